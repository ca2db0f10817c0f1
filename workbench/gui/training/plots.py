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
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QFont, QFontMetricsF
from PySide6.QtWidgets import (
    QApplication,
    QGraphicsItem,
    QMenu,
    QVBoxLayout,
    QWidget,
)

from workbench.core.training.task_metrics import metric_label
from workbench.gui.qt_compat import protect_none_refcount
from workbench.gui.training import plot_grid
from workbench.gui.training.plot_axes import PlotAxes
from workbench.gui.training.plot_bands import PauseBands
from workbench.gui.training.plot_canvas import ShortTicks, TimedGraphics
from workbench.gui.training.plot_markers import STAGE_RE, Marker, MarkerLayer, marker_text
from workbench.gui.training.plot_ranges import (
    coarse_range,
    drawing_budget,
    pause_intervals,
    robust_bounds,
)
from workbench.gui.training.plot_readout import VAL_COLOR, readout_lines, save_plots_png, shown_run_curves
from workbench.gui.training.plot_style import clip_label, is_dark, pen, plot_theme, run_color
from workbench.gui.training.plot_toolbar import PlotsToolbar
from workbench.gui.training.run_store import RunRecord, validation_text
from workbench.gui.training.series import SeriesBuffer, lr_group_name

# the names below moved to plot_style, plot_markers and plot_ranges; kept here for importers
__all__ = [
    "GRID_ORDER", "PLOT_KEYS", "PlotsPanel", "coarse_range", "drawing_budget", "is_dark", "marker_text", "plot_theme",
    "robust_bounds", "run_color",
]

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
#: Height of a plot's title row (pixels): one 9-pt line, the rest goes to the data.
TITLE_ROW_PX = 18
#: Most redraws per second while a run is shown live (the timer's rate).
REDRAW_HZ = 15
#: Longest wait between two redraws of a live run, whatever the budget.
MAX_FRAME_INTERVAL_S = 1.0


#: Columns with values only at the steps that validated: drawn point to point, with dots.
_SPARSE = frozenset({"val_loss", "val_acc"})
_VAL_COLOR = VAL_COLOR
#: Colours of the learning-rate curves, one per param group scale, in the order they appear.
_LR_COLORS = (
    (31, 119, 180), (214, 39, 40), (44, 160, 44), (148, 103, 189), (255, 127, 14),
    (23, 170, 190), (188, 189, 34), (227, 119, 194), (127, 127, 127), (140, 86, 75),
)


@dataclass
class _Overlay:
    record: RunRecord
    buffer: SeriesBuffer
    color: QColor
    curves: dict[str, pg.PlotDataItem] = field(default_factory=dict)


