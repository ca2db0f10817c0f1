"""Where the main window opens: a first size that fits the screen, and a saved geometry only
when it still fits the screen it opens on (a window saved on a large monitor must not open
with Start off-screen on a laptop)."""

from __future__ import annotations

from PySide6.QtCore import QByteArray, QRect, QSize, Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QWidget

__all__ = ["PREFERRED_SIZE", "available_geometry", "first_geometry", "restore_geometry"]

#: The first size of the window when the screen has room for it.
PREFERRED_SIZE = QSize(1400, 850)
#: Room left around a window that is as large as the screen allows (title bar, borders).
_MARGIN = QSize(16, 48)


def available_geometry(widget: QWidget) -> QRect:
    """The available geometry (without task bars) of the screen a widget is on.

    Args:
        widget: the widget.

    Returns:
        The rectangle; 1280 × 800 at the origin when no screen is known.
    """
    screen = widget.screen() or QGuiApplication.primaryScreen()
    return screen.availableGeometry() if screen is not None else QRect(0, 0, 1280, 800)


def first_geometry(available: QRect, preferred: QSize = PREFERRED_SIZE) -> QRect:
    """The window's first geometry: the preferred size, shrunk to fit the screen, centred.

    Args:
        available: the screen's available geometry.
        preferred: the size wanted when there is room.

    Returns:
        The geometry of the window's frame.
    """
    w = max(320, min(preferred.width(), available.width() - _MARGIN.width()))
    h = max(240, min(preferred.height(), available.height() - _MARGIN.height()))
    x = available.x() + (available.width() - w) // 2
    y = available.y() + (available.height() - h) // 2
    return QRect(x, y, w, h)


def restore_geometry(window: QWidget, saved: object, available: QRect | None = None) -> bool:
    """Restore a saved geometry when it fits the screen; otherwise the first geometry.

    Args:
        window: the top-level window.
        saved: the ``saveGeometry()`` bytes from the settings (anything else is ignored).
        available: the screen's available geometry (default: :func:`available_geometry`).

    Returns:
        True when the saved geometry was used.
    """
    area = available if available is not None else available_geometry(window)
    if isinstance(saved, QByteArray) and not saved.isEmpty():
        before = window.geometry()
        if window.restoreGeometry(saved) and (window.isMaximized() or area.contains(window.frameGeometry())):
            return True
        window.setWindowState(window.windowState() & ~Qt.WindowState.WindowMaximized)
        window.setGeometry(before)
    rect = first_geometry(area)
    window.resize(rect.size())
    window.move(rect.topLeft())
    return False
