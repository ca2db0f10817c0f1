"""Small icons painted in code: coloured dots for status and cache marks."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QIcon, QPainter, QPixmap

__all__ = ["dot_icon"]


def dot_icon(
    color: QColor, *, size: int = 12, margin: int = 1, filled: bool = True, outline: QColor | None = None
) -> QIcon:
    """A circle on a transparent square, antialiased.

    Args:
        color: fill colour (and outline colour unless ``outline`` is given).
        size: width and height of the icon in pixels.
        margin: pixels between the circle and the icon's edge.
        filled: False draws only the outline (a hollow dot).
        outline: colour of the outline (default: ``color``).

    Returns:
        The icon.

    Raises:
        ValueError: the margin leaves no room for the circle.
    """
    diameter = size - 2 * margin
    if diameter <= 0:
        raise ValueError(f"a dot icon of {size} px with a margin of {margin} px has no room; use a smaller margin")
    pm = QPixmap(size, size)
    pm.fill(Qt.GlobalColor.transparent)
    p = QPainter(pm)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    p.setPen(outline if outline is not None else color)
    if filled:
        p.setBrush(color)
    p.drawEllipse(margin, margin, diameter, diameter)
    p.end()
    return QIcon(pm)
