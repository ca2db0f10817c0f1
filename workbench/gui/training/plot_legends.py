"""Legends outside the data: a plot's legend sits in its title row, right of the (left-aligned)
title, one ``— name`` per curve in the curve's colour and dash. It shows while View ▸ Legends is
on and it names two curves or more (one curve needs no name), with as many entries as fit beside
the title (`` …`` for the rest, every name in its tooltip; the read-out names the same series)."""

from __future__ import annotations

import html
from collections.abc import Sequence

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFont
from PySide6.QtWidgets import QGraphicsTextItem

__all__ = ["GAP_PX", "TitleLegend", "line_glyph"]

#: Least room between the title's text and the legend (pixels).
GAP_PX = 10.0
_GLYPHS = {Qt.PenStyle.DashLine: "– –", Qt.PenStyle.DotLine: "···", Qt.PenStyle.DashDotLine: "–·–"}


def line_glyph(style: Qt.PenStyle) -> str:
    """The text standing for a line of this dash style: ``—``, ``– –``, ``···`` or ``–·–``."""
    return _GLYPHS.get(style, "—")


class TitleLegend:
    """The legend of one plot, in its title row.

    Args:
        plot: the plot (its title label's row holds the legend).

    Attributes:
        entries: ``[(name, curve)]`` named now, in order.
        wanted: View ▸ Legends is on.
        item: the text item drawn.
    """

    def __init__(self, plot: pg.PlotItem) -> None:
        self.plot = plot
        self.item = QGraphicsTextItem(plot)
        self.item.document().setDocumentMargin(0)
        font = QFont()
        font.setPointSizeF(8.0)
        self.item.setFont(font)
        self.item.setZValue(20)
        self.item.setVisible(False)
        self.entries: list[tuple[str, pg.PlotDataItem]] = []
        self.wanted = True
        self._text_color = "#444"
        self._parts: list[str] = []  # each entry's HTML
        self._shown_count = -1
        plot.geometryChanged.connect(self.place)
        plot.titleLabel.geometryChanged.connect(self.place)

    def set_entries(self, entries: Sequence[tuple[str, pg.PlotDataItem]], text_color: str) -> None:
        """Name these curves (fewer than two: no legend).

        Args:
            entries: ``[(name, curve)]``; each curve's pen gives its colour and dash.
            text_color: the names' colour (the theme's text colour).
        """
        self.entries = list(entries)
        self._text_color = text_color
        self._parts = []
        for name, curve in self.entries:
            line = pg.mkPen(curve.opts.get("pen"))
            color = QColor(line.color())
            color.setAlpha(255)
            self._parts.append(f"<span style='color:{color.name()}'>{line_glyph(line.style())}</span>&nbsp;"
                               f"{html.escape(name)}")
        self.item.setToolTip("\n".join(self.names()))
        self._shown_count = -1
        self.place()

    def _show(self, count: int) -> None:
        """Draw the first ``count`` entries (`` …`` after them when some are left out)."""
        if count == self._shown_count:
            return
        self._shown_count = count
        more = " …" if count < len(self._parts) else ""
        self.item.setHtml(f"<span style='color:{self._text_color}; white-space:nowrap'>"
                          f"{'&nbsp;&nbsp; '.join(self._parts[:count])}{more}</span>")

    def names(self) -> list[str]:
        """The names the legend holds (shown or not)."""
        return [name for name, _curve in self.entries]

    def width(self) -> float:
        """The legend's width in pixels."""
        return float(self.item.boundingRect().width())

    def place(self) -> None:
        """Right-align the legend in the title row with as many entries as fit beside the title
        (`` …`` for the rest, all of them in its tooltip); none fit: no legend."""
        label = self.plot.titleLabel
        row = label.geometry()
        room = row.width() - (label.item.boundingRect().width() if label.text else 0.0) - GAP_PX
        count = len(self._parts)
        while count > 0:
            self._show(count)
            if self.width() <= room:
                break
            count -= 1
        self.item.setVisible(self.wanted and len(self.entries) > 1 and count > 0 and self.plot.isVisible())
        w, h = self.width(), self.item.boundingRect().height()
        self.item.setPos(row.right() - w - 2, row.top() + max(0.0, (row.height() - h) / 2))

    def shown(self) -> bool:
        """Whether the legend shows now."""
        return bool(self.item.isVisible())
