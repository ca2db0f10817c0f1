"""param:GLOB selectors, weight decay, lr_decay and tied weights on live models."""

from __future__ import annotations

import warnings

import pytest
import torch
import torchvision
from torch import nn

import workbench as wb
from workbench.core.plan.problems import PlanError, PlanWarning
from workbench.core.plan.rules import FreezePlan


def _resnet() -> nn.Module:
    torch.manual_seed(0)
    return torchvision.models.resnet18(num_classes=10)


def _vit(**kw) -> nn.Module:
    timm = pytest.importorskip("timm")
    return timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, depth=2, num_classes=5, **kw
    )


BITFIT = {"rules": [{"select": "*", "frozen": True}, {"select": "param:*.bias", "frozen": False}]}


def test_bitfit_is_one_rule_and_counts_the_biases():
    model = _resnet()
    biases = sum(p.numel() for n, p in model.named_parameters() if n.endswith(".bias"))
    plan = FreezePlan.from_dict(BITFIT)
    applied = plan.apply(model)
    assert {n for n, p in model.named_parameters() if p.requires_grad} == {
        n for n, _ in model.named_parameters() if n.endswith(".bias")
    }
    assert applied.counts().trainable == biases
    assert f"trainable {biases:,} of" in plan.summary(model)
    assert plan.fit_problems(model) == []
    groups = applied.param_groups(0.1)
    assert sum(len(g["params"]) for g in groups) == sum(1 for n, _ in model.named_parameters() if n.endswith(".bias"))


def test_norm_weights_only_is_one_rule():
    model = _resnet()
    plan = {"rules": [{"select": "*", "frozen": True}, {"select": "param:*bn*.weight", "frozen": False}]}
    wb.apply_plan(model, plan)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".bn" in n or n.startswith("bn") for n in trainable)
    assert all(n.endswith(".weight") for n in trainable)


def test_a_later_module_rule_wins_over_an_earlier_param_rule():
    model = _resnet()
    plan = FreezePlan.from_dict(
        {"rules": [{"select": "param:*.bias", "frozen": True}, {"select": "fc", "frozen": False}]}
    )
    params = plan.resolve_params(model)
    assert not params["fc.bias"].frozen and params["layer1.0.bn1.bias"].frozen
    wb.apply_plan(model, plan)
    assert model.fc.bias.requires_grad and not model.layer1[0].bn1.bias.requires_grad


def test_param_lr_scale_and_weight_decay_reach_param_groups():
    model = _resnet()
    plan = {"rules": [
        {"select": "*", "weight_decay": 0.05},
        {"select": "param:fc.*", "lr_scale": 10},
        {"select": "param:*.bias", "weight_decay": 0},
    ]}
    applied = wb.apply_plan(model, plan)
    by_name = {n: g for g in applied.param_groups(0.01, weight_decay=0.3) for n in g["param_names"]}
    assert by_name["fc.weight"]["lr"] == pytest.approx(0.1) and by_name["fc.weight"]["weight_decay"] == 0.05
    assert by_name["fc.bias"]["lr"] == pytest.approx(0.1) and by_name["fc.bias"]["weight_decay"] == 0.0
    assert by_name["conv1.weight"]["lr"] == pytest.approx(0.01) and by_name["conv1.weight"]["weight_decay"] == 0.05


def test_param_selector_matching_nothing_names_the_rule_and_field():
    model = _resnet()
    plan = FreezePlan.from_dict({"rules": [{"select": "*"}, {"select": "param:*.biass", "frozen": False}]})
    with pytest.raises(PlanError) as e:
        plan.apply(model)
    assert e.value.rule_index == 1 and e.value.field == "select"
    assert "matches no parameter" in str(e.value) and "\n" not in str(e.value)


def test_param_selector_on_another_key_is_refused():
    with pytest.raises(PlanError) as e:
        FreezePlan.from_dict({"rules": [{"select": "param:*.weight", "bn_eval": True}]})
    assert e.value.field == "bn_eval" and "param:" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(PlanError, match="needs a glob"):
        FreezePlan.from_dict({"rules": [{"select": "param:", "frozen": True}]})


