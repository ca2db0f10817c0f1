"""The sweep's chart: the objective against training time and against peak memory, fronts marked.

One drawing, :func:`paint_report`, with ``QPainter``: the Suggest dialog's *Train each* draws
it live in a widget (:class:`SweepChart`), and ``workbench sweep`` writes it as a PNG
(:func:`write_chart`) on the offscreen platform, so the CLI needs no display and no plotting
library beyond Qt, which the app already has. Two panels side by side: every candidate that
trained for the whole budget is a point, the front is joined by a line in colour, the
recommended plan is a larger ring, and a pruned candidate is a hollow grey point at the value
and cost where it stopped (its cost is a shorter run's, so it is not on a front).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QImage, QPainter, QPen
from PySide6.QtWidgets import QApplication, QWidget

from workbench.core.advisor.sweep_report import SweepReport, SweepRow
from workbench.gui.theme import is_dark

__all__ = ["SweepChart", "paint_report", "write_chart"]

_SIZE = (1200, 520)


def _colors(dark: bool = False) -> dict[str, QColor]:
    """The chart's colours on a light background (the PNG ``workbench sweep`` writes) or on a dark one
    (the dialog in a dark theme)."""
    if dark:
        return {"background": QColor(30, 31, 34), "front": QColor(86, 156, 214), "chosen": QColor(240, 90, 90),
                "other": QColor(150, 150, 150), "pruned": QColor(105, 105, 105), "axis": QColor(204, 204, 204),
                "grid": QColor(58, 60, 64)}
    return {"background": QColor(255, 255, 255), "front": QColor(31, 119, 180), "chosen": QColor(214, 39, 40),
            "other": QColor(120, 120, 120), "pruned": QColor(170, 170, 170), "axis": QColor(60, 60, 60),
            "grid": QColor(225, 225, 225)}


def _nice(lo: float, hi: float, *, floor: float | None = None) -> tuple[float, float, list[float]]:
    """An axis over ``lo..hi``: its ends on multiples of a 1-2-5 step, and the ticks between them.

    Args:
        lo / hi: the data's range.
        floor: the axis starts no lower than this (costs are never negative).

    Returns:
        ``(start, end, ticks)``.
    """
    if not math.isfinite(lo) or not math.isfinite(hi):
        lo, hi = 0.0, 1.0
    if hi <= lo:
        pad = abs(hi) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    pad = (hi - lo) * 0.08
    lo, hi = lo - pad, hi + pad
    if floor is not None:
        lo = max(lo, floor)
    raw = (hi - lo) / 4
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start, end = math.floor(lo / step) * step, math.ceil(hi / step) * step
    ticks = [start + k * step for k in range(round((end - start) / step) + 1)]
    return start, end, ticks


def _tick(v: float) -> str:
    return f"{v:.4g}" if abs(v) > 1e-12 else "0"


def _panel(p: QPainter, r: QRectF, report: SweepReport, by: str, title: str, c: dict[str, QColor]) -> None:
    p.setBrush(QBrush())  # outlines only, whatever the last point was filled with
    plot = QRectF(r.left() + 70, r.top() + 36, r.width() - 90, r.height() - 86)
    p.setPen(QPen(c["axis"]))
    p.drawText(QRectF(r.left(), r.top() + 4, r.width(), 24), Qt.AlignmentFlag.AlignHCenter, title)
    scale = 1.0 if by == "time" else 1e6
    pts = [(row, row.cost(by) / scale, row.metric) for row in report.rows
           if row.metric is not None and math.isfinite(row.cost(by)) and math.isfinite(row.metric)]
    xs = [x for _, x, _ in pts] or [0.0, 1.0]
    ys = [float(y) for _, _, y in pts] or [0.0, 1.0]
    x0, x1, xticks = _nice(min(xs), max(xs), floor=0.0)
    y0, y1, yticks = _nice(min(ys), max(ys))

    def at(x: float, y: float) -> QPointF:
        return QPointF(plot.left() + (x - x0) / (x1 - x0) * plot.width(),
                       plot.bottom() - (y - y0) / (y1 - y0) * plot.height())

    for fx in xticks:  # grid and tick labels, at round values
        p.setPen(QPen(c["grid"]))
        p.drawLine(at(fx, y0), at(fx, y1))
        p.setPen(QPen(c["axis"]))
        p.drawText(QRectF(at(fx, y0).x() - 40, plot.bottom() + 4, 80, 18), Qt.AlignmentFlag.AlignHCenter, _tick(fx))
    for fy in yticks:
        p.setPen(QPen(c["grid"]))
        p.drawLine(at(x0, fy), at(x1, fy))
        p.setPen(QPen(c["axis"]))
        p.drawText(QRectF(plot.left() - 66, at(x0, fy).y() - 9, 60, 18), Qt.AlignmentFlag.AlignRight, _tick(fy))
    p.drawRect(plot)
    unit = "training time (s)" if by == "time" else "peak memory (MB)"
    p.drawText(QRectF(plot.left(), plot.bottom() + 24, plot.width(), 20), Qt.AlignmentFlag.AlignHCenter, unit)
    p.save()
    p.translate(r.left() + 14, plot.center().y())
    p.rotate(-90)
    p.drawText(QRectF(-plot.height() / 2, -10, plot.height(), 20), Qt.AlignmentFlag.AlignHCenter, report.objective)
    p.restore()
    flag = "on_time_front" if by == "time" else "on_memory_front"
    front = sorted((x, float(y)) for row, x, y in pts if getattr(row, flag))
    p.setPen(QPen(c["front"], 2))
    for a, b in zip(front, front[1:], strict=False):
        p.drawLine(at(*a), at(*b))
    for row, x, y in pts:
        _point(p, at(x, float(y)), row, getattr(row, flag), report.rows.index(row) == report.recommended, c,
               right=plot.right())


def _point(painter: QPainter, at: QPointF, row: SweepRow, on_front: bool, chosen: bool, c: dict[str, QColor],
           *, right: float) -> None:
    if row.status != "completed":
        painter.setPen(QPen(c["pruned"], 1.5))
        painter.setBrush(QBrush())
        painter.drawEllipse(at, 4.0, 4.0)
        return
    color = c["front"] if on_front else c["other"]
    painter.setPen(QPen(color))
    painter.setBrush(QBrush(color))
    painter.drawEllipse(at, 5.0, 5.0)
    if chosen:
        painter.setPen(QPen(c["chosen"], 2.5))
        painter.setBrush(QBrush())
        painter.drawEllipse(at, 10.0, 10.0)
    if on_front or chosen:
        painter.setPen(QPen(c["axis"]))
        label = row.name if len(row.name) <= 28 else row.name[:27] + "…"
        width = painter.fontMetrics().horizontalAdvance(label)
        x = at.x() + 8 if at.x() + 8 + width <= right else at.x() - 8 - width  # inside the plot, not cut
        painter.drawText(QPointF(x, at.y() - 8), label)


def paint_report(p: QPainter, width: int, height: int, report: SweepReport, *, dark: bool = False) -> None:
    """Draw both panels and the legend into ``painter`` over ``width`` x ``height`` pixels.

    Args:
        p: an active ``QPainter``.
        width / height: the area, in pixels.
        report: the sweep's report.
        dark: dark colours (a dark theme's dialog); the PNG file is light.
    """
    c = _colors(dark)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    p.fillRect(QRectF(0, 0, width, height), c["background"])
    half = width / 2
    _panel(p, QRectF(0, 0, half, height - 24), report, "time", f"{report.objective} vs training time", c)
    _panel(p, QRectF(half, 0, half, height - 24), report, "memory", f"{report.objective} vs peak memory", c)
    p.setPen(QPen(c["axis"]))
    p.drawText(QRectF(10, height - 24, width - 20, 20), Qt.AlignmentFlag.AlignLeft,
               "blue: Pareto front · red ring: recommended · grey: dominated · hollow: stopped early (pruned)")


def write_chart(report: SweepReport, path: str | os.PathLike[str], size: tuple[int, int] = _SIZE) -> Path:
    """Render the chart to a PNG file, with no display needed (Qt's offscreen platform).

    Args:
        report: the sweep's report.
        path: the PNG file to write.
        size: width and height in pixels.

    Returns:
        The path written.

    Raises:
        OSError: the file cannot be written.
    """
    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    # a QApplication, not a QGuiApplication: the process's one application must serve widgets too
    # (the app, or a test run after this in the same process)
    _app = QApplication.instance() or QApplication([])
    image = QImage(size[0], size[1], QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    try:
        paint_report(painter, size[0], size[1], report)
    finally:
        painter.end()
    out = Path(path)
    if not image.save(str(out)):
        raise OSError(f"cannot write the chart {out}; check the folder")
    del _app
    return out


class SweepChart(QWidget):
    """The chart in a widget (the Suggest dialog's *Train each*), redrawn when the report changes, in
    the colours of its palette (a theme switched repaints it)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.report: SweepReport | None = None
        self.setMinimumSize(480, 220)

    def set_report(self, report: SweepReport | None) -> None:
        """Show ``report`` (None: nothing)."""
        self.report = report
        self.update()

    def paintEvent(self, event: object) -> None:
        """Draw the report."""
        if self.report is None:
            return
        painter = QPainter(self)
        try:
            paint_report(painter, self.width(), self.height(), self.report, dark=is_dark(self.palette()))
        finally:
            painter.end()
