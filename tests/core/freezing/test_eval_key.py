"""The eval key: modules locked in eval mode across model.train(); stage labels name modules."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import workbench as wb
from workbench.core.freezing.plan_handle import is_bn_eval_locked, is_eval_locked
from workbench.core.plan.problems import PlanError
from workbench.core.plan.rules import FreezePlan


def _vit() -> nn.Module:
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    return timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, depth=2, num_classes=5,
        drop_path_rate=0.5, drop_rate=0.3,
    )


def test_eval_locks_drop_path_and_dropout_across_train():
    model = _vit()
    x = torch.randn(2, 3, 32, 32)
    model.train()
    assert not torch.equal(model.blocks(model.patch_embed(x)), model.blocks(model.patch_embed(x)))  # stochastic
    applied = wb.apply_plan(model, {"rules": [{"select": "blocks", "eval": True}]})
    model.train()
    assert model.training and not model.blocks.training
    assert all(not m.training for m in model.blocks.modules())  # DropPath, Dropout, LayerNorm
    assert model.head_drop.training  # outside the selection
    feats = model.patch_embed(x)
    assert torch.equal(model.blocks(feats), model.blocks(feats))
    assert is_eval_locked(model.blocks[0].drop_path1) and is_bn_eval_locked(model.blocks[0].drop_path1)
    diff = applied.update(FreezePlan.from_dict({"rules": [{"select": "*"}]}))
    assert diff.eval_changed and "eval blocks" in diff.describe()
    model.train()
    assert model.blocks[0].drop_path1.training and not is_eval_locked(model.blocks[0].drop_path1)


def test_eval_remove_restores_modes():
    model = _vit()
    model.train()
    applied = wb.apply_plan(model, {"rules": [{"select": "blocks.0", "eval": True}]})
    assert not model.blocks[0].attn.training
    applied.remove()
    model.train()
    assert all(m.training for m in model.modules()) and not any(is_eval_locked(m) for m in model.modules())


def test_eval_keeps_batchnorm_statistics():
    import torchvision

    model = torchvision.models.resnet18(num_classes=4)
    applied = wb.apply_plan(model, {"rules": [{"select": "layer1", "eval": True}]})
    model.train()
    before = model.layer1[0].bn1.running_mean.clone()
    model(torch.randn(2, 3, 32, 32))
    assert torch.equal(before, model.layer1[0].bn1.running_mean)
    assert applied.verify().ok


@pytest.mark.parametrize("bad", [1, "yes", 0])
def test_eval_not_a_bool_is_one_line_naming_the_field(bad):
    with pytest.raises(PlanError) as e:
        FreezePlan.from_dict({"rules": [{"select": "*", "eval": bad}]})
    assert e.value.field == "eval" and "true or false" in str(e.value) and "\n" not in str(e.value)


def test_stage_label_names_the_unfrozen_module():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=4, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=16, num_labels=2,
    )
    model = transformers.BertForSequenceClassification(cfg)
    applied = wb.apply_plan(model, {"rules": [{"select": "*", "frozen": True}]})
    diff = applied.update(
        FreezePlan.from_dict({"rules": [{"select": "*", "frozen": True}, {"select": "bert.encoder.layer.2", "frozen": False}]})
    )
    assert diff.describe() == "unfroze bert.encoder.layer.2"
    diff = applied.update(FreezePlan.from_dict({"rules": [{"select": "*", "frozen": True}, {"select": "classifier", "frozen": False}, {"select": "bert.encoder.layer.3", "frozen": False}]}))
    assert diff.describe() == "froze bert.encoder.layer.2; unfroze bert.encoder.layer.3, classifier"
