"""Runs: rename, notes and tags kept in run.json; the setup column; the comparison by plan segment."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QWidget
from torch import nn

from tests.timeouts import GUI_EVENT_S, ms
from workbench.core.runs.record import RunRecord, clean_name, clean_tags
from workbench.core.runs.store import RunStore
from workbench.core.runs.text import plan_text
from workbench.gui.controller import Controller
from workbench.gui.model_loading import loaded_from_model
from workbench.gui.training.run_controller import RunController
from workbench.gui.training.runs_tab import COLUMNS, RunsPanel, compare_text, setup_text


def _metrics(step_ms: list[float], trainable: list[int]) -> list[dict[str, Any]]:
    return [
        {"step": i, "epoch": 0, "loss": 1.0, "step_time_s": ms / 1e3, "data_time_s": 0.0, "samples_per_s": 1.0,
         "wall_time": float(i), "mem_allocated": 1000, "mem_peak": 1000, "mem_reserved": None,
         "trainable_params": t, "frozen_params": 0, "grad_bytes": 0, "optimizer_state_bytes": 0}
        for i, (ms, t) in enumerate(zip(step_ms, trainable, strict=True))
    ]


def _stored(store: RunStore, name: str, step_ms: list[float], trainable: list[int], events: list[dict] | None = None,
            **fields: Any) -> RunRecord:
    rec = store.new_record(name, status="completed", metrics=_metrics(step_ms, trainable), events=events or [], **fields)
    store.save(rec)
    return rec


def test_notes_and_tags_round_trip_through_run_json(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    rec = _stored(store, "#1 resnet18", [10, 10], [5, 5])
    rec.notes, rec.tags = "lr too high?\nretry with 1e-4", ["baseline", "sweep"]
    store.save(rec, metrics=False)
    data = json.loads((rec.folder / "run.json").read_text())
    assert data["notes"] == "lr too high?\nretry with 1e-4" and data["tags"] == ["baseline", "sweep"]
    (back,), problems = store.list()
    assert not problems and back.notes == rec.notes and back.tags == ["baseline", "sweep"]
    # hand-edited: wrong types are dropped, not fatal; older files without the keys read as empty
    data.update(notes=3, tags=["a", 4, " a ", "", "b"])
    (rec.folder / "run.json").write_text(json.dumps(data))
    (back,), _ = store.list()
    assert back.notes == "" and back.tags == ["a", "b"]
    del data["notes"], data["tags"]
    (rec.folder / "run.json").write_text(json.dumps(data))
    (back,), _ = store.list()
    assert back.notes == "" and back.tags == []


def test_clean_name_tags_and_plan_text() -> None:
    assert clean_name("  my\n run  ") == "my run" and clean_name("   ") == ""
    assert len(clean_name("x" * 500)) == 120
    assert clean_tags("a, b ,, a,c") == ["a", "b", "c"]
    assert plan_text({"rules": []}) == "all train"
    plan = {"rules": [{"select": "*", "frozen": True}, {"select": "fc", "frozen": False, "lr_scale": 0.1},
                      {"select": "type:BatchNorm2d", "bn_eval": True}],
            "stages": [{"at_step": 5, "rules": []}]}
    assert plan_text(plan) == "* frozen, fc trains lr×0.1 +1, 1 stage"
    assert plan_text(plan, most=5).endswith("type:BatchNorm2d bn_eval, 1 stage")
    assert plan_text(None) == "no plan"


def test_setup_text_shows_lr_classes_and_plan() -> None:
    config = {"optimizer": "sgd", "lr": 0.01, "batch_size": 16, "image_size": 64, "device": "cpu", "amp": "off"}
    text = setup_text(config, num_classes=10, plan={"rules": [{"select": "layer1", "frozen": True}]})
    assert text == "sgd lr 0.01 bs16 64px 10 classes cpu · layer1 frozen"
    assert setup_text(config) == "sgd lr 0.01 bs16 64px cpu"  # older callers: unchanged form plus the LR


def test_segments_split_at_plan_changes_with_medians() -> None:
    ms = [100, 50, 52, 51, 300, 30, 31, 29]  # one outlier per segment: medians ignore it
    trainable = [10, 10, 10, 10, 4, 4, 4, 4]
    rec = RunRecord(id="a", name="#2", metrics=_metrics(ms, trainable),
                    events=[{"step": 4, "wall_time": 4.0, "label": "froze layer1"}])
    first, second = rec.segments()
    assert (first.start, first.end, first.label, first.trainable) == (0, 3, "", 10)
    assert first.step_ms == 51.5
    assert (second.start, second.end, second.label, second.trainable) == (4, 7, "froze layer1", 4)
    assert second.step_ms == 30.5
    # without metrics: one segment from the summary
    bare = RunRecord(id="b", name="#3", summary={"median_step_time_s": 0.02, "trainable_params": 7, "steps": 5})
    (only,) = bare.segments()
    assert (only.start, only.end, only.step_ms, only.trainable) == (0, 4, 20.0, 7)


def test_compare_uses_medians_per_plan_segment_not_the_final_count() -> None:
    base = RunRecord(id="a", name="#1 full", metrics=_metrics([50] * 6, [10] * 6))
    froze = RunRecord(id="b", name="#2 froze", metrics=_metrics([50, 50, 50, 25, 25, 25], [10, 10, 10, 2, 2, 2]),
                      events=[{"step": 3, "wall_time": 3.0, "label": "froze layer1"}])
    html, tip = compare_text(base, [froze])
    assert "#2 froze vs #1 full" in html
    assert "step time <b>1.00× → 0.50×</b>" in html and "trainable <b>1.00× → 0.20×</b>" in html
    assert "per plan segment (2 vs 1)" in html
    assert "after froze layer1" in tip and "steps 3–5" in tip
    same = RunRecord(id="c", name="#3", metrics=_metrics([40] * 6, [5] * 6))
    html, _ = compare_text(base, [same])
    assert "step time <b>0.80×</b>" in html and "trainable <b>0.50×</b>" in html and "segment" not in html


def test_compare_shows_a_measured_zero_peak_without_a_ratio() -> None:
    # peak memory is growth over the run's start: a short CPU run can measure 0, which is a
    # number to show (not "no measurement"), but no ratio can be taken against it
    def rec(name: str, peak: int) -> RunRecord:
        return RunRecord(id=name, name=name, metrics=_metrics([50] * 3, [5] * 3), summary={"peak_memory_bytes": peak})

    html, _ = compare_text(rec("#1", 0), [rec("#2", 2_000_000)])
    assert "peak memory (2 MB vs 0 MB)" in html and "×</b> (2 MB" not in html
    html, _ = compare_text(rec("#1", 1_000_000), [rec("#2", 0)])
    assert "peak memory <b>0.00×</b> (0 MB vs 1 MB)" in html
    unmeasured = RunRecord(id="u", name="#3", summary={"median_step_time_s": 0.05})
    html, _ = compare_text(unmeasured, [rec("#2", 0)])
    assert "peak memory" not in html


_OWNERS: list[QWidget] = []  # keeps the panels' parent alive for the test (closed by the leak check)


def _panel(qtbot: Any, runs_dir: Path) -> tuple[RunController, RunsPanel]:
    owner = QWidget()
    _OWNERS[:] = [owner]
    qtbot.addWidget(owner)
    c = Controller(owner)
    c.set_loaded(loaded_from_model(nn.Sequential(nn.Linear(2, 3)), "tiny"))
    store = RunStore(runs_dir)
    _stored(store, "#1 tiny", [50] * 4, [9] * 4, config={"optimizer": "adamw", "lr": 0.001, "batch_size": 4})
    _stored(store, "#2 tiny", [50, 50, 25, 25], [9, 9, 3, 3], plan={"rules": [{"select": "0", "frozen": True}]},
            events=[{"step": 2, "wall_time": 2.0, "label": "froze 0"}])
    runs = RunController(c, RunStore(runs_dir), owner)
    panel = RunsPanel(runs, owner)
    return runs, panel


def test_runs_tab_renames_in_place_and_edits_notes_and_tags(qtbot: Any, runs_dir: Path) -> None:
    runs, panel = _panel(qtbot, runs_dir)
    table = panel.table
    first, second = runs.records
    assert table.item(1, 0).text() == "#1 tiny"
    assert table.item(1, COLUMNS.index("Setup")).text() == "adamw lr 0.001 bs4 auto · all train"
    first.summary["num_classes"] = 10  # what the run's setup reported
    panel.refresh()
    assert "10 classes" in table.item(1, COLUMNS.index("Setup")).text()
    assert table.item(0, COLUMNS.index("Setup")).text().endswith("· 0 frozen")
    # rename in place: the name cell is editable, the others are not
    assert table.item(1, 0).flags() & Qt.ItemFlag.ItemIsEditable
    assert not table.item(1, 3).flags() & Qt.ItemFlag.ItemIsEditable
    shown: list[list] = []
    panel.selectionChanged.connect(shown.append)
    table.item(1, 0).setText("  baseline  run ")
    assert first.name == "baseline run" and table.item(1, 0).text() == "baseline run"
    assert json.loads((first.folder / "run.json").read_text())["name"] == "baseline run"
    messages: list[str] = []
    runs.statusMessage.connect(messages.append)
    table.item(1, 0).setText("   ")  # refused: the old name stays
    assert first.name == "baseline run" and table.item(1, 0).text() == "baseline run"
    assert messages and "needs a name" in messages[-1]
    # tags and notes of the one selected run
    assert not panel.notes_edit.isEnabled()
    panel.select([first])
    panel._selection_changed()
    assert panel.notes_edit.isEnabled() and panel.tags_edit.text() == ""
    panel.tags_edit.setText("baseline, lr sweep, baseline")
    panel.tags_edit.editingFinished.emit()
    panel.notes_edit.setPlainText("first try")
    qtbot.waitUntil(lambda: first.notes == "first try", timeout=ms(GUI_EVENT_S))  # saved after a short pause
    saved = json.loads((first.folder / "run.json").read_text())
    assert saved["tags"] == ["baseline", "lr sweep"] and saved["notes"] == "first try"
    row = panel._row_of(first)
    assert table.item(row, COLUMNS.index("Tags · notes")).text() == "[baseline] [lr sweep] first try"
    # switching runs saves at once and shows the other run's (empty) notes
    panel.notes_edit.setPlainText("second thoughts")
    panel.select([second])
    panel._selection_changed()
    assert first.notes == "second thoughts" and panel.notes_edit.toPlainText() == ""
    # they come back with the store
    again = RunController(Controller(), RunStore(runs_dir))
    back = next(r for r in again.records if r.id == first.id)
    assert (back.name, back.tags, back.notes) == ("baseline run", ["baseline", "lr sweep"], "second thoughts")


def test_runs_tab_compare_line_reads_metrics_and_splits_segments(qtbot: Any, runs_dir: Path) -> None:
    runs, panel = _panel(qtbot, runs_dir)
    first, second = runs.records
    assert not first.metrics_loaded
    panel.select([first, second])
    panel._selection_changed()
    text = panel.compare.text()
    assert "#2 tiny vs #1 tiny" in text and "step time <b>1.00× → 0.50×</b>" in text
    assert "trainable <b>1.00× → 0.33×</b>" in text
    assert "after froze 0" in panel.compare.toolTip()


def test_setup_text_shows_tokens_for_text_runs() -> None:
    config = {"optimizer": "adamw", "lr": 0.001, "batch_size": 8, "image_size": 64, "device": "cpu"}
    text = setup_text(config, seq_len=128)
    assert "128 tokens" in text and "px" not in text
    assert "64px" in setup_text(config)


def test_runs_tab_setup_shows_tokens_of_a_text_run(qtbot: Any, runs_dir: Path) -> None:
    runs, panel = _panel(qtbot, runs_dir)
    runs.records[0].summary["seq_len"] = 128
    panel.refresh()
    assert "128 tokens" in panel.table.item(1, COLUMNS.index("Setup")).text()
