"""The rule-key table drives Rule, Effective, parsing and the schema docs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from workbench.core.plan.keys import RULE_KEYS, SETTING_KEYS, Effective, effective_from, schema_markdown
from workbench.core.plan.reparam_spec import ReparamSpec
from workbench.core.plan.rules import FreezePlan, Rule, Stage
from workbench.core.plan.selectors import is_pattern
from workbench.core.suggest import did_you_mean

DOCS = Path(__file__).resolve().parents[3] / "docs" / "plan-schema.md"


def test_every_key_row_is_a_rule_field_and_every_setting_an_effective_field():
    rule_fields = {f.name for f in dataclasses.fields(Rule)}
    eff_fields = {f.name for f in dataclasses.fields(Effective)}
    assert {k.name for k in RULE_KEYS} <= rule_fields
    assert {k.name for k in SETTING_KEYS} <= eff_fields


def test_docs_schema_table_is_generated_from_the_table():
    assert DOCS.read_text(encoding="utf-8") == schema_markdown(), "regenerate docs/plan-schema.md from schema_markdown()"
    assert all(f"`{k.name}`" in schema_markdown() for k in RULE_KEYS)


def test_effective_from_follows_and_switches_off():
    eff = effective_from({"frozen": True, "reparam": False})
    assert eff.bn_eval and not eff.bn_eval_explicit and eff.reparam is None and eff.lr_scale == 1.0
    assert effective_from({"frozen": True, "bn_eval": False}).bn_eval_explicit


def test_rule_holds_a_typed_spec_that_serializes_to_the_same_json():
    r = Rule("fc", reparam=True)
    assert isinstance(r.reparam, ReparamSpec) and r.reparam.mode == "exact" and r.reparam.a.kind == "current"
    assert r.to_dict() == FreezePlan.from_dict({"rules": [r.to_dict()]}).rules[0].to_dict()
    assert r.to_dict()["reparam"] == {"kind": "a_plus_b", "a": "current", "b_init": "zeros", "mode": "exact", "params": None}
    assert Rule("fc", reparam=False).to_dict() == {"select": "fc", "reparam": False}
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.reparam.mode = "fused"  # type: ignore[misc]


def test_stage_describe_shows_specs_as_json():
    st = Stage([Rule("fc", frozen=False, reparam=True)], at_step=1)
    assert st.describe().startswith("fc: frozen=False reparam={'kind': 'a_plus_b'")


def test_unknown_rule_key_suggests_the_closest():
    with pytest.raises(Exception, match="did you mean 'frozen'"):
        FreezePlan.from_dict({"rules": [{"select": "*", "frozn": True}]})
    assert did_you_mean("frozn", ["frozen", "bn_eval"]) == "did you mean 'frozen'?"
    assert did_you_mean("zzz", ["frozen"]) == ""


def test_is_pattern():
    assert is_pattern("type:Conv2d") and is_pattern("layer*.conv1")
    assert not is_pattern("*") and not is_pattern("layer4.0")