class PlotsPanel(PlotAxes, QWidget):
    """The plots of the shown run, its markers, and overlays of other runs.

    Signals:
        exportCsvRequested(): the user asked to export the metrics of the shown run as CSV.
        viewChanged(): the plots shown or the legends changed (:attr:`shown_keys`, :attr:`legends_shown`).

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
    #: Which plots show, or the legends, changed (the caller keeps them in settings).
    viewChanged = Signal()

    def __init__(self, parent: QWidget | None = None, save_file: Callable[..., str] | None = None) -> None:
        super().__init__(parent)
        protect_none_refcount()
        self._save_file = save_file
        self.buffer = SeriesBuffer()
        self.record: RunRecord | None = None
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
        self._title_tips: dict[str, str] = {}  # what a plot measures, in its title's tooltip

        bar = self.toolbar = PlotsToolbar(PLOT_KEYS, self.buffer.ema, self)
        self.x_box, self.ema_box, self.view_button = bar.x_box, bar.ema_box, bar.view_button
        self.save_button, self.csv_button, self.title, self.title_val = bar.save_button, bar.csv_button, bar.title, bar.title_val
        self.act_outliers, self.act_legends, self.log_actions = bar.act_outliers, bar.act_legends, bar.log_actions
        self.show_actions = bar.show_actions
        self.x_box.currentIndexChanged.connect(lambda _i: self.set_x_mode(self.x_box.currentData()))
        self.ema_box.valueChanged.connect(self.set_ema)
        self.save_button.clicked.connect(lambda: self.save_png())
        self.csv_button.clicked.connect(self.exportCsvRequested.emit)
        self.act_outliers.setChecked(self.ignore_outliers)
        self.act_outliers.toggled.connect(self.set_ignore_outliers)
        self.act_legends.toggled.connect(self.set_legends_shown)
        for key, act in self.log_actions.items():
            act.toggled.connect(lambda on, key=key: self.set_log(key, on))
        for key, act in self.show_actions.items():
            act.toggled.connect(lambda on, key=key: self.set_plot_shown(key, on))
        bar.act_auto_plots.toggled.connect(self.set_auto_plots)

        before = set(QApplication.topLevelWidgets())
        self.graphics = TimedGraphics(self)
        self.graphics.left.connect(lambda: self.show_crosshair(None))
        self.graphics.resized.connect(self._canvas_resized)
        self.graphics.ci.setContentsMargins(2, 2, 2, 2)
        self.graphics.ci.setSpacing(4)
        self.plots: dict[str, pg.PlotItem] = {}
        self._vlines: dict[str, pg.InfiniteLine] = {}
        for i, (key, _title) in enumerate(PLOT_KEYS):
            p = pg.PlotItem(axisItems={"left": ShortTicks("left")} if key == "lr" else None)
            clip_label(p.titleLabel)
            p.titleLabel.geometryChanged.connect(lambda key=key: self._show_title(key, force=False))
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
                # now, and again once the linked plots have followed (their mapping lags a moment)
                p.sigXRangeChanged.connect(self._x_range_changed)
            p.vb.sigResized.connect(lambda *_a: self._relayout_markers_soon())  # labels flip and elide to fit
            vl = pg.InfiniteLine(angle=90, movable=False, pen=pen((90, 90, 90), 1, Qt.PenStyle.DashLine, 160))
            vl.setVisible(False)
            vl.setZValue(50)
            p.addItem(vl, ignoreBounds=True)
            self._vlines[key] = vl
            self.plots[key] = p
        self._markers = MarkerLayer(self.plots, self._marker_font)
        self._bands = PauseBands(self.plots)
        self.shown_keys: list[str] = list(GRID_ORDER)
        self.legends_shown = True
        # pyqtgraph makes its context menus without a parent: tie them to this panel so they
        # are destroyed with it instead of living on as top-level widgets
        for w in QApplication.topLevelWidgets():
            if isinstance(w, QMenu) and w not in before:
                w.setParent(self, w.windowFlags())
        self.readout = pg.LabelItem(justify="left", size="9pt")
        clip_label(self.readout, shrink_height=True)  # a short screen: the plots keep their rows
        self.columns = 0
        self._chosen: list[str] | None = None  # the user's View ▸ Plots choice (None: fit the width)
        self.enlarged: str | None = None
        self._layout: tuple[Any, ...] = ()
        self.columns = plot_grid.place(self.graphics.ci.layout, self.plots, self.readout, self.shown_keys, 600, 0, None)
        # legends bottom-left: before a freeze, step time and memory are high there
        self._legend_step = self.plots["step_time"].addLegend(offset=(4, -4), labelTextSize="8pt", verSpacing=-6)
        self._legend_mem = self.plots["memory"].addLegend(offset=(4, -4), labelTextSize="8pt", verSpacing=-6)
        # loss falls: its legend top-right; the lr of most schedules falls too
        self._legend_loss = self.plots["loss"].addLegend(offset=(-4, 4), labelTextSize="8pt", verSpacing=-6)
        self._legend_lr = self.plots["lr"].addLegend(offset=(-4, 4), labelTextSize="8pt", verSpacing=-6)
        self.lr_curves: dict[float, pg.PlotDataItem] = {}

        self.curves: dict[str, pg.PlotDataItem] = shown_run_curves(self.plots)
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
        layout.addWidget(bar)
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
        self._markers.clear()
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
            for n in STAGE_RE.findall(event.partition(": ")[0]):
                self._markers.remove_planned(int(n))
        self.add_marker(step, float(wall) if isinstance(wall, (int, float)) else None, label, kind, full=event)

    def end_run(self, record: RunRecord) -> None:
        """The shown run ended: draw what is left and stop the timer.

        Args:
            record: the run (its final status titles the plots).
        """
        if record is self.record:
            self._live = False
            for m in [m for m in self.markers if m.kind == "planned"]:
                self._markers.remove(m)
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
        self._markers.clear()
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
        self._title_tips["memory"] = (
            "RSS growth: the process's resident memory since the run began, after memory freed by "
            "earlier runs was handed back (every allocation counts, not only tensors)" if kind not in ("cuda", "mps") else
            "Memory the framework allocated on the device (peak: the highest since the run began)"
        )
        self._set_plot_title("memory", f"Memory (MB, {'CPU' if kind not in ('cuda', 'mps') else kind.upper()})")
        self._rebuild_legends()

    def _set_plot_title(self, key: str, text: str) -> None:
        self._titles[key] = text
        self._show_title(key)

    def title_text(self, key: str) -> str:
        """A plot's whole title (its unit, `` · log``), however much of it its cell shows."""
        return self._titles[key] + (" · log" if self._log[key] else "")

    def _show_title(self, key: str, force: bool = True) -> None:
        """The title, cut with "…" where it is wider than the plot (three columns on a 1280-px
        screen); the whole title is then in its tooltip, above what the plot measures.

        Args:
            key: the plot.
            force: set it even when the text shown stays the same (a new colour).
        """
        full = self.title_text(key)
        label = self.plots[key].titleLabel
        width = label.width()  # the plot's width over its axis: clip_label lets it be narrower than the text
        shown = full
        if width > 0:
            font = QFont(self.font())
            font.setPointSizeF(9)
            margins = 2 * label.item.document().documentMargin()  # the text item's own margins
            shown = QFontMetricsF(font).elidedText(full, Qt.TextElideMode.ElideRight, width - margins - 1)
        if force or shown != label.text:
            self.plots[key].setTitle(shown, size="9pt", color=self._theme["title"])
            self.plots[key].layout.setRowFixedHeight(0, TITLE_ROW_PX)  # pyqtgraph's 30 px: a 9-pt line needs less
        tip = [full] if shown != full else []
        label.setToolTip("\n".join(tip + ([self._title_tips[key]] if key in self._title_tips else [])))

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
        for legend in self.legends.values():
            legend.setBrush(pg.mkBrush(*t["legend"]))
            legend.setLabelTextColor(t["text"])
        self.readout.opts["color"] = t["readout"]
        self._rebuild_legends()
        self._update_readout(self._crosshair_x)

    @property
    def dark(self) -> bool:
        """The plots use dark colours."""
        return self._theme["background"] != "w"

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if (event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange)
                and is_dark(self.palette()) != self.dark):
            self.apply_theme()

    def _rebuild_legends(self) -> None:
        for legend in self.legends.values():
            legend.clear()
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
        self._fit_legends()

    @property
    def legends(self) -> dict[str, pg.LegendItem]:
        """The legends, by the key of the plot they sit in."""
        return {"step_time": self._legend_step, "memory": self._legend_mem, "loss": self._legend_loss,
                "lr": self._legend_lr}

    def _fit_legends(self) -> None:
        """A legend shows while legends are on (View ▸ Legends) and it fits across its plot's data
        area. In a narrow cell (three columns on a 1280-px screen) a long one would run past the
        plot's edge, clipped, over the curves; the read-out below names the same series."""
        width = self.graphics.ci.layout.columnMinimumWidth(0) if self.columns else 0.0
        for key, legend in self.legends.items():
            room = width - self.plots[key].getAxis("left").width() - 8
            legend.setVisible(self.legends_shown and (width <= 0 or legend.boundingRect().width() <= room))

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
                curve = self.plots["lr"].plot(pen=pen(color, 2), name=lr_group_name(scale, plan), antialias=True)
                self.lr_curves[scale] = curve
                added = True
            curve.setData(x, self.buffer.lr_column(scale), connect="finite")
        return added

    def _set_accuracy_title(self) -> None:
        """"not measured" on the accuracy plot while neither the shown run nor an overlay has any."""
        measured = self.buffer.has_values("val_acc") or any(ov.buffer.has_values("val_acc") for ov in self.overlays.values())
        name = self.buffer.metric_name
        title = "Validation accuracy (%)" if name == "accuracy" else f"Validation {metric_label(name)}"
        self._set_plot_title("accuracy", title + ("" if measured else " · not measured"))

    def _canvas_resized(self, force: bool = False) -> None:
        """Columns by the canvas's width only (a neighbour growing in height never makes the grid
        jump), of equal widths (a long plot title must not take a column's width from the
        others); by default the plots that fit the width (:mod:`~workbench.gui.training.plot_grid`)."""
        w = self.graphics.width()
        if self._chosen is None:
            auto = plot_grid.auto_keys(w, GRID_ORDER)
            if auto != self.shown_keys:
                self.shown_keys = auto
                self._check_shown_actions()
                force = True
        grid = self.graphics.ci.layout
        layout = (w, tuple(self.shown_keys), self.enlarged)
        if force or layout != self._layout:
            self._layout = layout
            self.columns = plot_grid.place(grid, self.plots, self.readout, self.shown_keys, w, self.columns,
                                           self.enlarged)
        self._fit_legends()

    def _check_shown_actions(self) -> None:
        for key, act in self.show_actions.items():
            act.blockSignals(True)
            act.setChecked(key in self.shown_keys)
            act.blockSignals(False)
        self.toolbar.act_auto_plots.blockSignals(True)
        self.toolbar.act_auto_plots.setChecked(self._chosen is None)
        self.toolbar.act_auto_plots.blockSignals(False)

    @property
    def chosen_keys(self) -> list[str] | None:
        """The plots the user chose to show (View ▸ Plots), or None: the default set for the width."""
        return None if self._chosen is None else list(self._chosen)

    def set_auto_plots(self, on: bool = True) -> None:
        """Show the default set for the width (View ▸ Plots ▸ Fit the Width), or keep what shows now.

        Args:
            on: the default set (False: the plots shown now become the user's choice).
        """
        self._chosen = None if on else list(self.shown_keys)
        self._check_shown_actions()
        self._canvas_resized(force=True)
        self.viewChanged.emit()

    def set_enlarged(self, key: str | None) -> None:
        """Enlarge one plot over the grid's width, the others as small multiples below (None: the grid).

        Args:
            key: a shown plot's key, or None.
        """
        self.enlarged = key if key in self.shown_keys else None
        self._canvas_resized(force=True)

    def set_plot_shown(self, key: str, on: bool) -> None:
        """Show or hide one plot (the View ▸ Plots list); the others fill the grid.

        Args:
            key: a key of :data:`PLOT_KEYS`.
            on: show it.

        Raises:
            KeyError: unknown plot.
        """
        act = self.show_actions[key]
        if act.isChecked() != bool(on):
            act.blockSignals(True)
            act.setChecked(bool(on))
            act.blockSignals(False)
        shown = [k for k in GRID_ORDER if (k == key and on) or (k != key and k in self.shown_keys)]
        chosen_before = self._chosen
        self._chosen = shown
        if shown == self.shown_keys and chosen_before is not None:
            return
        self.shown_keys = shown
        self._check_shown_actions()
        self._canvas_resized(force=True)
        self.viewChanged.emit()

    def set_shown_plots(self, keys: Iterable[str]) -> None:
        """Show exactly these plots (unknown keys are skipped); none known, or every plot (the
        default of earlier versions): the default set for the width.

        Args:
            keys: plot keys.
        """
        wanted = [k for k in GRID_ORDER if k in set(keys)]
        if not wanted or wanted == list(GRID_ORDER):
            self.set_auto_plots(True)
            return
        self._chosen = wanted
        self.shown_keys = wanted
        self._check_shown_actions()
        self._canvas_resized(force=True)
        self.viewChanged.emit()

    def set_legends_shown(self, on: bool) -> None:
        """Show or hide the legends (View ▸ Legends); shown, a legend too wide for its plot stays hidden.

        Args:
            on: show them.
        """
        on = bool(on)
        if self.act_legends.isChecked() != on:
            self.act_legends.blockSignals(True)
            self.act_legends.setChecked(on)
            self.act_legends.blockSignals(False)
        if on == self.legends_shown:
            return
        self.legends_shown = on
        self._fit_legends()
        self.viewChanged.emit()

    def _draw_bands(self) -> None:
        """The shaded intervals of pauses and validation, on the wall-time axis only."""
        buf = self.buffer
        if self._x != "wall":
            self._bands.set_intervals([], shown=False)
            return
        cols = [buf.column(c) for c in ("step", "wall", "step_ms", "data_ms", "val_loss")]
        self._bands.set_intervals(pause_intervals(*cols))

    @property
    def bands(self) -> list[tuple[float, float, str]]:
        """The shaded intervals shown: ``[(start, end, kind)]`` (kind ``paused`` or ``validation``)."""
        return list(self._bands.intervals)

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
        self._draw_bands()
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

    def showEvent(self, event: Any) -> None:
        super().showEvent(event)
        self.redraw()

    def _mouse_clicked(self, event: Any) -> None:
        """A double click fits the plots to their data and enlarges the plot under it (the
        others as small multiples), or puts an enlarged plot back in the grid."""
        if event.double():
            self.fit_view()
            pos = event.scenePos()
            key = next((k for k in self.shown_keys if self.plots[k].sceneBoundingRect().contains(pos)), None)
            if key is not None:
                self.set_enlarged(None if key == self.enlarged else key)

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
            self.plots[key].setLabel("bottom", "step" if mode == "step" else "seconds", color=self._theme["text"])
        self._markers.x_mode = mode
        for m in self.markers:
            self._markers.place(m)
        self._refit_x()
        self._layout_markers()
        self._draw_bands()
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
    @property
    def markers(self) -> list[Marker]:
        """The markers shown (plan changes, stages, alerts)."""
        return self._markers.markers

    def add_marker(
        self, step: float, wall: float | None, label: str, kind: str = "change", *, full: str = "", stage: int | None = None
    ) -> None:
        """Add a vertical marker on every plot (see :meth:`MarkerLayer.add`).

        Args:
            step: x position in steps.
            wall: x position in seconds (None: hidden in wall-time mode).
            label: short text shown at the line.
            kind: ``change``, ``stage``, ``planned``, ``refused`` or ``alert`` (its colour and style).
            full: the full text (tooltip); default ``label``.
            stage: the plan stage a ``planned`` marker stands for.
        """
        self._markers.add(step, wall, label, kind, full=full, stage=stage)

    def marker_groups(self) -> list[list[Marker]]:
        """The shown markers grouped as their labels are (see :meth:`MarkerLayer.groups`)."""
        return self._markers.groups()

    def marker_label_texts(self) -> list[str]:
        """The marker labels as shown (one per group of close markers), in x order."""
        return self._markers.label_texts()

    def _layout_markers(self) -> None:
        self._markers.layout()

    def _x_range_changed(self, *_a: Any) -> None:
        self._layout_markers()
        self._relayout_markers_soon()

    def _relayout_markers_soon(self) -> None:
        """Lay the labels out once every plot has its new size (the plots resize one by one)."""
        timer = getattr(self, "_marker_timer", None)
        if timer is None:
            timer = self._marker_timer = QTimer(self)
            timer.setSingleShot(True)
            timer.setInterval(0)
            timer.timeout.connect(self._layout_markers)
        timer.start()

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
                curve = pg.PlotDataItem(pen=pen(ov.color, 1.5, Qt.PenStyle.DashLine), name=record.name, **dots)
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
        return readout_lines(self.buffer, self._x, x, self._memory_kind, self._marker_near, self.overlays.values())

    def _marker_near(self, x: float) -> Marker | None:
        return self._markers.near(x, max(1.0, (self.buffer.last(self._x) or 1.0) * 0.02))

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
        return save_plots_png(self, self.graphics, self.record.name if self.record else "plots", self._save_file,
                              self.redraw, path)
