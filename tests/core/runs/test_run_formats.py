"""Every format runs have been kept in opens as one typed record: ``workbench train --save``
folders, app runs of the first ``run.json`` version, and app runs as written today."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.run_folders import app_run, early_app_run, save_folder
from workbench.core.plan.keys import RULE_KEYS
from workbench.core.runs.compare import compare_runs
from workbench.core.runs.record import RUN_VERSION, RunRecord
from workbench.core.runs.store import RunStore, RunStoreError, load_metrics, open_run, read_runs
from workbench.core.runs.text import plan_text, rule_text


def test_a_save_folder_opens_with_its_summary_config_plan_and_plan_changes(tmp_path: Path) -> None:
    folder = save_folder(tmp_path / "frozen", [40, 40, 20, 20], [9, 9, 3, 3], events={2: "froze 0"},
                         val={3: (0.8, 0.5)}, summary={"val_loss": 0.8, "val_step": 3, "val_acc": 0.5})
    rec = open_run(folder)
    assert (rec.name, rec.status, rec.metrics_file) == ("frozen", "completed", "metrics.jsonl")
    assert rec.config["optimizer"] == "sgd" and rec.plan == rec.final_plan == {"version": 1, "rules": [{"select": "0", "frozen": True}]}
    s = rec.summarize()
    assert (s.steps, s.step_ms, s.peak_memory, s.trainable, s.total) == (4, 40.0, 2_000_000, 3, 10)
    assert s.validation is not None and (s.validation.loss, s.validation.acc) == (0.8, 0.5)
    assert [(g.start, g.end) for g in s.segments] == [(0, 3)]  # no metrics read yet: one segment
    load_metrics(rec)
    segs = rec.summarize().segments
    assert [(g.start, g.end, g.label, g.step_ms, g.trainable) for g in segs] == [
        (0, 1, "", 40.0, 9.0), (2, 3, "froze 0", 20.0, 3.0)]
    assert rec.verify == {"ok": True}


def test_an_app_run_of_the_first_version_opens_and_lists(tmp_path: Path) -> None:
    early_app_run(tmp_path, "20240501-100000-ab12", "#1 old", [30, 30, 30], [5, 5, 5])
    rec = open_run(tmp_path / "20240501-100000-ab12")
    assert (rec.name, rec.notes, rec.tags, rec.final_plan, rec.events) == ("#1 old", "", [], None, [])
    assert rec.metrics_file == "metrics.csv" and rec.trainable() == 5
    assert [m["step"] for m in load_metrics(rec)] == [0, 1, 2] and rec.median_step_ms() == pytest.approx(30.0)
    (listed,), problems = RunStore(tmp_path).list()
    assert not problems and listed.name == "#1 old"


def test_an_app_run_of_today_round_trips(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    rec = app_run(store, "#2 new", [10, 10, 5], [4, 4, 1], events={2: "froze"}, notes="n", tags=["a"])
    assert rec.folder is not None
    back = open_run(rec.folder)
    assert back.to_dict() == rec.to_dict() and json.loads((rec.folder / "run.json").read_text())["version"] == RUN_VERSION
    load_metrics(back)
    assert back.summarize() == rec.summarize()


def test_a_newer_version_or_a_folder_that_is_not_a_run_is_one_line(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "store")
    rec = app_run(store, "#1", [10], [1])
    assert rec.folder is not None
    data = json.loads((rec.folder / "run.json").read_text())
    (rec.folder / "run.json").write_text(json.dumps({**data, "version": RUN_VERSION + 1}))
    with pytest.raises(RunStoreError, match="newer than this app reads") as e:
        open_run(rec.folder)
    assert "\n" not in str(e.value) and str(e.value).startswith(str(rec.folder))
    for version, says in ((None, "has no 'version'"), ("2", "'2' is not a version number"),
                          (True, "True is not a version number"), (0, "0 is not a version number")):
        (rec.folder / "run.json").write_text(json.dumps({**data, "version": version}))
        with pytest.raises(RunStoreError, match=says) as e:
            open_run(rec.folder)
        assert "newer than" not in str(e.value) and "\n" not in str(e.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunStoreError, match="not a run folder"):
        open_run(tmp_path / "empty")
    with pytest.raises(RunStoreError, match="does not exist"):
        open_run(tmp_path / "missing")


def test_read_runs_takes_run_folders_and_folders_of_runs(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "store")
    app_run(store, "#1 app", [10, 10], [2, 2])
    save_folder(tmp_path / "store" / "cli-run", [20, 20], [2, 2])  # a --save folder inside the store
    save_folder(tmp_path / "alone", [20, 20], [2, 2])
    records, problems = read_runs([tmp_path / "store", tmp_path / "alone", tmp_path / "nothing"])
    assert sorted(r.name for r in records) == ["#1 app", "alone", "cli-run"]
    assert len(problems) == 1 and "nothing" in problems[0] and "\n" not in problems[0]
    assert [r.name for r in RunStore(tmp_path / "store").list()[0]] == ["#1 app"]  # the app lists its own runs


def test_compare_is_by_the_oldest_run_whichever_comes_first(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    a = app_run(store, "#1", [40, 40], [9, 9])
    b = app_run(store, "#2", [20, 20], [3, 3])
    for order in ([a, b], [b, a]):
        c = compare_runs(order)
        assert c is not None and c.text() == "#2 vs #1: step time 0.50×, peak memory 1.00× (1 MB vs 1 MB), trainable 0.33×"
    assert c is not None and "<b>0.50×</b>" in c.text(as_html=True)
    assert compare_runs([a]) is None


def test_rule_text_reads_every_setting_key_from_the_key_table() -> None:
    for key in RULE_KEYS:
        if not key.setting:
            continue
        value = 0.5 if key.numeric else True
        assert rule_text({"select": "fc", key.name: value}) == f"fc {key.summary(value)}"
    assert rule_text({"select": "fc", "mystery": 3}) == "fc mystery=3"  # a hand-edited key is shown, not dropped
    assert plan_text({"rules": "nonsense"}) == "all train" and plan_text(None) == "no plan"


def test_the_record_s_numbers_skip_values_of_the_wrong_type() -> None:
    rec = RunRecord(id="x", name="x", summary={"trainable_params": True, "steps": -3, "val_loss": 0.5, "val_step": "2",
                                               "median_step_time_s": float("nan")})
    s = rec.summarize()
    assert (s.trainable, s.steps, s.validation, s.step_ms) == (None, 0, None, None)
