"""Hostile sweep folders where the Runs tab, ``workbench runs`` and Suggest ▸ Resume read them: a sweep folder
that is a link, a damaged study or report, FIFOs in a sweep's runs folder. Each is one line or passed over;
nothing hangs and nothing in the folders changes (issue 34)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.core.runs.test_sweep_runs import make_sweep
from workbench.core.runs.store import read_runs, read_sweep_runs
from workbench.gui.advisor.resume import IDENTITY_FILE, find_resumable

IDENTITY = {"candidates": ["c00 head", "c01 full"], "steps": 2}

fifo_only = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")


def _snapshot(folder: Path) -> dict[str, bytes | str]:
    """Every entry under ``folder`` (links and FIFOs by kind, files by content)."""
    out: dict[str, bytes | str] = {}
    for p in sorted(folder.rglob("*")):
        rel = str(p.relative_to(folder))
        out[rel] = ("link" if p.is_symlink() else "fifo" if p.is_fifo() else "dir" if p.is_dir()
                    else p.read_bytes())
    return out


def _unfinished(folder: Path) -> Path:
    (folder / IDENTITY_FILE).write_text(json.dumps(IDENTITY))
    (folder / "report.json").write_text(json.dumps({"rows": [{"status": "completed"}, {"status": "waiting"}]}))
    return folder


def test_a_sweep_folder_that_is_a_link_is_one_line_and_not_read(tmp_path: Path) -> None:
    sweeps = tmp_path / "sweeps"
    make_sweep(sweeps / "a", "c00-head")
    elsewhere = _unfinished(make_sweep(tmp_path / "elsewhere", "c00-head"))
    (sweeps / "b").symlink_to(elsewhere, target_is_directory=True)
    before = _snapshot(tmp_path)
    records, problems = read_sweep_runs([sweeps])
    assert [r.sweep.text for r in records if r.sweep] == ["a · c00"]
    assert len(problems) == 1 and "links outside" in problems[0] and "\n" not in problems[0]
    assert find_resumable(sweeps, IDENTITY) is None  # the linked sweep is not offered either
    records, problems = read_runs([sweeps])  # `workbench runs list SWEEPS`
    assert len(records) == 1 and len(problems) == 1
    assert _snapshot(tmp_path) == before


def test_a_damaged_study_or_report_is_passed_over_and_left_as_it_is(tmp_path: Path) -> None:
    sweeps = tmp_path / "sweeps"
    folder = _unfinished(make_sweep(sweeps / "20261202-120000", "c00-head"))
    (folder / "study.db").write_bytes(b"SQLite format 3\x00" + b"\xff" * 64)  # the header, then garbage
    records, problems = read_sweep_runs([sweeps])
    assert len(records) == 1 and not problems  # the runs are read without the study
    found = find_resumable(sweeps, IDENTITY)
    assert found is not None and (found.done, found.total) == (1, 2)  # resuming it says the study is damaged
    before = _snapshot(tmp_path)
    (folder / "report.json").write_bytes(b"\x00{not json")
    assert find_resumable(sweeps, IDENTITY) is not None  # no report: none done yet, still resumable
    (folder / IDENTITY_FILE).write_text('{"candidates": [')  # cut short: not this sweep's
    assert find_resumable(sweeps, IDENTITY) is None
    assert (folder / "study.db").read_bytes() == before["sweeps/20261202-120000/study.db"]


@fifo_only
def test_fifos_in_a_sweep_folder_never_hang_a_reader(tmp_path: Path) -> None:
    sweeps = tmp_path / "sweeps"
    folder = _unfinished(make_sweep(sweeps / "s1", "c00-head", "c01-full"))
    os.mkfifo(folder / "runs" / "c02-pipe")  # a FIFO among the candidates: not a run, passed over
    os.remove(folder / "runs" / "c01-full" / "summary.json")
    os.mkfifo(folder / "runs" / "c01-full" / "summary.json")  # a FIFO as a run's file: one line
    pipe_sweep = make_sweep(sweeps / "s2")
    os.rmdir(pipe_sweep / "runs")
    os.mkfifo(pipe_sweep / "runs")  # a FIFO where the sweep's runs folder should be: one line
    os.remove(folder / "report.json")
    os.mkfifo(folder / "report.json")  # read as no report: none done
    before = _snapshot(tmp_path)
    records, problems = read_sweep_runs([sweeps])
    assert [r.sweep.candidate for r in records if r.sweep] == ["c00-head"]
    assert len(problems) == 2 and all("\n" not in p for p in problems), problems
    assert any("c01-full" in p for p in problems) and any(str(pipe_sweep / "runs") in p for p in problems)
    found = find_resumable(sweeps, IDENTITY)
    assert found is not None and found.done == 0
    os.remove(folder / IDENTITY_FILE)
    os.mkfifo(folder / IDENTITY_FILE)
    assert find_resumable(sweeps, IDENTITY) is None
    after = _snapshot(tmp_path)
    after[f"sweeps/s1/{IDENTITY_FILE}"] = before[f"sweeps/s1/{IDENTITY_FILE}"]
    assert after == before
