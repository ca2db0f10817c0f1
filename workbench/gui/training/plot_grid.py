"""Where the plots sit in the plots panel's grid: which plots show, in how many columns, and
the one plot a double click enlarges.

Which plots show is the user's choice (View ▸ Plots) or, by default, the set that fits the
panel's width (:func:`auto_keys`): all of them when the canvas is wide, and only the rows marked
``compact`` (loss, step time, memory, trainable parameters) below :data:`COMPACT_BELOW_PX`, so on a laptop's screen
(1280×800, 1280×720) every plot keeps a data area a person can read. Nothing that holds text
shares the grid's rows with a changing height: the read-out is a cell of fixed rows.

A double click on a plot enlarges it over the width of the grid with the other shown plots
kept beside it as small multiples on one row below (:func:`place`); another double click puts
the grid back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workbench.gui.training.plot_ranges import grid_columns
from workbench.gui.training.plot_specs import PlotSpec

__all__ = ["COMPACT_BELOW_PX", "ENLARGED_STRETCH", "MAX_CELLS", "auto_keys", "place"]

#: A canvas narrower than this (pixels) shows the compact plots by default.
COMPACT_BELOW_PX = 720
#: Most cells on one row (the small multiples of an enlarged plot).
MAX_CELLS = 8
#: Row stretch of an enlarged plot against its row of small multiples (1).
ENLARGED_STRETCH = 4


def auto_keys(width: float, specs: Sequence[PlotSpec]) -> list[str]:
    """The plots shown by default on a canvas ``width`` pixels wide.

    Args:
        width: the canvas's width.
        specs: every plot, in grid order.

    Returns:
        The keys of the ``compact`` rows below :data:`COMPACT_BELOW_PX`, else every key.
    """
    return [s.key for s in specs if s.compact or not 0 < width < COMPACT_BELOW_PX]


def place(grid: Any, plots: dict[str, Any], readout: Any, shown: Sequence[str], width: float, current: int,
          enlarged: str | None) -> int:
    """Lay the shown plots and the read-out on ``grid`` (a ``QGraphicsGridLayout``).

    Args:
        grid: the layout (every plot and the read-out are taken out first).
        plots: ``{key: PlotItem}``.
        readout: the read-out item.
        shown: the keys shown, in grid order.
        width: the canvas's width (chooses the columns).
        current: the columns now (hysteresis of :func:`grid_columns`).
        enlarged: the key of the enlarged plot (None: the plain grid).

    Returns:
        The columns used.
    """
    for item in [*plots.values(), readout]:
        for i in range(grid.count()):
            if grid.itemAt(i) is item:
                grid.removeAt(i)
                break
    for key, plot in plots.items():
        plot.setVisible(key in shown)
    if enlarged is not None and enlarged in shown and len(shown) > 1:
        others = [plots[k] for k in shown if k != enlarged]
        columns = min(len(others), MAX_CELLS)
        readout.setVisible(False)
        grid.addItem(plots[enlarged], 0, 0, 1, columns)
        for i, item in enumerate(others[:columns]):
            grid.addItem(item, 1, i)
        stretches = {0: ENLARGED_STRETCH, 1: 1}
    else:
        items = [plots[k] for k in shown] + [readout]
        readout.setVisible(True)
        columns = grid_columns(width, len(shown), current)
        for i, item in enumerate(items):
            span = columns - i % columns if item is readout else 1
            grid.addItem(item, i // columns, i % columns, 1, span)
        rows = (len(items) + columns - 1) // columns
        stretches = dict.fromkeys(range(rows), 1)
    for r in range(MAX_CELLS + 1):
        grid.setRowStretchFactor(r, stretches.get(r, 0))
    spacing = 4
    cell = max(40.0, (width - 4 - spacing * (columns - 1)) / columns)
    for c in range(MAX_CELLS):
        grid.setColumnStretchFactor(c, 1 if c < columns else 0)
        grid.setColumnFixedWidth(c, cell if c < columns else 0.0)
    return columns
