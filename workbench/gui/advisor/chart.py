"""The Pareto chart of the Suggest dialog: predicted peak memory against trainable parameters.

Every candidate is a grey point; the front is drawn in colour and the cost front joined by a line, the chosen
plan is a larger star, and the budget is a vertical dashed line. The x axis spans the
candidates: a budget far beyond them (an 80 GB GPU for a 1 GB model) is marked at the right
edge with its value, instead of squeezing every candidate into the left few per cent. The
axes are scaled once: the ticks say ``1B`` and the unit is in the label (``GB``), with no
pyqtgraph SI factor such as ``(x1e+09)`` on top.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QPen
from PySide6.QtWidgets import QWidget

from workbench.core.advisor.advice import Advice
from workbench.core.advisor.front import pareto_front
from workbench.core.formatting import fmt_bytes, fmt_count
from workbench.gui.training.plot_canvas import DecadeTicks

__all__ = ["FrontChart"]

_FRONT = QColor(31, 119, 180)
_CHOSEN = QColor(214, 39, 40)
_OTHER = QColor(150, 150, 150)


def _unit(nbytes: int) -> tuple[str, float]:
    return ("GB", 1e9) if nbytes >= 2 * 10**9 else ("MB", 1e6)


class FrontChart(pg.PlotWidget):
    """Memory (x) against trainable parameters (y, log scale) of an advice's candidates.

    Attributes:
        points: the point items (all candidates, front, chosen), for tests.
        budget_line: the vertical budget line (at the right edge when the budget is beyond
            every candidate: :attr:`budget_clipped`).
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent, axisItems={"left": DecadeTicks("left", lambda v: fmt_count(int(round(v))))})
        self.setBackground(None)
        self.setLogMode(x=False, y=True)
        self.showGrid(x=True, y=True, alpha=0.2)
        self.setLabel("left", "trainable parameters")
        for side in ("left", "bottom"):  # the ticks carry their own scale (1M, 1B; MB or GB): no "(x1e+09)"
            self.getAxis(side).enableAutoSIPrefix(False)
        self.setMinimumHeight(220)
        # PlotDataItems (not bare scatter items) follow the plot's log scale
        self._all = pg.PlotDataItem(pen=None, symbol="o", symbolSize=7, symbolBrush=_OTHER, symbolPen=None)
        self._front_line = pg.PlotDataItem(pen=pg.mkPen(_FRONT, width=1.5))
        self._front = pg.PlotDataItem(pen=None, symbol="o", symbolSize=10, symbolBrush=_FRONT, symbolPen="w")
        self._chosen = pg.PlotDataItem(pen=None, symbol="star", symbolSize=20, symbolBrush=_CHOSEN, symbolPen="w")
        self.budget_line = pg.InfiniteLine(angle=90, movable=False,
                                           pen=QPen(_CHOSEN, 0, Qt.PenStyle.DashLine),
                                           label="budget", labelOpts={"position": 0.06, "color": _CHOSEN})
        for item in (self._all, self._front_line, self._front, self._chosen, self.budget_line):
            self.addItem(item)
        self.points = (self._all, self._front, self._chosen)
        self.budget_clipped = False

    def show_advice(self, advice: Advice | None, selected: int | None = None) -> None:
        """Draw an advice (None clears the chart).

        Args:
            advice: the advice.
            selected: index into ``advice.assessed`` to mark (default: the chosen plan).
        """
        if advice is None:
            for item in (self._all, self._front, self._chosen, self._front_line):
                item.setData([], [])
            return
        peak = max(a.memory.peak for a in advice.assessed)
        self.budget_clipped = advice.budget_bytes > 1.15 * peak
        name, scale = _unit(peak if self.budget_clipped else max(advice.budget_bytes, peak))
        self.setLabel("bottom", f"predicted peak memory ({name})")

        def xy(indices: list[int]) -> tuple[list[float], list[float]]:
            items = [advice.assessed[i] for i in indices]
            return [a.memory.peak / scale for a in items], [max(a.trainable_params, 1) for a in items]

        self._all.setData(*xy(list(range(len(advice.assessed)))))
        self._front.setData(*xy(advice.front))
        # the line joins the cost front; DoRA and full-rank A+B are marked on the front beside it (front_of)
        cost = set(pareto_front([a.point for a in advice.assessed]))
        self._front_line.setData(*xy([i for i in advice.front if i in cost]))
        mark = selected if selected is not None else advice.chosen
        self._chosen.setData(*xy([mark] if mark is not None else []))
        budget = advice.budget_bytes / scale
        right = peak / scale * 1.15 or 1.0
        if self.budget_clipped:  # far beyond the candidates: marked at the edge, value in the label
            self.budget_line.setValue(right)
            self.budget_line.label.setFormat(f"budget {fmt_bytes(advice.budget_bytes)} →")
            self.budget_line.label.setPosition(0.06)
            self.budget_line.label.anchors = [(1.0, 0.5), (1.0, 0.5)]
        else:
            right = max(right, budget * 1.08)
            self.budget_line.setValue(budget)
            self.budget_line.label.setFormat("budget")
            self.budget_line.label.anchors = [(0.0, 0.5), (0.0, 0.5)]
        self.enableAutoRange(axis="y")
        self.setXRange(0.0, right, padding=0.0)
