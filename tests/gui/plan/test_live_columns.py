"""Live tree columns: gradient norm and update/weight ratio after a short real run; frozen rows blank."""

from __future__ import annotations

import math
from typing import Any

import pytest
from PySide6.QtCore import Qt

from tests.timeouts import GUI_EVENT_S, GUI_RUN_S, ms
from workbench.core.training.module_stats import ModuleStats
from workbench.gui.main_window import MainWindow
from workbench.gui.plan.tree_columns import COLUMNS, Column
from workbench.gui.plan.tree_model import VALUE_ROLE


def test_a_short_run_fills_the_live_columns_and_frozen_rows_stay_blank(window: MainWindow, qtbot: Any) -> None:
    w = window
    w.controller.set_value([""], "frozen", True)
    w.controller.set_value(["layer4", "fc"], "frozen", False)
    t = w.training
    t.runs.trainer_kwargs["module_stats_every"] = 2
    t.panel.set_values(steps=4)
    with qtbot.waitSignal(t.runs.runEnded, timeout=ms(GUI_RUN_S)):
        assert t.panel.start()
    m = w.tree_model
    qtbot.waitUntil(lambda: m.module_stats is not None, timeout=ms(GUI_EVENT_S))
    stats = m.module_stats
    assert stats.step in (0, 2)
    header = w.view.header()  # the live columns come after the module names and the toggles, which keep their places
    order = [Column.MODULE, Column.FROZEN, Column.AB, Column.BN, Column.GRAD, Column.UPDATE, Column.TYPE,
             Column.PARAMS, Column.TRAINABLE, Column.LR]
    assert [header.visualIndex(c) for c in order] == list(range(len(order)))
    for c in (Column.MODULE, Column.FROZEN, Column.AB, Column.BN):  # in view in a 1280-px window's tree
        left = header.sectionViewportPosition(c)
        assert left >= 0 and left + header.sectionSize(c) <= w.view.viewport().width(), (c, left, w.view.width())
    fc = m.index_of("fc", Column.GRAD)
    layer4 = m.index_of("layer4", Column.GRAD)
    root = m.index_of("", Column.GRAD)
    g_fc, g_l4, g_root = (i.data(VALUE_ROLE) for i in (fc, layer4, root))
    assert g_fc > 0 and g_l4 > 0
    assert g_root == pytest.approx(math.hypot(g_fc, g_l4))  # the norm of the parts
    assert fc.data(Qt.ItemDataRole.DisplayRole) != ""
    ratio = m.index_of("layer4", Column.UPDATE).data(VALUE_ROLE)
    assert 0 < ratio < 1
    frozen = m.index_of("layer1", Column.GRAD)
    assert frozen.data(VALUE_ROLE) is None and frozen.data(Qt.ItemDataRole.DisplayRole) == ""
    assert "Frozen" in frozen.data(Qt.ItemDataRole.ToolTipRole)
    # the Layers plot: one curve per top-level module that trains
    plot = w.layers_plot
    plot.redraw()
    assert set(plot.curves) == {"layer4", "fc"}
    x, y = plot.curves["layer4"].getData()
    # the plot may already hold a later measurement than the columns (they update at most once a second)
    at = list(x).index(stats.step)
    assert x[-1] >= stats.step and 10 ** y[at] == pytest.approx(ratio)  # a log axis
    plot.quantity.setCurrentIndex(plot.quantity.findData("grad_norm"))
    plot.redraw()
    x, y = plot.curves["layer4"].getData()
    assert 10 ** y[list(x).index(stats.step)] == pytest.approx(g_l4)  # the same measurement as the column
    # the heat colour spans the rows in view: the warmest is the largest value in view
    w.view.expandToDepth(0)
    w.view.update_heat()
    bg = [m.index_of(p, Column.GRAD).data(Qt.ItemDataRole.BackgroundRole) for p in ("fc", "layer4")]
    assert all(b is not None for b in bg)
    warm = max(bg, key=lambda c: c.alpha())
    assert warm is bg[0 if g_fc > g_l4 else 1]


def test_updates_are_throttled_and_announced_for_the_live_columns_only(window: MainWindow, qtbot: Any) -> None:
    m = window.tree_model
    live = {i for i, c in enumerate(COLUMNS) if c.live is not None}
    seen: list[tuple[int, int]] = []
    m.dataChanged.connect(lambda a, b, roles=(): seen.append((a.column(), b.column())))
    one = ModuleStats(3, ("", "fc"), (4.0, 4.0), (1e-6, 1e-6), (1.0, 1.0))
    two = ModuleStats(5, ("", "fc"), (9.0, 9.0), (1e-6, 1e-6), (1.0, 1.0))
    m.set_module_stats(one)
    assert m.module_stats is one and seen
    assert {c for pair in seen for c in pair} <= live
    m.set_module_stats(two)  # within the interval: held back, the latest wins
    assert m.module_stats is one
    qtbot.waitUntil(lambda: m.module_stats is two, timeout=ms(GUI_EVENT_S))
    assert m.index_of("fc", Column.GRAD).data(VALUE_ROLE) == 3.0
    m.set_module_stats(None)
    qtbot.waitUntil(lambda: m.module_stats is None, timeout=ms(GUI_EVENT_S))
    assert m.index_of("fc", Column.GRAD).data(Qt.ItemDataRole.DisplayRole) == ""
