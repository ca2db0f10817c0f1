"""The Runs tab lists the candidates of the app's plan sweeps with their sweep in the Sweep column; a sweep's
run is renamed like any other but never deleted on its own (its sweep's study holds the result); the list
takes in new candidates when the sweep's runs are read again (issue 34)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PySide6.QtWidgets import QWidget
from torch import nn

from tests.core.runs.test_sweep_runs import make_sweep
from tests.fixtures.run_folders import app_run, save_folder
from workbench.core.runs.store import RunStore
from workbench.core.runs.sweeps import sweeps_folder
from workbench.gui.controller import Controller
from workbench.gui.model_loading import loaded_from_model
from workbench.gui.training.run_controller import RunController
from workbench.gui.training.runs_tab import COLUMNS, RunsPanel

_OWNERS: list[QWidget] = []  # keeps the panel's parent alive for the test (closed by the leak check)


def _panel(qtbot: Any, store: RunStore) -> RunsPanel:
    owner = QWidget()
    _OWNERS[:] = [owner]
    qtbot.addWidget(owner)
    c = Controller(owner)
    c.set_loaded(loaded_from_model(nn.Sequential(nn.Linear(2, 3)), "tiny"))
    return RunsPanel(RunController(c, RunStore(store.folder), owner), owner)


def _sweep_cells(panel: RunsPanel) -> dict[str, str]:
    col = COLUMNS.index("Sweep")
    return {panel.table.item(r, 0).text(): panel.table.item(r, col).text() for r in range(panel.table.rowCount())}  # type: ignore[union-attr]


def test_the_runs_tab_tags_a_sweep_s_runs_and_reads_new_ones(qtbot: Any, tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs")
    app_run(store, "#1 mine", [10, 10], [5, 5])
    panel = _panel(qtbot, store)
    assert panel.table.isColumnHidden(COLUMNS.index("Sweep"))  # no sweep: no column
    sweep = make_sweep(sweeps_folder(store.folder) / "20261202-120000", "c00-head")
    changed: list[int] = []
    panel.runs.runsChanged.connect(lambda: changed.append(1))
    panel.runs.reload()  # what a finished candidate of Train each calls
    assert changed and not panel.table.isColumnHidden(COLUMNS.index("Sweep"))
    assert _sweep_cells(panel) == {"#1 mine": "", "c00-head": "20261202-120000 · c00"}
    first = next(r for r in panel.runs.records if r.sweep is not None)
    save_folder(sweep / "runs" / "c01-full", [9.0, 9.0], [10, 10])
    panel.runs.reload()
    assert _sweep_cells(panel)["c01-full"] == "20261202-120000 · c01"
    assert any(r is first for r in panel.runs.records)  # the runs listed stay the same objects
    changed.clear()
    panel.runs.reload()
    assert not changed  # nothing new: no refresh


def test_a_sweep_s_run_is_renamed_but_not_deleted_on_its_own(qtbot: Any, tmp_path: Path, dialogs: Any) -> None:
    store = RunStore(tmp_path / "runs")
    mine = app_run(store, "#1 mine", [10, 10], [5, 5])
    sweep = make_sweep(sweeps_folder(store.folder) / "s1", "c00-head")
    panel = _panel(qtbot, store)
    rec = next(r for r in panel.runs.records if r.sweep is not None)
    assert panel.runs.rename(rec, "head only, sweep s1")  # kept in its run.json; the study keys the folder
    assert json.loads((sweep / "runs" / "c00-head" / "run.json").read_text())["name"] == "head only, sweep s1"

    panel.select([rec])
    panel.delete_button.click()
    (info,) = dialogs.kinds("info")
    assert "sweep s1" in info[2] and str(sweep) in info[2] and "\n" not in info[2]
    assert not dialogs.kinds("ask") and (sweep / "runs" / "c00-head").is_dir() and rec in panel.runs.records
    assert panel.note.text() == info[2]

    dialogs.script("ask", "Delete")
    panel.select([rec, next(r for r in panel.runs.records if r.name == "#1 mine")])
    panel.delete_button.click()
    (ask,) = dialogs.kinds("ask")
    assert ask[2].startswith("Delete #1 mine from the list") and "sweep s1" in ask[2]  # the mine goes, the sweep's stays
    assert mine.folder is not None and not mine.folder.exists() and (sweep / "runs" / "c00-head").is_dir()
    assert [r.name for r in panel.runs.records] == ["head only, sweep s1"]
