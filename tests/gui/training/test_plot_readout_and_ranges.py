"""Plots that survive real use: read-out cleared, merged markers, robust and log y ranges,
overlaid runs in the read-out, per-run memory, dark palette."""

from __future__ import annotations

from typing import Any

import numpy as np
from PySide6.QtCore import QEvent
from PySide6.QtGui import QColor, QPalette

from workbench.core.runs.record import RunRecord
from workbench.gui.training.plots import is_dark, robust_bounds


def records(n: int, ms: float = 100.0, rss: float = 500e6, start: int = 0) -> list[dict[str, Any]]:
    return [
        {"step": start + i, "wall_time": 0.1 * (start + i + 1), "step_time_s": ms / 1000, "loss": 2.0 - 0.01 * i,
         "mem_allocated": rss + 1e6 * i, "mem_peak": rss + 1e6 * i, "trainable_params": 1000,
         "grad_bytes": 4000, "optimizer_state_bytes": 8000}
        for i in range(n)
    ]


def test_readout_is_cleared_on_leave_on_run_start_and_on_overlay_change(shown_plots: Any) -> None:
    p = shown_plots(900, 600)
    p.start_run(RunRecord(id="a", name="#1 a"))
    p.append(records(20))
    p.redraw()
    p.show_crosshair(5.0)
    assert p._crosshair_x == 5.0 and all(v.isVisible() for v in p._vlines.values())
    p.graphics.leaveEvent(QEvent(QEvent.Type.Leave))
    assert p._crosshair_x is None and not any(v.isVisible() for v in p._vlines.values())
    p.show_crosshair(5.0)
    p.start_run(RunRecord(id="b", name="#2 b"))  # the next run: none of the previous numbers
    assert p._crosshair_x is None and "step 5" not in p.readout.text
    p.append(records(5))
    p.show_crosshair(2.0)
    p.set_overlays([(RunRecord(id="a", name="#1 a"), 0, records(20))])
    assert p._crosshair_x is None
    p.timer.stop()


def test_close_markers_share_one_label_and_lie_under_the_curves(shown_plots: Any) -> None:
    p = shown_plots(900, 600)
    p.start_run(RunRecord(id="a", name="#1 a"))
    p.append(records(200))
    p.redraw()
    p.timer.stop()
    p.plots["step_time"].setXRange(0, 200, padding=0)
    for step, text in ((100, "froze layer1"), (101, "froze layer2"), (102, "froze layer3"), (180, "froze fc")):
        p.add_marker(step, None, text, full=f"plan change: {text}")
    assert p.marker_label_texts() == ["3 changes", "froze fc"]
    head = p.markers[0]
    assert "froze layer2" in head.lines[0].toolTip() and "froze layer3" in head.lines[0].toolTip()
    assert not p.markers[1].lines[0].label.isVisible()
    assert all(line.zValue() < p.curves["step_ms_ema"].zValue() for m in p.markers for line in m.lines)
    p.plots["step_time"].setXRange(99, 104, padding=0)  # zoomed in: each its own label again
    assert p.marker_label_texts()[:3] == ["froze layer1", "froze layer2", "froze layer3"]
    assert p.marker_labels() == ["froze layer1", "froze layer2", "froze layer3", "froze fc"]


def test_robust_bounds_leave_a_single_slow_step_out() -> None:
    y = np.r_[np.full(100, 150.0), np.full(100, 120.0), [3800.0]]
    assert robust_bounds(y, ignore_outliers=False) == (120.0, 3800.0)
    lo, hi = robust_bounds(y)
    assert lo == 120.0 and hi < 300.0
    assert robust_bounds(np.array([100.0, 300.0])) == (100.0, 300.0)  # a handful: every value counts
    assert robust_bounds(np.array([np.nan])) is None


def test_step_time_range_ignores_outliers_and_log_scale_toggles(shown_plots: Any) -> None:
    p = shown_plots(900, 600)
    p.start_run(RunRecord(id="a", name="#1 a"))
    p.set_ema(0.0)
    p.append(records(100, ms=150.0) + [dict(records(1, ms=3800.0, start=100)[0])] + records(100, ms=120.0, start=101))
    p.redraw()
    p.timer.stop()
    lo, hi = p.y_range("step_time")
    assert lo <= 120.0 and hi < 400.0  # the 150 → 120 ms change fills the plot
    p.act_outliers.trigger()  # off: every point
    assert not p.ignore_outliers and p.y_range("step_time")[1] >= 3800.0
    p.set_log("step_time", True)
    assert p.log_scale("step_time") and p.log_actions["step_time"].isChecked()
    lo, hi = p.y_range("step_time")
    assert lo <= np.log10(120.0) and hi >= np.log10(3800.0) and hi < 4.5
    assert "log" in p.title_text("step_time") and "log" in p.plots["step_time"].titleLabel.text
    p.set_log("step_time", False)
    assert p.y_range("step_time")[1] >= 3800.0


def test_readout_shows_every_overlaid_run_and_memory_is_the_runs_own(shown_plots: Any) -> None:
    p = shown_plots(900, 600)
    p.start_run(RunRecord(id="b", name="#2 b"))
    p.append(records(30, rss=90e6))  # the engine's CPU figures are growth since the run began
    p.redraw()
    p.timer.stop()
    p.set_overlays([(RunRecord(id="a", name="#1 a"), 0, records(30, ms=80.0, rss=50e6))])
    text = p.readout_text(10.0)
    assert "#1 a @ 10: 80.0 ms" in text and "60 MB" in text
    assert "RSS growth 100 MB · peak tensors 100 MB" in text and "grads + optimizer state 0.0 MB" in text
    _x, y = p.curves["mem_alloc"].getData()
    assert y[0] == 90.0 and y[-1] == 119.0  # drawn as recorded: the one measure core defines
    _x, y = p.overlays["a"].curves["mem_alloc"].getData()
    assert y[-1] == 79.0  # the same measure for the overlaid run: comparable
    # a title short enough for a 1280 px window; the legend and the title's tooltip name the measure
    title = p.plots["memory"].titleLabel
    assert title.text == "Memory (MB, CPU)" and "RSS growth" in title.toolTip()
    assert p.curves["mem_alloc"].opts["name"] == "RSS growth"


def test_plots_follow_a_dark_palette(shown_plots: Any) -> None:
    p = shown_plots(900, 600)
    assert not p.dark
    dark = QPalette()
    dark.setColor(QPalette.ColorRole.Window, QColor(30, 30, 30))
    dark.setColor(QPalette.ColorRole.WindowText, QColor(230, 230, 230))
    assert is_dark(dark)
    p.setPalette(dark)
    assert p.dark
    assert p.graphics.backgroundBrush().color().lightness() < 64
    p.setPalette(QPalette(QColor(240, 240, 240)))
    assert not p.dark and p.graphics.backgroundBrush().color().lightness() > 200


def test_title_says_paused_while_paused(shown_plots: Any) -> None:
    p = shown_plots(900, 600)
    p.start_run(RunRecord(id="a", name="#1 a"))
    p.set_state("paused")
    assert "paused" in p.title.text()
    p.set_state("running")
    assert "running" in p.title.text()
    p.timer.stop()
