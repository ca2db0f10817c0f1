"""The plots' look: run colours, light and dark themes, pens, and titles that may be cut."""

from __future__ import annotations

from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFontMetricsF
from PySide6.QtWidgets import QGraphicsItem

from workbench.gui.theme import is_dark

__all__ = ["clip_label", "is_dark", "pen", "plot_theme", "run_color"]

#: Colours given to runs (runs table swatches and overlay curves).
#: Not the colours of the shown run's own curves (blue, red, green, purple) nor of markers.
_PALETTE = (
    (23, 170, 190), (140, 86, 75), (227, 119, 194), (150, 150, 40), (110, 110, 110),
    (0, 128, 110), (70, 70, 170), (200, 150, 0), (170, 60, 110), (90, 160, 90),
)
def run_color(index: int) -> QColor:
    """The colour of the run with this index (cycles through ten colours).

    Args:
        index: position of the run (any integer).

    Returns:
        The colour.
    """
    return QColor(*_PALETTE[index % len(_PALETTE)])


def plot_theme(dark: bool) -> dict[str, Any]:
    """The plots' colours for a light or dark palette.

    Args:
        dark: a dark palette.

    Returns:
        ``background``, ``title``, ``text``, ``axis``, ``readout``, ``muted`` (colour names)
        and ``legend`` (an RGBA tuple).
    """
    if dark:
        return {"background": "#1e1f22", "title": "#ddd", "text": "#ccc", "axis": "#777",
                "readout": "#e6e6e6", "muted": "#999", "legend": (30, 31, 34, 200)}
    return {"background": "w", "title": "#333", "text": "#444", "axis": "#999",
            "readout": "#222", "muted": "#777", "legend": (255, 255, 255, 200)}


def clip_label(label: pg.LabelItem, shrink_height: bool = False) -> None:
    """Let a label be narrower than its text (cut at its edge) so that a long plot title or
    read-out line does not widen its grid column (pyqtgraph sets a label's minimum width
    to its text's). A centred title that is cut is shown from its start.

    Args:
        label: the label.
        shrink_height: let it be lower than its text too (the read-out's lines must not make
            its grid row taller than the plots' rows on a short screen).
    """
    update_min = label.updateMin
    justify = label.opts.get("justify", "center")

    def update() -> None:
        update_min()
        want = "left" if 0 < label.width() < label.itemRect().width() else justify
        if label.opts.get("justify") != want:
            label.opts["justify"] = want
            label.resizeEvent(None)  # place the text again (it calls this again, with nothing to change)
        label.setMinimumWidth(0)
        low = 0 if shrink_height else label._sizeHint[Qt.SizeHint.MinimumSize][1]
        label._sizeHint[Qt.SizeHint.MinimumSize] = (0, low)
        label._sizeHint[Qt.SizeHint.PreferredSize] = (0, 0 if shrink_height else label._sizeHint[Qt.SizeHint.PreferredSize][1])
        if shrink_height:
            label.setMinimumHeight(0)

    label.updateMin = update
    label.setFlag(QGraphicsItem.GraphicsItemFlag.ItemClipsChildrenToShape)


def pen(
    color: QColor | tuple[int, ...], width: float = 1.0, style: Qt.PenStyle = Qt.PenStyle.SolidLine, alpha: int = 255
) -> Any:
    """A cosmetic pen.

    Args:
        color: a colour or an RGB tuple.
        width: line width in pixels.
        style: dash style.
        alpha: opacity, 0..255.

    Returns:
        The ``QPen``.
    """
    c = QColor(color) if isinstance(color, QColor) else QColor(*color)
    c.setAlpha(alpha)
    return pg.mkPen(c, width=width, style=style)


def fit_title(text: str, metrics: QFontMetricsF, width: float) -> str:
    """A plot's title cut to ``width`` pixels, its unit kept: the words before the first `` (``
    end with "…" (``"Trainable par… (M)"``, ``"Step ti… (ms) · log"``), since the unit is what
    reads the axis; a title whose unit alone is too wide is cut at its end.

    Args:
        text: the whole title.
        metrics: the title font's metrics.
        width: the room, in pixels.

    Returns:
        ``text`` itself when it fits, else the cut title.
    """
    if metrics.horizontalAdvance(text) <= width:
        return text
    head, sep, unit = text.partition(" (")
    tail = sep + unit
    room = width - metrics.horizontalAdvance(tail)
    if sep and room >= metrics.horizontalAdvance(head[:3] + "…"):
        return metrics.elidedText(head, Qt.TextElideMode.ElideRight, room) + tail
    return metrics.elidedText(text, Qt.TextElideMode.ElideRight, width)
