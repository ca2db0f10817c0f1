"""Every plan key and every config field says how the exported script carries it; the default is refuse."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from torch import nn

from tests.fixtures.plan_keys import CLIP, register_key
from workbench.core.export import ExportError, render_script
from workbench.core.export.export_rules import check_exportable
from workbench.core.models.spec import ModelSpec
from workbench.core.plan.keys import EXPORT_RULES, RULE_KEYS
from workbench.core.plan.rules import FreezePlan
from workbench.core.training.config import FIELD_EXPORT, TrainConfig, field_export

SPEC = ModelSpec(source="torchvision", name="resnet18", num_classes=4)


def _net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 4))


def test_every_key_and_field_has_a_known_rule():
    assert all(k.export in EXPORT_RULES for k in RULE_KEYS)
    assert {k.name: k.export for k in RULE_KEYS}["partial"] == "partial"  # sub-tensor freezing: the script's own code
    assert set(FIELD_EXPORT.values()) <= {"script", "ignored", "refuse"}
    assert field_export("no_such_field") == "refuse"


def test_a_key_registered_without_an_export_rule_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch):
    register_key(monkeypatch, CLIP, float | None)  # a row like every other, but no export rule: "refuse"
    plan = FreezePlan.from_dict({"rules": [{"select": "layer4", "grad_clip": 1.0}]})
    with pytest.raises(ExportError) as info:
        render_script(plan, SPEC)
    message = str(info.value)
    assert "\n" not in message and "plan key 'grad_clip'" in message
    # the same plan without the key exports
    assert "REQUIRES_GRAD" in render_script(FreezePlan.from_dict({"rules": [{"select": "layer4", "frozen": True}]}), SPEC)


def test_a_config_field_without_an_export_rule_is_refused_naming_it():
    @dataclass
    class LaterConfig(TrainConfig):
        clip_grad_norm: float | None = None  # a field added later, without a row in FIELD_EXPORT

    plan = FreezePlan()
    check_exportable(plan, LaterConfig())  # at its default it changes nothing
    with pytest.raises(ExportError) as info:
        check_exportable(plan, LaterConfig(clip_grad_norm=1.0))
    assert "\n" not in str(info.value) and "config field 'clip_grad_norm' = 1.0" in str(info.value)
    with pytest.raises(ExportError, match="config field 'auto_freeze' = True"):
        render_script(plan, SPEC, model=_net(), config=TrainConfig(auto_freeze=True, steps=5))
    # fields that do not change the numbers are named in the script, not refused
    text = render_script(plan, ModelSpec(source="torchvision", name="resnet18", num_classes=4),
                         config=TrainConfig(steps=5, metrics_path="m.jsonl", image_size=32, batch_size=2))
    assert "Not in this script: the run's 'metrics_path'" in text


def test_data_the_script_cannot_open_is_refused_naming_the_field(tmp_path):
    with pytest.raises(ExportError, match="config field 'data' = 'text:"):
        render_script(FreezePlan(), SPEC, config=TrainConfig(data=f"text:{tmp_path / 'a.jsonl'}", steps=2))


def test_a_py_loss_is_written_and_what_the_script_cannot_carry_is_refused_naming_the_field(tmp_path):
    (tmp_path / "my_loss.py").write_text("def loss(out, y):\n    return out.sum()\n")
    text = render_script(FreezePlan(), SPEC, config=TrainConfig(loss=f"py:{tmp_path / 'my_loss.py'}:loss", steps=2))
    assert f"LOSS_REF = {(str((tmp_path / 'my_loss.py').resolve()), 'loss')!r}" in text
    with pytest.raises(ExportError, match="config field 'input_shape' = "):
        render_script(FreezePlan(), SPEC, config=TrainConfig(data=f"imagefolder:{tmp_path}", input_shape=(1024,), steps=2))
    with pytest.raises(ExportError, match="config field 'input_column' = 'audio'"):
        render_script(FreezePlan(), SPEC, config=TrainConfig(input_column="audio", steps=2))
