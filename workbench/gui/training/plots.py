"""Live training plots (pyqtgraph): step time, memory, trainable parameters, loss, throughput,
validation accuracy and the learning rate of each param group.

The panel keeps the run it shows in a :class:`~workbench.gui.training.series.SeriesBuffer` (a ring
buffer of numpy columns). Metric batches only append to the buffer; a ``QTimer`` (up to
15 Hz) redraws from it with one ``setData`` per curve per tick, and only when the buffer changed,
so a fast training loop never causes one redraw per step. Redraws also keep to a CPU budget
(:func:`drawing_budget`): when training takes every core, the plots redraw once a second.
Every plot clips to its view and downsamples (peak mode), the x and y ranges move in coarse
steps (so the axes, cached as pixmaps, are drawn again only now and then), and each redraw is
painted once, so a redraw costs a few milliseconds however long the run.

Markers: each plan change and stage the engine reports (``StepMetrics.events``) becomes a
vertical line labelled with the change on every plot; stages of the plan that are not
reached yet show as dashed lines. Selected runs of the runs table are overlaid (dashed, one
colour per run, named in the legends). Moving the mouse over a plot shows a crosshair on
every plot and the values of the shown run at that step in the read-out cell.

Validation: the validation loss is drawn on the loss plot (blue, a dot at each step that
validated) next to the training loss (red), the validation accuracy on its own plot; both
for overlaid runs too. The learning-rate plot has one curve per ``lr_scale`` of the param
groups (groups added by stages or live edits join it), named by :func:`lr_group_name`.
"""

from __future__ import annotations

