"""Training in the window: the worker thread, live plots, live freezing, runs, verification.

Small and quick: resnet18 at 32 px with batch 4 (about 30–60 ms a step on one thread), or a
tiny model injected through ``controller.set_loaded``; waits use ``waitSignal`` and
``waitUntil``, never sleeps.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from tests.timeouts import GUI_EVENT_S, GUI_WORKER_S, ms
from workbench.core.plan.rules import FreezePlan
from workbench.core.training.metrics import load_metrics
from workbench.gui.background import running_threads
from workbench.gui.main_window import MainWindow
from workbench.gui.model_loading import loaded_from_model
from workbench.gui.training.runs_tab import COLUMNS

LAYER1_PARAMS = 147_968
LONG = 100_000  # steps of runs the test stops itself


@pytest.fixture
def window(window: MainWindow) -> MainWindow:
    """The shared window, with runs that go on until the test stops them."""
    window.training.panel.set_values(steps=LONG)
    return window


def start(qtbot: Any, w: MainWindow, **values: Any) -> list[dict[str, Any]]:
    """Start a run and return the first metric batch."""
    t = w.training
    if values:
        t.panel.set_values(**values)
    with qtbot.waitSignal(t.runs.metricsReceived, timeout=ms(GUI_WORKER_S)) as blocker:
        assert t.panel.start()
    return blocker.args[0]


def finish(qtbot: Any, w: MainWindow, stop: bool = True) -> Any:
    """Stop (or let end) the run in progress; returns its record once its thread has ended."""
    t = w.training
    with qtbot.waitSignal(t.runs.runEnded, timeout=ms(GUI_WORKER_S)) as blocker:
        if stop:
            t.panel.act_stop.trigger()
    return blocker.args[0]


def run_short(qtbot: Any, w: MainWindow, steps: int = 3) -> Any:
    t = w.training
    t.panel.set_values(steps=steps)
    with qtbot.waitSignal(t.runs.runEnded, timeout=ms(GUI_WORKER_S)) as blocker:
        assert t.panel.start()
    return blocker.args[0]


def curve_points(w: MainWindow, name: str) -> int:
    x, _y = w.training.plots.curves[name].getData()
    return 0 if x is None else len(x)


# ---------------------------------------------------------------- the four scenarios
def test_start_metrics_plots_and_stop_ends_the_thread(window: MainWindow, qtbot: Any) -> None:
    t = window.training
    batch = start(qtbot, window)
    assert batch and {"step", "loss", "step_time_s", "mem_allocated", "trainable_params"} <= set(batch[0])
    assert t.runs.state == "running"
    assert not t.panel.act_start.isEnabled() and t.panel.act_stop.isEnabled() and t.panel.act_pause.isEnabled()
    assert not t.panel.batch_size.isEnabled()  # settings are locked while a run trains
    assert window.right_panel.currentWidget() is t.plots
    qtbot.waitUntil(lambda: curve_points(window, "step_ms") > 0, timeout=ms(GUI_EVENT_S))  # drawn by the timer
    for name in ("step_ms", "step_ms_ema", "mem_alloc", "mem_peak", "trainable", "loss", "throughput"):
        assert curve_points(window, name) > 0, name
    assert "step time" in t.plots.readout_text() and "RSS" in t.plots.readout_text()
    assert t.panel.progress.maximum() == LONG
    record = finish(qtbot, window)
    assert record.status == "stopped" and not running_threads()
    assert t.runs.state == "idle" and t.panel.act_start.isEnabled() and t.panel.batch_size.isEnabled()
    assert (record.folder / "run.json").is_file() and (record.folder / "metrics.csv").is_file()
    assert len(load_metrics(record.folder / "metrics.csv")) == len(record.metrics) == record.steps()


def test_freezing_mid_run_lowers_trainable_and_adds_a_marker(window: MainWindow, qtbot: Any) -> None:
    t = window.training
    c = window.controller
    first = start(qtbot, window)
    before = first[-1]["trainable_params"]
    assert before == c.counts.total
    c.set_value(["layer1"], "frozen", True)  # a click in the tree, while training
    record = t.runs.current
    qtbot.waitUntil(lambda: any(m["trainable_params"] < before for m in record.metrics), timeout=ms(GUI_WORKER_S))
    changed = next(m for m in record.metrics if m["trainable_params"] < before)
    assert before - changed["trainable_params"] == LAYER1_PARAMS
    assert any("froze layer1" in e for e in changed["events"])  # applied at that step
    assert all(m["trainable_params"] == before for m in record.metrics if m["step"] < changed["step"])
    labels = t.plots.marker_labels()
    assert any(label.startswith("froze layer1") for label in labels), labels
    marker = next(m for m in t.plots.markers if m.label.startswith("froze layer1"))
    assert len(marker.lines) == len(t.plots.plots)  # on every plot
    for line, plot in zip(marker.lines, t.plots.plots.values()):
        assert line in plot.items and line.value() == changed["step"]
    # the change is kept with the run, and the loaded model is not the one that trained
    record = finish(qtbot, window)
    assert any("froze layer1" in e["label"] for e in record.events)
    assert record.final_plan["rules"] == [{"select": "layer1", "frozen": True}]
    assert all(p.requires_grad for p in c.model.parameters())
    # the verify tab shows the frozen modules green
    assert t.verify.ok is True and t.verify.status.get("layer1") == "ok"


def test_error_in_a_training_step_shows_a_dialog_and_the_app_stays_usable(
    window: MainWindow, qtbot: Any, dialogs: Any
) -> None:
    t = window.training

    def boom(step: int) -> None:
        if step == 2:
            raise RuntimeError("injected failure")

    t.runs.trainer_kwargs = {"step_hook": boom}
    record = run_short(qtbot, window, steps=50)
    assert record.status == "failed" and "injected failure" in record.message
    kind, title, message = dialogs.kinds("error")[-1]
    assert title == "Training failed" and "step 2" in message and "injected failure" in message
    assert not running_threads() and t.runs.state == "idle"
    assert t.panel.act_start.isEnabled()
    assert t.runs_panel.table.item(0, 1).text().startswith("failed")
    # usable after: edit the plan, train again
    t.runs.trainer_kwargs = {}
    window.controller.set_value(["layer1"], "frozen", True)
    again = run_short(qtbot, window, steps=3)
    assert again.status == "completed" and again.steps() == 3
    assert len(dialogs.kinds("error")) == 1


def test_closing_the_window_mid_run_stops_within_one_step(qtbot: Any) -> None:
    w = MainWindow()
    qtbot.addWidget(w)
    w.show()
    w.training.panel.set_values(batch_size=4, image_size=32, steps=LONG, device="cpu")
    start(qtbot, w)
    session = w.training.runs.session
    assert session is not None and session.is_running()
    trainer = session._control.trainer
    at_stop: list[int] = []
    real_stop = session.stop

    def stop() -> None:  # note the step the trainer is at when the window asks it to stop
        at_stop.append(trainer.step)
        real_stop()

    session.stop = stop
    record = w.training.runs.current
    assert w.close()
    assert not running_threads() and not session.is_running()  # joined before close() returned
    assert at_stop and record.steps() <= at_stop[0] + 1
    assert record.status == "stopped"
    saved = json.loads((record.folder / "run.json").read_text())
    assert saved["status"] == "stopped" and saved["summary"]["steps"] == record.steps()


# ---------------------------------------------------------------- controls and worker
def test_pause_and_resume(window: MainWindow, qtbot: Any) -> None:
    t = window.training
    start(qtbot, window)
    t.panel.act_pause.trigger()
    assert t.runs.state == "paused" and t.panel.act_pause.text() == "&Resume"
    trainer = t.runs.session._control.trainer
    qtbot.waitUntil(lambda: trainer.paused, timeout=ms(GUI_EVENT_S))
    held = trainer.step
    qtbot.waitUntil(lambda: len(t.runs.current.metrics) >= held, timeout=ms(GUI_EVENT_S))  # flushed at once on pause
    assert trainer.step == held
    t.panel.act_pause.trigger()
    assert t.runs.state == "running"
    qtbot.waitUntil(lambda: trainer.step > held, timeout=ms(GUI_EVENT_S))
    finish(qtbot, window)


def test_worker_emits_at_most_about_twenty_batches_a_second(window: MainWindow, qtbot: Any) -> None:
    torch.manual_seed(0)
    tiny = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 10))
    window.controller.set_loaded(loaded_from_model(tiny, "tiny"))
    t = window.training
    batches: list[int] = []
    t.runs.metricsReceived.connect(lambda b: batches.append(len(b)))
    shown: list[int] = []
    t.panel.progress.valueChanged.connect(shown.append)
    t.panel.set_values(steps=600, image_size=8, batch_size=4)  # a few ms a step: some twenty batches of steps
    with qtbot.waitSignal(t.runs.runEnded, timeout=ms(GUI_WORKER_S)) as blocker:
        assert t.panel.start()
    record = blocker.args[0]
    assert record.status == "completed" and sum(batches) == 600 == len(record.metrics)
    wall = record.metrics[-1]["wall_time"]
    assert len(batches) <= wall / 0.05 + 2, (len(batches), wall)  # throttled, however fast the steps
    assert max(batches) > 1  # several steps per batch
    # the progress bar repaints the panel: it moves at most twice a second, and ends on the last step
    from workbench.gui.training.panel import PROGRESS_INTERVAL_MS

    assert len(shown) <= wall / (PROGRESS_INTERVAL_MS / 1000) + 4, (len(shown), wall)
    assert len(shown) < len(batches)
    assert t.panel.progress.value() == 600 and t.panel.rate_label.text() == "completed"


def test_training_thread_gets_the_cores_and_the_gui_thread_keeps_one(
    window: MainWindow, qtbot: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The GUI thread runs torch ops serially (workbench.core.training.cpu_threads): the training
    # thread gets the count torch had before, or the Threads setting of the run.
    from workbench.core.training import cpu_threads

    monkeypatch.setattr(cpu_threads, "_worker_count", 2)
    seen: list[int] = []
    window.training.runs.trainer_kwargs = {"step_hook": lambda step: seen.append(torch.get_num_threads())}
    try:
        record = run_short(qtbot, window, steps=2)
        assert record.status == "completed" and seen == [2, 2]
        assert torch.get_num_threads() == 1  # the GUI thread, after the training thread set 2
    finally:
        torch.set_num_threads(1)  # what tests/conftest.py set for threads started later


def test_plan_that_leaves_nothing_trainable_is_not_sent(window: MainWindow, qtbot: Any) -> None:
    t = window.training
    first = start(qtbot, window)
    messages: list[str] = []
    window.statusBar().messageChanged.connect(messages.append)
    window.controller.set_value([""], "frozen", True)
    assert any("nothing trainable" in m for m in messages), messages
    record = t.runs.current
    n = len(record.metrics)
    qtbot.waitUntil(lambda: len(record.metrics) > n + 1, timeout=ms(GUI_WORKER_S))
    assert record.metrics[-1]["trainable_params"] == first[-1]["trainable_params"]  # the run goes on as it was
    finish(qtbot, window)


def test_invalid_settings_show_an_error_and_start_nothing(window: MainWindow, dialogs: Any) -> None:
    t = window.training
    t.panel.lr.setText("fast")
    assert not t.panel.start()
    assert dialogs.kinds("error")[-1][1] == "Cannot start training" and "learning rate" in dialogs.kinds("error")[-1][2]
    t.panel.lr.setText("1e-3")
    t.panel.set_values(data="imagefolder:")
    assert not t.panel.start()
    assert "folder" in dialogs.kinds("error")[-1][2]
    assert t.runs.records == [] and t.runs.state == "idle"


def test_missing_dataset_reports_the_setup_error(window: MainWindow, qtbot: Any, dialogs: Any, tmp_path: Path) -> None:
    t = window.training
    t.panel.set_values(data=f"imagefolder:{tmp_path / 'nowhere'}", steps=3)
    with qtbot.waitSignal(t.runs.runEnded, timeout=ms(GUI_WORKER_S)) as blocker:
        assert t.panel.start()
    record = blocker.args[0]
    # bad input found by the set-up: the start is refused and leaves no run behind
    assert record.status == "refused" and not running_threads()
    assert record not in t.runs.records
    assert dialogs.kinds("error")[-1][1] == "Cannot start training" and "nowhere" in dialogs.kinds("error")[-1][2]


# ---------------------------------------------------------------- plots
def test_stages_show_as_markers_and_x_axis_switches(window: MainWindow, qtbot: Any, dialogs: Any, tmp_path: Path) -> None:
    t = window.training
    c = window.controller
    plan = FreezePlan.from_dict(
        {"rules": [{"select": "layer1", "frozen": True}], "stages": [{"at_step": 4, "label": "thaw", "rules": [{"select": "layer1", "frozen": False}]}]}
    )
    path = tmp_path / "staged.json"
    plan.save(path)
    assert window.documents.open_plan(str(path))
    t.panel.set_values(steps=6)  # the stage at step 4 and two steps after it
    with qtbot.waitSignal(t.runs.prepared, timeout=ms(GUI_WORKER_S)):
        assert t.panel.start()
    assert any(m.kind == "planned" and "stage 0" in m.label for m in t.plots.markers)
    record = finish(qtbot, window, stop=False)
    kinds = [(m.kind, m.label) for m in t.plots.markers]
    assert any(k == "stage" and label.startswith("stage 0: unfroze layer1") for k, label in kinds), kinds
    assert not any(k == "planned" for k, _ in kinds)
    stage = next(m for m in t.plots.markers if m.kind == "stage")
    assert stage.step == 4 and stage.lines[0].value() == 4
    assert record.metrics[-1]["trainable_params"] == c.counts.total
    t.plots.set_x_mode("wall")
    assert stage.lines[0].value() == pytest.approx(stage.wall)
    x, _ = t.plots.curves["step_ms"].getData()
    assert x[-1] == pytest.approx(record.metrics[-1]["wall_time"])
    t.plots.show_crosshair(float(x[len(x) // 2]))
    shown = [key for key, plot in t.plots.plots.items() if plot.isVisible()]  # a narrow window shows four
    assert shown and all(t.plots._vlines[key].isVisible() for key in shown)
    assert "step " in t.plots.readout_text(float(x[3]))
    t.plots.show_crosshair(None)
    t.plots.set_ema(0.0)
    assert list(t.plots.buffer.column("step_ms_ema")) == list(t.plots.buffer.column("step_ms"))
    # files
    png = tmp_path / "plots.png"
    assert t.plots.save_png(str(png)) == str(png) and png.read_bytes()[:4] == b"\x89PNG"
    dialogs.script("save_file", str(tmp_path / "metrics"))
    t.plots.csv_button.click()
    rows = load_metrics(tmp_path / "metrics.csv")
    assert len(rows) == record.steps() == 6


# ---------------------------------------------------------------- runs
def test_runs_persist_compare_and_overlay(window: MainWindow, qtbot: Any, runs_dir: Path, dialogs: Any) -> None:
    t = window.training
    full = run_short(qtbot, window, steps=3)
    window.controller.set_value(["layer1", "layer2", "layer3"], "frozen", True)
    frozen = run_short(qtbot, window, steps=3)
    assert [r.name for r in t.runs.records] == ["#1 resnet18", "#2 resnet18"]
    table = t.runs_panel.table
    assert table.rowCount() == 2 and table.item(0, 0).text() == "#2 resnet18"  # newest first
    assert table.item(0, 3).text().endswith(" ms") and table.item(0, 4).text() != "–"
    assert frozen.trainable() < full.trainable()
    # the classes the run trained on: synthetic data takes 10 of the kept 1000-way head (a learnable demo)
    assert full.num_classes() == frozen.num_classes() == 10
    setup = table.item(0, COLUMNS.index("Setup")).text()
    assert " 10 classes " in setup and setup.endswith("+1")
    t.runs_panel.select([full, frozen])
    assert "×" in t.runs_panel.compare.text() and "#2 resnet18 vs #1 resnet18" in t.runs_panel.compare.text()
    # the shown run (#2) is drawn in full; #1 is overlaid with its own colour and named in the legend
    assert set(t.plots.overlays) == {full.id}
    x, y = t.plots.overlays[full.id].curves["step_ms_ema"].getData()
    assert len(x) == 3
    legend = t.plots.legends["step_time"].names()
    assert "#1 resnet18" in legend
    # use a run's plan
    t.runs_panel.select([full])
    t.runs_panel.use_plan_button.click()
    assert window.controller.plan.rules == []
    window.controller.undo_stack.undo()
    assert len(window.controller.plan.rules) == 3
    window.controller.undo_stack.setClean()

    # a new window finds them again (the store is WORKBENCH_RUNS_DIR)
    w2 = MainWindow()
    qtbot.addWidget(w2)
    again = list(w2.training.runs.records)
    assert [r.name for r in again] == ["#1 resnet18", "#2 resnet18"]
    assert again[1].status == "completed" and again[1].median_step_ms() == pytest.approx(frozen.median_step_ms())
    assert again[1].verify["ok"] is True
    w2.training.runs_panel.select(again)
    assert set(w2.training.plots.overlays) == {r.id for r in again}
    assert len(again[0].metrics) == 3  # loaded from metrics.csv when selected
    w2.training.runs_panel.select([again[0]])
    assert w2.training.verify.ok is True  # selecting one run shows its verification
    # delete
    dialogs.script("ask", "Delete")
    w2.training.runs_panel.delete_button.click()
    assert [r.name for r in w2.training.runs.records] == ["#2 resnet18"]
    assert not (runs_dir / again[0].id).exists()
    w2.close()


def test_verify_panel_shows_a_failure_in_red(qtbot: Any) -> None:
    from workbench.gui.training.verify_panel import VerifyPanel

    panel = VerifyPanel()
    qtbot.addWidget(panel)
    report = {
        "ok": False,
        "checked": {"frozen": 2, "bn_stats": 2, "trainable": 2},
        "violations": [
            {"name": "layer1.0.bn1.running_mean", "module": "layer1.0.bn1", "kind": "bn_stats_changed",
             "severity": "error", "message": "running statistics moved"},
        ],
        "module_status": {"layer1.0.conv1": "ok", "layer1.0.bn1": "error", "fc": "ok"},
    }
    panel.show_report(report, "#9 test")
    assert panel.ok is False and "FAILED" in panel.banner.text()
    assert panel.status["layer1.0.bn1"] == "error" and panel.status["layer1"] == "error" and panel.status["fc"] == "ok"
    root = panel.tree.topLevelItem(0)
    assert root.text(0) == "(model)"
    seen: list[str] = []
    panel.moduleActivated.connect(seen.append)
    layer1 = next(root.child(i) for i in range(root.childCount()) if root.child(i).text(0) == "layer1")
    assert layer1.isExpanded()
    panel.tree.itemClicked.emit(layer1, 0)
    assert seen == ["layer1"]


def test_plots_keep_to_their_drawing_budget_and_label_markers(qtbot: Any, shown_plots: Any) -> None:
    from workbench.core.runs.record import RunRecord
    from workbench.gui.training.plots import marker_text

    panel = shown_plots()
    panel.start_run(RunRecord(id="r", name="#1 test"), total_params=2_000_000)
    panel.timer.stop()  # ticks by hand below
    qtbot.wait(50)
    panel.budget = 1e-6  # any redraw is over budget: the next one waits the longest interval
    panel.append([{"step": 0, "wall_time": 0.1, "step_time_s": 0.01, "trainable_params": 2_000_000}])
    panel._tick()
    drawn = panel.redraws
    assert curve_count(panel) == 1
    qtbot.wait(50)
    assert panel.graphics.paint_cpu_s > 0
    panel.append([{"step": 1, "wall_time": 0.2, "step_time_s": 0.01, "trainable_params": 1_000_000}])
    panel._tick()  # too soon: not drawn
    assert panel.redraws == drawn and curve_count(panel) == 1
    panel._next_frame = 0.0
    paints = panel.graphics.paints
    panel._tick()
    assert panel.redraws == drawn + 1 and curve_count(panel) == 2
    assert panel.frame_s > 0  # the previous redraw and its paint: the budget counts both
    qtbot.wait(50)
    assert panel.graphics.paints == paints + 1  # one paint per redraw (ranges settled before it)
    panel.timer.start()
    panel._next_frame = 0.0
    panel.append([{"step": 2, "wall_time": 0.3, "step_time_s": 0.01, "trainable_params": 1_000_000}])
    panel._tick()
    assert panel.timer.interval() == 1000  # the timer wakes the GUI thread when the next redraw is due
    panel.timer.stop()
    _x, y = panel.curves["trainable"].getData()
    assert list(y) == [2.0, 1.0, 1.0]  # in millions, as the title says
    assert panel.title_text("trainable").endswith("(M)")
    panel.timer.stop()
    assert marker_text("plan change: froze layer1, layer2; BN eval layer1, layer2") == ("froze layer1, layer2 …", "change")
    assert marker_text("plan change: no change") == ("", "")
    assert marker_text("stage 1 'thaw': unfroze layer3")[1] == "stage"
    assert marker_text("plan change refused: the plan leaves nothing trainable")[1] == "refused"
    assert marker_text("loss nan: step skipped") == ("loss nan: step skipped", "alert")


def curve_count(panel: Any) -> int:
    x, _y = panel.curves["step_ms"].getData()
    return 0 if x is None else len(x)


def test_coarse_range_keeps_its_range_until_the_data_leave_or_shrink_in_it() -> None:
    from workbench.gui.training.plots import coarse_range

    lo, hi = coarse_range(95.0, 105.0, None)
    assert lo <= 94.0 and hi >= 106.0 and hi - lo <= 20.0  # padded, rounded, not much wider
    assert coarse_range(96.0, 104.0, (lo, hi)) == (lo, hi)  # noise inside: unchanged
    assert coarse_range(95.0, 130.0, (lo, hi))[1] >= 130.0  # out of range: moves
    assert coarse_range(100.0, 100.5, (0.0, 200.0)) != (0.0, 200.0)  # data fill too little of it
    assert coarse_range(0.05, 2.0, None)[0] == 0.0  # positive data: never below 0
    flat = coarse_range(11.2, 11.2, None)
    assert flat[0] < 11.2 < flat[1]


def test_plot_y_ranges_move_in_coarse_steps_and_stop_following_a_zoom(qtbot: Any, shown_plots: Any) -> None:
    from workbench.core.runs.record import RunRecord

    panel = shown_plots(900, 600)
    panel.start_run(RunRecord(id="r", name="#1 test"))
    panel.timer.stop()
    view = panel.plots["step_time"].vb
    step = 0

    def feed(*times_ms: float) -> None:
        nonlocal step
        for t_ms in times_ms:
            panel.append([{"step": step, "wall_time": 0.1 * step, "step_time_s": t_ms / 1000.0}])
            step += 1
        panel.redraw()

    feed(100, 104, 97)
    first = view.viewRange()[1]
    assert first[0] <= 97 and first[1] >= 104
    feed(101, 99, 103, 98)  # noise inside the range: the axis stays as it is
    assert view.viewRange()[1] == first
    feed(300)  # a jump: the range takes it in
    assert view.viewRange()[1][1] >= 300
    view.sigRangeChangedManually.emit([True, False])  # the user zoomed into the first steps
    view.setXRange(0, 3, padding=0)
    qtbot.wait(20)  # painted: the curve now displays only the points in view
    feed(400)  # off to the right of the view: the y range still takes every point in
    assert view.viewRange()[1][1] >= 400
    view.sigRangeChangedManually.emit([False, True])  # the user zoomed the y axis
    view.setYRange(90, 110, padding=0)
    view.sigRangeChangedManually.emit([True, False])  # and the x axis
    view.setXRange(0, 2, padding=0)
    feed(500)
    assert view.viewRange()[1] == [90.0, 110.0]  # left to the user
    from PySide6.QtCore import Qt

    plot_rect = panel.plots["step_time"].sceneBoundingRect()
    where = panel.graphics.mapFromScene(plot_rect.center())
    qtbot.mouseDClick(panel.graphics.viewport(), Qt.MouseButton.LeftButton, pos=where)
    qtbot.mouseRelease(panel.graphics.viewport(), Qt.MouseButton.LeftButton, pos=where)  # the double-click's own
    assert view.viewRange()[1][1] >= 500  # a double-click fits the plots to their data again
    assert view.viewRange()[0][1] >= step - 1  # x too, at once (a paused run gets no redraw)


def test_coarse_range_keeps_the_data_off_its_edges() -> None:
    from workbench.gui.training.plots import coarse_range

    lo, hi = coarse_range(1205.0, 1224.0, None)
    assert coarse_range(1205.0, hi, (lo, hi)) != (lo, hi)  # a curve on the top edge: moves
    new_lo, new_hi = coarse_range(1205.0, hi, (lo, hi))
    assert new_hi - hi >= 0.02 * (new_hi - new_lo)


def test_drawing_budget_is_small_only_when_a_cpu_run_takes_every_core() -> None:
    import os

    from workbench.gui.training.plots import drawing_budget

    cores = os.cpu_count() or 1
    assert drawing_budget("cpu", cores) == 0.01
    assert drawing_budget("cuda:0", cores) == 0.5  # the CPU threads mostly wait for the GPU
    if cores > 1:
        assert drawing_budget("cpu", cores - 1) == 0.5
