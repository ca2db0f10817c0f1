"""The plots' canvas (it adds up the CPU time its paints take, for the drawing budget), the
plot of one :class:`~workbench.gui.training.plot_specs.PlotSpec` row, its crosshair line, and
an axis whose tick labels keep to three significant digits, and a log axis labelled at its decades."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QGraphicsItem, QWidget

from workbench.gui.training.plot_specs import PlotSpec
from workbench.gui.training.plot_style import clip_label, pen

__all__ = ["DecadeTicks", "ShortTicks", "TimedGraphics", "crosshair_line", "make_plot", "short_number"]


def short_number(v: float, decimals: int = 1) -> str:
    """A short tick label: ``0``, ``0.03``, ``5e-4``, ``1.5e-5``, ``2e6``.

    Args:
        v: the value.
        decimals: most decimals of an exponent form's mantissa.

    Returns:
        The text (three significant digits at most from 0.01 up to 10 000, else an exponent
        without its zeros).
    """
    if v == 0:
        return "0"
    if 1e-2 <= abs(v) < 1e4:
        return f"{v:.3g}"
    mantissa, _, exponent = f"{v:.{decimals}e}".partition("e")
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"


class ShortTicks(pg.AxisItem):
    """An axis whose tick labels are short (:func:`short_number`: ``5e-4``, ``0.003``), with the
    decimals their spacing needs (``9.9e-4``, ``1.01e-3``): the learning rate's ticks fit the axis's width (pyqtgraph
    leaves out a label wider than its axis)."""

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:
        step = math.floor(math.log10(abs(spacing * scale))) if spacing * scale else 0
        return [short_number(v * scale, _decimals(v * scale, step)) for v in values]


class DecadeTicks(pg.AxisItem):
    """A log-scale axis labelled at the decades (``1e-3``, ``0.01``; ``100k``, ``1M``), and at 2 and
    5 times them when it spans less than two decades: pyqtgraph labels every minor tick from 2 to 9
    there, and on a vertical axis ``0.009``, ``0.008``, ``0.007`` overlap. Linear: pyqtgraph's labels.

    Args:
        orientation: ``"left"``, ``"bottom"``, ...
        fmt: the label of a value (default :func:`short_number`).
    """

    def __init__(self, orientation: str, fmt: Callable[[float], str] = short_number, **kwargs: Any) -> None:
        super().__init__(orientation, **kwargs)
        self._fmt = fmt

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:
        if not self.logMode:
            return super().tickStrings(values, scale, spacing)
        lo, hi = self.range
        marks = (1.0,) if hi - lo >= 2 else (1.0, 2.0, 5.0)

        def label(v: float) -> str:
            mantissa = 10 ** (v - math.floor(v + 1e-9))
            return self._fmt(float(10**v)) if any(abs(mantissa - m) < 1e-3 * m for m in marks) else ""

        return [label(v) for v in values]


def _decimals(v: float, step: int) -> int:
    """The mantissa decimals that tell ``v`` from its neighbours ``10**step`` apart (1 to 3)."""
    if v == 0:
        return 1
    return min(3, max(1, math.floor(math.log10(abs(v))) - step))


class TimedGraphics(pg.GraphicsLayoutWidget):
    """The plots' canvas; adds up the CPU time its paints take (the drawing budget counts it).

    A redraw does not paint: Qt paints the canvas when it gets to it, once for everything
    that changed since the last paint.
    """

    #: The mouse left the canvas (the crosshair and read-out are cleared).
    left = Signal()
    #: The canvas has a new size (the plots may go on more or fewer columns).
    resized = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.paint_cpu_s = 0.0
        self.paints = 0

    def leaveEvent(self, event: Any) -> None:
        super().leaveEvent(event)
        self.left.emit()

    def resizeEvent(self, event: Any) -> None:
        super().resizeEvent(event)
        self.resized.emit()

    def paintEvent(self, event: Any) -> None:
        cpu = time.thread_time()
        try:
            super().paintEvent(event)
        finally:
            self.paint_cpu_s += time.thread_time() - cpu
            self.paints += 1


def make_plot(spec: PlotSpec, link: pg.PlotItem | None = None) -> pg.PlotItem:
    """The plot of one row: its title on the left, clipped to its view and downsampled (peak
    mode), a faint grid, no menu or buttons, a fixed axis width, axes repainted from a pixmap
    unless their ticks changed.

    Args:
        spec: the row (``short_ticks`` chooses the y axis).
        link: the plot whose x range this one follows (None: it is the first).

    Returns:
        The plot.
    """
    # no menu from the start: its view box then never builds the context menu it would drop at once
    p = pg.PlotItem(axisItems={"left": ShortTicks("left")} if spec.short_ticks else None, enableMenu=False)
    p.titleLabel.opts["justify"] = "left"  # the legend goes right of it (plot_legends)
    clip_label(p.titleLabel)
    p.setClipToView(True)
    p.setDownsampling(auto=True, mode="peak")
    p.showGrid(x=True, y=True, alpha=0.15)
    p.setMenuEnabled(False)
    p.hideButtons()
    p.getAxis("left").setWidth(46)
    for ax in ("left", "bottom"):
        p.getAxis(ax).setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
    if link is not None:
        p.setXLink(link)
    return p


def crosshair_line(plot: pg.PlotItem) -> pg.InfiniteLine:
    """A hidden vertical line in ``plot`` for the crosshair (over the curves, outside the ranges).

    Args:
        plot: the plot.

    Returns:
        The line.
    """
    vl = pg.InfiniteLine(angle=90, movable=False, pen=pen((90, 90, 90), 1, Qt.PenStyle.DashLine, 160))
    vl.setVisible(False)
    vl.setZValue(50)
    plot.addItem(vl, ignoreBounds=True)
    return vl
