"""The plots tell the truth of the run: a refused Start changes nothing on screen but its
message, and a pause shows as a shaded band on the wall-time axis."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PySide6.QtCore import QRect

from tests.timeouts import GUI_EVENT_S, GUI_RUN_S, GUI_WORKER_S, ms
from workbench.core.runs.record import RunRecord
from workbench.gui.main_window import MainWindow
from workbench.gui.training.plot_ranges import pause_intervals


def _last_run_line(window: MainWindow) -> str:
    """The cost panel's "Last run: ..." line (the step line above it reads the RAM available now)."""
    text = window.cost_panel.activation_label.text()
    assert "Last run:" in text, text
    return text[text.index("Last run:"):]


def test_a_refused_start_leaves_the_plots_as_they_were(window: MainWindow, qtbot: Any, dialogs: Any,
                                                       tmp_path: Path) -> None:
    t = window.training
    t.panel.set_values(steps=3)
    with qtbot.waitSignal(t.runs.runEnded, timeout=ms(GUI_RUN_S)):
        assert t.panel.start()
    qtbot.wait(100)  # the x range fits the finished run when the plots paint
    t.plots.graphics.scene().prepareForPaint()
    shown = t.plots.record
    x, y = (np.array(a) for a in t.plots.curves["loss"].getData())
    title = t.plots.title.text()
    x_range = t.plots.plots["loss"].vb.viewRange()
    verify_icon = window.right_panel.tabIcon(window.right_panel.indexOf(t.verify)).cacheKey()
    last_run = _last_run_line(window)
    assert shown is not None and len(x)
    t.panel.set_values(data=f"imagefolder:{tmp_path / 'nowhere'}")
    with qtbot.waitSignal(t.runs.runEnded, timeout=ms(GUI_RUN_S)) as blocker:
        assert t.panel.start()
    assert blocker.args[0].status == "refused"
    qtbot.wait(100)
    t.plots.graphics.scene().prepareForPaint()
    assert dialogs.kinds("error")[-1][1] == "Cannot start training"  # the message
    assert t.plots.record is shown and t.plots.title.text() == title
    nx, ny = (np.array(a) for a in t.plots.curves["loss"].getData())
    assert np.array_equal(nx, x) and np.array_equal(ny, y, equal_nan=True)
    now = t.plots.plots["loss"].vb.viewRange()  # the same ranges (the padding follows the plot's pixels)
    assert now[0] == pytest.approx(x_range[0], abs=0.05) and now[1] == pytest.approx(x_range[1], rel=0.02)
    assert window.right_panel.tabIcon(window.right_panel.indexOf(t.verify)).cacheKey() == verify_icon
    assert _last_run_line(window) == last_run


def test_pause_bands_exist_after_pause_and_resume(window: MainWindow, qtbot: Any) -> None:
    t = window.training
    t.panel.set_values(steps=100_000)
    with qtbot.waitSignal(t.runs.metricsReceived, timeout=ms(GUI_WORKER_S)):
        assert t.panel.start()
    trainer = t.runs.session._control.trainer
    qtbot.waitUntil(lambda: trainer.step >= 3, timeout=ms(GUI_WORKER_S))
    t.panel.act_pause.trigger()
    qtbot.waitUntil(lambda: trainer.paused, timeout=ms(GUI_EVENT_S))
    time.sleep(2.0)  # a pause of seconds: far longer than a step of this run
    held = trainer.step
    t.panel.act_pause.trigger()
    qtbot.waitUntil(lambda: trainer.step >= held + 3, timeout=ms(GUI_WORKER_S))
    qtbot.waitUntil(lambda: len(t.runs.current.metrics) >= held + 3, timeout=ms(GUI_EVENT_S))
    with qtbot.waitSignal(t.runs.runEnded, timeout=ms(GUI_RUN_S)):
        t.panel.act_stop.trigger()
    plots = t.plots
    plots.set_x_mode("wall")
    # the pause is one band of its length (a loaded machine may add short stalls, also shown)
    bands = [b for b in plots.bands if b[2] == "paused" and b[1] - b[0] >= 1.5]
    assert len(bands) == 1, plots.bands
    start, end, _kind = bands[0]
    assert end - start <= 30.0
    assert all(len(items) == len(plots.bands) for items in plots._bands.bands.values())
    plots.set_x_mode("step")
    assert plots.bands == []  # a pause takes no steps


def test_pause_intervals_tell_pauses_from_validation() -> None:
    step = np.arange(6, dtype=float)
    wall = np.array([0.1, 0.2, 0.3, 5.3, 5.4, 8.4])
    ms = np.full(6, 100.0)
    val = np.array([np.nan] * 5 + [0.5])
    got = pause_intervals(step, wall, ms, np.zeros(6), val)
    assert [(round(a, 2), round(b, 2), k) for a, b, k in got] == [(0.3, 5.2, "paused"), (5.4, 8.3, "validation")]
    assert pause_intervals(step, 0.1 * (step + 1), ms, np.zeros(6)) == []  # steady steps: no band


def test_marker_labels_never_overlap_and_keep_their_full_text(qtbot: Any, shown_plots: Any) -> None:
    p = shown_plots(700, 500)
    p.start_run(RunRecord(id="a", name="#1 a"))
    p.append([{"step": i, "wall_time": 0.1 * i, "step_time_s": 0.1, "loss": 1.0} for i in range(300)])
    p.redraw()
    p.timer.stop()
    p.plots["step_time"].setXRange(0, 300, padding=0)
    for step in (30, 60, 90, 120, 150, 180, 210, 240, 270):
        p.add_marker(step, None, f"froze block {step} of the encoder", full=f"plan change: froze block {step} of the encoder")
    qtbot.wait(10)
    for i, _key in enumerate(p.plots):
        rects: list[QRect] = []
        for m in p.markers:
            label = m.lines[i].label
            if label.isVisible():
                r = label.sceneBoundingRect().toRect()
                assert not any(r.intersects(o) for o in rects), (label.format, r, rects)
                rects.append(r)
                assert m.full in m.lines[i].toolTip()
