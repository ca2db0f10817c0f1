"""Properties of the plan algebra, over random edit sequences (hypothesis):

- set then resolve: a setting put on a subtree is in force on every module of it;
- tidy never changes what resolves;
- to_dict / from_dict is a round trip (same JSON, same resolution);
- stages are monotone: a stage in force at step s stays in force later.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from workbench.core.plan.rules import FreezePlan, Rule, Stage
from workbench.core.plan.tree import ModelTree


def _tree() -> ModelTree:
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4),
        nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)), nn.Linear(4, 4)),
        nn.Linear(4, 2),
    )
    return ModelTree.from_model(model)


TREE = _tree()
PATHS = sorted(TREE.nodes)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

values = {
    "frozen": st.sampled_from([True, False]),
    "bn_eval": st.sampled_from([True, False]),
    "lr_scale": st.sampled_from([0.0, 0.1, 0.5, 1.0, 2.0]),
    "reparam": st.sampled_from([{"kind": "a_plus_b"}, {"rank": 2}, False]),
}
edit = st.sampled_from(sorted(values)).flatmap(
    lambda key: st.tuples(st.sampled_from(PATHS), st.just(key), st.one_of(st.none(), values[key]))
)
edits = st.lists(edit, max_size=12)


def _in_subtree(q: str, path: str) -> bool:
    return not path or q == path or q.startswith(path + ".")


def _field(key: str, value: Any) -> Any:
    """What Effective holds for a value set by path."""
    if key == "reparam":
        return None if value is False else value
    return value


def _plan(ops: list[tuple[str, str, Any]]) -> FreezePlan:
    plan = FreezePlan([Rule("*", frozen=True)])
    for path, key, value in ops:
        plan.set(path, key, value, TREE)
    return plan


@SETTINGS
@given(edits, edit.filter(lambda e: e[2] is not None))
def test_set_then_resolve_puts_the_setting_in_force_on_the_subtree(ops, last):
    plan = _plan(ops)
    path, key, value = last
    plan.set(path, key, value, TREE)
    eff = plan.resolve(TREE)
    for q in PATHS:
        if not _in_subtree(q, path):
            continue
        got = getattr(eff[q], key)
        if key == "reparam":
            assert (got is None) == (value is False)
            if value is not False:
                assert got.rank == value.get("rank")
        else:
            assert got == _field(key, value), (q, key, value, plan.to_dict()["rules"])


@SETTINGS
@given(edits)
def test_tidy_keeps_what_resolves(ops):
    plan = _plan(ops)
    plan.rules.reverse()  # any order: tidy sorts only where meaning stays
    shuffled = plan.resolve(TREE), plan.resolve_params(TREE)
    plan.tidy(TREE)
    assert (plan.resolve(TREE), plan.resolve_params(TREE)) == shuffled


@SETTINGS
@given(edits, st.lists(st.tuples(st.integers(0, 1000), edits), max_size=3))
def test_to_dict_from_dict_round_trip(ops, stage_ops):
    plan = _plan(ops)
    # a stage holds at least one rule (the schema refuses an empty one): edits that remove them all make
    # none; stages are listed in the order they are reached (the schema refuses another order)
    plan.stages = [Stage(rules=rules, at_step=s) for s, o in sorted(stage_ops, key=lambda so: so[0])
                   if (rules := _plan(o).rules)]
    data = plan.to_dict()
    again = FreezePlan.from_dict(data)
    assert again.to_dict() == data
    assert again.resolve(TREE) == plan.resolve(TREE)
    assert again.resolve_params(TREE) == plan.resolve_params(TREE)


@SETTINGS
@given(st.lists(st.integers(0, 100), min_size=1, max_size=4), st.integers(0, 120), st.integers(0, 120))
def test_stages_are_monotone(at_steps, s1, s2):
    lo, hi = sorted((s1, s2))
    plan = FreezePlan(
        [Rule("*", frozen=True)],
        stages=[Stage(rules=[Rule(PATHS[1 + i % (len(PATHS) - 1)], frozen=False)], at_step=a) for i, a in enumerate(at_steps)],
    )
    assert plan.stage_index(lo) <= plan.stage_index(hi)
    early, late = plan.at(lo), plan.at(hi)
    assert all(r in late.rules for r in early.rules)  # a rule in force stays in force
    if at_steps == sorted(at_steps):  # stages in time order: later plans extend earlier ones
        assert late.rules[: len(early.rules)] == early.rules
    trainable = {p for p, e in early.resolve(TREE).items() if not e.frozen}
    assert trainable <= {p for p, e in late.resolve(TREE).items() if not e.frozen}
