"""The plots' canvas (it adds up the CPU time its paints take, for the drawing budget) and
an axis whose tick labels keep to three significant digits."""

from __future__ import annotations

import time
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import Signal
from PySide6.QtWidgets import QWidget

__all__ = ["ShortTicks", "TimedGraphics"]


class ShortTicks(pg.AxisItem):
    """An axis whose tick labels keep three significant digits (``1e-05``, ``0.003``): the
    learning rate's ticks fit the axis's width."""

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:
        return [f"{v * scale:.3g}" for v in values]


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
