"""Tests of workbench.core.plan.readiness: one predicate for "the plan fits and trains"."""

from __future__ import annotations

from typing import Any

import pytest
from torch import nn

from workbench.core.models.tree import ModelTree
from workbench.core.plan.readiness import NOTHING_TRAINABLE, PlanReadiness, check_plan, leaves_trainable
from workbench.core.plan.rules import FreezePlan, PlanError


def _tree() -> ModelTree:
    model = nn.Sequential()
    model.add_module("conv", nn.Conv2d(3, 4, 3))
    model.add_module("bn", nn.BatchNorm2d(4))
    model.add_module("act", nn.ReLU())
    model.add_module("fc", nn.Linear(4, 2))
    return ModelTree.from_model(model)


def _plan(*rules: dict[str, Any], stages: list[dict[str, Any]] | None = None) -> FreezePlan:
    d: dict[str, Any] = {"format": "freeze-plan", "version": 1, "rules": list(rules)}
    if stages:
        d["stages"] = stages
    return FreezePlan.from_dict(d)


def test_a_plan_that_fits_and_trains_is_ok():
    r = check_plan(_plan({"select": "*", "frozen": True}, {"select": "fc", "frozen": False}), _tree())
    assert r.ok and r.fits and r.trainable is True and r.messages() == []
    r.raise_if_not_ok()  # nothing to raise


def test_everything_frozen_is_not_ok_with_a_clear_message():
    tree = _tree()
    plan = _plan({"select": "*", "frozen": True})
    r = check_plan(plan, tree)
    assert r.fits and r.trainable is False and not r.ok
    assert r.messages() == [NOTHING_TRAINABLE]
    assert not leaves_trainable(plan.resolve(tree), tree)
    with pytest.raises(PlanError, match="nothing trainable"):
        r.raise_if_not_ok()


def test_only_modules_without_parameters_unfrozen_is_nothing_trainable():
    r = check_plan(_plan({"select": "*", "frozen": True}, {"select": "act", "frozen": False}), _tree())
    assert r.trainable is False


def test_selectors_that_match_nothing_are_problems_naming_the_rule():
    r = check_plan(_plan({"select": "*", "frozen": True}, {"select": "fcc", "frozen": False}), _tree())
    assert not r.fits and not r.ok
    assert r.problems[0].rule_index == 1 and r.problems[0].field == "select"
    # the nothing-trainable line comes first, then every problem
    assert r.messages()[0] == NOTHING_TRAINABLE and "matches no module" in r.messages()[1] and "'fc'" in r.messages()[1]
    with pytest.raises(PlanError) as info:
        r.raise_if_not_ok()
    assert len(info.value.problems) == 2


def test_extension_specs_the_model_refuses_are_problems():
    pytest.importorskip("workbench.core.freezing.partial")
    plan = _plan({"select": "bn", "partial": {"dim": 0, "trainable": [[0, 2]]}})  # not a layer type it supports
    r = check_plan(plan, _tree())
    assert not r.fits and r.problems[0].field == "partial" and r.problems[0].rule_index == 0


def test_a_staged_plan_is_checked_for_fit_but_what_trains_depends_on_the_step():
    stages = [{"at_step": 5, "rules": [{"select": "fc", "frozen": False}]}]
    plan = _plan({"select": "*", "frozen": True}, stages=stages)
    r = check_plan(plan, _tree())
    assert r.ok and r.trainable is None
    assert check_plan(plan.at(0), _tree()).trainable is False and check_plan(plan.at(5), _tree()).ok
    bad = _plan({"select": "*", "frozen": True}, stages=[{"at_step": 5, "rules": [{"select": "nope", "frozen": False}]}])
    r = check_plan(bad, _tree())
    assert not r.fits and r.problems[0].stage_index == 0


def test_the_given_resolution_is_used():
    tree = _tree()
    plan = _plan({"select": "*", "frozen": True})
    unfrozen = _plan().resolve(tree)
    assert check_plan(plan, tree, effective=unfrozen).trainable is True  # the caller's resolution decides
    assert PlanReadiness().ok
