"""What the plots panel shows of its run besides the axes: the curves of the shown run, the
read-out (its values at one x position, as plain lines) and the PNG of the plots.

Memory figures are written by :func:`~workbench.core.training.metrics.fmt_memory`, as every
other read-out of the app writes them; overlaid runs get one line each.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QWidget

from workbench.core.formatting import fmt_count
from workbench.core.training.metrics import fmt_memory
from workbench.gui.training.plot_style import pen
from workbench.gui.training.series import SeriesBuffer

__all__ = ["VAL_COLOR", "readout_lines", "save_plots_png", "shown_run_curves"]

#: The shown run's validation colour (its training loss is red).
VAL_COLOR = (31, 119, 180)


def _mb(v: float | None) -> str:
    """A memory figure of the buffer (MB) as every read-out writes it (core's :func:`fmt_memory`)."""
    return fmt_memory(None if v is None else v * 1e6)


def readout_lines(buffer: SeriesBuffer, x_mode: str, x: float | None, memory_kind: str,
                  marker_near: Callable[[float], Any], overlays: Iterable[Any]) -> str:
    """The read-out of ``buffer`` at ``x`` (None: the newest values).

    Args:
        buffer: the shown run's series.
        x_mode: ``step`` or ``wall``.
        x: position on the x axis, or None.
        memory_kind: ``cuda``, ``mps`` or ``rss`` (names the memory figures).
        marker_near: the marker at an x (``.full`` is its text), or None.
        overlays: the overlaid runs (``.record.name``, ``.buffer``).

    Returns:
        The text (``""`` without data).
    """
    buf = buffer
    row = buf.nearest(x_mode, x) if x is not None else None
    if row is None:
        if not buf.total:
            return ""
        row = {name: buf.last(name) for name in ("step", "wall", "step_ms", "step_ms_ema", "mem_alloc", "mem_peak",
                                                "mem_reserved", "state_mb", "trainable", "loss", "loss_ema",
                                                "throughput")}
        x = None

    def f(v: float, fmt: str) -> str:
        return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)

    names = {"cuda": ("allocated", "peak"), "mps": ("allocated", "peak")}.get(memory_kind, ("RSS growth", "peak"))
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
    val = buf.latest("val_loss", x_mode, x)
    if val is not None:
        acc = buf.latest("val_acc", x_mode, x)
        where = f"step {val[0]:.0f}" if x_mode == "step" else f"{val[0]:.1f} s"
        lines.append(f"val loss {val[1]:.4f}" + (f" · acc {acc[1]:.1f} %" if acc is not None else "") + f" ({where})")
    lrs = buf.lr_near(x_mode, x)
    if lrs:  # each group's lr is the run's lr times its scale: the plot has the curves
        top, lo, hi = lrs[max(lrs)], min(lrs), max(lrs)
        lines.append(f"lr {top:.3g}" + (f" · {len(lrs)} groups ×{lo:.3g}–{hi:.3g}" if len(lrs) > 1 else ""))
    near = marker_near(row["step"] if x_mode == "step" else row["wall"])
    if near is not None:
        lines.append(f"⟂ {near.full}")
    if x is not None:
        for ov in overlays:
            orow = ov.buffer.nearest(x_mode, x)
            if orow is None:
                continue
            mem_v = orow["mem_alloc"]
            oval = ov.buffer.latest("val_loss", x_mode, x)
            lines.append(
                f"{ov.record.name} @ {f(orow['step'], '.0f')}: {f(orow['step_ms_ema'], '.1f')} ms · "
                f"loss {f(orow['loss_ema'], '.3f')}" + (f" · val {oval[1]:.3f}" if oval is not None else "")
                + f" · {f(mem_v, ',.0f')} MB"
            )
    return "\n".join(lines)



def shown_run_curves(plots: dict[str, pg.PlotItem]) -> dict[str, pg.PlotDataItem]:
    """The curves of the shown run, one per series column, in their plots.

    Args:
        plots: ``{key: PlotItem}`` of the panel.

    Returns:
        ``{column: PlotDataItem}``.
    """
    blue, red, green, purple, grey = (31, 119, 180), (214, 39, 40), (44, 160, 44), (148, 103, 189), (120, 120, 120)
    sp, mp, tp, lp, hp, ap = (plots[k] for k in ("step_time", "memory", "trainable", "loss", "throughput", "accuracy"))
    # antialiasing only where it shows (smooth and step curves): it costs a third of a repaint
    return {
        "step_ms": sp.plot(pen=pen(blue, 1, alpha=90), name="raw"),
        "step_ms_ema": sp.plot(pen=pen(blue, 2), name="this run (EMA)", antialias=True),
        "mem_alloc": mp.plot(pen=pen(blue, 2), name="RSS", antialias=True),
        "mem_peak": mp.plot(pen=pen(red, 1.5, Qt.PenStyle.DashLine), name="peak RSS"),
        "mem_reserved": mp.plot(pen=pen(grey, 1.5, Qt.PenStyle.DotLine), name="reserved"),
        "state_mb": mp.plot(pen=pen(green, 1.5, Qt.PenStyle.DashDotLine), name="grads + optimizer state"),
        "trainable": tp.plot(pen=pen(green, 2), antialias=True),
        "loss": lp.plot(pen=pen(red, 1, alpha=90)),
        "loss_ema": lp.plot(pen=pen(red, 2), name="training (EMA)", antialias=True),
        "throughput": hp.plot(pen=pen(purple, 1.5)),
        "val_loss": lp.plot(pen=pen(VAL_COLOR, 2), name="validation", antialias=True,
                            symbol="o", symbolSize=5, symbolPen=None, symbolBrush=QColor(*VAL_COLOR)),
        "val_acc": ap.plot(pen=pen(VAL_COLOR, 2), antialias=True,
                           symbol="o", symbolSize=5, symbolPen=None, symbolBrush=QColor(*VAL_COLOR)),
    }


def save_plots_png(parent: QWidget, graphics: QWidget, name: str, save_file: Callable[..., str] | None,
                   redraw: Callable[[], Any], path: str | None = None) -> str | None:
    """Save the plots' canvas as a PNG image (asks for the file without ``path``).

    Args:
        parent: the dialogs' parent.
        graphics: the canvas.
        name: the shown run's name (the file name offered).
        save_file: asks for a file name (``dialogs.save_file`` signature; None: that one).
        redraw: draws what is pending first.
        path: destination file.

    Returns:
        The path written, or None when cancelled or it failed.
    """
    from workbench.core.atomic import atomic_path
    from workbench.gui import dialogs

    if path is None:
        ask = save_file or dialogs.save_file
        stem = name.replace("#", "run").replace(" ", "_").replace("·", "")
        path = ask(parent, "Save plots as PNG", f"{stem}.png", "PNG images (*.png)")
        if not path:
            return None
        if not path.lower().endswith(".png"):
            path += ".png"
    redraw()
    image = graphics.grab()
    try:
        with atomic_path(path) as tmp:
            if not image.save(str(tmp), "PNG"):
                raise OSError("the image could not be encoded")
    except OSError as e:
        dialogs.error(parent, "Cannot save plots", f"{path}: {e}; choose another folder or file name")
        return None
    return str(path)
