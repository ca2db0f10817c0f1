"""JSON the user names: size and depth capped, non-regular files refused; the plan parser fuzzed."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hostile.makers import Tiny, nested_json
from workbench.core import safe_json
from workbench.core.models.tree import ModelTree
from workbench.core.plan.rules import FreezePlan, PlanError
from workbench.core.training.config import ConfigError, TrainConfig


def test_depth_ignores_brackets_in_strings() -> None:
    assert safe_json.json_depth('{"a": "[[[[[[", "b": [1, {"c": "\\"]]"}]}') == 3


@pytest.mark.parametrize("depth", [65, 1000, 200_000])
def test_deep_plan_text_is_a_plan_error(depth: int) -> None:
    with pytest.raises(PlanError, match="nested"):
        FreezePlan.from_json('{"rules": ' + nested_json(depth) + "}")


def test_deep_config_is_a_config_error(tmp_path: Path) -> None:
    p = tmp_path / "c.json"
    p.write_text(nested_json(10_000))
    with pytest.raises(ConfigError, match="nested"):
        TrainConfig.load(p)


def test_folder_and_fifo_refused(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="folder"):
        FreezePlan.load(tmp_path)
    if hasattr(os, "mkfifo"):
        fifo = tmp_path / "pipe.json"
        os.mkfifo(fifo)
        with pytest.raises(PlanError, match="not a regular file"):
            FreezePlan.load(fifo)  # never blocks waiting for a writer


def test_size_cap(tmp_path: Path) -> None:
    p = tmp_path / "big.json"
    p.write_text(json.dumps({"rules": [], "pad": "x" * 2000}))
    with pytest.raises(safe_json.JsonInputError, match="more than"):
        safe_json.load(p, max_bytes=1000)


def test_not_utf8(tmp_path: Path) -> None:
    p = tmp_path / "bin.json"
    p.write_bytes(b"\xff\xfe{}")
    with pytest.raises(PlanError):
        FreezePlan.load(p)


def test_syntax_error_keeps_line_and_column() -> None:  # promise
    with pytest.raises(PlanError, match="line 1, column"):
        FreezePlan.from_json('{"rules": [}')


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=25,
)
_keys = st.sampled_from(["select", "frozen", "bn_eval", "lr_scale", "reparam", "partial", "eval", "weight_decay",
                         "checkpoint", "rules", "stages", "at_step", "format", "version", "model", "unselected"])
_rule = st.dictionaries(_keys, _json, max_size=4)
_plan = st.fixed_dictionaries(
    {},
    optional={
        "format": st.sampled_from(["freeze-plan", "other"]) | _json,
        "version": st.sampled_from([1, 2, 0, -1]) | _json,
        "rules": st.lists(_rule, max_size=4) | _json,
        "stages": st.lists(st.dictionaries(_keys, _json | st.lists(_rule, max_size=2), max_size=3), max_size=2) | _json,
        "model": _json,
        "unselected": st.sampled_from(["train", "keep"]) | _json,
    },
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(_json, _plan))
def test_any_json_value_is_a_plan_or_a_plan_error(value: object) -> None:
    tree = ModelTree.from_model(Tiny())
    try:
        text = json.dumps(value)
    except (ValueError, TypeError):
        return
    try:
        plan = FreezePlan.from_json(text)
    except PlanError:
        return
    try:  # a plan that parsed must validate with a PlanError, or resolve on a model
        plan.validate(tree)
        plan.resolve(tree)
        json.loads(plan.to_json())
    except PlanError:
        pass


@settings(max_examples=100, deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True))
def test_lr_scale_floats(x: float) -> None:
    text = json.dumps({"rules": [{"select": "*", "lr_scale": x}]})
    try:
        plan = FreezePlan.from_json(text)
    except PlanError:
        assert not (math.isfinite(x) and x >= 0)
        return
    assert math.isfinite(plan.rules[0].lr_scale)
