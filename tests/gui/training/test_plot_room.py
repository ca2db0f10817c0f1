"""Plots a person can read on a laptop: every shown plot's data area (its view box) is at least
120 px tall in a 1280×800 window and 100 px in a 1280×720 one, before, during and after a run;
a narrow panel shows loss, step time, memory and trainable by default; a double click enlarges
one plot with the others as small multiples; the cost panel steps aside while a run goes."""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtCore import Qt

from tests.timeouts import GUI_EVENT_S, GUI_RUN_S, ms
from workbench.gui.main_window import MainWindow
from workbench.gui.training.plot_specs import PLOTS

GRID_ORDER = [s.key for s in PLOTS]
COMPACT_KEYS = [s.key for s in PLOTS if s.compact]

LAPTOPS = ((1280, 800, 120), (1280, 720, 100))


def _heights(qtbot: Any, window: MainWindow, size: tuple[int, int]) -> dict[str, float]:
    window.resize(*size)
    window.right_panel.setCurrentWidget(window.training.plots)
    qtbot.waitUntil(lambda: window.size().width() == size[0] and window.size().height() == size[1],
                    timeout=ms(GUI_EVENT_S))
    plots = window.training.plots
    qtbot.waitUntil(lambda: plots.graphics.width() > 0, timeout=ms(GUI_EVENT_S))
    qtbot.wait(50)  # the grid's layout settles at the next event-loop turn
    return {k: plots.plots[k].vb.height() for k in plots.shown_keys}


def _check(qtbot: Any, window: MainWindow, when: str) -> None:
    for w, h, least in LAPTOPS:
        heights = _heights(qtbot, window, (w, h))
        assert heights and all(v >= least for v in heights.values()), (when, (w, h), heights)
        assert set(heights) == set(COMPACT_KEYS)  # the default set of a laptop's narrow panel


def test_every_plot_keeps_a_readable_data_area_on_a_laptop(qtbot: Any, window: MainWindow) -> None:
    t = window.training
    t.panel.set_values(steps=6, val_every=3)
    _check(qtbot, window, "before")
    assert window.cost_panel.isVisible()
    assert t.panel.start()
    qtbot.waitUntil(lambda: t.runs.current is not None and len(t.runs.current.metrics) >= 2, timeout=ms(GUI_RUN_S))
    t.runs.pause()
    qtbot.waitUntil(lambda: t.runs.state == "paused", timeout=ms(GUI_RUN_S))
    assert not window.cost_panel.isVisible()  # stepped aside: the plots get its height
    _check(qtbot, window, "during")
    t.runs.resume()
    qtbot.waitUntil(lambda: t.runs.state == "idle", timeout=ms(GUI_RUN_S))
    assert window.cost_panel.isVisible() and "Last run" in window.cost_panel.activation_label.text()
    _check(qtbot, window, "after")


def test_a_line_of_text_never_changes_the_plots_height(qtbot: Any, window: MainWindow) -> None:
    before = _heights(qtbot, window, (1280, 720))
    window.cost_panel.show_run_memory({"predicted_peak_bytes": 10**8, "peak_memory_bytes": 2 * 10**8,
                                       "memory_source": "peak RSS growth", "peak_rss_bytes": 10**9})
    assert "Last run" in window.cost_panel.activation_label.text()
    assert _heights(qtbot, window, (1280, 720)) == before


def test_a_wide_panel_shows_every_plot_and_a_choice_is_kept(qtbot: Any, shown_plots: Any) -> None:
    panel = shown_plots(1000, 700)
    qtbot.waitUntil(lambda: panel.shown_keys == list(GRID_ORDER), timeout=ms(GUI_EVENT_S))
    assert panel.chosen_keys is None and panel.toolbar.act_auto_plots.isChecked()
    panel.resize(600, 700)
    qtbot.waitUntil(lambda: panel.shown_keys == [k for k in GRID_ORDER if k in COMPACT_KEYS], timeout=ms(GUI_EVENT_S))
    assert not panel.show_actions["lr"].isChecked() and panel.show_actions["loss"].isChecked()
    panel.show_actions["lr"].trigger()  # the user's choice: kept whatever the width
    assert panel.chosen_keys == [k for k in GRID_ORDER if k in (*COMPACT_KEYS, "lr")]
    assert not panel.toolbar.act_auto_plots.isChecked()
    panel.resize(1000, 700)
    qtbot.wait(50)
    assert panel.shown_keys == panel.chosen_keys
    panel.toolbar.act_auto_plots.trigger()
    qtbot.waitUntil(lambda: panel.shown_keys == list(GRID_ORDER), timeout=ms(GUI_EVENT_S))


@pytest.mark.parametrize("key", ["loss", "memory"])
def test_a_double_click_enlarges_one_plot_with_the_others_as_small_multiples(qtbot: Any, shown_plots: Any,
                                                                              key: str) -> None:
    panel = shown_plots(620, 560)
    qtbot.waitUntil(lambda: panel.shown_keys == [k for k in GRID_ORDER if k in COMPACT_KEYS], timeout=ms(GUI_EVENT_S))

    def double_click(k: str) -> None:
        where = panel.graphics.mapFromScene(panel.plots[k].sceneBoundingRect().center())
        qtbot.mouseDClick(panel.graphics.viewport(), Qt.MouseButton.LeftButton, pos=where)
        qtbot.mouseRelease(panel.graphics.viewport(), Qt.MouseButton.LeftButton, pos=where)
        qtbot.wait(50)

    qtbot.waitUntil(lambda: min(panel.plots[k].vb.height() for k in panel.shown_keys) > 150, timeout=ms(GUI_EVENT_S))
    plain = {k: panel.plots[k].vb.height() for k in panel.shown_keys}
    double_click(key)
    assert panel.enlarged == key
    big = panel.plots[key].vb
    others = [panel.plots[k] for k in panel.shown_keys if k != key]
    assert all(p.isVisible() for p in others) and not panel.readout.isVisible()
    assert big.height() > 2 * max(p.vb.height() for p in others)
    assert big.width() > 2 * max(p.vb.width() for p in others)  # the small multiples share one row
    assert len({round(p.sceneBoundingRect().top()) for p in others}) == 1
    double_click(key)
    assert panel.enlarged is None and panel.readout.isVisible()
    assert {k: panel.plots[k].vb.height() for k in panel.shown_keys} == plain
