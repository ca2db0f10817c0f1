"""verify() cannot be fooled: it checks the plan's own snapshot; a plan is applied once."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import workbench as wb
from tests.hostile.makers import Tiny
from workbench.core.plan.rules import PlanError

FC_ONLY = {"rules": [{"select": "*", "frozen": True}, {"select": "fc", "frozen": False}]}


def _step(model: nn.Module) -> None:
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    model(torch.randn(4, 3, 8, 8)).sum().backward()
    opt.step()


def test_reenabled_frozen_tensor_is_caught(tiny: Tiny) -> None:
    applied = wb.apply_plan(tiny, FC_ONLY)
    tiny.conv1.weight.requires_grad_(True)
    _step(tiny)
    report = applied.verify()
    kinds = {(v.name, v.kind) for v in report.violations}
    assert not report.ok
    assert ("conv1.weight", "frozen_changed") in kinds and ("conv1.weight", "plan_not_in_force") in kinds
    assert any("plan not in force" in v.message for v in report.errors)


def test_flag_flip_without_change_is_still_not_in_force(tiny: Tiny) -> None:
    applied = wb.apply_plan(tiny, FC_ONLY)
    for p in tiny.parameters():
        p.requires_grad_(True)
    report = applied.verify()
    assert not report.ok and {v.kind for v in report.errors} == {"plan_not_in_force"}


def test_honest_run_verifies(tiny: Tiny) -> None:  # promise
    applied = wb.apply_plan(tiny, FC_ONLY)
    _step(tiny)
    report = applied.verify()
    assert report.ok and not report.errors


def test_update_moves_the_snapshot(tiny: Tiny) -> None:
    applied = wb.apply_plan(tiny, FC_ONLY)
    applied.update(wb.FreezePlan.from_dict({"rules": []}))
    _step(tiny)
    assert applied.verify().ok


def test_second_plan_on_same_model_refused(tiny: Tiny) -> None:
    applied = wb.apply_plan(tiny, FC_ONLY)
    with pytest.raises(PlanError, match="already has a plan applied"):
        wb.apply_plan(tiny, {"rules": []})
    applied.remove()
    again = wb.apply_plan(tiny, FC_ONLY)  # after remove() a plan applies again
    again.remove()
    assert all(p.requires_grad for p in tiny.parameters())
