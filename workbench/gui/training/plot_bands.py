"""Shaded bands on the wall-time axis for the intervals a run did not train: pauses, and
validation (see :func:`~workbench.gui.training.plot_ranges.pause_intervals`)."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtGui import QColor

__all__ = ["BAND_COLORS", "PauseBands"]

#: Fill of a band by kind (RGBA): grey for pauses, light blue for validation.
BAND_COLORS = {"paused": (128, 128, 128, 60), "validation": (31, 119, 180, 40)}


class PauseBands:
    """One shaded band per interval on every plot; none in step mode (a pause takes no steps).

    Args:
        plots: ``{key: PlotItem}``.

    Attributes:
        intervals: the intervals shown, ``[(start, end, kind)]``.
        bands: ``{key: [LinearRegionItem]}``, one per interval.
    """

    def __init__(self, plots: dict[str, pg.PlotItem]) -> None:
        self.plots = plots
        self.intervals: list[tuple[float, float, str]] = []
        self.bands: dict[str, list[pg.LinearRegionItem]] = {key: [] for key in plots}

    def set_intervals(self, intervals: list[tuple[float, float, str]], shown: bool = True) -> None:
        """Show these intervals (the bands are made again only when they changed).

        Args:
            intervals: ``[(start, end, kind)]`` in x units (seconds).
            shown: False hides every band (the x axis is steps).
        """
        wanted = list(intervals) if shown else []
        if wanted == self.intervals:
            return
        self.clear()
        self.intervals = wanted
        for key, plot in self.plots.items():
            for start, end, kind in wanted:
                band = pg.LinearRegionItem(
                    values=(start, end), orientation="vertical", movable=False,
                    brush=pg.mkBrush(QColor(*BAND_COLORS.get(kind, BAND_COLORS["paused"]))), pen=pg.mkPen(None),
                )
                band.setZValue(-30)  # under markers and curves
                band.setToolTip(f"{kind} {end - start:.1f} s (from {start:.1f} s)")
                plot.addItem(band, ignoreBounds=True)
                self.bands[key].append(band)

    def clear(self) -> None:
        """Remove every band."""
        for key, bands in self.bands.items():
            for band in bands:
                self.plots[key].removeItem(band)
            bands.clear()
        self.intervals = []
