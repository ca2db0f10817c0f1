"""Legends and titles fit their plots: a legend too wide for its cell (three narrow columns
on a 1280-px screen) is hidden instead of running past the plot's edge (View ▸ Legends still
rules); a title too long for it is cut with "…" and whole in its tooltip."""

from __future__ import annotations

from typing import Any

from tests.timeouts import GUI_EVENT_S, ms
from workbench.gui.training.plots import PlotsPanel
from workbench.gui.training.run_store import RunRecord


def _panel(shown_plots: Any) -> PlotsPanel:
    panel = shown_plots()
    panel.start_run(RunRecord(id="r", name="#1 test"), total_params=2_000_000)
    panel.timer.stop()
    panel.append([{"step": i, "wall_time": 0.1 * (i + 1), "step_time_s": 0.01, "trainable_params": 2_000_000,
                   "mem_allocated": 1e8, "mem_peak": 1.2e8, "grad_bytes": 1e7, "optimizer_state_bytes": 2e7}
                  for i in range(4)])
    panel._tick()
    return panel


def _resize(qtbot: Any, panel: PlotsPanel, width: int) -> None:
    panel.resize(width, 420)
    qtbot.waitUntil(lambda: panel.graphics.width() >= width - 20, timeout=ms(GUI_EVENT_S))
    panel._canvas_resized()


def test_a_legend_wider_than_its_plot_is_hidden_and_returns_when_there_is_room(qtbot: Any, shown_plots: Any) -> None:
    panel = _panel(shown_plots)
    memory, step = panel.legends["memory"], panel.legends["step_time"]
    _resize(qtbot, panel, 700)
    assert panel.columns == 3
    room = panel.graphics.ci.layout.columnMinimumWidth(0) - panel.plots["memory"].getAxis("left").width()
    assert memory.boundingRect().width() > room - 8 and not memory.isVisible()  # four series' names
    assert step.isVisible()  # "#1 test" and "raw" fit
    _resize(qtbot, panel, 1100)
    assert panel.columns == 3 and memory.isVisible() and step.isVisible()


def test_view_legends_off_hides_every_legend_whatever_the_room(qtbot: Any, shown_plots: Any) -> None:
    panel = _panel(shown_plots)
    _resize(qtbot, panel, 1100)
    panel.set_legends_shown(False)
    assert not any(legend.isVisible() for legend in panel.legends.values())
    _resize(qtbot, panel, 1200)
    assert not any(legend.isVisible() for legend in panel.legends.values())
    panel.set_legends_shown(True)
    assert panel.legends["memory"].isVisible() and panel.legends["step_time"].isVisible()


def test_a_long_title_is_cut_with_an_ellipsis_and_whole_in_its_tooltip(qtbot: Any, shown_plots: Any) -> None:
    panel = _panel(shown_plots)
    label = panel.plots["trainable"].titleLabel
    whole = "Trainable parameters (M)"
    _resize(qtbot, panel, 640)
    assert panel.columns == 3 and panel.title_text("trainable") == whole
    qtbot.waitUntil(lambda: label.text.endswith("…"), timeout=ms(GUI_EVENT_S))  # once the layout has its widths
    assert whole.startswith(label.text[:-1]) and label.toolTip() == whole
    assert label.item.boundingRect().width() <= label.width()  # the text fits its plot
    # the memory title's tooltip says what it measures
    assert "RSS growth" in panel.plots["memory"].titleLabel.toolTip()
    panel.set_log("trainable", True)  # " · log" is part of the whole title
    assert label.text.endswith("…") and label.toolTip() == whole + " · log"
    panel.set_log("trainable", False)
    _resize(qtbot, panel, 1100)
    qtbot.waitUntil(lambda: label.text == whole, timeout=ms(GUI_EVENT_S))
    assert label.toolTip() == ""
