"""The plots' axes: x ranges that run ahead of a live run, y ranges that move in coarse steps
(:func:`~workbench.gui.training.plot_ranges.coarse_range`), and the user's zoom, which they
are left alone with until a double-click fits the view again.

:class:`PlotAxes` is owned by :class:`~workbench.gui.training.plots.PlotsPanel`; it holds the
range state of every plot and is told the rest (which plots leave outliers out, the x mode,
whether the run is live) by its arguments.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import pyqtgraph as pg

from workbench.gui.training.plot_ranges import coarse_range, nice_ceiling, robust_bounds

__all__ = ["PlotAxes"]


class PlotAxes:
    """Range handling of the plots.

    Args:
        plots: ``{key: PlotItem}``; the first one's x range is every plot's (the others are linked).
        robust: the keys whose y range leaves outliers out while :attr:`ignore_outliers` is on.

    Attributes:
        plots: the plots.
        ignore_outliers: leave outliers out of the y ranges of the robust plots.
        follow_x: the x range follows the data (False once the user moved it).
    """

    def __init__(self, plots: dict[str, pg.PlotItem], robust: Iterable[str]) -> None:
        self.plots = plots
        self.robust = frozenset(robust)
        self.ignore_outliers = True
        self.follow_x = True
        self._x_hi = -math.inf
        # y ranges chosen by coarse_range(), per plot; a plot the user zoomed is left alone
        self._y_range: dict[str, tuple[float, float] | None] = dict.fromkeys(plots)
        self._follow_y: dict[str, bool] = dict.fromkeys(plots, True)
        self._log: dict[str, bool] = dict.fromkeys(plots, False)

    def set_log(self, key: str, on: bool) -> bool:
        """Show one plot's y axis on a log scale (or linear again) and fit it.

        Args:
            key: the plot.
            on: log scale.

        Returns:
            True when the scale changed.

        Raises:
            KeyError: unknown plot.
        """
        if self._log[key] == on:
            return False
        self._log[key] = on
        self.plots[key].setLogMode(y=on)
        self._follow_y[key] = True
        self._y_range[key] = None
        self.fit_y()
        return True

    def log_scale(self, key: str) -> bool:
        """Whether a plot's y axis is on a log scale."""
        return self._log[key]

    def y_range(self, key: str) -> tuple[float, float]:
        """A plot's y range as shown (log10 units on a log scale)."""
        lo, hi = self.plots[key].vb.viewRange()[1]
        return float(lo), float(hi)

    def range_changed_by_user(self, key: str, mask: object = None) -> None:
        """The user zoomed or panned a plot: leave the axes they moved to them.

        Args:
            key: the plot.
            mask: pyqtgraph's ``(x moved, y moved)``; None: both.
        """
        x_moved, y_moved = (bool(mask[0]), bool(mask[1])) if isinstance(mask, (list, tuple)) else (True, True)
        if x_moved:
            self.follow_x = False
        if y_moved:
            self._follow_y[key] = False

    def reset_x(self) -> None:
        """Follow the data's x again."""
        self.follow_x = True
        self._x_hi = -math.inf

    def reset_y(self) -> None:
        """Fit every y range again at the next :meth:`fit_y`."""
        for key in self._follow_y:
            self._follow_y[key] = True
            self._y_range[key] = None

    def fit_y(self) -> None:
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
            bounds = robust_bounds(y, self.ignore_outliers and key in self.robust)
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

    def refit_x(self, live: bool) -> None:
        """Live: follow the data again; otherwise fit the x range to everything shown.

        Args:
            live: the shown run is live.
        """
        if live:
            self.reset_x()
        else:
            self.follow_x = False
            next(iter(self.plots.values())).enableAutoRange(x=True)

    def follow(self, xs: Iterable[np.ndarray], steps: bool) -> None:
        """Keep the x range ahead of the data in coarse steps, so the axes (whose tick labels
        are the slow part of a repaint) change only now and then, not at every step.

        Args:
            xs: the x columns shown (the shown run's and overlaid runs').
            steps: the x axis is steps (else seconds).
        """
        hi = max((float(x[-1]) for x in xs if len(x)), default=0.0)
        if not math.isfinite(hi):
            return
        if hi <= self._x_hi and hi >= 0.5 * self._x_hi:
            return
        self._x_hi = nice_ceiling(max(hi * 1.3, 10.0 if steps else 1.0))
        first = next(iter(self.plots.values()))
        first.setXRange(0.0, self._x_hi, padding=0.02)