def test_no_decay_auto_equals_timm_param_groups_weight_decay():
    from timm.optim import param_groups_weight_decay

    model = _vit()
    applied = wb.apply_plan(model, {"rules": [{"select": "*"}]})
    ours = {n: g["weight_decay"] for g in applied.param_groups(1e-3, 0.05, no_decay="auto") for n in g["param_names"]}
    ids = {id(p): n for n, p in model.named_parameters()}
    theirs = {
        ids[id(p)]: g["weight_decay"]
        for g in param_groups_weight_decay(model, 0.05, no_weight_decay_list=model.no_weight_decay())
        for p in g["params"]
    }
    assert ours == theirs
    assert ours["cls_token"] == 0.0 and ours["blocks.0.attn.qkv.bias"] == 0.0 and ours["blocks.0.attn.qkv.weight"] == 0.05
    with pytest.raises(ValueError, match="no_decay"):
        applied.param_groups(1e-3, no_decay="yes")


def test_lr_decay_equals_timm_param_groups_layer_decay():
    from timm.optim import param_groups_layer_decay

    model = _vit()
    applied = wb.apply_plan(model, {"lr_decay": 0.75, "rules": [{"select": "*"}]})
    ours = {n: g["lr_scale"] for g in applied.param_groups(1.0) for n in g["param_names"]}
    ids = {id(p): n for n, p in model.named_parameters()}
    theirs = {
        ids[id(p)]: g["lr_scale"]
        for g in param_groups_layer_decay(model, layer_decay=0.75, no_weight_decay_list=model.no_weight_decay())
        for p in g["params"]
    }
    assert ours.keys() == theirs.keys()
    assert all(ours[n] == pytest.approx(theirs[n]) for n in ours)
    assert ours["head.weight"] == 1.0 and ours["cls_token"] < ours["blocks.1.mlp.fc1.weight"] < 1.0


def test_lr_decay_shows_as_module_lr_scale_and_a_rule_overrides_it():
    model = _resnet()
    plan = FreezePlan.from_dict({"lr_decay": 0.5, "rules": [{"select": "layer4", "lr_scale": 3}]})
    eff = plan.resolve(model)
    assert eff["fc"].lr_scale == 1.0 and eff["layer4.0.conv1"].lr_scale == 3
    assert eff["layer3"].lr_scale == 0.25 and eff["layer3.0.relu"].lr_scale == 0.25  # inherited by a module without params
    assert eff["layer1"].lr_scale < eff["layer2"].lr_scale < eff["layer3"].lr_scale
    assert FreezePlan.from_dict(plan.to_dict()).lr_decay == 0.5


@pytest.mark.parametrize("bad", [0, -0.5, 1.5, True, "0.75"])
def test_bad_lr_decay_is_one_line_naming_the_field(bad):
    with pytest.raises(PlanError) as e:
        FreezePlan.from_dict({"lr_decay": bad, "rules": []})
    assert e.value.field == "lr_decay" and "\n" not in str(e.value)


def _gpt2() -> nn.Module:
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50, n_positions=16)
    return transformers.GPT2LMHeadModel(cfg)


def test_unfreezing_a_tied_head_warns_with_the_tie_named_and_counts_once():
    model = _gpt2()
    plan = {"rules": [{"select": "*", "frozen": True}, {"select": "lm_head", "frozen": False}]}
    said = r"lm_head\.weight is tied to transformer\.wte\.weight \(one tensor\): the plan unfreezes lm_head "
    with pytest.warns(PlanWarning, match=said + ".*does not train"):
        applied = wb.apply_plan(model, plan)
    assert not model.lm_head.weight.requires_grad
    total = sum(p.numel() for p in model.parameters())  # parameters() lists a shared tensor once
    assert applied.counts().total == total and applied.counts().trainable == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        wb.apply_plan(_gpt2(), {"rules": [{"select": "*", "frozen": True}, {"select": "transformer.h", "frozen": False}]})


def test_layers_without_timm_follow_the_repeated_blocks():
    from workbench.core.models.layers import parameter_layers

    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=3, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=16, num_labels=2,
    )
    model = transformers.BertForSequenceClassification(cfg)
    ids = parameter_layers(model)
    assert ids["bert.embeddings.word_embeddings.weight"] == 0
    assert ids["bert.encoder.layer.0.attention.self.query.weight"] == 1
    assert ids["bert.encoder.layer.2.output.dense.bias"] == 3
    assert ids["classifier.weight"] == ids["bert.pooler.dense.weight"] == 4
    scales = {n: e.lr_scale for n, e in FreezePlan.from_dict({"lr_decay": 0.5, "rules": []}).resolve_params(model).items()}
    assert scales["classifier.weight"] == 1.0 and scales["bert.encoder.layer.2.output.dense.bias"] == 0.5
    assert scales["bert.embeddings.word_embeddings.weight"] == 0.5 ** 4
    assert parameter_layers(_resnet())["fc.weight"] > parameter_layers(_resnet())["layer4.0.conv1.weight"]
