"""A new plan key reaches the layers that act on it through its row alone.

A throwaway key, ``momentum`` (a per-parameter SGD momentum), is added as the walkthrough in
docs/architecture.md says: a row with ``group=True`` and the field on ``Rule`` and
``Effective`` (``tests/fixtures/plan_keys.py`` does both in a copy of the table), and nothing
else. It then round-trips through plan JSON, applies to a model, splits the optimizer's param
groups and acts on training (each group carries its value, which torch's SGD reads), shows in
:class:`PlanDiff` when a stage changes it, keeps a live optimizer in step, and is refused by
the exporter in one line naming it (its export rule defaults to ``refuse``).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn

from tests.fixtures.plan_keys import register_key
from workbench.core.export.common import ExportError
from workbench.core.export.export_rules import check_exportable
from workbench.core.export.script import render_script
from workbench.core.freezing.apply import apply_plan
from workbench.core.models.spec import ModelSpec
from workbench.core.plan.keys import RULE_KEYS, PlanKey, group_values, rule_key
from workbench.core.plan.rules import FreezePlan
from workbench.core.training.config import TrainConfig
from workbench.core.training.optim import sync_optimizer


def _parse_momentum(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 <= v < 1:
        raise ValueError(f"must be a number in [0, 1), got {v!r}")
    return float(v)


#: A per-parameter optimizer setting: parameters with different values train in different groups.
MOMENTUM = PlanKey(
    "momentum", "number in [0, 1)", _parse_momentum, True, None, "SGD momentum of the modules' parameters",
    per_param=True, label="Momentum", numeric=True, group=True,
)


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def _names(groups: list[dict[str, Any]]) -> list[list[str]]:
    return [g["param_names"] for g in groups]


def test_the_shipped_rows_say_which_keys_group_and_how_a_change_shows():
    assert [k.name for k in RULE_KEYS if k.group] == ["lr_scale", "weight_decay"]
    assert {k.name: k.diff for k in RULE_KEYS if k.diff != "value"} == {
        "frozen": "requires_grad", "reparam": "tensors", "partial": "tensors",
    }
    with pytest.raises(ValueError, match="diff must be one of value, requires_grad, tensors"):
        PlanKey("x", "boolean", bool, True, False, "x", diff="maybe")


def test_summaries_come_from_the_rows():
    assert rule_key("frozen").summary(True) == "frozen" and rule_key("frozen").summary(False) == "trains"
    assert rule_key("reparam").summary({"rank": 4}) == "A+B" and rule_key("reparam").summary(False) == "no A+B"
    assert rule_key("lr_scale").summary(0.1) == "lr×0.1" and rule_key("lr_scale").summary("x") == "lr×x"
    assert rule_key("eval").summary(True) == "eval" and rule_key("bn_eval").summary(False) == "bn_eval=False"
    assert rule_key("weight_decay").summary(0.05) == "weight_decay=0.05"


def test_group_values_of_the_shipped_keys():
    plan = FreezePlan.from_dict({"rules": [{"select": "2", "lr_scale": 0.5, "weight_decay": 0.1}]})
    applied = apply_plan(_model(), plan)
    head = applied.effective["2"]
    assert group_values(head, weight_decay=0.01) == {"lr_scale": 0.5, "weight_decay": 0.1}
    assert group_values(head, weight_decay=0.01, no_decay=True) == {"lr_scale": 0.5, "weight_decay": 0.0}
    assert group_values(applied.effective["0"], weight_decay=0.01) == {"lr_scale": 1.0, "weight_decay": 0.01}


def test_a_group_key_is_a_row(monkeypatch: pytest.MonkeyPatch):
    register_key(monkeypatch, MOMENTUM, float | None)
    data = {"rules": [{"select": "*", "frozen": False}, {"select": "2", "momentum": 0.5}]}
    # plan JSON: parsed, written in schema order, read back the same
    plan = FreezePlan.from_dict(data)
    assert plan.to_dict()["rules"][1] == {"select": "2", "momentum": 0.5}
    assert FreezePlan.from_dict(plan.to_dict()).to_dict() == plan.to_dict()
    # apply, then param groups split by it: the head's group carries its momentum, the rest the optimizer's
    model = _model()
    applied = apply_plan(model, plan)
    groups = applied.param_groups(lr=0.1)
    assert _names(groups) == [["2.weight", "2.bias"], ["0.weight", "0.bias"]]  # set values first
    assert groups[0]["momentum"] == 0.5 and "momentum" not in groups[1]
    opt = torch.optim.SGD(groups, lr=0.1, momentum=0.9)
    assert [g["momentum"] for g in opt.param_groups] == [0.5, 0.9]
    # an optimizer-wide option of the same name does not override what the plan sets
    assert [g["momentum"] for g in applied.param_groups(lr=0.1, momentum=0.9)] == [0.5, 0.9]
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    # a stage that changes it: PlanDiff names it, the optimizer follows with the head's state kept
    changed = FreezePlan.from_dict({"rules": [{"select": "*", "frozen": False}, {"select": "2", "momentum": 0.25}]})
    diff = applied.update(changed)
    assert diff.changed == {"momentum": ["2.weight", "2.bias"]} and not diff.empty
    assert diff.describe() == "momentum 2"
    head = model.get_parameter("2.weight")
    state = opt.state[head]["momentum_buffer"]
    stats = sync_optimizer(opt, applied.param_groups(lr=0.1))
    assert stats == {"removed": 0, "added": 0, "moved": 2, "kept": 2}
    assert {g["param_names"][0]: g["momentum"] for g in opt.param_groups} == {"0.weight": 0.9, "2.weight": 0.25}
    assert opt.state[head]["momentum_buffer"] is state
    assert sync_optimizer(opt, applied.param_groups(lr=0.1))["moved"] == 0  # in step: nothing moves again
    # a plan that sets it has no plain-script form: refused in one line naming it
    with pytest.raises(ExportError, match=r"plan key 'momentum' \(Momentum\) has no plain-script form"):
        check_exportable(changed, TrainConfig())
    with pytest.raises(ExportError, match="plan key 'momentum'"):
        render_script(changed, ModelSpec(name="resnet18"), model=model)
    # a plan without it exports as before
    check_exportable(FreezePlan.from_dict({"rules": [{"select": "2", "frozen": False}]}), TrainConfig())


def test_a_value_key_change_shows_in_the_diff_in_table_order(monkeypatch: pytest.MonkeyPatch):
    register_key(monkeypatch, MOMENTUM, float | None)
    applied = apply_plan(_model(), {"rules": [{"select": "0", "frozen": True}]})
    diff = applied.update(FreezePlan.from_dict({"rules": [
        {"select": "2", "momentum": 0.5, "lr_scale": 0.1, "eval": True, "checkpoint": True},
    ]}))
    assert diff.newly_trainable == ["0.weight", "0.bias"]
    assert diff.lr_changed == ["2.weight", "2.bias"] and diff.eval_changed == ["2"]
    assert diff.describe() == "unfroze 0; lr× 2; momentum 2; eval 2; checkpoint 2"


def test_a_weight_decay_stage_is_a_change_the_optimizer_follows():
    model = _model()
    applied = apply_plan(model, {"rules": []})
    opt = torch.optim.AdamW(applied.param_groups(lr=0.1, weight_decay=0.01))
    diff = applied.update(FreezePlan.from_dict({"rules": [{"select": "2", "weight_decay": 0.5}]}))
    assert not diff.empty and diff.changed == {"weight_decay": ["2.weight", "2.bias"]}
    assert diff.describe() == "weight_decay 2"
    sync_optimizer(opt, applied.param_groups(lr=0.1, weight_decay=0.01))
    assert {g["param_names"][0]: g["weight_decay"] for g in opt.param_groups} == {"0.weight": 0.01, "2.weight": 0.5}


def test_the_frameworks_resync_keeps_a_group_key(monkeypatch: pytest.MonkeyPatch):
    from workbench.integrations.common import sync_param_groups

    register_key(monkeypatch, MOMENTUM, float | None)
    model = _model()
    applied = apply_plan(model, {"rules": [{"select": "2", "momentum": 0.5}]})
    opt = torch.optim.SGD(applied.param_groups(lr=0.1), lr=0.1, momentum=0.9)
    applied.update(FreezePlan.from_dict({"rules": [{"select": "2", "momentum": 0.25}]}))
    changed = sync_param_groups(opt, applied)  # the first group's momentum is not copied to the others
    assert not changed["added"] and not changed["removed"]
    assert {g["param_names"][0]: g["momentum"] for g in opt.param_groups if g["params"]} == {
        "2.weight": 0.25, "0.weight": 0.9,
    }
