"""The Suggest… dialog: budget from the device, chart and table for resnet18, Apply is one undo
step, Save writes a valid plan, Measure adds measured columns."""

from __future__ import annotations

import json
from typing import Any

import psutil
import pytest

from tests.timeouts import GUI_RUN_S, GUI_WORKER_S, ms
from workbench.core.advisor.sizes import parse_size
from workbench.core.plan import FreezePlan
from workbench.gui.advisor import open_suggest_dialog
from workbench.gui.advisor.budget import device_budget, format_budget
from workbench.gui.advisor.dialog import COLUMNS, SuggestDialog
from workbench.gui.main_window import MainWindow


def _ready(qtbot: Any, window: MainWindow, budget: str | None = None) -> SuggestDialog:
    d = open_suggest_dialog(window)
    qtbot.addWidget(d)
    qtbot.waitUntil(lambda: not d.busy, timeout=ms(GUI_WORKER_S))
    if budget is not None:
        d.budget.setText(budget)
        assert d.suggest()
        qtbot.waitUntil(lambda: not d.busy, timeout=ms(GUI_WORKER_S))
    return d


def test_budget_is_prefilled_from_the_device(qtbot: Any, window: MainWindow) -> None:
    d = _ready(qtbot, window)
    budget = parse_size(d.budget.text())
    available = psutil.virtual_memory().available  # the window's device is the CPU
    assert abs(budget - available) <= 0.25 * available
    assert d.batch.value() == 4 and d.input_size.value() == 32  # the training controls
    assert parse_size(format_budget(24 * 10**9)) == 24 * 10**9
    assert device_budget("cpu") > 0


def test_chart_and_table_show_the_front_with_the_chosen_plan_selected(qtbot: Any, window: MainWindow) -> None:
    d = _ready(qtbot, window, "60MB")
    advice = d.advice
    assert advice is not None and advice.chosen is not None
    assert d.table.rowCount() == len(advice.front) > 2
    assert [d.table.horizontalHeaderItem(i).text() for i in range(len(COLUMNS))] == list(COLUMNS)
    names = [d.table.item(r, 0).text() for r in range(d.table.rowCount())]
    assert names == [advice.assessed[i].candidate.name for i in advice.front]
    assert d.selected_index() == advice.chosen
    chosen = advice.assessed[advice.chosen]
    assert chosen.fits and not all(a.fits for a in advice.assessed)
    everything, front, star = d.chart.points
    assert len(everything.getData()[0]) == len(advice.assessed)
    assert len(front.getData()[0]) == len(advice.front) and len(star.getData()[0]) == 1
    assert d.chart.budget_line.value() == pytest.approx(60.0)  # MB
    assert not d.chart.budget_clipped
    assert "Chosen:" in d.status.text()


def test_a_budget_far_beyond_the_candidates_is_marked_at_the_edge(qtbot: Any, window: MainWindow) -> None:
    d = _ready(qtbot, window, "80GB")
    advice = d.advice
    assert advice is not None
    top = max(a.memory.peak for a in advice.assessed) / 1e6  # MB: the candidates set the axis
    lo, hi = d.chart.getPlotItem().vb.viewRange()[0]
    assert hi == pytest.approx(top * 1.15) and d.chart.budget_clipped
    assert d.chart.budget_line.value() == pytest.approx(hi)
    assert "80" in d.chart.budget_line.label.format and "→" in d.chart.budget_line.label.format


def test_apply_is_one_undoable_edit(qtbot: Any, window: MainWindow) -> None:
    c = window.controller
    before = c.plan.to_dict()
    d = _ready(qtbot, window, "60MB")
    a = d.selected()
    assert a is not None
    assert d.apply_selected()
    assert c.plan.to_dict()["rules"] == a.candidate.plan.to_dict()["rules"]
    assert c.undo_stack.count() == 1 and "Apply suggested plan" in c.undo_stack.undoText()
    c.undo_stack.undo()
    assert c.plan.to_dict() == before
    c.undo_stack.redo()
    assert c.plan.to_dict()["rules"] == a.candidate.plan.to_dict()["rules"]


def test_save_writes_a_valid_plan(qtbot: Any, window: MainWindow, tmp_path: Any, dialogs: Any) -> None:
    d = _ready(qtbot, window, "60MB")
    path = tmp_path / "suggested.json"
    dialogs.script("save_file", str(path))
    d.save_button.click()
    data = json.loads(path.read_text())
    plan = FreezePlan.from_dict(data)
    plan.validate(window.controller.model, strict=True)
    assert data["model"]["name"] == "resnet18"
    assert data["rules"] == d.selected().candidate.plan.to_dict()["rules"]
    assert "Saved" in d.status.text()


def test_a_budget_below_the_weights_says_what_could_work(qtbot: Any, window: MainWindow) -> None:
    d = _ready(qtbot, window, "10MB")
    assert d.advice is None and d.table.rowCount() == 0
    assert "smallest plan needs" in d.status.text()
    assert not d.apply_button.isEnabled()


def test_measure_adds_measured_columns(qtbot: Any, window: MainWindow) -> None:
    d = _ready(qtbot, window, "60MB")
    assert d.measure()
    qtbot.waitUntil(lambda: not d.busy, timeout=ms(GUI_RUN_S))
    advice = d.advice
    assert advice is not None and all(a.measured is not None for a in advice.front_assessed)
    for row in range(d.table.rowCount()):
        assert d.table.item(row, COLUMNS.index("measured peak")).text().endswith("B")
        assert float(d.table.item(row, COLUMNS.index("measured × full")).text()) > 0
    assert d.progress.isHidden()


def test_edit_menu_opens_the_dialog(qtbot: Any, window: MainWindow, dialogs: Any) -> None:
    seen: dict[str, Any] = {}

    def fill(d: SuggestDialog) -> bool:
        qtbot.waitUntil(lambda: not d.busy, timeout=ms(GUI_WORKER_S))
        seen["rows"] = d.table.rowCount()
        return True

    edit = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Edit")
    assert window.act_suggest in edit.actions()
    dialogs.script("dialog", fill)
    window.act_suggest.trigger()
    assert dialogs.kinds("dialog") == [("dialog", "Suggest a plan", "SuggestDialog")]
    assert seen["rows"] > 0


def test_closing_while_computing_leaves_no_thread(qtbot: Any, window: MainWindow) -> None:
    d = open_suggest_dialog(window)
    qtbot.addWidget(d)
    assert d.busy
    d.reject()  # waits for the worker; the leak fixture checks no thread is left
    assert not d.busy
