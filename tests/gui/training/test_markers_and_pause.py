"""Marker labels stay inside narrow plots; the wall-time throughput curve goes on after a pause."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from PySide6.QtGui import QFontMetricsF

from tests.timeouts import GUI_EVENT_S, GUI_WORKER_S, ms
from workbench.core.runs.record import RunRecord
from workbench.gui.main_window import MainWindow
from workbench.gui.training.plots import PlotsPanel


def _records(n: int) -> list[dict[str, Any]]:
    return [{"step": i, "wall_time": 0.1 * (i + 1), "step_time_s": 0.1, "loss": 1.0, "samples_per_s": 40.0,
             "mem_allocated": 5e8, "mem_peak": 5e8, "trainable_params": 1000} for i in range(n)]


def _labels_inside(p: PlotsPanel) -> list[tuple[str, str, float, float, float, float]]:
    """(plot, label, label left, label right, view left, view right) of every label outside its plot."""
    out = []
    for i, (key, plot) in enumerate(p.plots.items()):
        view = plot.vb.sceneBoundingRect()
        for m in p.markers:
            label = m.lines[i].label
            if not label.isVisible():
                continue
            r = label.sceneBoundingRect()
            if r.left() < view.left() - 1 or r.right() > view.right() + 1:
                out.append((key, label.format, r.left(), r.right(), view.left(), view.right()))
    return out


def test_marker_labels_flip_left_near_the_right_edge_and_elide_in_narrow_plots(qtbot: Any, shown_plots: Any) -> None:
    p = shown_plots(1000, 600)
    p.start_run(RunRecord(id="a", name="#1 a"))
    p.append(_records(200))
    p.redraw()
    p.timer.stop()
    p.plots["step_time"].setXRange(0, 200, padding=0)
    p.add_marker(190.0, 19.0, "froze layer1, layer2 and layer3")  # near the right edge
    p.add_marker(10.0, 1.0, "unfroze the stem")
    qtbot.wait(10)
    assert not _labels_inside(p)
    right = p.markers[0].lines[0].label
    assert right.anchor.x() == 1.0 and right.format == "froze layer1, layer2 and layer3"  # flipped, whole
    assert p.markers[1].lines[0].label.anchor.x() == 0.0  # room on the right: stays there
    # narrow: a label wider than the room on either side of its line is elided (the tooltip keeps it)
    p.resize(560, 600)  # the panel's minimum width: narrower plots than at 1000 px
    qtbot.waitUntil(lambda: p.plots["step_time"].vb.width() < 270, timeout=ms(GUI_EVENT_S))
    long = "froze layer1, layer2, layer3 and every block of layer4 but the last one"
    assert QFontMetricsF(p._marker_font).horizontalAdvance(long) > p.plots["step_time"].vb.width() / 2 + 20
    p.add_marker(100.0, 10.0, long)  # in the middle: neither side has room
    qtbot.wait(10)
    assert not _labels_inside(p)
    middle = next(m for m in p.markers if m.full.endswith(long) or m.label == long)
    shown = middle.lines[0].label.format
    assert shown.endswith("…") and long in middle.lines[0].toolTip()
    assert p.markers[0].lines[0].label.format == "froze layer1, layer2 and layer3"  # still fits on its left


def test_wall_time_throughput_is_drawn_after_a_pause(window: MainWindow, qtbot: Any) -> None:
    t = window.training
    t.plots.set_plot_shown("throughput", True)  # not in a narrow panel's default set
    t.panel.set_values(steps=100_000)
    got: list[str] = []
    t.runs.metricsReceived.connect(lambda *_: got.append("metrics"))
    t.runs.runEnded.connect(lambda record: got.append(f"ended: {record.status} {record.summary.get('error')}"))
    assert t.panel.start()
    qtbot.waitUntil(lambda: bool(got), timeout=ms(GUI_WORKER_S))  # metrics, or the run's end with its reason
    assert got[0] == "metrics", got
    trainer = t.runs.session._control.trainer
    qtbot.waitUntil(lambda: trainer.step >= 3, timeout=ms(GUI_WORKER_S))
    t.panel.act_pause.trigger()
    qtbot.waitUntil(lambda: trainer.paused, timeout=ms(GUI_EVENT_S))
    time.sleep(3.0)  # a pause of several seconds
    held = trainer.step
    t.panel.act_pause.trigger()
    qtbot.waitUntil(lambda: trainer.step >= held + 5, timeout=ms(GUI_WORKER_S))
    qtbot.waitUntil(lambda: len(t.runs.current.metrics) >= held + 5, timeout=ms(GUI_EVENT_S))
    with qtbot.waitSignal(t.runs.runEnded, timeout=ms(GUI_WORKER_S)):
        t.panel.act_stop.trigger()
    plots = t.plots
    plots.set_x_mode("wall")
    plots._drawn = -1
    plots.redraw()
    metrics = t.runs.records[-1].metrics
    resumed = next(m["wall_time"] for m in metrics if m["step"] == held)
    x, y = plots.curves["throughput"].getData()
    after = np.isfinite(y) & (x >= resumed)
    assert after.sum() >= 4, (resumed, x[-8:], y[-8:])
    lo, hi = plots.plots["throughput"].vb.viewRange()[0]
    assert lo <= resumed and hi >= x[after].max()  # in view, not scrolled out
    ylo, yhi = plots.plots["throughput"].vb.viewRange()[1]
    assert ((y[after] >= ylo) & (y[after] <= yhi)).mean() > 0.5
