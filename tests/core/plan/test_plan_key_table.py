"""A plan key is a row: what each row says (label, on/off, typed values, undo text), and a new
per-module numeric key, added as a row and its two fields only, parses, serializes, resolves
per module and is set by path with no other code naming it."""

from __future__ import annotations

from collections import OrderedDict

import pytest
from torch import nn

from tests.fixtures.plan_keys import CLIP, register_key
from workbench.core.plan.keys import RULE_KEYS, rule_key, schema_markdown
from workbench.core.plan.problems import PlanError
from workbench.core.plan.rules import FreezePlan, Stage
from workbench.core.plan.tree import ModelTree


@pytest.fixture
def tree() -> ModelTree:
    model = nn.Sequential(OrderedDict(
        stem=nn.Conv2d(3, 4, 3), bn=nn.BatchNorm2d(4),
        block=nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4)), head=nn.Linear(4, 2),
    ))
    return ModelTree.from_model(model)


def test_every_setting_row_has_a_label_and_the_window_keys_say_how_they_read():
    assert all(k.label for k in RULE_KEYS)
    assert [k.name for k in RULE_KEYS if k.switch] == ["frozen", "bn_eval", "eval", "reparam", "checkpoint"]
    assert [k.name for k in RULE_KEYS if k.numeric] == ["lr_scale", "weight_decay"]
    assert [k.name for k in RULE_KEYS if k.batchnorm_only] == ["bn_eval"]
    reparam = rule_key("reparam")
    spec = reparam.parse({"rank": 4})
    assert reparam.is_on(spec) and not reparam.is_on(None) and not reparam.is_on(False)
    assert reparam.agrees(spec, {"kind": "a_plus_b"}) and reparam.agrees(None, False) and not reparam.agrees(spec, False)
    lr = rule_key("lr_scale")
    assert lr.agrees(0.5, 0.5) and not lr.agrees(1.0, 0.5) and lr.gui_value(0.0) == 0.0


def test_typed_values_read_through_the_row():
    lr = rule_key("lr_scale")
    assert lr.parse_text("× 1e-3") == 1e-3 and lr.parse_text(" ") is None and lr.parse_text(None) is None
    assert lr.parse_text(2) == 2.0 and isinstance(lr.parse_text(2), float)
    for bad in ("-1", "abc", "nan", "inf", True):
        with pytest.raises(ValueError, match="not a learning-rate multiplier; enter a number >= 0 .* empty to inherit"):
            lr.parse_text(bad)
    wd = rule_key("weight_decay")
    assert wd.parse_text("0.05") == 0.05
    with pytest.raises(ValueError, match="'x0.05' is not a weight decay"):
        wd.parse_text("x0.05")  # only LR × takes a leading ×


def test_undo_texts_come_from_the_rows():
    assert rule_key("frozen").edit_text(True, "layer1") == "Freeze layer1"
    assert rule_key("frozen").edit_text(False, "2 modules") == "Unfreeze 2 modules"
    assert rule_key("bn_eval").edit_text(None, "bn1") == "BN eval follows frozen: bn1"
    assert rule_key("bn_eval").edit_text(False, "bn1") == "BN eval off: bn1"
    assert rule_key("reparam").edit_text({"kind": "a_plus_b"}, "fc") == "A+B on: fc"
    assert rule_key("reparam").edit_text(False, "fc") == "A+B off: fc"
    assert rule_key("lr_scale").edit_text(0.1, "layer4") == "LR × 0.1 on layer4"
    assert rule_key("lr_scale").edit_text(None, "layer4") == "LR × inherited on layer4"
    assert rule_key("comment").edit_text("x", "fc") == "Set comment on fc"


def test_a_new_numeric_key_is_a_row(monkeypatch: pytest.MonkeyPatch, tree: ModelTree):
    register_key(monkeypatch, CLIP, float | None)
    data = {"rules": [{"select": "*", "frozen": False}, {"select": "block", "lr_scale": 0.5, "grad_clip": 1}]}
    plan = FreezePlan.from_dict(data)
    assert plan.rules[1].value("grad_clip") == 1.0 and plan.rules[1].sets("grad_clip")
    # JSON in schema order (after checkpoint, before comment), and back
    out = plan.to_dict()["rules"][1]
    assert list(out) == ["select", "lr_scale", "grad_clip"] and out["grad_clip"] == 1.0
    assert FreezePlan.from_dict(plan.to_dict()).to_dict() == plan.to_dict()
    # per module: the subtree of the selected module, the default elsewhere; a later rule wins
    eff = plan.resolve(tree)
    assert eff["block"].grad_clip == 1.0 and eff["block.1"].grad_clip == 1.0
    assert eff["head"].grad_clip is None and eff[""].grad_clip is None
    plan.rules.append(type(plan.rules[0])("block.1", grad_clip=0.25))
    assert plan.resolve(tree)["block.1"].grad_clip == 0.25 and plan.resolve(tree)["block.0"].grad_clip == 1.0
    # set by path as a click does; unset again
    plan.set("head", "grad_clip", 2.0, tree)
    assert plan.resolve(tree)["head"].grad_clip == 2.0
    plan.set("head", "grad_clip", None, tree)
    assert plan.resolve(tree)["head"].grad_clip is None
    # the schema table, stage labels, bad values and misspellings
    assert "| `grad_clip` | number > 0 | yes | `null` |" in schema_markdown()
    assert Stage(plan.rules[1:2], at_step=3).describe() == "block: lr_scale=0.5 grad_clip=1.0"
    with pytest.raises(PlanError, match="rule 0, field 'grad_clip': must be a finite number > 0"):
        FreezePlan.from_dict({"rules": [{"select": "*", "grad_clip": -1}]})
    with pytest.raises(PlanError, match="did you mean 'grad_clip'"):
        FreezePlan.from_dict({"rules": [{"select": "*", "grad_clp": 1}]})
    with pytest.raises(PlanError, match="a \"param:\" selector sets only frozen, lr_scale, weight_decay"):
        FreezePlan.from_dict({"rules": [{"select": "param:*.bias", "grad_clip": 1}]})


def test_the_registered_key_is_gone_after_the_test():
    assert "grad_clip" not in {k.name for k in RULE_KEYS}
    with pytest.raises(PlanError, match="unknown key"):
        FreezePlan.from_dict({"rules": [{"select": "*", "grad_clip": 1}]})
