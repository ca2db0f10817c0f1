"""Plan language on trees: summary counts (partial, param:), GUI state counts, schema lines."""

from __future__ import annotations

import torch
from torch import nn

from workbench.core.models.tree import ModelTree
from workbench.core.plan.keys import PARAM_KEYS, schema_markdown
from workbench.core.plan.rules import FreezePlan


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 100), nn.ReLU(), nn.Linear(100, 10))


def test_summary_counts_the_trainable_share_of_partial():
    model = _mlp()
    plan = FreezePlan.from_dict({"rules": [
        {"select": "*", "frozen": True},
        {"select": "2", "frozen": False, "partial": {"param": "weight", "dim": 0, "trainable": [[0, 3]]}},
    ]})
    # 3 of 10 rows of the 100x10 weight, and the bias (10)
    assert "trainable 310 of 1,910 parameters" in plan.summary(model)
    applied = plan.apply(model)
    assert applied.counts().trainable >= 310  # the tensor itself trains; its frozen rows get no update


def test_summary_and_readiness_count_param_level_freezing():
    tree = ModelTree.from_model(_mlp())
    plan = FreezePlan.from_dict({"rules": [{"select": "*", "frozen": True}, {"select": "param:*.bias", "frozen": False}]})
    assert "trainable 110 of 1,910" in plan.summary(tree)
    from workbench.core.plan.readiness import check_plan

    assert check_plan(plan, tree).trainable is True
    frozen_all = FreezePlan.from_dict({"rules": [{"select": "*"}, {"select": "param:*", "frozen": True}]})
    assert check_plan(frozen_all, tree).trainable is False


def test_fast_counts_count_param_level_freezing():
    from workbench.core.plan.fast.counts import Own, count_plan
    from workbench.core.plan.fast.layout import layout

    tree = ModelTree.from_model(_mlp())
    plan = FreezePlan.from_dict({"rules": [{"select": "*", "frozen": True}, {"select": "param:*.bias", "frozen": False}]})
    rows = count_plan(plan, tree)
    assert rows.totals(tree).trainable == 110
    lay = layout(tree)
    i = lay.index["0"]
    assert int(lay.total[i] - rows.sums[i, Own.FROZEN]) == 100


def test_schema_documents_param_selectors_eval_weight_decay_and_lr_decay():
    text = schema_markdown()
    assert "`\"param:GLOB\"`" in text and "| `eval` |" in text and "| `weight_decay` |" in text
    assert "| `lr_decay` |" in text
    assert set(PARAM_KEYS) == {"frozen", "lr_scale", "weight_decay"}


def test_new_keys_round_trip():
    raw = {"rules": [{"select": "blocks", "eval": True, "weight_decay": 0.05}, {"select": "param:*.bias", "weight_decay": 0}]}
    plan = FreezePlan.from_dict(raw)
    assert [r.to_dict() for r in plan.rules] == raw["rules"]
    assert FreezePlan.from_json(plan.to_json()).to_dict() == plan.to_dict()


def test_lint_does_not_call_bitfit_nothing_trainable():
    from workbench.core.checks.lint import lint_plan

    tree = ModelTree.from_model(_mlp())
    bitfit = FreezePlan.from_dict({"rules": [{"select": "*", "frozen": True}, {"select": "param:*.bias", "frozen": False}]})
    assert "nothing-trainable" not in {f.code for f in lint_plan(bitfit, tree)}
    frozen = FreezePlan.from_dict({"rules": [{"select": "*", "frozen": True}]})
    assert "nothing-trainable" in {f.code for f in lint_plan(frozen, tree)}
