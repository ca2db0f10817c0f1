"""An edit recounts only the rows it can reach: the state it gives equals a full recount, for
random edit sequences (plain paths, globs, ``type:`` rules, A+B, partial, undo, ``param:``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from workbench.core.models.tree import ModelTree
from workbench.core.plan.fast.layout import layout
from workbench.core.plan.fast.resolve import edit_region, resolve_groups, supported
from workbench.core.plan.readiness import check_plan
from workbench.core.plan.rules import FreezePlan, Rule
from workbench.gui.model_loading import loaded_from_model
from workbench.gui.plan import edits as plan_edits
from workbench.gui.plan.state import PlanState


def _model() -> nn.Module:
    def block(c: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(c, c, 3), nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, c, 1))

    return nn.Sequential(
        nn.Sequential(block(4), block(4)),
        nn.Sequential(block(4), nn.Sequential(block(4), nn.Linear(8, 8))),
        nn.Linear(8, 3),
    )


LOADED = loaded_from_model(_model(), "nested")
TREE: ModelTree = LOADED.tree
PATHS = TREE.paths()
VALUES: dict[str, list[Any]] = {
    "frozen": [True, False, None],
    "bn_eval": [True, False, None],
    "lr_scale": [0.1, 2.0, 1.0, None],
    "reparam": [dict(plan_edits.A_PLUS_B), {"rank": 2}, False, None],
}
edit = st.one_of(
    st.tuples(st.just("set"), st.sampled_from(PATHS), st.sampled_from(sorted(VALUES)), st.integers(0, 3)),
    st.tuples(st.just("rule"), st.sampled_from(["type:BatchNorm2d", "0.*", "*.1", "type:Linear", "1.1"]),
              st.sampled_from(["frozen", "bn_eval", "lr_scale"]), st.integers(0, 2)),
    st.tuples(st.just("partial"), st.sampled_from([p for p in PATHS if TREE.nodes[p].type_name == "Conv2d"]),
              st.just(""), st.integers(0, 1)),
    st.tuples(st.just("train_only"), st.sampled_from(PATHS), st.just(""), st.just(0)),
    st.tuples(st.just("undo"), st.just(""), st.just(""), st.integers(1, 3)),
    st.tuples(st.just("param"), st.just("param:*.bias"), st.just("frozen"), st.just(0)),
)


def _apply(plan: FreezePlan, history: list[FreezePlan], step: tuple[str, str, str, int]) -> FreezePlan:
    kind, target, key, choice = step
    if kind == "undo":
        return history[max(0, len(history) - 1 - choice)].copy()
    plan = plan.copy()
    if kind == "set":
        values = VALUES[key]
        plan_edits.set_on_paths(plan, TREE, [target], key, values[choice % len(values)])
    elif kind == "rule":
        value = [True, False, 0.5][choice] if key == "lr_scale" else bool(choice % 2)
        plan.rules.append(Rule(target, **{key: value}))
    elif kind == "partial":
        spec = {"param": "weight", "dim": 0, "trainable": [[0, 2]]} if choice else None
        plan_edits.set_partial(plan, TREE, target, spec)
    elif kind == "train_only":
        plan_edits.train_only(plan, TREE, [target])
    elif kind == "param":
        plan.rules.append(Rule(target, frozen=True))
    return plan


def _same(a: PlanState, b: PlanState) -> None:
    assert a.effective == b.effective
    assert a.nodes == b.nodes
    assert a.counts == b.counts
    assert (a.bn_eval_modules, a.reparam_modules, a.fixed_params) == (b.bn_eval_modules, b.reparam_modules, b.fixed_params)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(edit, min_size=1, max_size=12))
def test_incremental_state_equals_a_full_recount(steps: list[tuple[str, str, str, int]]) -> None:
    plan = FreezePlan()
    history = [plan]
    state = PlanState.compute(TREE, plan, LOADED.own_bytes, "adamw", LOADED.param_shapes)
    for step in steps:
        plan = _apply(plan, history, step)
        history.append(plan)
        before = state
        state = PlanState.compute(TREE, plan, LOADED.own_bytes, "adamw", LOADED.param_shapes, previous=before)
        full = PlanState.compute(TREE, plan, LOADED.own_bytes, "adamw", LOADED.param_shapes)
        _same(state, full)
        resolved = plan.resolve(TREE)
        assert state.effective == resolved
        assert state.readiness == check_plan(plan, TREE)
        if supported(plan):  # any subtree resolved alone gets what the whole plan gives it
            lay = layout(TREE)
            for top in ("0", "1.1", "1.1.0.1"):
                rows = np.arange(lay.index[top], lay.end[lay.index[top]])
                group, effs = resolve_groups(plan, TREE, rows)
                assert [effs[g] for g in group] == [resolved[lay.paths[i]] for i in rows]
        if state.changed is not None:  # the rows left out of the recount kept their state
            assert state.base is before
            kept = set(PATHS) - {PATHS[i] for i in state.changed}
            assert all(full.nodes[p] == before.nodes[p] for p in kept)


def test_a_leaf_edit_recounts_the_leaf_and_its_ancestors_only() -> None:
    plan = FreezePlan()
    first = PlanState.compute(TREE, plan, LOADED.own_bytes, "adamw", LOADED.param_shapes)
    after = plan.copy()
    plan_edits.set_on_paths(after, TREE, ["1.1.0.0"], "frozen", True)
    state = PlanState.compute(TREE, after, LOADED.own_bytes, "adamw", LOADED.param_shapes, previous=first)
    assert state.changed is not None and state.base is first
    changed = {PATHS[i] for i in state.changed}
    assert changed == {"1.1.0.0", "1.1.0", "1.1", "1", ""}
    assert state.nodes["1.1.0.0"].frozen == "on" and state.nodes["1"].frozen == "mixed"
    _same(state, PlanState.compute(TREE, after, LOADED.own_bytes, "adamw", LOADED.param_shapes))


def test_plans_outside_module_rules_resolve_in_full() -> None:
    plan = FreezePlan(rules=[Rule("param:*.bias", frozen=True)])
    assert not supported(plan)
    assert edit_region(FreezePlan(), plan, TREE) is None
    lay = layout(TREE)
    group, effs = resolve_groups(FreezePlan(rules=[Rule("0", frozen=True)]), TREE, np.array([lay.index["0.0.0"]]))
    assert effs[group[0]].frozen


@pytest.mark.parametrize("select", ["type:BatchNorm2d", "0.*"])
def test_a_pattern_rule_reaches_every_match_and_its_subtree(select: str) -> None:
    region = edit_region(FreezePlan(), FreezePlan(rules=[Rule(select, frozen=True)]), TREE)
    assert region is not None
    from workbench.core.plan.selectors import select_paths

    assert region == set(select_paths(select, TREE))


def test_tree_rows_after_incremental_clicks_equal_a_fresh_read(window: Any) -> None:
    """The tree model announces every row whose look changed; every row shows the plan."""
    c, model = window.controller, window.tree_model
    model.set_expanded_test(None)  # every row counts as expanded: each change must be announced
    emitted: list[tuple[str | None, int, int]] = []
    model.dataChanged.connect(lambda a, b, *_: emitted.append((model.path(a.parent()), a.row(), b.row())))

    def check(before: dict[str, Any]) -> None:
        fresh = PlanState.compute(c.tree, c.plan, c.loaded.own_bytes, c.optimizer, c.loaded.param_shapes)
        assert c.state.nodes == fresh.nodes and c.state.effective == fresh.effective
        for path, node in c.tree.nodes.items():
            if before[path] != c.state.nodes[path]:
                parent = node.parent.path if node.parent is not None else None
                row = node.row if node.parent is not None else 0
                assert any(p == parent and a <= row <= b for p, a, b in emitted), path

    for paths, key, value in ((["layer1.0.conv1"], "frozen", True), ([""], "frozen", True),
                              (["layer2"], "frozen", False), (["layer3.1.bn2"], "bn_eval", False),
                              (["fc"], "lr_scale", 0.1), (["layer4"], "reparam", dict(plan_edits.A_PLUS_B))):
        emitted.clear()
        before = dict(c.state.nodes)
        assert c.set_value(paths, key, value)
        assert emitted
        check(before)
    before = dict(c.state.nodes)
    emitted.clear()
    c.undo_stack.undo()
    check(before)
    before = dict(c.state.nodes)
    emitted.clear()
    assert c.set_value(["layer1.0.conv1"], "frozen", False)  # one leaf under a frozen root: few rows
    assert c.state is not None and c.state.changed is not None and len(c.state.changed) < 10
    check(before)


def test_many_rows_changed_announce_the_expanded_rows_whole(window: Any) -> None:
    """A root click on a tree with many parents, in a model without a view that says which rows
    it shows, announces each expanded row's children in one range, and none under collapsed
    rows (with the view: tests/gui/plan/test_tree_expanded.py)."""
    c, model = window.controller, window.tree_model
    loaded = loaded_from_model(nn.Sequential(*[nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2)) for _ in range(80)]), "wide")
    c.set_loaded(loaded)
    window.plan_actions.expand_to_depth(0)
    model.set_rows_in_view(None)
    emitted: list[tuple[str | None, int, int]] = []
    model.dataChanged.connect(lambda a, b, *_: emitted.append((model.path(a.parent()), a.row(), b.row())))
    assert c.set_value([""], "frozen", True)
    assert (None, 0, 0) in emitted and ("", 0, 79) in emitted
    assert all(p in (None, "") for p, _a, _b in emitted)
    assert all(st.frozen == "on" for st in c.state.nodes.values())


def test_a_rule_per_module_resolves_like_the_plan() -> None:
    """Many groups (one per module, codes past a bit per rule): the sort-based grouping."""
    plan = FreezePlan(rules=[Rule(p, lr_scale=1.0 + i) for i, p in enumerate(PATHS)] + [Rule("type:Conv2d", frozen=True)])
    lay = layout(TREE)
    rows = np.arange(len(PATHS))
    group, effs = resolve_groups(plan, TREE, rows)
    resolved = plan.resolve(TREE)
    assert len(effs) == len(PATHS)
    assert [effs[g] for g in group] == [resolved[lay.paths[i]] for i in rows]
    state = PlanState.compute(TREE, plan, LOADED.own_bytes, "adamw", LOADED.param_shapes)
    assert state.effective == resolved


@pytest.mark.parametrize("rules", [[Rule("", frozen=True)], [Rule("", frozen=True), Rule("2", frozen=False)], [Rule("nope", frozen=True)]])
def test_readiness_from_the_rows_equals_check_plan(rules: list[Rule]) -> None:
    plan = FreezePlan(rules=rules)
    state = PlanState.compute(TREE, plan, LOADED.own_bytes, "adamw", LOADED.param_shapes)
    assert state.readiness == check_plan(plan, TREE)
