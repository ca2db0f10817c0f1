"""The plots' axes: x ranges that run ahead of a live run, y ranges that move in coarse steps
(:func:`~workbench.gui.training.plot_ranges.coarse_range`), and the user's zoom, which they
are left alone with until a double-click fits the view again.

:class:`PlotAxes` is a part of :class:`~workbench.gui.training.plots.PlotsPanel`; it holds
no state of its own (the attributes below are the panel's).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtGui import QAction

from workbench.gui.training.plot_ranges import ROBUST_KEYS, coarse_range, nice_ceiling, robust_bounds
from workbench.gui.training.series import SeriesBuffer

__all__ = ["PlotAxes"]


class PlotAxes:
    """Range handling of the plots panel (mixed into it).

    Attributes:
        plots: ``{key: PlotItem}``; the first one's x range is every plot's.
        buffer: the shown run's data.
        overlays: overlaid runs (their ``buffer`` counts for the x range).
        ignore_outliers: leave outliers out of the y ranges of :data:`ROBUST_KEYS`.
    """

    plots: dict[str, pg.PlotItem]
    buffer: SeriesBuffer
    overlays: dict[str, Any]
    ignore_outliers: bool
    _x: str
    _live: bool
    _follow_x: bool
    _x_hi: float
    _y_range: dict[str, tuple[float, float] | None]
    _follow_y: dict[str, bool]
    _log: dict[str, bool]
    _titles: dict[str, str]
    act_outliers: QAction
    log_actions: dict[str, QAction]
    _set_plot_title: Callable[[str, str], None]

    def set_log(self, key: str, on: bool) -> None:
        """Show one plot's y axis on a log scale (or linear again).

        Args:
            key: a key of :data:`PLOT_KEYS`.
            on: log scale.

        Raises:
            KeyError: unknown plot.
        """
        p = self.plots[key]
        on = bool(on)
        if self._log[key] == on:
            return
        self._log[key] = on
        act = self.log_actions[key]
        if act.isChecked() != on:
            act.blockSignals(True)
            act.setChecked(on)
            act.blockSignals(False)
        p.setLogMode(y=on)
        self._set_plot_title(key, self._titles[key])
        self._follow_y[key] = True
        self._y_range[key] = None
        self._fit_y()

    def log_scale(self, key: str) -> bool:
        """Whether a plot's y axis is on a log scale."""
        return self._log[key]

    def set_ignore_outliers(self, on: bool) -> None:
        """Fit the y axes of step time, memory, loss and throughput without their outliers.

        Args:
            on: leave outliers out of the y ranges (see :func:`robust_bounds`).
        """
        self.ignore_outliers = bool(on)
        if self.act_outliers.isChecked() != self.ignore_outliers:
            self.act_outliers.blockSignals(True)
            self.act_outliers.setChecked(self.ignore_outliers)
            self.act_outliers.blockSignals(False)
        self._reset_y()
        self._fit_y()

    def y_range(self, key: str) -> tuple[float, float]:
        """A plot's y range as shown (log10 units on a log scale)."""
        lo, hi = self.plots[key].vb.viewRange()[1]
        return float(lo), float(hi)

    def _range_changed_by_user(self, key: str, mask: Any = None) -> None:
        """The user zoomed or panned a plot: leave the axes they moved to them."""
        x_moved, y_moved = (bool(mask[0]), bool(mask[1])) if mask is not None else (True, True)
        if x_moved:
            self._follow_x = False
        if y_moved:
            self._follow_y[key] = False

    def fit_view(self) -> None:
        """Fit every plot to its data again, as after a zoom (double-click does it)."""
        self._reset_y()
        self._refit_x()
        if self._live:  # now, not at the next redraw (a paused run gets none)
            self._follow(self.buffer.column(self._x))
        self._fit_y()

    def _reset_x(self) -> None:
        self._follow_x = True
        self._x_hi = -math.inf

    def _reset_y(self) -> None:
        for key in self._follow_y:
            self._follow_y[key] = True
            self._y_range[key] = None

    def _fit_y(self) -> None:
        """Keep each plot's y range around its curves in coarse steps (:func:`coarse_range`):
        pyqtgraph's own auto-range would move the axis a little at every redraw, and a
        y axis whose range moved is laid out and drawn again."""
        for key, p in self.plots.items():
            if not self._follow_y[key]:
                continue
            ys = []
            for item in p.listDataItems():
                if not item.isVisible():
                    continue
                # every point, not the displayed ones: those are clipped to the x range the
                # view had at the last paint
                _x, y = item.getOriginalDataset()
                if y is not None and len(y):
                    ys.append(np.asarray(y, dtype=np.float64))
            if not ys:
                continue  # nothing to show yet
            y = np.concatenate(ys)
            if self._log[key]:  # the view works in log10 units
                with np.errstate(divide="ignore", invalid="ignore"):
                    y = np.log10(y[y > 0])
            bounds = robust_bounds(y, self.ignore_outliers and key in ROBUST_KEYS)
            if bounds is None:
                continue
            lo, hi = bounds
            if self._log[key]:
                rng = (math.floor(lo * 4) / 4, math.ceil(hi * 4) / 4 + (0.25 if hi == lo else 0.0))
            else:
                rng = coarse_range(lo, hi, self._y_range[key])
            if rng != self._y_range[key]:
                self._y_range[key] = rng
                p.setYRange(*rng, padding=0)

    def _refit_x(self) -> None:
        """Live: follow the data again; otherwise fit the x range to everything shown."""
        if self._live:
            self._reset_x()
        else:
            self._follow_x = False
            next(iter(self.plots.values())).enableAutoRange(x=True)

    def _follow(self, x: np.ndarray) -> None:
        """Keep the x range ahead of the data in coarse steps, so the axes (whose tick labels
        are the slow part of a repaint) change only now and then, not at every step."""
        hi = float(x[-1]) if len(x) else 0.0
        for ov in self.overlays.values():
            ox = ov.buffer.column(self._x)
            if len(ox):
                hi = max(hi, float(ox[-1]))
        if not math.isfinite(hi):
            return
        if hi <= self._x_hi and hi >= 0.5 * self._x_hi:
            return
        self._x_hi = nice_ceiling(max(hi * 1.3, 10.0 if self._x == "step" else 1.0))
        first = next(iter(self.plots.values()))
        first.setXRange(0.0, self._x_hi, padding=0.02)

