"""``workbench runs list|show|compare``: app runs and ``--save`` folders side by side; a folder
that cannot be read is one line, and the exit code is 2 only when no run can be read."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.fixtures.run_folders import app_run, early_app_run, save_folder
from workbench.cli import main
from workbench.core.runs.record import RUN_VERSION
from workbench.core.runs.store import RUNS_DIR_ENV, RunStore, load_metrics, open_run


@pytest.fixture()
def runs(tmp_path: Path) -> Path:
    store = RunStore(tmp_path / "store")
    app_run(store, "#1 full", [40, 40, 40, 40], [9, 9, 9, 9], val={3: (0.9, 0.5)},
            config={"optimizer": "adamw", "lr": 0.001, "batch_size": 4}, tags=["baseline"])
    app_run(store, "#2 frozen", [40, 40, 20, 20], [9, 9, 3, 3], events={2: "froze 0"}, val={3: (0.8, 0.6)})
    save_folder(tmp_path / "cli", [30, 30, 30], [5, 5, 5])
    return tmp_path


def test_list_prints_a_row_per_run_oldest_first(runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "list", str(runs / "store")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["Run", "Status", "Steps"]
    assert out[1].startswith("#1 full") and "40.0 ms" in out[1] and "0.9000" in out[1] and "50.0 %" in out[1]
    assert out[2].startswith("#2 frozen") and "0.8000" in out[2] and "* " not in out[2].split("·")[0]
    assert len(out) == 3


def test_show_names_every_number_of_a_save_folder(runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "show", str(runs / "cli")]) == 0
    out = capsys.readouterr().out
    assert "run          cli" in out and "step time    30.0 ms" in out and "peak memory  2 MB (peak RSS growth)" in out
    assert "segments     steps 0–2, 30.0 ms, 5 trainable" in out and "validation   none" in out


def test_compare_prints_each_run_against_the_oldest_per_plan_segment(runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "compare", str(runs / "store")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("#2 frozen vs #1 full: step time 1.00× → 0.50×, peak memory 1.00× (1 MB vs 1 MB), "
                      "trainable 1.00× → 0.33×, per plan segment (2 vs 1), val loss 0.8000 vs 0.9000, "
                      "val acc 60.0 % vs 50.0 % (+10.0 pts)")
    assert out[1] == "segments:" and out[3] == "  #2 frozen: steps 0–1, 40.0 ms, 9 trainable; steps 2–3, after froze 0, 20.0 ms, 3 trainable"


def test_compare_mixes_app_runs_and_save_folders(runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "compare", str(runs / "cli"), str(runs / "store"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["lines"]) == 2 and len(data["segments"]) == 3


def test_a_bad_folder_is_one_line_and_the_others_are_read(runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "list", str(runs / "cli"), str(runs / "missing")]) == 0
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "missing: does not exist" in captured.err
    assert main(["runs", "list", str(runs / "missing")]) == 2
    assert "no run could be read" in capsys.readouterr().err
    assert main(["runs", "compare", str(runs / "cli")]) == 2
    assert "compare needs two runs or more; 1 could be read" in capsys.readouterr().err


def test_without_runs_the_app_s_store_is_read(runs: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    early_app_run(runs / "store", "20240101-000000-0000", "#0 early", [50, 50], [9, 9])
    monkeypatch.setenv(RUNS_DIR_ENV, str(runs / "store"))
    assert main(["runs", "list", "--json"]) == 0
    names = [r["name"] for r in json.loads(capsys.readouterr().out)]
    assert names == ["#0 early", "#1 full", "#2 frozen"]
    monkeypatch.setenv(RUNS_DIR_ENV, str(runs / "none yet"))
    assert main(["runs", "list"]) == 0
    assert "no runs in" in capsys.readouterr().err


def test_the_engine_writes_the_run_record_into_the_save_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    quick = ["train", "--model", "resnet18", "--num-classes", "10", "--image-size", "16", "--batch-size", "4",
             "--data", "synthetic:16", "--device", "cpu", "--no-progress", "--steps", "2", "--save", str(tmp_path / "run")]
    assert main(quick) == 0
    data = json.loads((tmp_path / "run" / "run.json").read_text())
    assert (data["version"], data["name"], data["metrics_file"], data["status"]) == (RUN_VERSION, "run", "metrics.jsonl", "completed")
    rec = open_run(tmp_path / "run")
    assert [m["step"] for m in load_metrics(rec)] == [0, 1] and rec.summarize().trainable == rec.summary["trainable_params"]
    assert main([*quick, "--overwrite"]) == 0  # a folder holding run.json is an earlier run: replaced
    capsys.readouterr()
    assert main(["runs", "show", str(tmp_path / "run")]) == 0
    assert "status       completed: completed 2 steps" in capsys.readouterr().out


def test_a_store_that_is_not_writable_is_still_read(runs: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from workbench.core.runs import store as store_module

    real = store_module.os.access
    monkeypatch.setattr(store_module.os, "access",
                        lambda p, mode: False if Path(p) == runs / "store" and mode & os.W_OK else real(p, mode))
    assert RunStore(runs / "store").list() == ([], [f"the run store {runs / 'store'} is not writable: runs are not kept; "
                                                    "check its permissions"])  # the app says so once
    assert main(["runs", "list", str(runs / "store")]) == 0
    assert "#1 full" in capsys.readouterr().out
