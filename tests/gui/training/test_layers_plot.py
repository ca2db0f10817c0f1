"""The Layers tab reads at any model width; its axes read as numbers: a ratio's log axis labelled at its decades (and 2 and 5
times them over a short span), never a row of overlapping ``0.009 0.008 0.007``, no pyqtgraph
scale factor (``(x0.001)``) after the names, and one measured step shown among whole steps."""

from __future__ import annotations

import math
from typing import Any

from torch import nn

from tests.timeouts import GUI_EVENT_S, ms
from workbench.core.training.module_stats import ModuleStats
from workbench.gui.main_window import MainWindow
from workbench.gui.model_loading import loaded_from_model
from workbench.gui.training.layers_plot import MAX_CURVES
from workbench.gui.training.plot_canvas import DecadeTicks


def _stats(step: int, ratio: float) -> ModuleStats:
    return ModuleStats(step=step, paths=("", "fc"), grad_sq=(1.0, 1.0), update_sq=(ratio**2,) * 2, weight_sq=(1.0, 1.0))


def test_ratio_ticks_are_decades_or_one_two_five_and_short() -> None:
    axis = DecadeTicks("left")
    axis.setLogMode(False, True)
    axis.setRange(math.log10(1.5e-3), math.log10(0.04))  # under two decades: 1, 2 and 5 times them
    values = [math.log10(v) for v in (2e-3, 3e-3, 5e-3, 9e-3, 0.01, 0.02)]
    assert axis.tickStrings(values, 1.0, 0.1) == ["2e-3", "", "5e-3", "", "0.01", "0.02"]
    axis.setRange(-6.0, 0.0)  # six decades: the decades alone
    assert axis.tickStrings([-5.0, math.log10(2e-5), -1.0], 1.0, 1.0) == ["1e-5", "", "0.1"]


def test_the_layers_plot_has_no_scale_factor_and_one_step_among_whole_steps(window: MainWindow, qtbot: Any) -> None:
    plot = window.layers_plot
    history = window.training.runs.module_history
    try:
        window.right_panel.setCurrentWidget(plot)
        history.add(_stats(10, 3e-3))
        plot.redraw()
        qtbot.waitUntil(lambda: plot.plot.getAxis("bottom").range[0] != 0.0, timeout=ms(GUI_EVENT_S))
        left, bottom = plot.plot.getAxis("left"), plot.plot.getAxis("bottom")
        assert isinstance(left, DecadeTicks) and not left.autoSIPrefix and not bottom.autoSIPrefix
        assert "(x" not in left.labelString() and "(x" not in bottom.labelString()
        assert bottom.range == [9.0, 11.0]  # a step either side of the one measured
        ticks = [v for _spacing, values in bottom.tickValues(9.0, 11.0, 400) for v in values]
        assert ticks and all(float(v).is_integer() for v in ticks)  # no step 9.5
        history.add(_stats(30, 1e-3))
        plot.redraw()
        qtbot.waitUntil(lambda: plot.plot.getAxis("bottom").range[1] >= 30, timeout=ms(GUI_EVENT_S))  # auto again
    finally:
        history.clear()
        plot.redraw()


def test_a_root_of_many_children_draws_the_largest_that_have_values(window: MainWindow, qtbot: Any) -> None:
    """A flat ``nn.Sequential`` of 30 layers: ten curves (one colour each), the largest layers whose
    figures the log axis can draw, in the model's order; the note says how many are left out."""
    widths = [4 + (i % 7) for i in range(30)]  # sizes repeat: ties go in the model's order
    model = nn.Sequential(*(nn.Linear(w, 3) for w in widths))
    window.controller.set_loaded(loaded_from_model(model, "wide"))
    qtbot.waitUntil(lambda: window.controller.tree is not None and len(window.controller.tree.nodes) == 31,
                    timeout=ms(GUI_EVENT_S))
    paths = [str(i) for i in range(30)]
    vanished = {"6", "13"}  # the two largest layers, whose gradients vanished: 0 on a log axis
    history = window.training.runs.module_history
    plot = window.layers_plot
    try:
        for step in (0, 20):
            history.add(ModuleStats(step=step, paths=("", *paths), grad_sq=(1.0,) * 31,
                                    update_sq=(1e-6, *(0.0 if p in vanished else 1e-6 for p in paths)),
                                    weight_sq=(1.0,) * 31))
        plot.redraw()
        assert len(plot.curves) == MAX_CURVES == 10
        size = {p: (widths[int(p)] + 1) * 3 for p in paths}
        ranked = sorted((p for p in paths if p not in vanished), key=lambda p: -size[p])
        assert list(plot.curves) == [p for p in paths if p in set(ranked[:10])]  # the model's order
        assert not vanished & set(plot.curves)
        assert "10 of 30 top-level modules" in plot.note.text()
        history.clear()
        history.add(_stats(0, 1e-3))
        plot.redraw()
        assert list(plot.curves) == ["fc"] and plot.note.text() == ""  # a few: every one, no note
    finally:
        history.clear()
        plot.redraw()
