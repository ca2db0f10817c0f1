"""workbench.gui.show.show: the window on a script's model, blocking until it closes."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
from torch import nn

from workbench.core.errors import WorkbenchError
from workbench.core.plan.rules import FreezePlan
from workbench.gui.show import ScriptWindow, show


def _tiny() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))


def _window() -> ScriptWindow:
    return next(w for w in QApplication.topLevelWidgets() if isinstance(w, ScriptWindow) and w.isVisible())


def test_show_returns_the_edited_plan(qtbot):
    model = _tiny()
    seen = {}

    def edit_and_close() -> None:
        w = _window()
        seen["title"] = w.windowTitle()
        w.plan_actions.toggle_frozen(["0"])  # freeze the first Linear, as Space in the tree does
        w.close()  # no save prompt: the plan goes back to the caller

    QTimer.singleShot(0, edit_and_close)
    plan = show(model, label="tiny")
    assert "tiny" in seen["title"]
    assert isinstance(plan, FreezePlan)
    eff = plan.resolve(__import__("workbench.core.models.tree", fromlist=["ModelTree"]).ModelTree.from_model(model))
    assert eff["0"].frozen and not eff["3"].frozen


def test_show_starts_from_a_plan_and_none_without_rules(qtbot):
    model = _tiny()
    start = FreezePlan.from_dict({"format": "freeze-plan", "version": 1, "rules": [{"select": "3", "frozen": True}]})
    QTimer.singleShot(0, lambda: _window().close())
    plan = show(model, start)
    assert plan is not None and plan.to_dict()["rules"] == start.to_dict()["rules"]
    QTimer.singleShot(0, lambda: _window().close())
    import workbench.gui.show

    assert workbench.gui.show(_tiny()) is None  # the module is callable: the documented one-liner


def test_show_bad_input():
    with pytest.raises(WorkbenchError, match="nn.Module"):
        show("resnet18")  # type: ignore[arg-type]
    bad = FreezePlan.from_dict({"format": "freeze-plan", "version": 1, "rules": [{"select": "nope", "frozen": True}]})
    with pytest.raises(WorkbenchError):
        show(_tiny(), bad)
