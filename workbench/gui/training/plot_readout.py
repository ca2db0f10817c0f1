"""What the plots panel shows of its run besides the axes: the curves of the shown run and of
overlaid runs (:class:`~workbench.gui.training.plot_specs.CurveSpec` rows as pyqtgraph items), the
read-out (its values at one x position, as plain lines, one per plot row) and the PNG of the plots.

Memory figures are written by :func:`~workbench.core.training.metrics.fmt_memory`, as every
other read-out of the app writes them; overlaid runs get one line each.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QWidget

from workbench.gui.training.plot_specs import CurveSpec, PlotContext, PlotSpec, ReadoutRow, fmt_value
from workbench.gui.training.plot_style import pen
from workbench.gui.training.series import SeriesBuffer

__all__ = ["LR_COLORS", "curve_item", "lr_curve_item", "readout_lines", "save_plots_png", "shown_run_curves"]

#: Colours of the shown run's learning-rate curves, one per param group scale, in the order they appear.
LR_COLORS = (
    (31, 119, 180), (214, 39, 40), (44, 160, 44), (148, 103, 189), (255, 127, 14),
    (23, 170, 190), (188, 189, 34), (227, 119, 194), (127, 127, 127), (140, 86, 75),
)
_STYLES = {"solid": Qt.PenStyle.SolidLine, "dash": Qt.PenStyle.DashLine, "dot": Qt.PenStyle.DotLine,
           "dashdot": Qt.PenStyle.DashDotLine}


def readout_lines(specs: Sequence[PlotSpec], buffer: SeriesBuffer, x_mode: str, x: float | None, memory_kind: str,
                  marker_near: Callable[[float], Any], overlays: Iterable[Any]) -> str:
    """The read-out of ``buffer`` at ``x`` (None: the newest values): the x position, each
    plot's line (:attr:`PlotSpec.readout`), the marker there and one line per overlaid run.

    Args:
        specs: the plots.
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
        row = {c.name: buf.last(c.name) for c in buf.columns}
        x = None
    lines = [f"step {fmt_value(row['step'], '.0f')} · {fmt_value(row['wall'], '.1f')} s"]
    at = ReadoutRow(row, buf, x_mode, x, memory_kind)
    for spec in specs:
        text = spec.readout(at) if spec.readout is not None else None
        if text is None:
            continue
        if spec.readout_joins and lines:
            lines[-1] += f" · {text}"
        else:
            lines.append(text)
    near = marker_near(row["step"] if x_mode == "step" else row["wall"])
    if near is not None:
        lines.append(f"⟂ {near.full}")
    if x is not None:
        for ov in overlays:
            orow = ov.buffer.nearest(x_mode, x)
            if orow is None:
                continue
            parts = [part for spec in specs if spec.overlay_readout is not None
                     and (part := spec.overlay_readout(orow, ov.buffer, x_mode, x))]
            lines.append(f"{ov.record.name} @ {fmt_value(orow['step'], '.0f')}: " + " · ".join(parts))
    return "\n".join(lines)


def curve_item(curve: CurveSpec, ctx: PlotContext, color: QColor | None = None) -> pg.PlotDataItem:
    """The item of one curve: the shown run's (``color`` None) or an overlaid run's (dashed, in its colour).

    Args:
        curve: the curve's row.
        ctx: names the curve in its legend.
        color: an overlaid run's colour, or None for the shown run.

    Returns:
        The item (not yet in a plot).
    """
    if color is None:
        item_color: QColor = QColor(*curve.color)
        line = pen(curve.color, curve.width, _STYLES[curve.style], curve.alpha)
        opts: dict[str, Any] = {"name": curve.label(ctx) or None, "antialias": curve.antialias}
    else:
        item_color = color
        line = pen(color, 1.5, Qt.PenStyle.DashLine)
        opts = {}
    if curve.sparse:
        opts.update(symbol="o", symbolSize=4 if color is not None else 5, symbolPen=None, symbolBrush=item_color)
    item = pg.PlotDataItem(pen=line, **opts)
    if color is not None:
        item.setZValue(-10)  # under the shown run
    return item


def lr_curve_item(index: int, name: str, color: QColor | None = None) -> pg.PlotDataItem:
    """The item of one param group's learning rate: the shown run's (the ``index``-th colour of
    :data:`LR_COLORS`) or an overlaid run's (dashed, in its colour).

    Args:
        index: how many groups the run showed before this one.
        name: its legend name.
        color: an overlaid run's colour, or None for the shown run.

    Returns:
        The item (not yet in a plot).
    """
    if color is None:
        return pg.PlotDataItem(pen=pen(LR_COLORS[index % len(LR_COLORS)], 2), name=name, antialias=True)
    item = pg.PlotDataItem(pen=pen(color, 1.5, Qt.PenStyle.DashLine), name=name)
    item.setZValue(-10)  # under the shown run
    return item


def shown_run_curves(plots: dict[str, pg.PlotItem], specs: Sequence[PlotSpec], ctx: PlotContext) -> dict[str, pg.PlotDataItem]:
    """The curves of the shown run, one per series column of the rows, in their plots.

    Args:
        plots: ``{key: PlotItem}`` of the panel.
        specs: the plots.
        ctx: names the curves in their legends.

    Returns:
        ``{column: PlotDataItem}``.
    """
    out: dict[str, pg.PlotDataItem] = {}
    for spec in specs:
        for curve in spec.curves:
            item = out[curve.column] = curve_item(curve, ctx)
            plots[spec.key].addItem(item)
    return out


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
