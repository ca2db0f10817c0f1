"""Live training plots (pyqtgraph): step time, memory, trainable parameters, loss, throughput,
validation accuracy and the learning rate of each param group, one per row of
:data:`~workbench.gui.training.plot_specs.PLOTS` (the panel iterates the rows; no plot is named here).

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
colour per run, their learning rate too, named in the legends, which sit in the title rows). Moving the mouse over a plot shows a crosshair on
every plot and the values of the shown run at that step in the read-out cell.

Validation: the validation loss is drawn on the loss plot (blue, a dot at each step that
validated) next to the training loss (red), the validation accuracy on its own plot; both
for overlaid runs too. The learning-rate plot has one curve per ``lr_scale`` of the param
groups (groups added by stages or live edits join it), named by :func:`lr_group_name`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QTimer, Signal
from PySide6.QtGui import QColor, QFont, QFontMetricsF
from PySide6.QtWidgets import (
    QApplication,
    QMenu,
    QVBoxLayout,
    QWidget,
)

from workbench.core.runs.record import RunRecord
from workbench.core.runs.text import validation_text
from workbench.gui.qt_compat import protect_none_refcount
from workbench.gui.theme import palette_changed
from workbench.gui.training import plot_grid, plot_specs
from workbench.gui.training.plot_axes import PlotAxes
from workbench.gui.training.plot_bands import PauseBands
from workbench.gui.training.plot_canvas import TimedGraphics, crosshair_line, make_plot
from workbench.gui.training.plot_legends import TitleLegend
from workbench.gui.training.plot_markers import STAGE_RE, Marker, MarkerLayer, marker_text
from workbench.gui.training.plot_ranges import (
    coarse_range,
    drawing_budget,
    pause_intervals,
    robust_bounds,
)
from workbench.gui.training.plot_readout import (
    curve_item,
    lr_curve_item,
    readout_lines,
    save_plots_png,
    shown_run_curves,
)
from workbench.gui.training.plot_specs import PlotContext, PlotSpec, plot_of_column
from workbench.gui.training.plot_style import clip_label, fit_title, is_dark, plot_theme, run_color
from workbench.gui.training.plot_toolbar import PlotsToolbar
from workbench.gui.training.series import SeriesBuffer, lr_group_name

# the names below moved to plot_style, plot_markers and plot_ranges; kept here for importers
__all__ = [
    "PlotsPanel", "coarse_range", "drawing_budget", "is_dark", "marker_text", "plot_theme", "robust_bounds", "run_color",
]
#: Height of a plot's title row (pixels): one 9-pt line, the rest goes to the data.
TITLE_ROW_PX = 18
#: Most redraws per second while a run is shown live (the timer's rate).
REDRAW_HZ = 15
#: Longest wait between two redraws of a live run, whatever the budget.
MAX_FRAME_INTERVAL_S = 1.0


@dataclass
class _Overlay:
    record: RunRecord
    buffer: SeriesBuffer
    color: QColor
    curves: dict[str, pg.PlotDataItem] = field(default_factory=dict)
    lr_curves: dict[float, pg.PlotDataItem] = field(default_factory=dict)


class PlotsPanel(QWidget):
    """The plots of the shown run, its markers, and overlays of other runs.

    Signals:
        exportCsvRequested(): the user asked to export the metrics of the shown run as CSV.
        viewChanged(): the plots shown or the legends changed (:attr:`shown_keys`, :attr:`legends_shown`).

    Args:
        parent: Qt parent.
        save_file: asks for a file name to save the PNG to (``dialogs.save_file``
            signature); default: :func:`workbench.gui.dialogs.save_file`.

    Attributes:
        specs: the plots' rows (:data:`workbench.gui.training.plot_specs.PLOTS` when the panel was made).
        buffer: the shown run's data.
        plots: ``{key: PlotItem}``, one per row.
        curves: ``{column: PlotDataItem}`` of the shown run.
        lr_curves: ``{lr_scale: PlotDataItem}`` of the shown run (the row with ``lr_groups``).
        legends: ``{key: TitleLegend}`` of the rows with a legend (in the title row, outside the data).
        axes: the plots' ranges (:class:`~workbench.gui.training.plot_axes.PlotAxes`).
        markers: the markers shown (plan changes, stages).
        redraws: how many redraws actually drew (for tests and benchmarks).
    """

    exportCsvRequested = Signal()
    #: Which plots show, or the legends, changed (the caller keeps them in settings).
    viewChanged = Signal()
    axes: PlotAxes

    def __init__(self, parent: QWidget | None = None, save_file: Callable[..., str] | None = None) -> None:
        super().__init__(parent)
        protect_none_refcount()
        self._save_file = save_file
        self.specs: tuple[PlotSpec, ...] = tuple(plot_specs.PLOTS)  # the table as it is now
        self._plot_of = plot_of_column(self.specs)
        self._lr_key = next((s.key for s in self.specs if s.lr_groups), None)
        self._count_columns = {c.column for s in self.specs if s.counts for c in s.curves}
        self._sparse = {c.column for s in self.specs for c in s.curves if c.sparse}
        self.buffer = SeriesBuffer()
        self.record: RunRecord | None = None
        self.overlays: dict[str, _Overlay] = {}
        self.redraws = 0
        self._drawn = -1
        self._x = "step"
        self._total_params: int | None = None  # the shown run's model size (the unit of counts)
        self._count_scale = (1.0, "")
        self._memory_kind = "rss"
        self._live = False
        self._state = "running"
        self._crosshair_x: float | None = None
        self._marker_font = QFont()
        self._marker_font.setPointSizeF(8.0)
        self._theme = plot_theme(is_dark(self.palette()))
        self._titles: dict[str, str] = {s.key: s.title_in(PlotContext()) for s in self.specs}
        self._title_tips: dict[str, str] = {}  # what a plot measures, in its title's tooltip

        bar = self.toolbar = PlotsToolbar(self.specs, self.buffer.ema, self)
        self.x_box, self.ema_box, self.view_button = bar.x_box, bar.ema_box, bar.view_button
        self.save_button, self.csv_button, self.title, self.title_val = bar.save_button, bar.csv_button, bar.title, bar.title_val
        self.act_outliers, self.act_legends, self.log_actions = bar.act_outliers, bar.act_legends, bar.log_actions
        self.show_actions = bar.show_actions
        self.x_box.currentIndexChanged.connect(lambda _i: self.set_x_mode(self.x_box.currentData()))
        self.ema_box.valueChanged.connect(self.set_ema)
        self.save_button.clicked.connect(lambda: self.save_png())
        self.csv_button.clicked.connect(self.exportCsvRequested.emit)
        self.act_outliers.setChecked(True)
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
        for spec in self.specs:
            key = spec.key
            p = self.plots[key] = make_plot(spec, next(iter(self.plots.values()), None))
            p.titleLabel.geometryChanged.connect(lambda key=key: self._show_title(key, force=False))
            p.vb.sigRangeChangedManually.connect(lambda mask, key=key: self.axes.range_changed_by_user(key, mask))
            if len(self.plots) == 1:  # now, and again once the linked plots have followed (their mapping lags)
                p.sigXRangeChanged.connect(self._x_range_changed)
            p.vb.sigResized.connect(lambda *_a: self._relayout_markers_soon())  # labels flip and elide to fit
            self._vlines[key] = crosshair_line(p)
        self.axes = PlotAxes(self.plots, [s.key for s in self.specs if s.robust])
        self.legends: dict[str, TitleLegend] = {s.key: TitleLegend(self.plots[s.key]) for s in self.specs if s.legend}
        self._markers = MarkerLayer(self.plots, self._marker_font)
        self._bands = PauseBands(self.plots)
        self.shown_keys: list[str] = [s.key for s in self.specs]
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
        self.lr_curves: dict[float, pg.PlotDataItem] = {}

        self.curves: dict[str, pg.PlotDataItem] = shown_run_curves(self.plots, self.specs, self._context())
        self.apply_theme()

        self._mouse = pg.SignalProxy(self.graphics.scene().sigMouseMoved, rateLimit=30, slot=self._mouse_moved)
        self.graphics.scene().sigMouseClicked.connect(self._mouse_clicked)
        self.budget = drawing_budget("idle")  # no run yet: nothing competes with drawing (set per run)
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

    def _context(self) -> PlotContext:
        """What the titles and legend names depend on now."""
        measured = self.buffer.has_values("val_acc") or any(ov.buffer.has_values("val_acc") for ov in self.overlays.values())
        return PlotContext(memory_kind=self._memory_kind, metric_name=self.buffer.metric_name, measured=measured,
                           count_unit=self._count_scale[1], run_name=self.record.name if self.record else "")

    def _relabel(self) -> None:
        """Titles, their tooltips and the legend names for the shown run and the overlays now
        (the unit of counts is by the largest model shown)."""
        totals = [self._total_params or 0]
        for ov in self.overlays.values():
            totals.append(int(ov.record.summary.get("total_params") or 0))
            if ov.buffer.has_values("trainable"):
                totals.append(int(np.nanmax(ov.buffer.column("trainable"))))
        if not totals[0] and self.buffer.has_values("trainable"):
            totals.append(int(np.nanmax(self.buffer.column("trainable"))))
        total = max(totals)
        scale = (1e-6, "M") if total >= 1_000_000 else (1e-3, "k") if total >= 10_000 else (1.0, "")
        if scale != self._count_scale:
            self._count_scale = scale
            self._drawn = -1
            self._draw_overlays()
        ctx = self._context()
        for spec in self.specs:
            for c in spec.curves:
                self.curves[c.column].opts["name"] = c.label(ctx) or None
            self._title_tips[spec.key] = spec.tip_in(ctx)
            self._set_plot_title(spec.key, spec.title_in(ctx))
        self._rebuild_legends()

    # ------------------------------------------------------------ axes
    @property
    def ignore_outliers(self) -> bool:
        """The y ranges of the robust rows leave outliers out (View ▸ Ignore Outliers)."""
        return self.axes.ignore_outliers

    def set_log(self, key: str, on: bool) -> None:
        """Show one plot's y axis on a log scale (or linear again).

        Args:
            key: a plot's key.
            on: log scale.

        Raises:
            KeyError: unknown plot.
        """
        on = bool(on)
        act = self.log_actions[key]
        if act.isChecked() != on:
            act.blockSignals(True)
            act.setChecked(on)
            act.blockSignals(False)
        if self.axes.set_log(key, on):
            self._show_title(key)

    def log_scale(self, key: str) -> bool:
        """Whether a plot's y axis is on a log scale."""
        return self.axes.log_scale(key)

    def set_ignore_outliers(self, on: bool) -> None:
        """Fit the y axes of the robust rows (step time, memory, loss, throughput) without their outliers.

        Args:
            on: leave outliers out of the y ranges (see :func:`robust_bounds`).
        """
        self.axes.ignore_outliers = bool(on)
        if self.act_outliers.isChecked() != bool(on):
            self.act_outliers.blockSignals(True)
            self.act_outliers.setChecked(bool(on))
            self.act_outliers.blockSignals(False)
        self.axes.reset_y()
        self.axes.fit_y()

    def y_range(self, key: str) -> tuple[float, float]:
        """A plot's y range as shown (log10 units on a log scale)."""
        return self.axes.y_range(key)

    def fit_view(self) -> None:
        """Fit every plot to its data again, as after a zoom (double-click does it)."""
        self.axes.reset_y()
        self.axes.refit_x(self._live)
        if self._live:  # now, not at the next redraw (a paused run gets none)
            self._follow()
        self.axes.fit_y()

    def _follow(self) -> None:
        xs = [self.buffer.column(self._x), *(ov.buffer.column(self._x) for ov in self.overlays.values())]
        self.axes.follow(xs, self._x == "step")

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
        self.axes.reset_x()
        self.axes.reset_y()
        self._total_params = total_params
        self._relabel()
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
        self._memory_kind = "cuda" if device.startswith("cuda") else ("mps" if device == "mps" else "rss")
        self.budget = drawing_budget(device, info.get("torch_threads"))
        if info.get("total_params"):
            self._total_params = int(info["total_params"])
            self._drawn = -1
        self._relabel()
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
        self.axes.refit_x(self._live)  # the run is complete: fit it exactly
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
        self.axes.reset_x()
        self.axes.reset_y()
        total = record.summary.get("total_params")
        self._total_params = int(total) if isinstance(total, (int, float)) and total else None
        device = str(record.summary.get("device") or record.config.get("device") or "cpu")
        self._memory_kind = "cuda" if device.startswith("cuda") else "rss"
        self.append(metrics)
        self._relabel()
        self._drawn = -1
        self.redraw()
        self.axes.refit_x(self._live)
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

    def _set_plot_title(self, key: str, text: str) -> None:
        self._titles[key] = text
        self._show_title(key)

    def title_text(self, key: str) -> str:
        """A plot's whole title (its unit, `` · log``), however much of it its cell shows."""
        return self._titles[key] + (" · log" if self.axes.log_scale(key) else "")

    def _show_title(self, key: str, force: bool = True) -> None:
        """The title, cut with "…" where it is wider than the plot (three columns on a 1280-px
        screen), its unit kept (:func:`fit_title`); the whole title is then in its tooltip, above
        what the plot measures.

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
            shown = fit_title(full, QFontMetricsF(font), width - margins - 1)
        if force or shown != label.text:
            self.plots[key].setTitle(shown, size="9pt", color=self._theme["title"])
            self.plots[key].layout.setRowFixedHeight(0, TITLE_ROW_PX)  # pyqtgraph's 30 px: a 9-pt line needs less
            if key in self.legends:  # beside the title, where it fits
                self.legends[key].place()
        tip = [full] if shown != full else []
        label.setToolTip("\n".join(tip + ([self._title_tips[key]] if self._title_tips.get(key) else [])))

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
            self._set_plot_title(key, self._titles[key])
        self.readout.opts["color"] = t["readout"]
        self._rebuild_legends()
        self._update_readout(self._crosshair_x)

    @property
    def dark(self) -> bool:
        """The plots use dark colours."""
        return self._theme["background"] != "w"

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if palette_changed(event) and is_dark(self.palette()) != self.dark:
            self.apply_theme()

    def _rebuild_legends(self) -> None:
        """Each legend names its plot's named curves that show (a curve shown only with values,
        once it has them), the learning-rate groups and, where the row says so, the overlaid
        runs; a legend of one entry stays empty (one curve needs no name)."""
        for key, legend in self.legends.items():
            spec = next(s for s in self.specs if s.key == key)
            entries: list[tuple[pg.PlotDataItem, str]] = []
            for c in spec.curves:
                item = self.curves[c.column]
                name = item.opts.get("name")
                if name and (not c.conditional or self.buffer.has_values(c.column)):
                    entries.append((item, name))
            if spec.lr_groups:
                entries += [(curve, curve.opts.get("name") or "") for curve in self.lr_curves.values()]
            if spec.legend_overlays:
                for ov in self.overlays.values():
                    item = next((ov.curves[c.column] for c in spec.curves if c.column in ov.curves), None)
                    if item is not None:
                        entries.append((item, ov.record.name))
            legend.set_entries([(name, item) for item, name in entries], self._theme["text"])
        self._fit_legends()

    def _fit_legends(self) -> None:
        """A legend shows while legends are on (View ▸ Legends) and it fits beside its plot's title."""
        for legend in self.legends.values():
            legend.wanted = self.legends_shown
            legend.place()

    # ------------------------------------------------------------ drawing
    def _xy(self, buffer: SeriesBuffer, column: str, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The points of one column: every row, or only the rows with a value (a sparse curve);
        counts in the unit of their plot's title."""
        y = buffer.column(column)
        if column in self._count_columns and self._count_scale[0] != 1.0:
            y = y * self._count_scale[0]
        if column in self._sparse:
            keep = np.isfinite(y)
            return x[keep], y[keep]
        return x, y

    def _draw_lr(self, buffer: SeriesBuffer, x: np.ndarray, curves: dict[float, pg.PlotDataItem],
                 color: QColor | None = None, name: str = "") -> bool:
        """One curve per param-group scale of a run (the shown run's in colours named by the
        groups, an overlaid run's dashed in its colour); True when a curve was added."""
        if self._lr_key is None:
            return False
        added = False
        plan = self.record.plan if self.record is not None else None
        for scale in buffer.lr_scales():
            curve = curves.get(scale)
            if curve is None:
                curve = lr_curve_item(len(curves), lr_group_name(scale, plan) if color is None else name, color)
                self.plots[self._lr_key].addItem(curve)
                curves[scale] = curve
                added = True
            curve.setData(x, buffer.lr_column(scale), connect="finite")
        return added

    def _canvas_resized(self, force: bool = False) -> None:
        """Columns by the canvas's width only (a neighbour growing in height never makes the grid
        jump), of equal widths (a long plot title must not take a column's width from the
        others); by default the plots that fit the width (:mod:`~workbench.gui.training.plot_grid`)."""
        w = self.graphics.width()
        if self._chosen is None:
            auto = plot_grid.auto_keys(w, self.specs)
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
            self.axes.fit_y()  # a plot shown just now was left out while hidden (a run that ended draws no more)
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
            key: a plot's key.
            on: show it.

        Raises:
            KeyError: unknown plot.
        """
        act = self.show_actions[key]
        if act.isChecked() != bool(on):
            act.blockSignals(True)
            act.setChecked(bool(on))
            act.blockSignals(False)
        shown = [s.key for s in self.specs if (s.key == key and on) or (s.key != key and s.key in self.shown_keys)]
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
        wanted = [s.key for s in self.specs if s.key in set(keys)]
        if not wanted or len(wanted) == len(self.specs):
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

    def _clear_lr_curves(self, curves: dict[float, pg.PlotDataItem] | None = None) -> None:
        """Remove the shown run's learning-rate curves (or an overlaid run's)."""
        curves = self.lr_curves if curves is None else curves
        for curve in curves.values():
            self.plots[str(self._lr_key)].removeItem(curve)
        curves.clear()

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
        first = self._drawn < 0
        self._drawn = buf.version
        x = buf.column(self._x)
        for name, curve in self.curves.items():
            curve.setData(*self._xy(buf, name, x), connect="finite")
        changed = self._draw_lr(buf, x, self.lr_curves)
        self._draw_bands()
        for spec in self.specs:  # a curve shown only with values: once it has them
            for c in spec.curves:
                if c.conditional:
                    item, on = self.curves[c.column], buf.has_values(c.column)
                    changed = changed or item.isVisible() != on
                    item.setVisible(on)
        if changed or first:
            self._relabel()
        if self.axes.follow_x:
            self._follow()
        self.axes.fit_y()
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
        for key in self.plots:
            self.plots[key].setLabel("bottom", "step" if mode == "step" else "seconds", color=self._theme["text"])
        self._markers.x_mode = mode
        for m in self.markers:
            self._markers.place(m)
        self.axes.refit_x(self._live)
        self._layout_markers()
        self._draw_bands()
        self._draw_overlays()
        self._drawn = -1
        self.axes.reset_y()
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
            for column, curve in ov.curves.items():
                self.plots[self._plot_of[column]].removeItem(curve)
            self._clear_lr_curves(ov.lr_curves)
        for rid, (record, ci, metrics) in wanted.items():
            if rid in self.overlays:
                continue
            ov = _Overlay(record, SeriesBuffer.from_metrics(metrics, ema=self.buffer.ema), run_color(ci))
            for spec in self.specs:
                for c in spec.curves:
                    if not c.overlay or (c.conditional and not ov.buffer.has_values(c.column)):
                        continue  # a run without validation
                    curve = ov.curves[c.column] = curve_item(c, self._context(), ov.color)
                    curve.opts["name"] = record.name
                    self.plots[spec.key].addItem(curve)
            self.overlays[rid] = ov
        self._relabel()  # the unit of counts, "not measured", the legends
        self._draw_overlays()
        self.axes.refit_x(self._live)
        self._drawn = -1
        self.show_crosshair(None)  # values of runs no longer shown must not stay
        self.redraw()

    def _draw_overlays(self) -> None:
        for ov in self.overlays.values():
            x = ov.buffer.column(self._x)
            for col, curve in ov.curves.items():
                curve.setData(*self._xy(ov.buffer, col, x), connect="finite")
            self._draw_lr(ov.buffer, x, ov.lr_curves, ov.color, ov.record.name)
        self.axes.fit_y()

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
        return readout_lines(self.specs, self.buffer, self._x, x, self._memory_kind, self._marker_near,
                             self.overlays.values())

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
