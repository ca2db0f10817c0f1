"""Hostile: run folders that appear in the app's store half-written while it is open. A folder without
its run.json yet is passed over without a word; a run.json cut short is one line, said once, and the run
is taken in when the file is whole; a sweep candidate that is not a run is one line; nothing listed is lost."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.core.runs.test_sweep_runs import make_sweep
from tests.fixtures.run_folders import app_run
from tests.gui.training import test_runs_watch
from tests.timeouts import GUI_EVENT_S, ms
from workbench.core.runs.record import RUN_FILE
from workbench.core.runs.rescan import StoreScan
from workbench.core.runs.store import RunStore
from workbench.core.runs.sweeps import sweeps_folder
from workbench.gui.training.runs_tab import RunsPanel

runs_panel = test_runs_watch.runs_panel  # the fixture: the Runs tab on a store of its own


def _whole_and_cut(tmp_path: Path) -> tuple[Path, str]:
    """A run as the app writes it (in a store of its own), and its run.json's text."""
    rec = app_run(RunStore(tmp_path / "elsewhere"), "#7 half", [10, 10], [5, 5])
    assert rec.folder is not None
    return rec.folder, (rec.folder / RUN_FILE).read_text()


def test_the_scan_passes_over_a_half_written_folder_then_takes_it_in(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs")
    mine = app_run(store, "#1 mine", [10, 10], [5, 5])
    records, _ = store.list(sweeps=True)
    scan = StoreScan(store, records)
    source, text = _whole_and_cut(tmp_path)
    half = store.folder / source.name
    half.mkdir()  # the folder first, its files later
    merged, problems = scan.merge(records)
    assert [r.name for r in merged] == ["#1 mine"] and not problems  # not a run yet: nothing to say
    (half / RUN_FILE).write_text(text[: len(text) // 2])  # cut short
    merged, problems = scan.merge(merged)
    assert [r.name for r in merged] == ["#1 mine"] and len(problems) == 1
    assert str(half) in problems[0] and "\n" not in problems[0]
    assert str(half / RUN_FILE) in scan.watched()[1]  # written in place, it changes no folder: watched itself
    assert scan.merge(merged) == (merged, [])  # the same cut file: said once
    (half / RUN_FILE).write_text(text)
    merged, problems = scan.merge(merged)
    assert [r.name for r in merged] == ["#1 mine", "#7 half"] and not problems
    assert merged[0] is next(r for r in records if r.folder == mine.folder)
    assert not scan.watched()[1]


def test_a_sweep_candidate_that_is_not_a_run_and_a_hand_edited_run_file(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs")
    mine = app_run(store, "#1 mine", [10, 10], [5, 5])
    assert mine.folder is not None
    records, _ = store.list(sweeps=True)
    scan = StoreScan(store, records)
    sweep = make_sweep(sweeps_folder(store.folder) / "s1", "c00-head")
    (sweep / "runs" / "c01-empty").mkdir()
    merged, problems = scan.merge(records)
    assert sorted(r.name for r in merged) == ["#1 mine", "c00-head"]
    assert len(problems) == 1 and "c01-empty" in problems[0] and "not a run folder" in problems[0]
    data = json.loads((mine.folder / RUN_FILE).read_text())
    (mine.folder / RUN_FILE).write_text(json.dumps({**data, "version": "two"}))  # edited by hand
    again, problems = scan.merge(merged)
    assert len(problems) == 1 and "not a version number" in problems[0]
    assert any(r is merged[0] for r in again) and len(again) == 2  # listed as it was last read: nothing lost


def test_the_runs_tab_takes_in_a_run_once_its_file_is_whole(qtbot: Any, runs_panel: RunsPanel, tmp_path: Path) -> None:
    store = runs_panel.runs.store
    said: list[str] = []
    runs_panel.runs.statusMessage.connect(said.append)
    app_run(store, "#1 mine", [10, 10], [5, 5])
    qtbot.waitUntil(lambda: runs_panel.table.rowCount() == 1, timeout=ms(GUI_EVENT_S))
    source, text = _whole_and_cut(tmp_path)
    half = store.folder / source.name
    half.mkdir()
    (half / RUN_FILE).write_text(text[: len(text) // 3])  # written in place, cut short
    qtbot.waitUntil(lambda: len(said) == 1, timeout=ms(GUI_EVENT_S))
    assert str(half) in said[0] and "\n" not in said[0] and runs_panel.table.rowCount() == 1
    (half / RUN_FILE).write_text(text)  # the same file, whole
    qtbot.waitUntil(lambda: runs_panel.table.rowCount() == 2, timeout=ms(GUI_EVENT_S))
    assert len(said) == 1
