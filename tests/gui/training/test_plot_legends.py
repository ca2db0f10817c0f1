"""Legends and titles fit their plots: a legend sits in its plot's title row, outside the data,
with the entries that fit beside the title (none fit: hidden; View ▸ Legends still rules); a
title too long for its plot is cut with "…" and whole in its tooltip."""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtGui import QFont, QFontMetricsF

from tests.timeouts import GUI_EVENT_S, ms
from workbench.core.runs.record import RunRecord
from workbench.gui.training.plot_legends import GAP_PX
from workbench.gui.training.plot_style import fit_title
from workbench.gui.training.plots import PlotsPanel


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


def _room(panel: PlotsPanel, key: str) -> float:
    label = panel.plots[key].titleLabel
    return label.geometry().width() - label.item.boundingRect().width() - GAP_PX


def test_legends_sit_in_the_title_row_outside_the_data_with_the_entries_that_fit(qtbot: Any, shown_plots: Any) -> None:
    panel = _panel(shown_plots)
    memory, step = panel.legends["memory"], panel.legends["step_time"]
    assert step.names() == ["#1 test"] and not step.shown()  # one run: its line needs no name
    assert memory.names() == ["RSS growth", "peak tensor bytes", "grads + optimizer state"]
    _resize(qtbot, panel, 700)
    assert panel.columns == 3
    qtbot.wait(50)
    assert not memory.shown() and _room(panel, "memory") < memory.width()  # not even one entry fits
    _resize(qtbot, panel, 1400)
    qtbot.waitUntil(lambda: memory.shown(), timeout=ms(GUI_EVENT_S))
    vb = panel.plots["memory"].vb.sceneBoundingRect()  # in the title row: the data area stays the curves'
    assert memory.item.sceneBoundingRect().bottom() <= vb.top() + 1
    assert memory.item.sceneBoundingRect().right() <= panel.plots["memory"].sceneBoundingRect().right()
    assert memory.width() <= _room(panel, "memory")
    assert "grads + optimizer state" in memory.item.toolTip()  # every name, whatever the row shows
    assert not panel.legends["loss"].shown()  # one curve (no validation): no legend


def test_view_legends_off_hides_every_legend_whatever_the_room(qtbot: Any, shown_plots: Any) -> None:
    panel = _panel(shown_plots)
    _resize(qtbot, panel, 1400)
    panel.set_legends_shown(False)
    assert not any(legend.shown() for legend in panel.legends.values())
    _resize(qtbot, panel, 1300)
    assert not any(legend.shown() for legend in panel.legends.values())
    panel.set_legends_shown(True)
    assert panel.legends["memory"].shown()


def test_a_long_title_is_cut_with_an_ellipsis_keeps_its_unit_and_is_whole_in_its_tooltip(
        qtbot: Any, shown_plots: Any) -> None:
    panel = _panel(shown_plots)
    label = panel.plots["trainable"].titleLabel
    whole = "Trainable parameters (M)"
    _resize(qtbot, panel, 640)
    assert panel.columns == 3 and panel.title_text("trainable") == whole
    qtbot.waitUntil(lambda: "…" in label.text, timeout=ms(GUI_EVENT_S))  # once the layout has its widths
    head, unit = label.text.split("…")
    assert unit == " (M)" and head and whole.startswith(head)  # the unit reads the axis: it stays
    assert label.toolTip() == whole
    assert label.item.boundingRect().width() <= label.width()  # the text fits its plot
    # the memory title's tooltip says what it measures
    assert "RSS growth" in panel.plots["memory"].titleLabel.toolTip()
    panel.set_log("trainable", True)  # " · log" is part of the whole title, and kept with the unit
    assert label.text.endswith("… (M) · log") and label.toolTip() == whole + " · log"
    assert label.item.boundingRect().width() <= label.width()
    panel.set_log("trainable", False)
    _resize(qtbot, panel, 1100)
    qtbot.waitUntil(lambda: label.text == whole, timeout=ms(GUI_EVENT_S))
    assert label.toolTip() == ""


@pytest.mark.parametrize(("text", "room", "expect"), [
    ("Trainable parameters (M)", 10_000, "Trainable parameters (M)"),  # fits: as it is
    ("Trainable parameters (M)", 0.75, "Trainable par… (M)"),  # the name is cut, the unit kept
    ("Step time (ms) · log", 0.85, "Step ti… (ms) · log"),
    ("Validation pitch_accuracy", 0.5, None),  # no unit: cut at its end
    ("Memory (MB, CPU)", 0.3, None),  # the unit alone is too wide: cut at its end
])
def test_fit_title_cuts_the_name_before_the_unit(qapp: Any, text: str, room: float, expect: str | None) -> None:
    metrics = QFontMetricsF(QFont())
    width = room if room > 1 else metrics.horizontalAdvance(text) * room
    shown = fit_title(text, metrics, width)
    assert metrics.horizontalAdvance(shown) <= width
    if expect is not None and room > 1:
        assert shown == expect
    elif expect is not None:
        head, tail = expect.split("…")
        assert shown.endswith("…" + tail) and text.startswith(shown.split("…")[0])
    else:
        assert shown.endswith("…") and text.startswith(shown[:-1])
