"""The cost panel lists BatchNorm with fixed statistics (momentum 0) that the plan trains in
train mode, with the bn_eval rule as the fix, and drops the line once the plan has it."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from torch import nn

from workbench.core.checks.bn_stats import CODE
from workbench.gui.controller import Controller
from workbench.gui.model_loading import loaded_from_model
from workbench.gui.plan.cost_panel import CostPanel


def test_cost_panel_names_fixed_statistics_and_the_rule(qtbot: Any) -> None:
    model = nn.Sequential(nn.Conv1d(1, 4, 3), nn.BatchNorm1d(4, momentum=0.0), nn.Flatten(), nn.Linear(24, 2))
    c = Controller()
    c.set_loaded(loaded_from_model(model, "bn", spec={"source": "py", "name": "bn"}))
    panel = CostPanel(c)
    qtbot.addWidget(panel)
    lines = [panel.findings.item(i) for i in range(panel.findings.count())]
    hit = [item for item in lines if "fixed running statistics" in item.text()]
    assert len(hit) == 1 and '{"select": "1", "bn_eval": true}' in hit[0].text()
    assert "never saw" in hit[0].toolTip() and hit[0].data(Qt.ItemDataRole.UserRole) == "1"
    c.set_value(["1"], "bn_eval", True)
    assert CODE not in {f.code for f in c.state.findings}
    assert not any("fixed running statistics" in panel.findings.item(i).text() for i in range(panel.findings.count()))
