"""``workbench runs`` and the app's Runs tab print the same numbers for the same runs: the
table's cells are the rows of ``runs list``, and the comparison line under the table is
``runs compare``'s, word for word."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QWidget
from torch import nn

from tests.fixtures.run_folders import app_run, early_app_run
from workbench.cli import main
from workbench.core.runs.store import RunStore
from workbench.gui.controller import Controller
from workbench.gui.model_loading import loaded_from_model
from workbench.gui.training.run_controller import RunController
from workbench.gui.training.runs_tab import COLUMNS, RunsPanel

_OWNERS: list[QWidget] = []  # keeps the panel's parent alive for the test (closed by the leak check)


def _plain(rich: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", rich.replace("<br>", "\n")))


def test_runs_cli_and_runs_tab_show_the_same_numbers(qtbot: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = RunStore(tmp_path / "runs")
    early_app_run(store.folder, "20240101-000000-0000", "#0 <early>", [50, 50, 50], [9, 9, 9])
    app_run(store, "#1 full", [40, 41, 39, 40], [9, 9, 9, 9], val={1: (0.95, 0.4), 3: (0.9, 0.5)},
            config={"optimizer": "adamw", "lr": 0.001, "batch_size": 4})
    app_run(store, "#2 frozen", [40, 40, 20, 21], [9, 9, 3, 3], events={2: "froze 0"}, val={3: (0.8, 0.6)},
            plan={"rules": [{"select": "0", "frozen": True}]})

    assert main(["runs", "list", str(store.folder)]) == 0
    cli_rows = [re.split(r"\s{2,}", line.strip()) for line in capsys.readouterr().out.splitlines()]
    assert main(["runs", "compare", str(store.folder)]) == 0
    cli_compare = capsys.readouterr().out.split("\nsegments:\n")[0]

    owner = QWidget()
    _OWNERS[:] = [owner]
    qtbot.addWidget(owner)
    c = Controller(owner)
    c.set_loaded(loaded_from_model(nn.Sequential(nn.Linear(2, 3)), "tiny"))
    panel = RunsPanel(RunController(c, RunStore(store.folder), owner), owner)
    table = panel.table
    shown = COLUMNS.index("Setup") + 1
    tab_rows = [[table.item(row, col).text() for col in range(shown)] for row in reversed(range(table.rowCount()))]
    assert cli_rows[0] == list(COLUMNS[:shown])
    assert cli_rows[1:] == tab_rows  # oldest first in both
    assert [r[0] for r in tab_rows] == ["#0 <early>", "#1 full", "#2 frozen"]

    panel.select(list(panel.runs.records))
    assert _plain(panel.compare.text()) == cli_compare
    assert "#2 frozen vs #0 <early>: step time 0.80× → 0.41×" in cli_compare  # per plan segment, against the oldest
