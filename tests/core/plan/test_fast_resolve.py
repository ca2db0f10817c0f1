"""The fast plan engine (core/plan/fast) equals the plan's own resolution and the applied model's
counts, for random plans on a tree large enough that FreezePlan.resolve takes the fast path."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from workbench.core.freezing.apply import apply_plan
from workbench.core.plan.fast.counts import Own, count_plan, low_rank_elements, own_tally_keys, recount, tallied
from workbench.core.plan.fast.layout import layout
from workbench.core.plan.fast.resolve import edit_region, resolve_groups, resolve_rules, supported
from workbench.core.plan.keys import SETTING_KEYS
from workbench.core.plan.problems import PlanError
from workbench.core.plan.reparam_spec import LOW_RANK_LAYERS, parse_spec
from workbench.core.plan.resolution import FAST_MODULES, effectives, rule_state
from workbench.core.plan.rules import FreezePlan, Rule
from workbench.core.plan.tree import ModelTree


def _block(c: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(c, c, 3), nn.BatchNorm2d(c), nn.ReLU(), nn.Linear(c, c))


def _model() -> nn.Module:
    return nn.Sequential(nn.Sequential(_block(2), _block(2)), nn.Sequential(_block(2), nn.Linear(4, 4)), nn.Linear(4, 3))


TREE = ModelTree.from_model(_model())
PATHS = TREE.paths()
SELECTS = [*PATHS, "*", "type:BatchNorm2d", "type:Linear", "0.*", "*.1", "1.0"]
VALUE = st.sampled_from([
    ("frozen", True), ("frozen", False), ("bn_eval", True), ("bn_eval", False), ("lr_scale", 0.5),
    ("eval", True), ("weight_decay", 0.01), ("checkpoint", True), ("reparam", {"rank": 1}), ("reparam", True),
    ("reparam", False),
])
RULES = st.lists(st.tuples(st.sampled_from(SELECTS), VALUE), max_size=8)


def _plan(rules: list[tuple[str, tuple[str, Any]]]) -> FreezePlan:
    return FreezePlan.from_dict({"rules": [{"select": s, k: v} for s, (k, v) in rules]})


def _reference(plan: FreezePlan, tree: ModelTree) -> dict[str, Any]:
    return effectives(rule_state(plan.rules, tree)[0])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(RULES)
def test_fast_resolution_equals_the_rule_by_rule_resolution(rules: list[tuple[str, tuple[str, Any]]]) -> None:
    plan = _plan(rules)
    assert supported(plan)
    want = _reference(plan, TREE)
    assert resolve_rules(plan.rules, TREE) == want
    assert count_plan(plan, TREE).effective(TREE) == want
    lay = layout(TREE)
    for top in ("0", "1.0", "1.1"):  # a subtree resolved alone gets what the whole plan gives it
        rows = np.arange(lay.index[top], lay.end[lay.index[top]])
        group, effs = resolve_groups(plan, TREE, rows)
        assert [effs[g] for g in group] == [want[lay.paths[i]] for i in rows]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(RULES)
def test_fast_counts_equal_the_applied_model(rules: list[tuple[str, tuple[str, Any]]]) -> None:
    plan = _plan(rules)
    model = _model()
    rows = count_plan(plan, ModelTree.from_model(model))
    try:
        applied = apply_plan(model, plan)
    except PlanError:  # does not fit this model (checkpointing a ReLU): nothing to compare
        return
    try:
        real = applied.counts()
    finally:
        applied.remove()
    t = rows.totals(TREE)
    assert (t.total, t.trainable, t.param_bytes, t.trainable_bytes, t.fixed_bytes) == (
        real.total, real.trainable, real.param_bytes, real.grad_bytes, real.fixed_bytes)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(RULES, RULES)
def test_a_recount_equals_a_full_count(before: list[tuple[str, tuple[str, Any]]], added: list[tuple[str, tuple[str, Any]]]) -> None:
    old, new = _plan(before), _plan(before + added)
    prev = count_plan(old, TREE)
    hit = recount(prev, old, new, TREE, TREE.param_shapes)
    full = count_plan(new, TREE)
    if hit is not None:
        rows, touched = hit
        assert (rows.sums == full.sums).all() and (rows.own == full.own).all()
        assert rows.effective(TREE) == full.effective(TREE)
        untouched = np.setdiff1d(np.arange(len(PATHS)), touched)
        assert (rows.sums[untouched] == prev.sums[untouched]).all()


def test_a_large_tree_resolves_through_the_fast_engine_with_equal_results() -> None:
    model = nn.Sequential(*[nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)) for _ in range(FAST_MODULES // 3 + 1)])
    tree = ModelTree.from_model(model)
    assert len(tree) >= FAST_MODULES
    plan = FreezePlan.from_dict({"rules": [{"select": "*", "frozen": True}, {"select": "5", "frozen": False},
                                           {"select": "type:BatchNorm1d", "bn_eval": False},
                                           {"select": "7.0", "reparam": {"rank": 1}}]})
    resolved = plan.resolve(tree)
    assert resolved == _reference(plan, tree)
    t = count_plan(plan, tree).totals(tree)
    assert t.trainable == 2 * 2 + 2 + 2 + 2  # module 5; U and V of the frozen 7.0 are frozen too
    assert t.total == tree.total_params + low_rank_elements(tree.nodes["7.0"], plan.rules[3].reparam, tree.param_shapes)


def test_plans_outside_module_rules_are_not_supported() -> None:
    for raw in ({"rules": [{"select": "param:*.bias", "frozen": True}]}, {"lr_decay": 0.5}, {"unselected": "keep"}):
        plan = FreezePlan.from_dict(raw)
        assert not supported(plan)
        assert edit_region(FreezePlan(), plan, TREE) is None
    keep = FreezePlan.from_dict({"unselected": "keep", "rules": [{"select": "0", "frozen": True}]})
    assert count_plan(keep, TREE).effective(TREE) == keep.resolve(TREE)


@pytest.mark.parametrize("select", ["type:BatchNorm2d", "0.*"])
def test_a_pattern_rule_reaches_every_match_and_its_subtree(select: str) -> None:
    from workbench.core.plan.selectors import select_paths

    region = edit_region(FreezePlan(), FreezePlan(rules=[Rule(select, frozen=True)]), TREE)
    assert region == set(select_paths(select, TREE))


def test_count_columns_are_named_and_switch_keys_tallied_from_the_key_table() -> None:
    assert [c.name for c in Own][:3] == ["FROZEN", "REPARAM", "ADDED"]
    switches = {k.name for k in SETTING_KEYS if k.switch}
    assert set(own_tally_keys()) | {k.name for k in tallied()} == switches
    assert set(own_tally_keys()) == {"frozen", "reparam", "bn_eval"}
    plan = FreezePlan.from_dict({"rules": [{"select": "1", "eval": True}]})
    rows = count_plan(plan, TREE)
    lay = layout(TREE)
    j = len(Own) + [k.name for k in tallied()].index("eval")
    assert int(rows.own[:, j].sum()) == lay.end[lay.index["1"]] - lay.index["1"]


def test_low_rank_layers_are_one_list() -> None:
    from workbench.core.freezing.reparam.low_rank import LAYER_KINDS
    from workbench.core.plan.peft_config import SUPPORTED_LAYERS

    assert LAYER_KINDS is LOW_RANK_LAYERS and SUPPORTED_LAYERS is LOW_RANK_LAYERS
    spec = parse_spec({"rank": 2})
    assert low_rank_elements(TREE.nodes["0.0.0"], spec, TREE.param_shapes) == 2 * (2 + 2 * 9)
    assert low_rank_elements(TREE.nodes["0.0.1"], spec, TREE.param_shapes) is None
