"""Start the desktop app: ``QApplication`` with name, organization and icon, then the window."""

from __future__ import annotations

import contextlib
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import shiboken6
from PySide6.QtCore import QPointF, QRectF, Qt, QTimer
from PySide6.QtGui import QColor, QIcon, QPainter, QPen, QPixmap
from PySide6.QtWidgets import QApplication, QWidget

from workbench import __version__
from workbench.gui.settings import APPLICATION, ORGANIZATION
from workbench.gui.startup import StartupWindow
from workbench.resources import APP_ID, ResourceError, icon_paths, resource_path

if TYPE_CHECKING:
    from workbench.core.models.tree_cache import CachedTree
    from workbench.core.plan.rules import FreezePlan
    from workbench.gui.main_window import MainWindow

__all__ = ["UNPAINTED_START_MS", "app_icon", "create_application", "main"]

#: Start-up imports begin once the first window is painted, or after this many milliseconds
#: when it is not (a minimized window, a platform that paints nothing); on a busy machine the
#: first paint can take well over a second.
UNPAINTED_START_MS = 2000


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


def create_application(argv: Sequence[str] | None = None, *, reserve_cores: bool = True) -> QApplication:
    """The ``QApplication`` (reused when one exists), named for ``QSettings``.

    Also keeps torch on one CPU thread in the calling (GUI) thread, so that the training and
    loading threads get every core at full speed (:mod:`workbench.core.training.cpu_threads`).

    Args:
        argv: Qt command-line arguments (default: the program name only).
        reserve_cores: do that now (imports torch); :func:`main` passes False and does it once
            torch has been imported behind the full window.

    Returns:
        The application.
    """
    if reserve_cores:
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

    The window shows at once (:class:`~workbench.gui.startup.StartupWindow`: model bar, an
    empty tree saying what loads, or the model's tree as described the last time it loaded).
    Once it is painted the full window takes its place, built before torch is imported (its
    modules import none): the described tree in its module tree, its checkboxes editing the
    plan. Torch and torchvision are then imported on a thread behind it; the devices and the
    model list fill in (:mod:`workbench.gui.torch_ready`) and the model loads in the background,
    its live tree taking the described one's place with the plan edits made on it.

    Args:
        argv: Qt command-line arguments.
        path: a plan (``.json``) or checkpoint file to open after start-up.
        model: a torchvision model to load instead of the default (with its weights when
            they are in the local cache, random initialisation otherwise).

    Returns:
        The exit code of the event loop.
    """
    from workbench.gui import dialogs
    from workbench.gui.settings import settings
    from workbench.gui.startup import HeavyImports, trace

    app = create_application(argv, reserve_cores=False)
    shell = StartupWindow(model or "resnet18", settings(), preview=_described_tree(model or "resnet18"))
    shell.show()
    imports = HeavyImports()
    window: MainWindow | None = None

    def fail(parent: QWidget, message: str, details: str) -> None:
        dialogs.error(parent, "Cannot start Freeze Workbench", message, details)
        parent.close()
        QApplication.exit(2)

    def imported(error: str, details: str) -> None:
        imports.wait()
        trace("imports-done")
        if window is None or not shiboken6.isValid(window) or not window.isVisible():
            return  # closed while torch was loading: the app is quitting
        if error:
            fail(window, error, details)
            return
        _load_startup_model(window, path=path, model=model)

    imports.imported.connect(imported, Qt.ConnectionType.QueuedConnection)
    # once the first window has been painted, or after a short wait when the platform paints
    # nothing (minimized)
    started = False
    closed: list[bool] = []  # the user closed the start-up window first: nothing more opens
    shell.closed.connect(lambda: closed.append(not started))

    def open_window() -> None:
        nonlocal started, window
        if started or any(closed):
            return
        started = True
        try:
            window = _open_window(shell, path=path, model=model)
        except Exception as e:  # a window module that fails to import or build: say it, never hang
            fail(shell, f"the main window could not be built: {type(e).__name__}: {e}", traceback.format_exc())
            return
        trace("window")
        window.controller.modelChanged.connect(lambda: trace("tree") if window.controller.loaded is not None else None)
        imports.start()  # torch and torchvision, behind the full window

    shell.painted.connect(open_window, Qt.ConnectionType.QueuedConnection)
    QTimer.singleShot(UNPAINTED_START_MS, open_window)
    code = app.exec()
    imports.wait()  # closed during start-up: let the import thread finish before Python exits
    return code


def _described_tree(model: str) -> CachedTree | None:
    """The start-up model's tree as described the last time it loaded, or as the app ships it.

    Args:
        model: the start-up model spec (``resnet18``, ``timm:resnet10t``).

    Returns:
        The described tree, or None (no description, another version, a broken file, a
        model whose name does not say its architecture).
    """
    from workbench.core.models.tree_cache import TreeCacheError, read_description, read_tree, startup_model

    key = startup_model(model)
    if key is None:
        return None
    cached = read_tree(*key)  # never an error on screen: the app starts as without one
    if cached is not None:
        return cached
    source, name = key
    try:  # the first start: the description the app ships of its start-up model, if it is this one
        return read_description(resource_path("trees", f"{source}-{name}.json"), source, name, None)
    except (ResourceError, TreeCacheError):
        return None


def _remember_tree(window: MainWindow) -> None:
    """Describe the loaded model's tree for the next start (:mod:`workbench.core.models.tree_cache`).

    Only a model named by its source alone (torchvision, timm) with its own head is described;
    a cache folder that cannot be written costs nothing but the next start's preview.

    Args:
        window: the window whose model has just loaded.
    """
    from workbench.core.models.tree_cache import write_tree

    loaded = window.controller.loaded
    if loaded is None or loaded.spec.get("num_classes") is not None or loaded.meta:
        return
    source, name = loaded.spec.get("source"), loaded.spec.get("name")
    if isinstance(source, str) and isinstance(name, str):
        with contextlib.suppress(OSError):
            write_tree(source, name, loaded.spec.get("weights"), loaded.tree)


def _take_described(shell: StartupWindow, window: MainWindow) -> None:
    """Put the start-up window's described tree in the full window: the same rows, the plan
    edits made on it as undo steps, the row the user picked current and the rows they opened open.

    Args:
        shell: the start-up window showing a described tree.
        window: the full window (not shown yet).
    """
    from workbench.gui.plan.tree_preview import carry_over, preview_state

    described = shell.described
    assert described is not None and shell.preview is not None
    cached = shell.preview
    c = window.controller
    c.show_described(cached.tree, {"source": cached.source, "name": cached.name, "weights": cached.weights})
    c.take_edits(described.controller.done_edits(), described.controller.tree)  # the same tree: all taken
    shell.edits_taken = True  # the window has them: the start-up window closes without asking
    window.view.expandToDepth(0)
    carry_over(preview_state(described), _expander(window), _selector(window))


def _expander(window: MainWindow) -> Callable[[str], bool]:
    """Expands the window's row of a path (False: no such row)."""

    def expand(path: str) -> bool:
        index = window.proxy.mapFromSource(window.tree_model.index_of(path))
        if index.isValid():
            window.view.expand(index)
        return index.isValid()

    return expand


def _selector(window: MainWindow) -> Callable[[str], bool]:
    """Makes the window's row of a path current, shown and selected (False: no such row)."""

    def select(path: str) -> bool:
        if not window.tree_model.index_of(path).isValid():
            return False
        window.plan_actions.select_path(path)  # current, shown and selected, as a clicked finding
        return True

    return select


def _live_tree_takes_over(window: MainWindow) -> None:
    """When the model loads over a described tree, keep what the user did on it.

    The plan edits stay with their undo steps (the controller keeps them when the loaded tree
    is the one described, :meth:`~workbench.gui.controller.Controller.set_loaded`); the row the
    user picked stays current and the rows they opened open. A model whose tree changed since
    its description so that the plan no longer fits gets one line in the status bar saying the
    edits were not kept. A load that fails leaves the described tree and its edits as they are
    (its error is said by the window).

    Args:
        window: the full window showing a described tree, about to load its model.
    """
    from workbench.gui.plan.tree_preview import DescribedTree, carry_over, preview_state

    c = window.controller
    state: tuple[str | None, list[str]] | None = None
    before: FreezePlan | None = None

    def loading_ended(busy: bool, _what: str = "") -> None:  # before the tree is replaced or an error said
        nonlocal state, before
        if busy:
            return
        c.busyChanged.disconnect(loading_ended)
        state = preview_state(DescribedTree(c, window.tree_model, window.proxy, window.view))
        before = c.plan

    def carry(*_args: object) -> None:
        if state is None or before is None or c.loaded is None:
            return
        c.modelChanged.disconnect(carry)
        c.loadFinished.disconnect(not_loaded)
        missing = carry_over(state, _expander(window), _selector(window))
        if before.rules and c.plan.rules != before.rules:
            window.statusBar().showMessage(
                "the plan edits made before the model loaded were not kept: the loaded model's tree is not "
                "the one shown at start-up", 15000)
        elif missing:
            window.statusBar().showMessage(
                f"not in the loaded model (it changed since the last start): {', '.join(missing[:3])}", 15000)

    def not_loaded(ok: bool) -> None:
        if not ok:
            c.loadFinished.disconnect(not_loaded)
            c.modelChanged.disconnect(carry)

    c.busyChanged.connect(loading_ended)
    c.modelChanged.connect(carry)  # after the window's own handler: its default expansion first
    c.loadFinished.connect(not_loaded)


def _show_in_place_of(shell: QWidget, window: MainWindow) -> None:
    """Show the full window where the start-up window was (both restore the saved geometry)."""
    window.show()
    shell.close()
    shell.deleteLater()


def _open_window(shell: StartupWindow, *, path: str | None, model: str | None) -> MainWindow:
    """Build the full window before torch is imported and show it in the start-up window's place.

    It shows the start-up window's described tree, with the plan edits made on it, when the
    start-up model is what loads; else an empty tree saying what loads.

    Args:
        shell: the start-up window (closed here).
        path: plan or checkpoint to open once the model has loaded.
        model: the model to load instead of the default.

    Returns:
        The window (its model loads in :func:`_load_startup_model`).
    """
    from workbench.gui import torch_ready
    from workbench.gui.main_window import MainWindow
    from workbench.gui.startup import loading_text, trace

    trace("window-modules")
    torch_ready.defer()  # the devices and torchvision's models fill in once torch is imported
    window = MainWindow(load_default=False)
    window.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    window.controller.modelChanged.connect(lambda: QTimer.singleShot(0, window, lambda: _remember_tree(window)))
    if model:
        window.source_bar.set_current({"name": model})
    if shell.preview is not None and (not path or Path(path).is_file()):
        _take_described(shell, window)
        _live_tree_takes_over(window)
    window.controller.show_waiting(loading_text(model or "resnet18"))
    _show_in_place_of(shell, window)
    return window


def _load_startup_model(window: MainWindow, *, path: str | None, model: str | None) -> None:
    """Torch is imported: fill in the devices and models, load the start-up model, open ``path``.

    Args:
        window: the full window.
        path: plan or checkpoint to open once the model has loaded.
        model: the model to load instead of the default.
    """
    from workbench.core.models.sources import SOURCES
    from workbench.core.training.cpu_threads import reserve_cores_for_workers
    from workbench.gui import dialogs, torch_ready
    from workbench.gui.model_loading import LoadRequest, default_request

    reserve_cores_for_workers()  # on the GUI thread, before it runs any torch op
    torch_ready.announce()
    if model:
        window.source_bar.set_current({"name": model})  # picks cached weights, if any
        request = window.source_bar.request() if window.source_bar.current_name() == model else LoadRequest(name=model)
        row = SOURCES.get(request.source)
        local = row.local_folder if row is not None else None
        folder = local(request.name) if local is not None and request.name else None
        if folder is not None and not folder.is_dir():
            dialogs.error(window, "Cannot load model",
                          f"The model folder {folder} does not exist; the default model "
                          f"({default_request().describe()}) opens instead.")
        else:
            def default_after_failure(ok: bool) -> None:  # a refused --model leaves no empty window
                window.controller.loadFinished.disconnect(default_after_failure)
                if not ok and window.controller.loaded is None and not window.controller.busy:
                    window.controller.load(default_request())

            window.controller.loadFinished.connect(default_after_failure)
            window.documents.load_model_request(request)
    if window.controller.loaded is None and not window.controller.busy:  # the default, or after a refused --model
        window.controller.load(default_request())
    if not window.controller.busy:
        window.controller.show_waiting("")  # nothing loads (a refusal was said): the busy line goes
    if path:
        if not Path(path).is_file():
            dialogs.error(window, "Cannot open file", f"{path}: no such file; check the path")
        elif window.controller.busy:  # open it once the model has loaded

            def open_after_load(_ok: bool) -> None:
                window.controller.loadFinished.disconnect(open_after_load)
                window.documents.open_path(path)

            window.controller.loadFinished.connect(open_after_load)
        else:
            window.documents.open_path(path)
