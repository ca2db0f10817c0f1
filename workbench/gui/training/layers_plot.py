"""The Layers tab: update/weight ratio or gradient norm of each top-level module over a run.

The tree's live columns show the latest measurement; this plot shows how it went, one curve
per top-level module (children of the root) on a log scale, from the run controller's
:class:`~workbench.core.training.module_stats.ModuleStatsHistory`. It redraws when a
measurement arrives (at most one a batch of metrics) and only while it is shown, and follows
the window's palette (View ▸ Theme) as the training plots do.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QApplication, QComboBox, QHBoxLayout, QLabel, QMenu, QVBoxLayout, QWidget

from workbench.gui.theme import palette_changed
from workbench.gui.training.plot_canvas import DecadeTicks
from workbench.gui.training.plots import is_dark, plot_theme, run_color
from workbench.gui.training.run_controller import RunController

__all__ = ["MAX_CURVES", "LayersPlot", "QUANTITIES"]

#: Most curves drawn: one colour each (``run_color`` has ten). A root with more children (a flat
#: ``nn.Sequential`` of 300 layers) shows its largest; the tree's columns show every module.
MAX_CURVES = 10
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
        self.note.setWordWrap(True)  # two lines in a narrow panel, never a wider window
        top = QHBoxLayout()
        top.addWidget(QLabel("Show", self))
        top.addWidget(self.quantity)
        top.addWidget(self.note, 1)
        before = set(QApplication.topLevelWidgets())
        self.plot = pg.PlotWidget(self, enableMenu=False, axisItems={"left": DecadeTicks("left")})  # no menu to drop
        for w in QApplication.topLevelWidgets():  # pyqtgraph's context menus: destroyed with this tab
            if isinstance(w, QMenu) and w not in before:
                w.setParent(self, w.windowFlags())
        self.plot.setLogMode(y=True)
        self.plot.showGrid(x=True, y=True, alpha=0.2)
        self.plot.setLabel("bottom", "step")
        for side in ("left", "bottom"):  # the ticks carry the values: no "(x0.001)" after the names
            self.plot.getAxis(side).enableAutoSIPrefix(False)
        self.plot.setMenuEnabled(False)
        self.legend = self.plot.addLegend(offset=(-10, 10))
        self.dark = False
        self.apply_theme()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addLayout(top)
        layout.addWidget(self.plot, 1)
        self.curves: dict[str, Any] = {}
        self._stale = True
        self.quantity.currentIndexChanged.connect(lambda _i: self._changed(reset=True))
        runs.moduleStatsReceived.connect(lambda _s: self._changed())
        self._changed(reset=True)

    def apply_theme(self, dark: bool | None = None) -> None:
        """Colour the plot for a light or dark palette, as the training plots are (:func:`plot_theme`).

        Args:
            dark: dark colours; default: whether the tab's palette is dark.
        """
        self.dark = is_dark(self.palette()) if dark is None else dark
        theme = plot_theme(self.dark)
        self.plot.setBackground(theme["background"])
        for side in ("left", "bottom"):
            self.plot.getAxis(side).setTextPen(theme["text"])
            self.plot.getAxis(side).setPen(theme["axis"])
        self.legend.setBrush(theme["legend"])
        self.legend.setLabelTextColor(theme["text"])  # the entries added later ...
        for _sample, label in self.legend.items:  # ... and those shown now, drawn again in it
            label.setText(label.text)

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if palette_changed(event) and is_dark(self.palette()) != self.dark:
            self.apply_theme()

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
        paths = self._shown(history.paths, series)
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
        steps = [x for v in history.steps.values() for x in v]
        axis = self.plot.getAxis("bottom")
        if steps and max(steps) - min(steps) < 1:  # one measured step: a step either side, whole steps ticked
            self.plot.setXRange(min(steps) - 1, max(steps) + 1, padding=0)
            axis.setTickSpacing(1, 1)
        else:
            axis.setTickSpacing()  # pyqtgraph's own again
            self.plot.enableAutoRange(axis="x")
        if not steps:
            self.note.setText("Start a run: the modules' figures are measured every few steps while it trains.")
        elif len(paths) < len(history.paths):
            self.note.setText(f"{len(paths)} of {len(history.paths)} top-level modules, the largest with values; "
                              "the tree's columns show all.")
        else:
            self.note.setText("")

    def _shown(self, paths: list[str], series: dict[str, list[float]]) -> list[str]:
        """The modules drawn, in the model's order: all of them, or the :data:`MAX_CURVES` with the
        most parameters among those with a value the log axis can draw (a module whose gradients
        vanish measures 0), the first in the model's order among equals."""
        if len(paths) <= MAX_CURVES:
            return paths
        tree = self._runs.controller.tree
        nodes = tree.nodes if tree is not None else {}

        def rank(path: str) -> tuple[bool, int]:
            values = np.asarray(series.get(path, ()), dtype=float)
            drawn = bool(np.any(np.isfinite(values) & (values > 0)))
            return not drawn, -(nodes[path].total_params if path in nodes else 0)

        keep = set(sorted(paths, key=rank)[:MAX_CURVES])  # a stable sort: the model's order among equals
        return [p for p in paths if p in keep]