import math
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QPointF, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QColor, QFont, QFontMetricsF, QPalette
from PySide6.QtWidgets import (
    QApplication,
    QComboBox,
    QDoubleSpinBox,
    QGraphicsItem,
    QHBoxLayout,
    QLabel,
    QMenu,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from workbench.core.formatting import fmt_count
from workbench.core.training.metrics import fmt_memory
from workbench.gui.elided_label import ElidedLabel
from workbench.gui.qt_compat import protect_none_refcount
from workbench.gui.training.run_store import RunRecord, validation_text
from workbench.gui.training.series import SeriesBuffer, lr_group_name

__all__ = ["GRID_ORDER", "PLOT_KEYS", "PlotsPanel", "is_dark", "marker_text", "plot_theme", "robust_bounds", "run_color"]

#: The plots: ``(key, title)`` (:data:`GRID_ORDER` places them).
PLOT_KEYS: tuple[tuple[str, str], ...] = (
    ("step_time", "Step time (ms)"),
    ("memory", "Memory (MB)"),
    ("trainable", "Trainable parameters"),
    ("loss", "Loss"),
    ("throughput", "Throughput (samples/s)"),
    ("accuracy", "Validation accuracy (%)"),
    ("lr", "Learning rate"),
)
#: The plots in grid order (row by row): loss and validation accuracy side by side.
GRID_ORDER: tuple[str, ...] = ("step_time", "memory", "trainable", "throughput", "loss", "accuracy", "lr")
#: Plots go in three columns instead of two when the canvas is this much wider than high.
WIDE_ASPECT = 1.45
#: Most redraws per second while a run is shown live (the timer's rate).
REDRAW_HZ = 15
#: Longest wait between two redraws of a live run, whatever the budget.
MAX_FRAME_INTERVAL_S = 1.0


class _TimedGraphics(pg.GraphicsLayoutWidget):
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

    def leaveEvent(self, event: Any) -> None:  # noqa: N802 - Qt API
        super().leaveEvent(event)
        self.left.emit()

    def resizeEvent(self, event: Any) -> None:  # noqa: N802 - Qt API
        super().resizeEvent(event)
        self.resized.emit()

    def paintEvent(self, event: Any) -> None:  # noqa: N802 - Qt API
        cpu = time.thread_time()
        try:
            super().paintEvent(event)
        finally:
            self.paint_cpu_s += time.thread_time() - cpu
            self.paints += 1


def drawing_budget(device: str = "cpu", threads: int | None = None) -> float:
    """The share of one core live redraws may use (see :attr:`PlotsPanel.budget`).

    When a run on the CPU has torch threads on every core, each repaint of the window takes
    a core (and the GIL) from the training step, which then waits for it; drawing is then
    held to 1 % of a core (a redraw costs about 7 ms, so the plots redraw about once a
    second, the least they do while a run is live). With a core to spare, or a run on a GPU
    (its CPU threads mostly wait for the device), 50 %.

    Args:
        device: the device the run trains on (``"cpu"``, ``"cuda:0"``, ``"mps"``).
        threads: the run's torch threads (default: the training thread's count,
            :func:`workbench.core.training.cpu_threads.worker_thread_count`).

    Returns:
        The fraction.
    """
    from workbench.core.training.cpu_threads import worker_thread_count

    if device != "cpu":
        return 0.5
    spare = (os.cpu_count() or 1) - (threads or worker_thread_count())
    return 0.5 if spare >= 1 else 0.01


#: Colours given to runs (runs table swatches and overlay curves).
#: Not the colours of the shown run's own curves (blue, red, green, purple) nor of markers.
_PALETTE = (
    (23, 170, 190), (140, 86, 75), (227, 119, 194), (150, 150, 40), (110, 110, 110),
    (0, 128, 110), (70, 70, 170), (200, 150, 0), (170, 60, 110), (90, 160, 90),
)
_MARKER_STYLE = {
    "change": ((230, 120, 0), Qt.PenStyle.SolidLine),
    "stage": ((128, 60, 170), Qt.PenStyle.SolidLine),
    "planned": ((128, 60, 170), Qt.PenStyle.DashLine),
    "refused": ((200, 30, 30), Qt.PenStyle.DotLine),
    "alert": ((200, 30, 30), Qt.PenStyle.DotLine),
}
#: Plots whose y range leaves outliers out when "Ignore outliers" is on. Not the trainable
#: count: it is a step function whose short first level would count as an outlier.
ROBUST_KEYS = frozenset({"step_time", "memory", "loss", "throughput"})
#: Values needed before outliers are left out of a y range.
ROBUST_MIN_POINTS = 32
#: Markers closer than this share of the x range share one label ("3 changes").
MERGE_FRACTION = 0.06
#: Heights of marker labels (0 bottom, 1 top), in turn. Near the top: after freezing, step time,
#: memory and trainable parameters drop, so the space above the newer data is free.
_LABEL_SLOTS = (0.93, 0.75, 0.57)
#: The trainable count is a step function at the top and bottom of its plot: labels go between.
_TRAINABLE_SLOTS = (0.5, 0.32, 0.68)
_STAGE_RE = re.compile(r"stage (\d+)")
#: Columns with values only at the steps that validated: drawn point to point, with dots.
_SPARSE = frozenset({"val_loss", "val_acc"})
#: The shown run's validation colour (its training loss is red).
_VAL_COLOR = (31, 119, 180)
#: Colours of the learning-rate curves, one per param group scale, in the order they appear.
_LR_COLORS = (
    (31, 119, 180), (214, 39, 40), (44, 160, 44), (148, 103, 189), (255, 127, 14),
    (23, 170, 190), (188, 189, 34), (227, 119, 194), (127, 127, 127), (140, 86, 75),
)


def run_color(index: int) -> QColor:
    """The colour of the run with this index (cycles through ten colours).

    Args:
        index: position of the run (any integer).

    Returns:
        The colour.
    """
    return QColor(*_PALETTE[index % len(_PALETTE)])


def marker_text(event: str, limit: int = 30) -> tuple[str, str]:
    """The short plot label of an engine event, and its kind.

    Args:
        event: ``StepMetrics.events`` text (``"plan change: froze layer3"``,
            ``"stage 1 'unfreeze': unfroze layer3"``, ``"plan change refused: ..."``).
        limit: longest label; longer ones end with ``…``.

    Returns:
        ``(label, kind)`` with kind ``"change"``, ``"stage"``, ``"refused"``, ``"alert"``
        (a non-finite loss) or ``""`` (events that change nothing, which get no marker).
    """
    head, _, tail = event.partition(": ")
    if "refused" in head:
        kind, prefix = "refused", "refused: "
    elif tail == "no change":
        return "", ""
    elif head.startswith("stage"):
        kind, prefix = "stage", f"stage {', '.join(_STAGE_RE.findall(head))}: "
    elif head.startswith("plan change"):
        kind, prefix = "change", ""
    elif head.startswith("loss"):
        kind, prefix, tail = "alert", "", event
    else:
        kind, prefix, tail = "change", "", event
    parts = [p for p in (tail or head).split("; ") if p]
    text = prefix + "; ".join(parts)
    if len(text) > limit and len(parts) > 1:  # keep whole parts: "froze layer1; …"
        kept = parts[:1]
        for p in parts[1:]:
            if len(prefix + "; ".join(kept + [p])) + 3 > limit:
                break
            kept.append(p)
        text = prefix + "; ".join(kept) + (" …" if len(kept) < len(parts) else "")
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return text, kind


def is_dark(palette: QPalette | None = None) -> bool:
    """Whether a palette (default: the application's) is dark: its window colour is dark.

    Args:
        palette: the palette.

    Returns:
        True for a dark palette.
    """
    pal = palette if palette is not None else QApplication.palette()
    return pal.color(QPalette.ColorRole.Window).lightness() < 128


def plot_theme(dark: bool) -> dict[str, Any]:
    """The plots' colours for a light or dark palette.

    Args:
        dark: a dark palette.

    Returns:
        ``background``, ``title``, ``text``, ``axis``, ``readout``, ``muted`` (colour names)
        and ``legend`` (an RGBA tuple).
    """
    if dark:
        return {"background": "#1e1f22", "title": "#ddd", "text": "#ccc", "axis": "#777",
                "readout": "#e6e6e6", "muted": "#999", "legend": (30, 31, 34, 200)}
    return {"background": "w", "title": "#333", "text": "#444", "axis": "#999",
            "readout": "#222", "muted": "#777", "legend": (255, 255, 255, 200)}


def robust_bounds(y: np.ndarray, ignore_outliers: bool = True) -> tuple[float, float] | None:
    """The y interval to show for values ``y``: all of them, or all but the outliers.

    Outliers are values beyond 3 interquartile ranges from the quartiles (Tukey's far
    fences), so a single 3.8 s step does not flatten a 150 → 120 ms change. With fewer than
    :data:`ROBUST_MIN_POINTS` values every value counts (quartiles of a handful of points
    say nothing).

    Args:
        y: values (NaN and inf are skipped).
        ignore_outliers: leave outliers out of the interval.

    Returns:
        ``(low, high)``, or None when no value is finite.
    """
    y = np.asarray(y, dtype=np.float64)
    y = y[np.isfinite(y)]
    if not y.size:
        return None
    lo, hi = float(y.min()), float(y.max())
    if ignore_outliers and y.size >= ROBUST_MIN_POINTS:
        q1, q3 = (float(v) for v in np.percentile(y, [25.0, 75.0]))
        fence = 3.0 * (q3 - q1)
        lo, hi = max(lo, q1 - fence), min(hi, q3 + fence)
    return lo, hi


def _mb(v: float | None) -> str:
    """A memory figure of the buffer (MB) as every read-out writes it (core's :func:`fmt_memory`)."""
    return fmt_memory(None if v is None else v * 1e6)


def _nice_ceiling(v: float) -> float:
    """The smallest of 1, 1.5, 2, 3, 4, 5, 6, 8 × 10^k that is >= ``v`` (> 0)."""
    if v <= 0:
        return 1.0
    k = math.floor(math.log10(v))
    for m in (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0):
        c = m * 10.0**k
        if c >= v * (1 - 1e-12):
            return c
    return 10.0 ** (k + 1)


def coarse_range(lo: float, hi: float, current: tuple[float, float] | None) -> tuple[float, float]:
    """A y range for data spanning ``lo``..``hi`` that changes only now and then.

    The current range is kept while it holds the data clear of its edges (2 % of it) and the
    data fill at least half of it; otherwise the new range pads the data by 10 % and rounds
    outwards to a nice step (a range for data that are all 0 or above stays there).

    Args:
        lo: smallest value shown.
        hi: largest value shown.
        current: the range now, or None.

    Returns:
        ``(bottom, top)``.
    """
    if current is not None:
        c_lo, c_hi = current
        margin = 0.02 * (c_hi - c_lo)
        if c_lo + margin <= lo and hi <= c_hi - margin and (hi - lo) >= 0.5 * (c_hi - c_lo):
            return current
    span = hi - lo
    if span <= 0:
        span = abs(hi) * 0.2 or 1.0
    q = _nice_ceiling(span * 1.2 / 8)
    bottom = math.floor((lo - 0.1 * span) / q) * q
    top = math.ceil((hi + 0.1 * span) / q) * q
    if lo >= 0 > bottom:
        bottom = 0.0
    return bottom, top


@dataclass
class _Marker:
    step: float
    wall: float | None
    label: str
    full: str
    kind: str
    stage: int | None = None
    lines: list[pg.InfiniteLine] = field(default_factory=list)


@dataclass
class _Overlay:
    record: RunRecord
    buffer: SeriesBuffer
    color: QColor
    curves: dict[str, pg.PlotDataItem] = field(default_factory=dict)


def _clip_label(label: pg.LabelItem) -> None:
    """Let a label be narrower than its text (cut at its edge) so that a long plot title or
    read-out line does not widen its grid column (pyqtgraph sets a label's minimum width
    to its text's). A centred title that is cut is shown from its start."""
    update_min = label.updateMin
    justify = label.opts.get("justify", "center")

    def update() -> None:
        update_min()
        want = "left" if 0 < label.width() < label.itemRect().width() else justify
        if label.opts.get("justify") != want:
            label.opts["justify"] = want
            label.resizeEvent(None)  # place the text again (it calls this again, with nothing to change)
        label.setMinimumWidth(0)
        label._sizeHint[Qt.SizeHint.MinimumSize] = (0, label._sizeHint[Qt.SizeHint.MinimumSize][1])
        label._sizeHint[Qt.SizeHint.PreferredSize] = (0, label._sizeHint[Qt.SizeHint.PreferredSize][1])

    label.updateMin = update
    label.setFlag(QGraphicsItem.GraphicsItemFlag.ItemClipsChildrenToShape)


def _pen(
    color: QColor | tuple[int, ...], width: float = 1.0, style: Qt.PenStyle = Qt.PenStyle.SolidLine, alpha: int = 255
) -> Any:
    c = QColor(color) if isinstance(color, QColor) else QColor(*color)
    c.setAlpha(alpha)
    return pg.mkPen(c, width=width, style=style)


class PlotsPanel(QWidget):
    """The plots of the shown run, its markers, and overlays of other runs.

    Signals:
        exportCsvRequested(): the user asked to export the metrics of the shown run as CSV.

    Args:
        parent: Qt parent.
        save_file: asks for a file name to save the PNG to (``dialogs.save_file``
            signature); default: :func:`workbench.gui.dialogs.save_file`.

    Attributes:
        buffer: the shown run's data.
        plots: ``{key: PlotItem}`` for the keys of :data:`PLOT_KEYS`.
        curves: ``{name: PlotDataItem}`` of the shown run.
        markers: the markers shown (plan changes, stages).
        redraws: how many redraws actually drew (for tests and benchmarks).
    """

    exportCsvRequested = Signal()

    def __init__(self, parent: QWidget | None = None, save_file: Callable[..., str] | None = None) -> None:
        super().__init__(parent)
        protect_none_refcount()
        self._save_file = save_file
        self.buffer = SeriesBuffer()
        self.record: RunRecord | None = None
        self.markers: list[_Marker] = []
        self.overlays: dict[str, _Overlay] = {}
        self.redraws = 0
        self._drawn = -1
        self._x = "step"
        self._trainable_scale = (1.0, "")
        self._memory_kind = "rss"
        self._live = False
        self._state = "running"
        self._crosshair_x: float | None = None
        self._follow_x = True
        self._x_hi = -math.inf
        # y ranges chosen by coarse_range(), per plot; a plot the user zoomed is left alone
        self._y_range: dict[str, tuple[float, float] | None] = {key: None for key, _t in PLOT_KEYS}
        self._follow_y: dict[str, bool] = {key: True for key, _t in PLOT_KEYS}
        self._marker_font = QFont()
        self._marker_font.setPointSizeF(8.0)
        self._theme = plot_theme(is_dark(self.palette()))
        self.ignore_outliers = True
        self._log: dict[str, bool] = {key: False for key, _t in PLOT_KEYS}
        self._titles: dict[str, str] = dict(PLOT_KEYS)

        self.x_box = QComboBox(self)
        self.x_box.addItem("Step", "step")
        self.x_box.addItem("Wall time (s)", "wall")
        self.x_box.setToolTip("X axis of every plot")
        self.x_box.currentIndexChanged.connect(lambda _i: self.set_x_mode(self.x_box.currentData()))
        self.ema_box = QDoubleSpinBox(self)
        self.ema_box.setRange(0.0, 0.99)
        self.ema_box.setSingleStep(0.05)
        self.ema_box.setDecimals(2)
        self.ema_box.setValue(self.buffer.ema)
        self.ema_box.setToolTip("Smoothing of step time and loss (exponential moving average; 0 = off)")
        self.ema_box.valueChanged.connect(self.set_ema)
        self.save_button = QPushButton("Save PNG…", self)
        self.save_button.setToolTip("Save the plots as a PNG image")
        self.save_button.clicked.connect(lambda: self.save_png())
        self.csv_button = QPushButton("Export CSV…", self)
        self.csv_button.setToolTip("Export the metrics of the shown run (every step) as CSV")
        self.csv_button.clicked.connect(self.exportCsvRequested.emit)
        self.view_button = QToolButton(self)
        self.view_button.setText("View")
        self.view_button.setToolTip("Y axes: ignore outliers, log scale per plot")
        self.view_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        view_menu = QMenu(self.view_button)
        self.act_outliers = QAction("Ignore Outliers", view_menu)
        self.act_outliers.setCheckable(True)
        self.act_outliers.setChecked(self.ignore_outliers)
        self.act_outliers.setToolTip("Fit the y axes of step time, memory, loss and throughput to the data "
                                     "without their outliers (a single slow step no longer flattens the curve)")
        self.act_outliers.toggled.connect(self.set_ignore_outliers)
        view_menu.addAction(self.act_outliers)
        view_menu.addSeparator()
        self.log_actions: dict[str, QAction] = {}
        for key, title in PLOT_KEYS:
            act = QAction(f"Log Scale: {title}", view_menu)
            act.setCheckable(True)
            act.toggled.connect(lambda on, key=key: self.set_log(key, on))
            view_menu.addAction(act)
            self.log_actions[key] = act
        self.view_button.setMenu(view_menu)
        self.title = QLabel("No run yet: press Start.", self)
        self.title.setTextFormat(Qt.TextFormat.RichText)
        self.title_val = ElidedLabel(self)
        bar = QHBoxLayout()
        bar.setContentsMargins(0, 0, 0, 0)
        bar.setSpacing(6)
        bar.addWidget(self.title)
        bar.addWidget(self.title_val, 1)
        bar.addWidget(QLabel("X", self))
        bar.addWidget(self.x_box)
        bar.addWidget(QLabel("EMA", self))
        bar.addWidget(self.ema_box)
        bar.addWidget(self.view_button)
        bar.addWidget(self.save_button)
        bar.addWidget(self.csv_button)

        before = set(QApplication.topLevelWidgets())
        self.graphics = _TimedGraphics(self)
        self.graphics.left.connect(lambda: self.show_crosshair(None))
        self.graphics.resized.connect(self._canvas_resized)
        self.graphics.ci.setContentsMargins(2, 2, 2, 2)
        self.graphics.ci.setSpacing(4)
        self.plots: dict[str, pg.PlotItem] = {}
        self._vlines: dict[str, pg.InfiniteLine] = {}
        for i, (key, _title) in enumerate(PLOT_KEYS):
            p = pg.PlotItem()
            _clip_label(p.titleLabel)
            p.setClipToView(True)
            p.setDownsampling(auto=True, mode="peak")
            p.showGrid(x=True, y=True, alpha=0.15)
            p.setMenuEnabled(False)
            p.hideButtons()
            p.getAxis("left").setWidth(46)
            for ax in ("left", "bottom"):  # repaint axes from a pixmap unless their ticks changed
                p.getAxis(ax).setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
            p.vb.sigRangeChangedManually.connect(lambda mask, key=key: self._range_changed_by_user(key, mask))
            if i:
                p.setXLink(self.plots[PLOT_KEYS[0][0]])
            else:
                p.sigXRangeChanged.connect(lambda *_a: self._layout_markers())
            p.vb.sigResized.connect(lambda *_a: self._relayout_markers_soon())  # labels flip and elide to fit
            vl = pg.InfiniteLine(angle=90, movable=False, pen=_pen((90, 90, 90), 1, Qt.PenStyle.DashLine, 160))
            vl.setVisible(False)
            vl.setZValue(50)
            p.addItem(vl, ignoreBounds=True)
            self._vlines[key] = vl
            self.plots[key] = p
        # pyqtgraph makes its context menus without a parent: tie them to this panel so they
        # are destroyed with it instead of living on as top-level widgets
        for w in QApplication.topLevelWidgets():
            if isinstance(w, QMenu) and w not in before:
                w.setParent(self, w.windowFlags())
        self.readout = pg.LabelItem(justify="left", size="9pt")
        _clip_label(self.readout)
        self.columns = 0
        self._arrange(2)
        # legends bottom-left: before a freeze, step time and memory are high there
        self._legend_step = self.plots["step_time"].addLegend(offset=(4, -4), labelTextSize="8pt", verSpacing=-6)
        self._legend_mem = self.plots["memory"].addLegend(offset=(4, -4), labelTextSize="8pt", verSpacing=-6)
        # loss falls: its legend top-right; the lr of most schedules falls too
        self._legend_loss = self.plots["loss"].addLegend(offset=(-4, 4), labelTextSize="8pt", verSpacing=-6)
        self._legend_lr = self.plots["lr"].addLegend(offset=(-4, 4), labelTextSize="8pt", verSpacing=-6)
        self.lr_curves: dict[float, pg.PlotDataItem] = {}

        blue, red, green, purple, grey = (31, 119, 180), (214, 39, 40), (44, 160, 44), (148, 103, 189), (120, 120, 120)
        sp, mp, tp, lp, hp, ap = (self.plots[k] for k in ("step_time", "memory", "trainable", "loss", "throughput", "accuracy"))
        # antialiasing only where it shows (smooth and step curves): it costs a third of a repaint
        self.curves: dict[str, pg.PlotDataItem] = {
            "step_ms": sp.plot(pen=_pen(blue, 1, alpha=90), name="raw"),
            "step_ms_ema": sp.plot(pen=_pen(blue, 2), name="this run (EMA)", antialias=True),
            "mem_alloc": mp.plot(pen=_pen(blue, 2), name="RSS", antialias=True),
            "mem_peak": mp.plot(pen=_pen(red, 1.5, Qt.PenStyle.DashLine), name="peak RSS"),
            "mem_reserved": mp.plot(pen=_pen(grey, 1.5, Qt.PenStyle.DotLine), name="reserved"),
            "state_mb": mp.plot(pen=_pen(green, 1.5, Qt.PenStyle.DashDotLine), name="grads + optimizer state"),
            "trainable": tp.plot(pen=_pen(green, 2), antialias=True),
            "loss": lp.plot(pen=_pen(red, 1, alpha=90)),
            "loss_ema": lp.plot(pen=_pen(red, 2), name="training (EMA)", antialias=True),
            "throughput": hp.plot(pen=_pen(purple, 1.5)),
            "val_loss": lp.plot(pen=_pen(_VAL_COLOR, 2), name="validation", antialias=True,
                                symbol="o", symbolSize=5, symbolPen=None, symbolBrush=QColor(*_VAL_COLOR)),
            "val_acc": ap.plot(pen=_pen(_VAL_COLOR, 2), antialias=True,
                               symbol="o", symbolSize=5, symbolPen=None, symbolBrush=QColor(*_VAL_COLOR)),
        }
        self.apply_theme()
        self._set_memory_names("rss")

        self._mouse = pg.SignalProxy(self.graphics.scene().sigMouseMoved, rateLimit=30, slot=self._mouse_moved)
        self.graphics.scene().sigMouseClicked.connect(self._mouse_clicked)
        self.budget = drawing_budget()
        self.frame_s = 0.0  # CPU time of the last redraw, painting included
        self._redraw_cpu_s = 0.0
        self._painted_cpu_s = 0.0
        self._next_frame = 0.0
        self.timer = QTimer(self)
        self.timer.setInterval(1000 // REDRAW_HZ)  # then as long as the drawing budget asks
        self.timer.timeout.connect(self._tick)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.setSpacing(4)
        layout.addLayout(bar)
        layout.addWidget(self.graphics, 1)
        self._update_readout(None)

    # ------------------------------------------------------------ runs
    def start_run(self, record: RunRecord, total_params: int | None = None) -> None:
        """Show a new run live: clears the data and markers, starts the redraw timer.

        Args:
            record: the run (its name titles the plots).
            total_params: the model's parameter count (chooses the trainable axis unit).
        """
        self.record = record
        self.buffer.clear()
        self._clear_lr_curves()
        self._clear_markers()
        self._drawn = -1
        self._live = True
        self._state = "running"
        self.show_crosshair(None)  # the previous run's values are not this run's
        self._reset_x()
        self._reset_y()
        self._set_trainable_scale(total_params)
        self.curves["step_ms_ema"].opts["name"] = record.name
        self._rebuild_legends()
        self._set_title()
        self.timer.start(1000 // REDRAW_HZ)
        self.redraw()

    def set_run_info(self, info: Mapping[str, Any], plan: Mapping[str, Any] | None = None) -> None:
        """Settings known once the run is set up: device (memory labels), stages to come.

        Args:
            info: ``TrainingSession.prepared`` info (``device``, ``total_params``,
                ``steps_per_epoch`` ...).
            plan: the plan the run started with (its stages become dashed markers).
        """
        device = str(info.get("device", "cpu"))
        self._set_memory_names("cuda" if device.startswith("cuda") else ("mps" if device == "mps" else "rss"))
        self.budget = drawing_budget(device, info.get("torch_threads"))
        if info.get("total_params"):
            self._set_trainable_scale(int(info["total_params"]))
            self._drawn = -1
        spe = info.get("steps_per_epoch")
        for i, st in enumerate((plan or {}).get("stages") or []):
            at = st.get("at_step")
            if at is None and st.get("at_epoch") is not None and spe:
                at = int(st["at_epoch"]) * int(spe)
            if at is None or at <= 0:
                continue
            label = f"stage {i}" + (f" '{st['label']}'" if st.get("label") else "") + f" at step {at}"
            self.add_marker(float(at), None, label, "planned", stage=i)
        self._set_title()

    def append(self, batch: Iterable[Mapping[str, Any]]) -> None:
        """Add metric records of the shown run (drawn at the next timer tick).

        Records with ``events`` add markers.

        Args:
            batch: ``StepMetrics.to_dict()`` records.
        """
        batch = list(batch)
        self.buffer.append(batch)
        for m in batch:
            for event in m.get("events") or []:
                self.add_event(m, event)

    def add_event(self, record: Mapping[str, Any], event: str) -> None:
        """Add the marker of one engine event at its record's step and time.

        Args:
            record: the metric record the event came with.
            event: the event text.
        """
        label, kind = marker_text(event)
        if not kind:
            return
        step = float(record.get("step", 0))
        wall = record.get("wall_time")
        if kind == "stage":
            for n in _STAGE_RE.findall(event.partition(": ")[0]):
                self._remove_planned(int(n))
        self.add_marker(step, float(wall) if isinstance(wall, (int, float)) else None, label, kind, full=event)

    def end_run(self, record: RunRecord) -> None:
        """The shown run ended: draw what is left and stop the timer.

        Args:
            record: the run (its final status titles the plots).
        """
        if record is self.record:
            self._live = False
            for m in [m for m in self.markers if m.kind == "planned"]:
                self._remove_marker(m)
        self.redraw()
        self.timer.stop()
        self._refit_x()  # the run is complete: fit it exactly
        self._set_title()

    def show_record(self, record: RunRecord, metrics: list[dict[str, Any]]) -> None:
        """Show a finished run (not live): its data and markers.

        Args:
            record: the run.
            metrics: its records.
        """
        self.timer.stop()
        self._live = False
        self.record = record
        self.buffer.clear()
        self._clear_lr_curves()
        self._clear_markers()
        self._reset_x()
        self._reset_y()
        self._set_trainable_scale(record.summary.get("total_params"))
        device = str(record.summary.get("device") or record.config.get("device") or "cpu")
        self._set_memory_names("cuda" if device.startswith("cuda") else "rss")
        self.curves["step_ms_ema"].opts["name"] = record.name
        self._rebuild_legends()
        self.append(metrics)
        self._drawn = -1
        self.redraw()
        self._refit_x()
        self._set_title()

    def _set_title(self) -> None:
        r = self.record
        if r is None:
            self.title.setText("No run yet: press Start.")
            self.title_val.set_full_text("")
            return
        state = self._state if self._live else r.status
        self.title.setText(f"<b>{r.name}</b> · {state}")
        # after the run, its validation numbers where there is room (all of them in the tooltip)
        val = "" if self._live else validation_text(r.validation(), best=False)
        self.title_val.set_full_text(f"· {val}" if val else "")
        full = validation_text(r.validation()) if not self._live else ""
        self.title_val.setToolTip(full)

    def set_state(self, state: str) -> None:
        """The live run's state (``running``, ``paused``, ``stopping`` ...) for the title.

        Args:
            state: :attr:`RunController.state <workbench.gui.training.run_controller.RunController.state>`.
        """
        if state in ("idle", "starting"):
            state = "running" if state == "starting" else self._state
        self._state = state
        self._set_title()

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

    def _set_trainable_scale(self, total: int | None) -> None:
        if total and total >= 1_000_000:
            self._trainable_scale = (1e-6, "M")
        elif total and total >= 10_000:
            self._trainable_scale = (1e-3, "k")
        else:
            self._trainable_scale = (1.0, "")
        unit = self._trainable_scale[1]
        self._set_plot_title("trainable", f"Trainable parameters{f' ({unit})' if unit else ''}")

    def _set_memory_names(self, kind: str) -> None:
        self._memory_kind = kind
        names = {
            "cuda": ("allocated", "peak allocated", "reserved"),
            "mps": ("allocated", "peak", "driver"),
        }.get(kind, ("RSS growth", "peak RSS growth", "reserved"))
        for key, name in zip(("mem_alloc", "mem_peak", "mem_reserved"), names):
            self.curves[key].opts["name"] = name
        # On the CPU the process RSS holds every earlier run and the app itself: the engine
        # records the run's own growth since its setup began (core.training.metrics), and the
        # bytes of gradients and optimizer state are exact (torch tensors, counted by the engine).
        self._set_plot_title(
            "memory",
            "Memory (MB, CUDA)" if kind == "cuda" else (
                "Memory (MB, MPS)" if kind == "mps" else "Memory (MB): RSS growth since the run began"),
        )
        self._rebuild_legends()

    def _set_plot_title(self, key: str, text: str) -> None:
        self._titles[key] = text
        self.plots[key].setTitle(text + (" · log" if self._log[key] else ""), size="9pt", color=self._theme["title"])

    def apply_theme(self, dark: bool | None = None) -> None:
        """Colour the plots for a light or dark palette (the panel follows palette changes).

        Args:
            dark: dark colours; default: whether the panel's palette is dark.
        """
        self._theme = t = plot_theme(is_dark(self.palette()) if dark is None else dark)
        self.graphics.setBackground(t["background"])
        for key, p in self.plots.items():
            for ax in ("left", "bottom"):
                p.getAxis(ax).setTextPen(t["text"])
                p.getAxis(ax).setPen(t["axis"])
            self._set_plot_title(key, self._titles.get(key, dict(PLOT_KEYS)[key]))
        for legend in (self._legend_step, self._legend_mem, self._legend_loss, self._legend_lr):
            legend.setBrush(pg.mkBrush(*t["legend"]))
            legend.setLabelTextColor(t["text"])
        self.readout.opts["color"] = t["readout"]
        self._rebuild_legends()
        self._update_readout(self._crosshair_x)

    @property
    def dark(self) -> bool:
        """The plots use dark colours."""
        return self._theme["background"] != "w"

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt API
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            if is_dark(self.palette()) != self.dark:
                self.apply_theme()

    def _rebuild_legends(self) -> None:
        self._legend_step.clear()
        self._legend_mem.clear()
        self._legend_loss.clear()
        self._legend_lr.clear()
        if self.curves["val_loss"].isVisible() and self.buffer.has_values("val_loss"):
            for key in ("loss_ema", "val_loss"):
                self._legend_loss.addItem(self.curves[key], self.curves[key].opts.get("name") or key)
        if len(self.lr_curves) > 1:  # one group needs no name
            for curve in self.lr_curves.values():
                self._legend_lr.addItem(curve, curve.opts.get("name") or "")
        for key in ("step_ms_ema", "step_ms"):
            self._legend_step.addItem(self.curves[key], self.curves[key].opts.get("name") or key)
        for ov in self.overlays.values():
            c = ov.curves.get("step_ms_ema")
            if c is not None:
                self._legend_step.addItem(c, ov.record.name)
        for key in ("mem_alloc", "mem_peak", "mem_reserved", "state_mb"):
            if key not in ("mem_reserved", "state_mb") or self.buffer.has_values(key):
                self._legend_mem.addItem(self.curves[key], self.curves[key].opts.get("name") or key)

    # ------------------------------------------------------------ drawing
    def _y(self, buffer: SeriesBuffer, column: str) -> np.ndarray:
        y = buffer.column(column)
        if column == "trainable" and self._trainable_scale[0] != 1.0:
            return y * self._trainable_scale[0]
        return y

    def _xy(self, buffer: SeriesBuffer, column: str, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The points of one column: every row, or only the rows with a value (validation)."""
        y = self._y(buffer, column)
        if column in _SPARSE:
            keep = np.isfinite(y)
            return x[keep], y[keep]
        return x, y

    def _draw_lr(self, x: np.ndarray) -> bool:
        """One curve per param group scale of the shown run; True when a curve was added."""
        added = False
        plan = self.record.plan if self.record is not None else None
        for scale in self.buffer.lr_scales():
            curve = self.lr_curves.get(scale)
            if curve is None:
                color = _LR_COLORS[len(self.lr_curves) % len(_LR_COLORS)]
                curve = self.plots["lr"].plot(pen=_pen(color, 2), name=lr_group_name(scale, plan), antialias=True)
                self.lr_curves[scale] = curve
                added = True
            curve.setData(x, self.buffer.lr_column(scale), connect="finite")
        return added

    def _set_accuracy_title(self) -> None:
        """"not measured" on the accuracy plot while neither the shown run nor an overlay has any."""
        measured = self.buffer.has_values("val_acc") or any(ov.buffer.has_values("val_acc") for ov in self.overlays.values())
        self._set_plot_title("accuracy", "Validation accuracy (%)" + ("" if measured else " · not measured"))

    def _arrange(self, columns: int) -> None:
        """Place the plots in :data:`GRID_ORDER` on ``columns`` columns, the read-out in the
        cells left on the last row."""
        if columns == self.columns:
            return
        grid = self.graphics.ci.layout
        items = [self.plots[key] for key in GRID_ORDER] + [self.readout]
        for item in items:
            for i in range(grid.count()):
                if grid.itemAt(i) is item:
                    grid.removeAt(i)
                    break
        for i, item in enumerate(items):
            span = columns - i % columns if item is self.readout else 1
            grid.addItem(item, i // columns, i % columns, 1, span)
        for c in range(3):
            grid.setColumnStretchFactor(c, 1 if c < columns else 0)
        self.columns = columns

    def _canvas_resized(self) -> None:
        """Two or three columns as the canvas's shape asks, of equal widths (a long plot
        title must not take a column's width from the others)."""
        w, h = self.graphics.width(), self.graphics.height()
        self._arrange(3 if w >= WIDE_ASPECT * max(1, h) else 2)
        grid = self.graphics.ci.layout
        width = max(40.0, (w - 4 - 4 * (self.columns - 1)) / self.columns)
        for c in range(3):
            grid.setColumnFixedWidth(c, width if c < self.columns else 0.0)

    def _clear_lr_curves(self) -> None:
        for curve in self.lr_curves.values():
            self.plots["lr"].removeItem(curve)
        self.lr_curves = {}

    def redraw(self) -> bool:
        """Draw the shown run from the buffer when it changed since the last draw.

        Nothing is drawn while the panel is hidden (another tab is shown); it catches up
        when shown.

        Returns:
            True when something was drawn.
        """
        buf = self.buffer
        if buf.version == self._drawn or not self.isVisible():
            return False
        had_reserved = self._drawn >= 0 and self.curves["mem_reserved"].isVisible()
        self._drawn_first = self._drawn < 0
        self._drawn = buf.version
        x = buf.column(self._x)
        for name, curve in self.curves.items():
            curve.setData(*self._xy(buf, name, x), connect="finite")
        legend_changed = self._draw_lr(x)
        validated = buf.has_values("val_loss")
        had_val = self.curves["val_loss"].isVisible()
        self.curves["val_loss"].setVisible(validated)
        self.curves["val_acc"].setVisible(validated)
        if validated != had_val or self._drawn_first:
            legend_changed = True
            self._set_accuracy_title()
        reserved = buf.has_values("mem_reserved")
        self.curves["mem_reserved"].setVisible(reserved)
        had_state = self.curves["state_mb"].isVisible()
        state = buf.has_values("state_mb")
        self.curves["state_mb"].setVisible(state)
        if reserved != had_reserved or state != had_state or self._drawn_first or legend_changed:
            self._drawn_first = False
            self._rebuild_legends()
        if self._follow_x:
            self._follow(x)
        self._fit_y()
        # Settle the auto-ranges now: done at paint time (pyqtgraph's default), the new
        # ranges would ask for a second paint right after the first.
        self.graphics.scene().prepareForPaint()
        self.redraws += 1
        if self._crosshair_x is None:
            self._update_readout(None)
        return True

    def _tick(self) -> None:
        """Timer tick: redraw when the data changed and the drawing budget allows it.

        The CPU time of the last redraw and of every paint since (the paint of that redraw
        comes after this returns) sets how long the next redraw waits: cost / budget, at
        least one timer interval and at most :data:`MAX_FRAME_INTERVAL_S`. CPU time, because
        wall time grows with the load.
        """
        now = time.perf_counter()
        # a coarse QTimer may fire up to 5 % early: such a tick still counts as on time
        if now < self._next_frame - 0.05 * self.timer.interval() / 1000 or self.buffer.version == self._drawn:
            return
        painted = self.graphics.paint_cpu_s
        self.frame_s = self._redraw_cpu_s + painted - self._painted_cpu_s
        self._painted_cpu_s = painted
        cpu = time.thread_time()
        if self.redraw():
            self._redraw_cpu_s = time.thread_time() - cpu
            wait = max(1.0 / REDRAW_HZ, min(MAX_FRAME_INTERVAL_S, (self.frame_s + self._redraw_cpu_s) / max(self.budget, 1e-3)))
            self._next_frame = now + wait
            if self.timer.isActive():  # tick when the next redraw is due, not in between
                self.timer.start(round(wait * 1000))

    def showEvent(self, event: Any) -> None:  # noqa: N802 - Qt API
        super().showEvent(event)
        self.redraw()

    def _range_changed_by_user(self, key: str, mask: Any = None) -> None:
        """The user zoomed or panned a plot: leave the axes they moved to them."""
        x_moved, y_moved = (bool(mask[0]), bool(mask[1])) if mask is not None else (True, True)
        if x_moved:
            self._follow_x = False
        if y_moved:
            self._follow_y[key] = False

    def _mouse_clicked(self, event: Any) -> None:
        if event.double():
            self.fit_view()

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
            self.plots[PLOT_KEYS[0][0]].enableAutoRange(x=True)

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
        self._x_hi = _nice_ceiling(max(hi * 1.3, 10.0 if self._x == "step" else 1.0))
        first = self.plots[PLOT_KEYS[0][0]]
        first.setXRange(0.0, self._x_hi, padding=0.02)

    def set_x_mode(self, mode: str) -> None:
        """Plot against ``"step"`` or ``"wall"`` time (seconds since the run started).

        Args:
            mode: the x column.

        Raises:
            ValueError: another mode.
        """
        if mode not in ("step", "wall"):
            raise ValueError(f"x mode must be 'step' or 'wall', got {mode!r}")
        if mode == self._x:
            return
        self._x = mode
        i = self.x_box.findData(mode)
        if i != self.x_box.currentIndex():
            self.x_box.blockSignals(True)
            self.x_box.setCurrentIndex(i)
            self.x_box.blockSignals(False)
        for key, _t in PLOT_KEYS:
            self.plots[key].setLabel("bottom", "step" if mode == "step" else "seconds", **{"color": self._theme["text"]})
        for m in self.markers:
            self._place(m)
        self._refit_x()
        self._layout_markers()
        self._draw_overlays()
        self._drawn = -1
        self._reset_y()
        self.redraw()

    @property
    def x_mode(self) -> str:
        """``"step"`` or ``"wall"``."""
        return self._x

    def set_ema(self, ema: float) -> None:
        """Change the smoothing of step time and loss (redraws the shown run and overlays).

        Args:
            ema: factor in [0, 1).
        """
        ema = float(ema)
        if abs(self.ema_box.value() - ema) > 1e-9:
            self.ema_box.blockSignals(True)
            self.ema_box.setValue(ema)
            self.ema_box.blockSignals(False)
        self.buffer.set_ema(ema)
        for ov in self.overlays.values():
            ov.buffer.set_ema(ema)
        self._draw_overlays()
        self.redraw()

    # ------------------------------------------------------------ markers
    def add_marker(
        self, step: float, wall: float | None, label: str, kind: str = "change", *, full: str = "", stage: int | None = None
    ) -> None:
        """Add a vertical marker on every plot.

        Args:
            step: x position in steps.
            wall: x position in seconds (None: hidden in wall-time mode).
            label: short text shown at the line.
            kind: ``change``, ``stage``, ``planned``, ``refused`` or ``alert`` (its colour and style).
            full: the full text (tooltip); default ``label``.
            stage: the plan stage a ``planned`` marker stands for.
        """
        color, style = _MARKER_STYLE.get(kind, _MARKER_STYLE["change"])
        marker = _Marker(step, wall, label, full or label, kind, stage)
        for key, _t in PLOT_KEYS:
            line = pg.InfiniteLine(
                angle=90,
                movable=False,
                pen=_pen(color, 1.5, style),
                label=label,
                labelOpts={
                    "position": _LABEL_SLOTS[0],
                    "color": QColor(*color),
                    "movable": False,
                },  # default anchors: the text sits on the side of the line facing the middle
            )
            line.label.setFont(self._marker_font)
            line.setToolTip(marker.full)
            line.setZValue(-20)  # under every curve: a label never hides data
            self.plots[key].addItem(line, ignoreBounds=True)
            marker.lines.append(line)
        self.markers.append(marker)
        self._place(marker)
        self._layout_markers()

    def marker_groups(self) -> list[list[_Marker]]:
        """The shown markers grouped as their labels are: markers closer than
        :data:`MERGE_FRACTION` of the x range share one label (``"3 changes"``).

        Returns:
            Groups in x order (each in x order).
        """
        xs = [(x, m) for m in self.markers if (x := (m.step if self._x == "step" else m.wall)) is not None]
        xs.sort(key=lambda xm: xm[0])
        lo, hi = self.plots[PLOT_KEYS[0][0]].vb.viewRange()[0]
        gap = MERGE_FRACTION * max(hi - lo, 1e-9)
        groups: list[list[_Marker]] = []
        last = -math.inf
        for x, m in xs:
            if groups and x - last <= gap:
                groups[-1].append(m)
            else:
                groups.append([m])
            last = x
        return groups

    def marker_label_texts(self) -> list[str]:
        """The marker labels as shown (one per group of close markers), in x order."""
        return [g[0].lines[0].label.format for g in self.marker_groups() if g[0].lines]

    def _layout_markers(self) -> None:
        """One label per group of close markers, the groups' labels at alternating heights,
        the full texts of a group in the tooltip of each of its lines; each label on the side
        of its line with room for it (elided when neither side has)."""
        if not self.markers:
            return
        metrics = QFontMetricsF(self._marker_font)
        for turn, group in enumerate(self.marker_groups()):
            head = group[0]
            text = head.label if len(group) == 1 else f"{len(group)} {'changes' if all(m.kind != 'planned' for m in group) else 'markers'}"
            tip = "\n".join(m.full for m in group)
            for m in group:
                for key, line in zip((k for k, _t in PLOT_KEYS), m.lines):
                    line.setToolTip(tip)
                    shown = m is head
                    line.label.setVisible(shown)
                    if shown:
                        fitted, anchor = self._fit_label(key, line.value(), text, metrics)
                        if line.label.anchors[0] != anchor:
                            line.label.anchors = [anchor, anchor]
                        if line.label.format != fitted:
                            line.label.setFormat(fitted)
                        slots = _TRAINABLE_SLOTS if key == "trainable" else _LABEL_SLOTS
                        line.label.setPosition(slots[turn % len(slots)])

    def _relayout_markers_soon(self) -> None:
        """Lay the labels out once every plot has its new size (the plots resize one by one)."""
        timer = getattr(self, "_marker_timer", None)
        if timer is None:
            timer = self._marker_timer = QTimer(self)
            timer.setSingleShot(True)
            timer.setInterval(0)
            timer.timeout.connect(self._layout_markers)
        timer.start()

    def _fit_label(self, key: str, x: float, text: str, metrics: QFontMetricsF) -> tuple[str, tuple[float, float]]:
        """A marker label's text and anchor on one plot: right of its line when the text fits
        there, else left of it, else elided on the roomier side.

        Returns:
            ``(text, anchor)``: anchor ``(0, 0.5)`` puts the text right of the line, ``(1, 0.5)`` left.
        """
        vb = self.plots[key].vb
        view = vb.sceneBoundingRect()
        at = vb.mapViewToScene(QPointF(x, 0.0)).x()
        pad = 8.0  # the label's own margins and a gap to the frame
        right, left = view.right() - at - pad, at - view.left() - pad
        width = metrics.horizontalAdvance(text)
        if width <= right or view.width() <= 0:
            return text, (0.0, 0.5)
        if width <= left:
            return text, (1.0, 0.5)
        room = max(right, left)
        return metrics.elidedText(text, Qt.TextElideMode.ElideRight, max(room, 0.0)), (0.0, 0.5) if right >= left else (1.0, 0.5)

    def _place(self, m: _Marker) -> None:
        x = m.step if self._x == "step" else m.wall
        for line in m.lines:
            if x is None:
                line.setVisible(False)
            else:
                line.setVisible(True)
                line.setValue(x)

    def _remove_marker(self, m: _Marker) -> None:
        for key, line in zip([k for k, _ in PLOT_KEYS], m.lines):
            self.plots[key].removeItem(line)
        m.lines.clear()
        if m in self.markers:
            self.markers.remove(m)
        self._layout_markers()

    def _remove_planned(self, stage: int) -> None:
        for m in [m for m in self.markers if m.kind == "planned" and m.stage == stage]:
            self._remove_marker(m)

    def _clear_markers(self) -> None:
        for m in list(self.markers):
            self._remove_marker(m)

    def marker_labels(self) -> list[str]:
        """The labels of the markers shown (for tests and the read-out)."""
        return [m.label for m in self.markers]

    # ------------------------------------------------------------ overlays
    def set_overlays(self, runs: Iterable[tuple[RunRecord, int, list[dict[str, Any]]]]) -> None:
        """Overlay other runs: ``(record, colour index, metrics)`` each (the shown run is skipped).

        Args:
            runs: the runs to overlay; an empty iterable removes every overlay.
        """
        wanted: dict[str, tuple[RunRecord, int, list[dict[str, Any]]]] = {
            r.id: (r, ci, ms) for r, ci, ms in runs if r is not self.record or not self._live
        }
        if self.record is not None and not self._live:
            wanted.pop(self.record.id, None)  # already drawn in full
        for rid in [k for k in self.overlays if k not in wanted]:
            ov = self.overlays.pop(rid)
            for key, curve in ov.curves.items():
                self.plots[self._plot_of(key)].removeItem(curve)
        for rid, (record, ci, metrics) in wanted.items():
            if rid in self.overlays:
                continue
            ov = _Overlay(record, SeriesBuffer.from_metrics(metrics, ema=self.buffer.ema), run_color(ci))
            for col in ("step_ms_ema", "mem_alloc", "state_mb", "trainable", "loss_ema", "throughput", "val_loss", "val_acc"):
                if col in _SPARSE and not ov.buffer.has_values(col):
                    continue  # a run without validation
                dots = {"symbol": "o", "symbolSize": 4, "symbolPen": None, "symbolBrush": ov.color} if col in _SPARSE else {}
                curve = pg.PlotDataItem(pen=_pen(ov.color, 1.5, Qt.PenStyle.DashLine), name=record.name, **dots)
                curve.setZValue(-10)
                self.plots[self._plot_of(col)].addItem(curve)
                ov.curves[col] = curve
            self.overlays[rid] = ov
        self._draw_overlays()
        self._set_accuracy_title()
        self._rebuild_legends()
        self._refit_x()
        self._drawn = -1
        self.show_crosshair(None)  # values of runs no longer shown must not stay
        self.redraw()

    @staticmethod
    def _plot_of(column: str) -> str:
        return {
            "step_ms_ema": "step_time", "mem_alloc": "memory", "state_mb": "memory", "trainable": "trainable",
            "loss_ema": "loss", "throughput": "throughput", "val_loss": "loss", "val_acc": "accuracy",
        }[column]

    def _draw_overlays(self) -> None:
        for ov in self.overlays.values():
            x = ov.buffer.column(self._x)
            for col, curve in ov.curves.items():
                curve.setData(*self._xy(ov.buffer, col, x), connect="finite")
        self._fit_y()

    # ------------------------------------------------------------ crosshair and read-out
    def _mouse_moved(self, event: tuple[Any, ...]) -> None:
        pos = event[0]
        for p in self.plots.values():
            if p.sceneBoundingRect().contains(pos):
                self.show_crosshair(p.vb.mapSceneToView(pos).x())
                return
        self.show_crosshair(None)

    def show_crosshair(self, x: float | None) -> None:
        """Show the crosshair at ``x`` on every plot with the values there (None hides it).

        Args:
            x: position on the x axis (step or seconds), or None.
        """
        self._crosshair_x = x
        for vl in self._vlines.values():
            if x is None:
                vl.setVisible(False)
            else:
                vl.setValue(x)
                vl.setVisible(True)
        self._update_readout(x)

    def readout_text(self, x: float | None = None) -> str:
        """The read-out as plain lines: the shown run's values at ``x`` (None: the newest).

        Args:
            x: position on the x axis.

        Returns:
            The text (``""`` without data).
        """
        buf = self.buffer
        row = buf.nearest(self._x, x) if x is not None else None
        if row is None:
            if not buf.total:
                return ""
            row = {name: buf.last(name) for name in ("step", "wall", "step_ms", "step_ms_ema", "mem_alloc", "mem_peak",
                                                    "mem_reserved", "state_mb", "trainable", "loss", "loss_ema",
                                                    "throughput")}
            x = None

        def f(v: float, fmt: str) -> str:
            return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)

        names = {"cuda": ("allocated", "peak"), "mps": ("allocated", "peak")}.get(self._memory_kind, ("RSS growth", "peak"))
        lines = [
            f"step {f(row['step'], '.0f')} · {f(row['wall'], '.1f')} s",
            f"step time {f(row['step_ms'], '.1f')} ms (EMA {f(row['step_ms_ema'], '.1f')})",
            f"{names[0]} {_mb(row['mem_alloc'])} · {names[1]} {_mb(row['mem_peak'])}"
            + (f" · reserved {f(row['mem_reserved'], ',.0f')} MB" if not math.isnan(row["mem_reserved"]) else ""),
            f"grads + optimizer state {f(row['state_mb'], ',.1f')} MB",
            f"trainable {fmt_count(int(row['trainable'])) if not math.isnan(row['trainable']) else '–'}"
            f" · {f(row['throughput'], ',.1f')} samples/s",
            f"loss {f(row['loss'], '.4f')} (EMA {f(row['loss_ema'], '.4f')})",
        ]
        val = buf.latest("val_loss", self._x, x)
        if val is not None:
            acc = buf.latest("val_acc", self._x, x)
            where = f"step {val[0]:.0f}" if self._x == "step" else f"{val[0]:.1f} s"
            lines.append(f"val loss {val[1]:.4f}" + (f" · acc {acc[1]:.1f} %" if acc is not None else "") + f" ({where})")
        lrs = buf.lr_near(self._x, x)
        if lrs:  # each group's lr is the run's lr times its scale: the plot has the curves
            top, lo, hi = lrs[max(lrs)], min(lrs), max(lrs)
            lines.append(f"lr {top:.3g}" + (f" · {len(lrs)} groups ×{lo:.3g}–{hi:.3g}" if len(lrs) > 1 else ""))
        near = self._marker_near(row["step"] if self._x == "step" else row["wall"])
        if near is not None:
            lines.append(f"⟂ {near.full}")
        if x is not None:
            for ov in self.overlays.values():
                orow = ov.buffer.nearest(self._x, x)
                if orow is None:
                    continue
                mem_v = orow["mem_alloc"]
                oval = ov.buffer.latest("val_loss", self._x, x)
                lines.append(
                    f"{ov.record.name} @ {f(orow['step'], '.0f')}: {f(orow['step_ms_ema'], '.1f')} ms · "
                    f"loss {f(orow['loss_ema'], '.3f')}" + (f" · val {oval[1]:.3f}" if oval is not None else "")
                    + f" · {f(mem_v, ',.0f')} MB"
                )
        return "\n".join(lines)

    def _marker_near(self, x: float) -> _Marker | None:
        if x is None or math.isnan(x) or not self.markers:
            return None
        best, dist = None, math.inf
        for m in self.markers:
            mx = m.step if self._x == "step" else m.wall
            if mx is not None and abs(mx - x) < dist:
                best, dist = m, abs(mx - x)
        span = max(1.0, (self.buffer.last(self._x) or 1.0) * 0.02)
        return best if dist <= span else None

    def _update_readout(self, x: float | None) -> None:
        text = self.readout_text(x)
        if not text:
            html = (f"<span style='color:{self._theme['muted']}'>Values at the mouse pointer<br>"
                    "appear here during a run.</span>")
        else:
            html = "<br>".join(text.split("\n"))
        self.readout.setText(html)

    # ------------------------------------------------------------ files
    def save_png(self, path: str | None = None) -> str | None:
        """Save the plots as a PNG image (asks for the file without ``path``).

        Args:
            path: destination file.

        Returns:
            The path written, or None when cancelled or it failed.
        """
        from workbench.core.atomic import atomic_path
        from workbench.gui import dialogs

        if path is None:
            ask = self._save_file or dialogs.save_file
            stem = (self.record.name if self.record else "plots").replace("#", "run").replace(" ", "_").replace("·", "")
            path = ask(self, "Save plots as PNG", f"{stem}.png", "PNG images (*.png)")
            if not path:
                return None
            if not path.lower().endswith(".png"):
                path += ".png"
        self.redraw()
        image = self.graphics.grab()
        try:
            with atomic_path(path) as tmp:
                if not image.save(str(tmp), "PNG"):
                    raise OSError("the image could not be encoded")
        except OSError as e:
            dialogs.error(self, "Cannot save plots", f"{path}: {e}; choose another folder or file name")
            return None
        return str(path)
