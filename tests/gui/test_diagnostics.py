"""The Diagnostics tab: plan lint at once, the doctor's model check, the doctor watching training."""

from __future__ import annotations

from typing import Any

from tests.timeouts import GUI_WORKER_S, ms
from workbench.gui.main_window import MainWindow


def test_plan_findings_show_at_once_and_a_click_selects_the_module(window: MainWindow) -> None:
    panel = window.diagnostics
    assert panel is not None
    assert panel.rows == [] and panel.status.text().startswith("No pitfalls found")
    c = window.controller
    c.set_value(["layer1"], "frozen", True)
    c.set_value(["layer1.0.bn1"], "bn_eval", False)  # frozen BatchNorm forced into train mode
    texts = panel.finding_texts()
    assert any(t.startswith("layer1.0.bn1:") for t in texts), texts
    assert {source for source, _f in panel.rows} == {"plan"}
    row = next(i for i, (_s, f) in enumerate(panel.rows) if f.path == "layer1.0.bn1")
    assert panel.table.item(row, 0).text() == "warning" and not panel.table.item(row, 0).icon().isNull()
    assert panel.table.item(row, 3).text()  # the fix
    panel.table.selectRow(row)
    assert "Why:" in panel.details.text() and "plan linter" in panel.details.text()
    panel.table.cellClicked.emit(row, 1)
    assert window.view.selected_paths() == ["layer1.0.bn1"]


def test_model_check_runs_off_the_gui_thread_and_restores_the_model(window: MainWindow, qtbot: Any) -> None:
    c = window.controller
    panel = window.diagnostics
    c.set_value(["layer1"], "frozen", True)
    c.set_value(["layer1.0.bn1"], "bn_eval", False)
    with qtbot.waitSignal(c.checkFinished, timeout=ms(GUI_WORKER_S)):
        assert panel.run()
    assert not c.checking and panel.run_button.isEnabled()
    assert any("layer1.0.bn1" in t for t in panel.finding_texts())
    assert {source for source, _f in panel.rows} == {"model"}
    assert "model checked with the plan" in panel.status.text()
    assert all(p.requires_grad for p in c.model.parameters())  # the plan was removed again
    c.set_value(["fc"], "frozen", True)
    assert "Plan changed since the model check" in panel.status.text()
    assert {source for source, _f in panel.rows} == {"plan"}


def test_watch_training_reports_through_the_training_thread(window: MainWindow, qtbot: Any) -> None:
    panel = window.diagnostics
    t = window.training
    window.controller.set_value(["layer1", "layer2", "layer3"], "frozen", True)
    panel.watch_steps.setValue(6)
    with qtbot.waitSignal(t.runs.watchFinished, timeout=ms(GUI_WORKER_S)) as blocker:
        assert panel.watch()
    findings, summary = blocker.args
    assert summary["steps"] == 6 and len(summary["graph_nodes"]) == 6
    assert max(summary["graph_nodes"]) == 0  # nothing leaks across steps with a workbench plan
    assert not [f for f in findings if f["severity"] == "error"], findings
    assert "training watched for 6 steps" in panel.status.text()
    assert panel.watch_button.isEnabled()
    record = t.runs.records[-1]
    assert record.name.endswith("doctor watch") and record.status == "completed"
    # plan edits are not sent to a watch run (they would show up as faults)
    assert t.runs.state == "idle"
