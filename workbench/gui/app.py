"""Start the desktop app: ``QApplication`` with name, organization and icon, then the window."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QIcon, QPainter, QPen, QPixmap
from PySide6.QtWidgets import QApplication

from workbench import __version__
from workbench.gui.settings import APPLICATION, ORGANIZATION
from workbench.resources import APP_ID, ResourceError, icon_paths

__all__ = ["app_icon", "create_application", "main"]


def app_icon() -> QIcon:
    """The app icon: the packaged PNG sizes (:mod:`workbench.resources`).

    Falls back to :func:`_drawn_icon` only when the resources cannot be loaded (a broken
    installation), so the window always has an icon.

    Returns:
        An icon with 16–512 px pixmaps.
    """
    icon = QIcon()
    try:
        for path in icon_paths().values():
            pm = QPixmap(str(path))
            if pm.isNull():
                raise ResourceError(f"{path}: not a readable PNG; reinstall freeze-workbench")
            icon.addPixmap(pm)
    except ResourceError:
        return _drawn_icon()
    return icon


def _drawn_icon() -> QIcon:
    """The fallback icon, drawn in code (a snowflake on a blue rounded square).

    Returns:
        An icon with 16–256 px pixmaps.
    """
    icon = QIcon()
    for size in (16, 24, 32, 48, 64, 128, 256):
        pm = QPixmap(size, size)
        pm.fill(Qt.GlobalColor.transparent)
        p = QPainter(pm)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        p.setPen(Qt.PenStyle.NoPen)
        p.setBrush(QColor(45, 105, 170))
        p.drawRoundedRect(QRectF(0, 0, size, size), size * 0.2, size * 0.2)
        pen = QPen(QColor(255, 255, 255), max(1.2, size * 0.07))
        pen.setCapStyle(Qt.PenCapStyle.RoundCap)
        p.setPen(pen)
        c = QPointF(size / 2, size / 2)
        r = size * 0.34
        p.translate(c)
        for _ in range(6):
            p.drawLine(QPointF(0, 0), QPointF(0, -r))
            p.drawLine(QPointF(0, -r * 0.55), QPointF(r * 0.22, -r * 0.78))
            p.drawLine(QPointF(0, -r * 0.55), QPointF(-r * 0.22, -r * 0.78))
            p.rotate(60)
        p.end()
        icon.addPixmap(pm)
    return icon


def create_application(argv: Sequence[str] | None = None) -> QApplication:
    """The ``QApplication`` (reused when one exists), named for ``QSettings``.

    Also keeps torch on one CPU thread in the calling (GUI) thread, so that the training and
    loading threads get every core at full speed (:mod:`workbench.core.training.cpu_threads`).

    Args:
        argv: Qt command-line arguments (default: the program name only).

    Returns:
        The application.
    """
    from workbench.core.training.cpu_threads import reserve_cores_for_workers

    reserve_cores_for_workers()
    app = QApplication.instance()
    if app is None:
        app = QApplication(list(argv) if argv is not None else [sys.argv[0] if sys.argv else "workbench"])
    assert isinstance(app, QApplication)
    from workbench.gui.qt_compat import protect_none_refcount

    protect_none_refcount()  # shiboken6 6.12 on Python 3.11 loses references to None (see qt_compat)
    app.setOrganizationName(ORGANIZATION)
    app.setApplicationName(APPLICATION)
    app.setApplicationVersion(__version__)
    app.setDesktopFileName(APP_ID)  # Wayland: the window's app id, matched to the .desktop file
    app.setWindowIcon(app_icon())
    return app


def main(argv: Sequence[str] | None = None, *, path: str | None = None, model: str | None = None) -> int:
    """Run the desktop app until its window closes.

    Args:
        argv: Qt command-line arguments.
        path: a plan (``.json``) or checkpoint file to open after start-up.
        model: a torchvision model to load instead of the default (with its weights when
            they are in the local cache, random initialisation otherwise).

    Returns:
        The exit code of the event loop.
    """
    from workbench.gui.main_window import MainWindow
    from workbench.gui.model_loading import LoadRequest

    app = create_application(argv)
    window = MainWindow()
    window.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    window.show()
    if model:
        window.source_bar.set_current({"name": model})  # picks cached weights, if any
        request = window.source_bar.request() if window.source_bar.current_name() == model else LoadRequest(name=model)
        window.load_model_request(request)
    if path:
        if not Path(path).is_file():
            from workbench.gui import dialogs

            dialogs.error(window, "Cannot open file", f"{path}: no such file; check the path")
        elif window.controller.busy:  # open it once the --model load has ended

            def open_after_load(_ok: bool) -> None:
                window.controller.loadFinished.disconnect(open_after_load)
                window.open_path(path)

            window.controller.loadFinished.connect(open_after_load)
        else:
            window.open_path(path)
    return app.exec()
