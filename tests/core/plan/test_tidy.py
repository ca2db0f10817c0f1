"""``FreezePlan.tidy`` sorts plain-path rules into tree order only when that keeps the plan's
meaning; it skips resolving the plan when no two rules that could override each other swap."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from workbench.core.models.tree import ModelTree
from workbench.core.plan.rules import FreezePlan, Rule

TREE = ModelTree.from_model(
    nn.Sequential(nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)), nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2)))
)
PATHS = ["*", *[p for p in TREE.paths() if p]]
rule = st.builds(
    lambda select, key, value: Rule(select, **{key: value if key != "lr_scale" else (0.5 if value else 2.0)}),
    st.sampled_from(PATHS), st.sampled_from(["frozen", "bn_eval", "lr_scale"]), st.booleans(),
)


def _reference(plan: FreezePlan) -> list[Rule]:
    """Tidy as it was: sort the runs, keep the sort when resolving gives the same."""
    nodes = TREE.nodes
    new, run = [], []
    for r in [*plan.rules, None]:
        if r is not None and (r.select in ("", "*") or r.select in nodes):
            run.append(r)
            continue
        run.sort(key=lambda x: -1 if x.select in ("", "*") else nodes[x.select].order)
        new.extend(run)
        run = []
    trial = FreezePlan(rules=new)
    return new if trial.resolve(TREE) == plan.resolve(TREE) else list(plan.rules)


@settings(max_examples=200, deadline=None)
@given(st.lists(rule, max_size=7))
def test_tidy_keeps_the_meaning_and_sorts_as_resolving_would(rules: list[Rule]) -> None:
    plan = FreezePlan(rules=list(rules))
    before = plan.resolve(TREE)
    expected = _reference(plan)
    plan.tidy(TREE)
    assert plan.resolve(TREE) == before
    assert [r.select for r in plan.rules] == [r.select for r in expected]


def test_swapping_rules_that_override_each_other_is_refused() -> None:
    plan = FreezePlan(rules=[Rule("0.0", frozen=False), Rule("*", frozen=True)])
    plan.tidy(TREE)
    assert [r.select for r in plan.rules] == ["0.0", "*"]  # sorted, the root would win over 0.0
    plan = FreezePlan(rules=[Rule("1", frozen=True), Rule("0", frozen=True), Rule("*", bn_eval=True)])
    plan.tidy(TREE)
    assert [r.select for r in plan.rules] == ["*", "0", "1"]  # no overlap of settings or modules
