"""The plots of the training view as rows (Qt-free): one :class:`PlotSpec` per plot, in grid order.

A row says everything the view knows of one plot: its title (and what it measures, in the
title's tooltip), the series columns it draws as :class:`CurveSpec` (colour, dash, legend name,
whether overlaid runs draw it too), whether it has a legend, whether its y range leaves
outliers out, whether it belongs to the default set of a narrow panel, and its line of the
read-out. :class:`~workbench.gui.training.plots.PlotsPanel`, its toolbar, grid, axes and
read-out iterate :data:`PLOTS`; nothing else names a plot.

Adding a plot is one row here plus, when it draws a column the series do not have yet, one
column in :data:`workbench.gui.training.series.COLUMNS` (docs/architecture.md walks through it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from workbench.core.formatting import fmt_count
from workbench.core.training.metrics import fmt_memory
from workbench.core.training.task_metrics import metric_label

__all__ = [
    "PLOTS", "VAL_COLOR", "CurveSpec", "PlotContext", "PlotSpec", "ReadoutRow", "fmt_value",
    "plot_of_column", "spec_of",
]

#: The shown run's validation colour (its training loss is red).
VAL_COLOR = (31, 119, 180)
_BLUE, _RED, _GREEN, _PURPLE, _GREY = VAL_COLOR, (214, 39, 40), (44, 160, 44), (148, 103, 189), (120, 120, 120)


@dataclass(frozen=True)
class PlotContext:
    """What a plot's title and curve names depend on besides the row.

    Attributes:
        memory_kind: ``cuda``, ``mps`` or ``rss`` (names the memory figures).
        metric_name: the shown run's validation metric (``accuracy``, a task metric).
        measured: the validation metric has values in the shown run or an overlay.
        count_unit: ``M``, ``k`` or ``""``: the unit of a plot of counts (:attr:`PlotSpec.counts`).
        run_name: the shown run's name.
    """

    memory_kind: str = "rss"
    metric_name: str = "accuracy"
    measured: bool = True
    count_unit: str = ""
    run_name: str = ""


@dataclass(frozen=True)
class ReadoutRow:
    """The values a read-out line is written from.

    Attributes:
        row: ``{column: value}`` of the shown run at the read-out's x (NaN where missing).
        buffer: the shown run's series (sparse columns, learning rates).
        x_mode: ``step`` or ``wall``.
        x: the read-out's x position (None: the newest values).
        memory_kind: ``cuda``, ``mps`` or ``rss``.
    """

    row: Mapping[str, float]
    buffer: Any
    x_mode: str
    x: float | None
    memory_kind: str


@dataclass(frozen=True)
class CurveSpec:
    """One curve of a plot: a series column and how it is drawn.

    Attributes:
        column: the series column (:data:`workbench.gui.training.series.COLUMNS`).
        color: RGB.
        width: line width in pixels.
        style: ``solid``, ``dash``, ``dot`` or ``dashdot``.
        alpha: opacity, 0..255.
        name: its legend name (a text, or a function of the :class:`PlotContext`); ``""``: none.
        antialias: smooth the line (costs a third of a repaint: only where it shows).
        sparse: values only at some steps (validation): drawn point to point with dots, and
            only once the column has a value.
        optional: shown only once the column has a value (reserved memory on a GPU).
        overlay: overlaid runs draw it too (dashed, in the run's colour).
    """

    column: str
    color: tuple[int, int, int]
    width: float = 2.0
    style: str = "solid"
    alpha: int = 255
    name: str | Callable[[PlotContext], str] = ""
    antialias: bool = False
    sparse: bool = False
    optional: bool = False
    overlay: bool = False

    def label(self, ctx: PlotContext) -> str:
        """The legend name in this context."""
        return self.name(ctx) if callable(self.name) else self.name

    @property
    def conditional(self) -> bool:
        """Shown only once its column has a value."""
        return self.sparse or self.optional


@dataclass(frozen=True)
class PlotSpec:
    """One plot of the training view.

    Attributes:
        key: its name (settings, View ▸ Plots, tests).
        title: its title (a text, or a function of the :class:`PlotContext`).
        menu: its name in View ▸ Plots.
        curves: the series it draws.
        tip: what it measures, in its title's tooltip (a text or a function of the context).
        legend: it has a legend (in its title row, outside the data:
            :mod:`~workbench.gui.training.plot_legends`); a legend of one entry is not shown.
        legend_overlays: overlaid runs are named in its legend.
        robust: "Ignore Outliers" leaves outliers out of its y range.
        compact: in the default set of a narrow panel.
        counts: its values are counts, shown in millions or thousands (``(M)`` in the title)
            by the size of the model (the shown run's, or the largest overlaid one's).
        lr_groups: it draws the learning rate of each param-group scale (curves made as
            groups appear, for overlaid runs too) instead of :attr:`curves`.
        short_ticks: y tick labels with three significant digits (``1e-05``).
        readout: its line of the read-out, or None.
        readout_joins: its read-out text joins the previous line (`` · ``).
        overlay_readout: its part of an overlaid run's read-out line (``row``, ``buffer``, ``x_mode``,
            ``x``), or None.
    """

    key: str
    title: str | Callable[[PlotContext], str]
    menu: str
    curves: tuple[CurveSpec, ...] = ()
    tip: str | Callable[[PlotContext], str] = ""
    legend: bool = False
    legend_overlays: bool = False
    robust: bool = False
    compact: bool = False
    counts: bool = False
    lr_groups: bool = False
    short_ticks: bool = False
    readout: Callable[[ReadoutRow], str | None] | None = None
    readout_joins: bool = False
    overlay_readout: Callable[[Mapping[str, float], Any, str, float], str | None] | None = None
    columns: tuple[str, ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "columns", tuple(c.column for c in self.curves))

    def title_in(self, ctx: PlotContext) -> str:
        """The title in this context (with the count unit of a plot of counts)."""
        text = self.title(ctx) if callable(self.title) else self.title
        return f"{text} ({ctx.count_unit})" if self.counts and ctx.count_unit else text

    def tip_in(self, ctx: PlotContext) -> str:
        """What the plot measures, in this context."""
        return self.tip(ctx) if callable(self.tip) else self.tip


def fmt_value(v: float | None, fmt: str) -> str:
    """A number of the read-out, ``–`` where there is none.

    Args:
        v: the value (None or NaN: none).
        fmt: its format spec.

    Returns:
        The text.
    """
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


def _mb(v: float | None) -> str:
    """A memory figure of the series (MB) as every read-out writes it (core's :func:`fmt_memory`)."""
    return fmt_memory(None if v is None else v * 1e6)


def _memory_names(kind: str) -> tuple[str, str, str]:
    """The names of allocated, peak and reserved memory on a device kind."""
    return {
        "cuda": ("allocated", "peak allocated", "reserved"),
        "mps": ("allocated", "peak", "driver"),
    }.get(kind, ("RSS growth", "peak tensor bytes", "reserved"))


def _memory_tip(ctx: PlotContext) -> str:
    # On the CPU the process RSS holds every earlier run and the app itself: the engine
    # records the run's own growth since its setup began (core.training.metrics), and the
    # bytes of gradients and optimizer state are exact (torch tensors, counted by the engine).
    if ctx.memory_kind in ("cuda", "mps"):
        return "Memory the framework allocated on the device (peak: the highest since the run began)"
    return ("RSS growth: the process's resident memory since the run began, after memory freed by "
            "earlier runs was handed back (every allocation counts, not only tensors). Peak tensor bytes: "
            "the most bytes of live tensors during a step (weights, gradients, optimizer state, activations), "
            "the run's peak memory")


def _accuracy_title(ctx: PlotContext) -> str:
    name = ctx.metric_name
    title = "Validation accuracy (%)" if name == "accuracy" else f"Validation {metric_label(name)}"
    return title + ("" if ctx.measured else " · not measured")


def _step_readout(r: ReadoutRow) -> str:
    return f"step time {fmt_value(r.row['step_ms'], '.1f')} ms (EMA {fmt_value(r.row['step_ms_ema'], '.1f')})"


def _memory_readout(r: ReadoutRow) -> str:
    row = r.row
    alloc, peak = ("allocated", "peak") if r.memory_kind in ("cuda", "mps") else ("RSS growth", "peak tensors")
    reserved = row["mem_reserved"]
    return (f"{alloc} {_mb(row['mem_alloc'])} · {peak} {_mb(row['mem_peak'])}"
            + (f" · reserved {fmt_value(reserved, ',.0f')} MB" if not math.isnan(reserved) else "")
            + f"\ngrads + optimizer state {fmt_value(row['state_mb'], ',.1f')} MB")


def _trainable_readout(r: ReadoutRow) -> str:
    v = r.row["trainable"]
    return f"trainable {fmt_count(int(v)) if not math.isnan(v) else '–'}"


def _validation_readout(r: ReadoutRow) -> str | None:
    val = r.buffer.latest("val_loss", r.x_mode, r.x)
    if val is None:
        return None
    acc = r.buffer.latest("val_acc", r.x_mode, r.x)
    where = f"step {val[0]:.0f}" if r.x_mode == "step" else f"{val[0]:.1f} s"
    return f"val loss {val[1]:.4f}" + (f" · acc {acc[1]:.1f} %" if acc is not None else "") + f" ({where})"


def _lr_readout(r: ReadoutRow) -> str | None:
    lrs = r.buffer.lr_near(r.x_mode, r.x)
    if not lrs:
        return None
    # each group's lr is the run's lr times its scale: the plot has the curves
    top, lo, hi = lrs[max(lrs)], min(lrs), max(lrs)
    return f"lr {top:.3g}" + (f" · {len(lrs)} groups ×{lo:.3g}–{hi:.3g}" if len(lrs) > 1 else "")


def _overlay_validation(_row: Mapping[str, float], buffer: Any, x_mode: str, x: float) -> str | None:
    val = buffer.latest("val_loss", x_mode, x)
    return f"val {val[1]:.3f}" if val is not None else None


#: The plots, in grid order (row by row: loss and validation side by side).
PLOTS: tuple[PlotSpec, ...] = (
    PlotSpec(
        "step_time", "Step time (ms)", "Step time (ms)",
        (CurveSpec("step_ms", _BLUE, 1, alpha=90),  # the faint line under the average: named by the read-out
         CurveSpec("step_ms_ema", _BLUE, 2, name=lambda ctx: ctx.run_name or "this run (EMA)", antialias=True,
                   overlay=True)),
        legend=True, legend_overlays=True, robust=True, compact=True, readout=_step_readout,
        overlay_readout=lambda row, _b, _m, _x: f"{fmt_value(row['step_ms_ema'], '.1f')} ms",
    ),
    PlotSpec(
        "memory", lambda ctx: f"Memory (MB, {ctx.memory_kind.upper() if ctx.memory_kind in ('cuda', 'mps') else 'CPU'})",
        "Memory (MB)",
        (CurveSpec("mem_alloc", _BLUE, 2, name=lambda ctx: _memory_names(ctx.memory_kind)[0], antialias=True,
                   overlay=True),
         CurveSpec("mem_peak", _RED, 1.5, "dash", name=lambda ctx: _memory_names(ctx.memory_kind)[1]),
         CurveSpec("mem_reserved", _GREY, 1.5, "dot", name=lambda ctx: _memory_names(ctx.memory_kind)[2], optional=True),
         CurveSpec("state_mb", _GREEN, 1.5, "dashdot", name="grads + optimizer state", optional=True, overlay=True)),
        tip=_memory_tip, legend=True, robust=True, compact=True, readout=_memory_readout,
        overlay_readout=lambda row, _b, _m, _x: f"{fmt_value(row['mem_alloc'], ',.0f')} MB",
    ),
    PlotSpec(
        # not robust: a step function whose short first level would count as an outlier
        "trainable", "Trainable parameters", "Trainable parameters",
        (CurveSpec("trainable", _GREEN, 2, antialias=True, overlay=True),),
        compact=True, counts=True, readout=_trainable_readout,
    ),
    PlotSpec(
        "throughput", "Throughput (samples/s)", "Throughput (samples/s)",
        (CurveSpec("throughput", _PURPLE, 1.5, overlay=True),),
        robust=True, readout=lambda r: f"{fmt_value(r.row['throughput'], ',.1f')} samples/s", readout_joins=True,
    ),
    PlotSpec(
        "loss", "Loss", "Loss",
        (CurveSpec("loss", _RED, 1, alpha=90),
         CurveSpec("loss_ema", _RED, 2, name="training (EMA)", antialias=True, overlay=True),
         CurveSpec("val_loss", VAL_COLOR, 2, name="validation", antialias=True, sparse=True, overlay=True)),
        legend=True, robust=True, compact=True,
        readout=lambda r: f"loss {fmt_value(r.row['loss'], '.4f')} (EMA {fmt_value(r.row['loss_ema'], '.4f')})",
        overlay_readout=lambda row, _b, _m, _x: f"loss {fmt_value(row['loss_ema'], '.3f')}",
    ),
    PlotSpec(
        "accuracy", _accuracy_title, "Validation accuracy (%)",
        (CurveSpec("val_acc", VAL_COLOR, 2, antialias=True, sparse=True, overlay=True),),
        readout=_validation_readout, overlay_readout=_overlay_validation,
    ),
    PlotSpec(
        "lr", "Learning rate", "Learning rate",
        legend=True, lr_groups=True, short_ticks=True, readout=_lr_readout,
    ),
)


def spec_of(specs: Sequence[PlotSpec], key: str) -> PlotSpec:
    """The row of a plot.

    Args:
        specs: the rows.
        key: the plot's key.

    Returns:
        Its row.

    Raises:
        KeyError: no plot has this key.
    """
    for spec in specs:
        if spec.key == key:
            return spec
    raise KeyError(f"no plot {key!r}; the plots are {', '.join(s.key for s in specs)}")


def plot_of_column(specs: Sequence[PlotSpec]) -> dict[str, str]:
    """``{series column: plot key}`` of every curve of the rows."""
    return {c.column: s.key for s in specs for c in s.curves}
