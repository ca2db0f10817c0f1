"""The Runs tab follows its store on disk: a run that ``workbench train --save`` or ``workbench sweep`` writes
into the app's store or sweeps while the app is open is listed without a restart, one whose folder is
removed goes, and a run listed whose file did not change is not read again."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QWidget
from torch import nn

from tests.core.runs.test_sweep_runs import make_sweep
from tests.fixtures.run_folders import app_run
from tests.timeouts import GUI_EVENT_S, ms
from workbench.core.runs import rescan
from workbench.core.runs.record import RunRecord
from workbench.core.runs.store import RunStore
from workbench.core.runs.sweeps import sweeps_folder
from workbench.gui.controller import Controller
from workbench.gui.model_loading import loaded_from_model
from workbench.gui.training.run_controller import RunController
from workbench.gui.training.runs_tab import RunsPanel


@pytest.fixture
def runs_panel(qtbot: Any, tmp_path: Path) -> Iterator[RunsPanel]:
    owner = QWidget()  # alive while the fixture's frame is: the panel's parent
    qtbot.addWidget(owner)
    c = Controller(owner)
    c.set_loaded(loaded_from_model(nn.Sequential(nn.Linear(2, 3)), "tiny"))
    yield RunsPanel(RunController(c, RunStore(tmp_path / "runs"), owner), owner)


def names(panel: RunsPanel) -> list[str]:
    """The names in the table, top to bottom."""
    return [panel.table.item(row, 0).text() for row in range(panel.table.rowCount())]  # type: ignore[union-attr]


def test_runs_written_from_outside_appear_and_go(qtbot: Any, runs_panel: RunsPanel,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    store = runs_panel.runs.store
    assert names(runs_panel) == []  # the store does not exist yet: its parent is watched
    outside = RunStore(store.folder)  # another process's writer (workbench train --save into the store)
    first = app_run(outside, "#1 from the CLI", [10, 10], [5, 5])
    qtbot.waitUntil(lambda: names(runs_panel) == ["#1 from the CLI"], timeout=ms(GUI_EVENT_S))
    listed = runs_panel.runs.records[0]
    opened: list[Path] = []
    real_read = rescan.read_run_folder

    def read_run_folder(folder: Path) -> RunRecord | str:
        opened.append(Path(folder))
        return real_read(folder)

    monkeypatch.setattr(rescan, "read_run_folder", read_run_folder)
    make_sweep(sweeps_folder(store.folder) / "20261202-120000", "c00-head")  # workbench sweep, beside the store
    qtbot.waitUntil(lambda: "c00-head" in names(runs_panel), timeout=ms(GUI_EVENT_S))
    assert runs_panel.runs.records[0] is listed  # the run listed stays the same object (selection, metrics)
    assert first.folder not in opened  # ... and its unchanged file was not read again
    assert first.folder is not None
    shutil.rmtree(first.folder)
    qtbot.waitUntil(lambda: names(runs_panel) == ["c00-head"], timeout=ms(GUI_EVENT_S))
