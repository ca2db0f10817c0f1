"""The Layers tab: update/weight ratio or gradient norm of each top-level module over a run.

The tree's live columns show the latest measurement; this plot shows how it went, one curve
per top-level module (children of the root) on a log scale, from the run controller's
:class:`~workbench.core.training.module_stats.ModuleStatsHistory`. It redraws when a
measurement arrives (at most one a batch of metrics) and only while it is shown.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QApplication, QComboBox, QHBoxLayout, QLabel, QMenu, QVBoxLayout, QWidget

from workbench.gui.training.plots import is_dark, plot_theme, run_color
from workbench.gui.training.run_controller import RunController

__all__ = ["LayersPlot", "QUANTITIES"]

#: What the plot can show: (key of ModuleStatsHistory, axis label).
QUANTITIES: tuple[tuple[str, str], ...] = (
    ("update_ratio", "Update/weight ratio ‖Δw‖/‖w‖"),
    ("grad_norm", "Gradient norm ‖g‖"),
)


class LayersPlot(QWidget):
    """One curve per top-level module: update/weight ratio (or gradient norm) against step.

    Args:
        runs: the run controller (its ``module_history`` and ``moduleStatsReceived``).
        parent: Qt parent.
    """

    def __init__(self, runs: RunController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._runs = runs
        self.quantity = QComboBox(self)
        for key, label in QUANTITIES:
            self.quantity.addItem(label, key)
        self.quantity.setToolTip("What each curve shows; both are measured every few steps while training")
        self.note = QLabel(self)
        top = QHBoxLayout()
        top.addWidget(QLabel("Show", self))
        top.addWidget(self.quantity)
        top.addWidget(self.note, 1)
        theme = plot_theme(is_dark(self.palette()))
        before = set(QApplication.topLevelWidgets())
        self.plot = pg.PlotWidget(self, background=theme["background"], enableMenu=False)  # no menu built to drop
        for w in QApplication.topLevelWidgets():  # pyqtgraph's context menus: destroyed with this tab
            if isinstance(w, QMenu) and w not in before:
                w.setParent(self, w.windowFlags())
        self.plot.setLogMode(y=True)
        self.plot.showGrid(x=True, y=True, alpha=0.2)
        self.plot.setLabel("bottom", "step")
        self.plot.setMenuEnabled(False)
        self.legend = self.plot.addLegend(offset=(-10, 10), labelTextColor=theme["text"], brush=theme["legend"])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addLayout(top)
        layout.addWidget(self.plot, 1)
        self.curves: dict[str, Any] = {}
        self._stale = True
        self.quantity.currentIndexChanged.connect(lambda _i: self._changed(reset=True))
        runs.moduleStatsReceived.connect(lambda _s: self._changed())
        self._changed(reset=True)

    def _changed(self, reset: bool = False) -> None:
        if reset:
            self.plot.setLabel("left", self.quantity.currentText())
        self._stale = True
        if self.isVisible():
            self.redraw()

    def showEvent(self, event: Any) -> None:
        super().showEvent(event)
        if self._stale:
            self.redraw()

    def redraw(self) -> None:
        """Draw the run's history now."""
        self._stale = False
        history = self._runs.module_history
        key = self.quantity.currentData() or "update_ratio"
        series = getattr(history, key)
        paths = history.paths
        for path in [p for p in self.curves if p not in paths]:
            self.plot.removeItem(self.curves.pop(path))
            self.legend.removeItem(path)
        for i, path in enumerate(paths):
            curve = self.curves.get(path)
            if curve is None:
                curve = self.curves[path] = self.plot.plot(
                    pen=pg.mkPen(QColor(run_color(i)), width=1.5), name=path, symbol="o", symbolSize=4,
                    symbolBrush=QColor(run_color(i)), symbolPen=None,
                )
            y = np.asarray(series[path], dtype=float)
            keep = np.isfinite(y) & (y > 0)  # a log axis: zero and missing values are left out
            curve.setData(np.asarray(history.steps[path], dtype=float)[keep], y[keep])
        n = sum(len(v) for v in history.steps.values())
        self.note.setText(
            "" if n else "Start a run: the modules' figures are measured every few steps while it trains."
        )
