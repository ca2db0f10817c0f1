"""A plan sweep's candidates are normal run folders (``<sweep>/runs/<id-name>/``): ``workbench runs`` and the
app's store read them tagged with their sweep, and a sweep's run is never deleted on its own (issue 34)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.fixtures.run_folders import app_run, save_folder
from workbench.cli import main
from workbench.core.runs.record import RunStoreError
from workbench.core.runs.rescan import StoreScan
from workbench.core.runs.store import RunStore, open_run, read_runs
from workbench.core.runs.sweeps import sweep_tag_of, sweeps_folder


def make_sweep(folder: Path, *candidates: str) -> Path:
    """A sweep folder as ``workbench sweep`` leaves it (its report, and one ``--save`` folder per candidate)."""
    (folder / "runs").mkdir(parents=True)
    (folder / "report.json").write_text("{}")
    for i, name in enumerate(candidates):
        save_folder(folder / "runs" / name, [10.0 + i, 10.0 + i], [5, 5])
    return folder


def test_a_sweep_s_run_carries_its_tag_and_the_user_s_own_runs_none(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs")
    own = app_run(store, "#1 mine", [10, 10], [5, 5])
    sweep = make_sweep(sweeps_folder(store.folder) / "20261202-120000", "c00-head-only", "c01-full")
    rec = open_run(sweep / "runs" / "c00-head-only")
    assert rec.sweep is not None and rec.sweep.text == "20261202-120000 · c00" and rec.sweep.folder == sweep
    assert open_run(own.folder).sweep is None  # type: ignore[arg-type]
    assert sweep_tag_of(tmp_path / "runs" / "x") is None  # a folder called runs is not a sweep's on its own

    mine, problems = store.list()
    assert [r.name for r in mine] == ["#1 mine"] and not problems  # the store alone: the user's runs
    every, problems = store.list(sweeps=True)
    assert sorted(r.name for r in every) == ["#1 mine", "c00-head-only", "c01-full"] and not problems
    assert {r.name: r.sweep.candidate for r in every if r.sweep} == {"c00-head-only": "c00-head-only", "c01-full": "c01-full"}


def test_runs_reads_a_sweep_folder_and_a_folder_of_sweeps(tmp_path: Path) -> None:
    a = make_sweep(tmp_path / "sweeps" / "a", "c00-head")
    make_sweep(tmp_path / "sweeps" / "b", "c00-head", "c01-full")
    (a / "runs" / ".c01-full.lock").write_text("")  # a candidate's lock and a run being written: left out
    (a / "runs" / ".c01-full.tmp-1234").mkdir()
    records, problems = read_runs([a])
    assert [r.sweep.text for r in records if r.sweep] == ["a · c00"] and not problems
    records, problems = read_runs([tmp_path / "sweeps"])
    assert sorted(r.sweep.text for r in records if r.sweep) == ["a · c00", "b · c00", "b · c01"]
    assert not problems


def test_a_sweep_s_run_is_not_deleted_on_its_own(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs")
    sweep = make_sweep(sweeps_folder(store.folder) / "s1", "c00-head")
    rec = open_run(sweep / "runs" / "c00-head")
    with pytest.raises(RunStoreError) as e:
        store.delete(rec)
    line = str(e.value)
    assert "\n" not in line and "sweep s1" in line and str(sweep) in line and "resuming the sweep" in line
    assert (sweep / "runs" / "c00-head" / "summary.json").is_file()  # nothing lost
    rec.sweep = None  # the folder still says where it lies
    with pytest.raises(RunStoreError, match="sweep s1"):
        store.delete(rec)


def test_merging_sweeps_again_keeps_the_runs_listed_and_adds_the_new_ones(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs")
    app_run(store, "#1 mine", [10, 10], [5, 5])
    sweep = make_sweep(sweeps_folder(store.folder) / "s1", "c00-head")
    records, _ = store.list(sweeps=True)
    scan = StoreScan(store, records)
    first = next(r for r in records if r.sweep is not None)
    save_folder(sweep / "runs" / "c01-full", [9.0, 9.0], [10, 10])  # a candidate finished
    merged, problems = scan.merge(records)
    assert not problems and len(merged) == 3
    assert any(r is first for r in merged)  # the same object: its selection and metrics stay
    assert any(r.name == "#1 mine" for r in merged)


def test_runs_list_shows_the_sweep_column_only_when_a_run_has_one(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    store = RunStore(tmp_path / "runs")
    app_run(store, "#1 mine", [10, 10], [5, 5])
    assert main(["runs", "list", str(store.folder)]) == 0
    assert "Sweep" not in capsys.readouterr().out
    make_sweep(sweeps_folder(store.folder) / "s1", "c00-head")
    monkeypatch.setenv("WORKBENCH_RUNS_DIR", str(store.folder))
    assert main(["runs", "list"]) == 0  # the app's runs and the app's sweeps
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[-1] == "Sweep" and len(lines) == 3
    assert lines[-1].endswith("s1 · c00") and "#1 mine" in lines[1]
    assert main(["runs", "list", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["sweep"] and d["sweep"]["sweep"] for d in data] == [None, "s1"]
    assert main(["runs", "show", str(sweeps_folder(store.folder) / "s1")]) == 0
    assert re.search(r"^sweep +s1 · c00 \(", capsys.readouterr().out, re.M)
