"""The seed scenarios: freezing a backbone with BatchNorm, done right and proven."""

import copy

import pytest
import torch
from torch import nn

import workbench as wb
from tests.fixtures.models import Tied
from workbench.core.freezing.apply import is_bn_eval_locked, optimizer_state_factor
from workbench.core.plan.rules import FreezePlan, PlanError, Rule

FC_ONLY = {"rules": [{"select": "*", "frozen": True}, {"select": "fc", "frozen": False}]}


def _train(model, opt, steps=3, size=32):
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        model.train()  # called every step, as training loops do
        x = torch.randn(4, 3, size, size, generator=g)
        y = torch.randint(0, 1000, (4,), generator=g)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def test_fc_only_backbone_bit_identical_bn_unchanged_adam_state_only_fc(resnet18):
    before = copy.deepcopy(resnet18.state_dict())
    applied = wb.apply_plan(resnet18, FC_ONLY)
    opt = torch.optim.Adam(applied.param_groups(lr=1e-2))
    _train(resnet18, opt)
    after = resnet18.state_dict()
    for k, v in before.items():
        if k.startswith("fc."):
            assert not torch.equal(v, after[k]), k
        else:  # weights and BN running stats (incl. num_batches_tracked) bit-identical
            assert torch.equal(v, after[k]), k
    opt_params = {id(p) for g in opt.param_groups for p in g["params"]}
    assert opt_params == {id(resnet18.fc.weight), id(resnet18.fc.bias)}
    assert {id(p) for p in opt.state} == opt_params
    assert all(not m.training for m in resnet18.modules() if isinstance(m, nn.BatchNorm2d))
    report = applied.verify()
    assert report.ok and not report.violations, str(report)
    assert report.checked["frozen"] == 60 and report.checked["trainable"] == 2 and report.checked["bn_stats"] == 60


def test_counts_equal_hand_computation(resnet18):
    applied = wb.apply_plan(resnet18, FC_ONLY)
    c = applied.counts("adamw")
    assert c.trainable == 513_000 and c.total == 11_689_512 and c.frozen == 11_689_512 - 513_000
    assert c.param_bytes == 11_689_512 * 4 and c.grad_bytes == 513_000 * 4
    assert c.optimizer_bytes == 2 * 513_000 * 4
    assert applied.counts("sgd").optimizer_bytes == 0
    assert applied.counts("sgd_momentum").optimizer_bytes == 513_000 * 4
    assert c.full_ft_bytes == 11_689_512 * 4 * 4
    assert c.training_bytes == 4 * (11_689_512 + 3 * 513_000)
    assert optimizer_state_factor(torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1, momentum=0.9)) == 1
    assert optimizer_state_factor(torch.optim.Adam([nn.Parameter(torch.zeros(1))], amsgrad=True)) == 3
    with pytest.raises(ValueError, match="unknown optimizer"):
        optimizer_state_factor("lion")


def test_bn_eval_survives_train_and_unlocks(resnet18):
    plan = FreezePlan([Rule("*", frozen=True), Rule("layer4", frozen=False)])
    applied = plan.apply(resnet18)
    resnet18.train()
    assert not resnet18.bn1.training and resnet18.layer4[0].bn1.training
    assert is_bn_eval_locked(resnet18.bn1) and not is_bn_eval_locked(resnet18.layer4[0].bn1)
    assert resnet18.training and resnet18.layer1.training
    resnet18.eval()
    resnet18.train(True)
    assert not resnet18.layer1[0].bn2.training
    # deepcopy keeps the behaviour
    clone = copy.deepcopy(resnet18)
    clone.train()
    assert not clone.bn1.training
    applied.remove()
    resnet18.train()
    assert resnet18.bn1.training and not is_bn_eval_locked(resnet18.bn1)


def test_explicit_bn_eval_false_keeps_frozen_bn_training(resnet18):
    plan = FreezePlan([Rule("*", frozen=True), Rule("bn1", bn_eval=False), Rule("fc", frozen=False)])
    plan.apply(resnet18)
    resnet18.train()
    assert resnet18.bn1.training and not resnet18.layer1[0].bn1.training


def test_param_groups_by_lr_scale_each_param_once(resnet18):
    plan = FreezePlan([Rule("*", frozen=True), Rule("layer4", frozen=False, lr_scale=0.1), Rule("fc", frozen=False)])
    applied = plan.apply(resnet18)
    groups = applied.param_groups(lr=1e-3, weight_decay=0.01, betas=(0.9, 0.99))
    assert [g["lr_scale"] for g in groups] == [1.0, 0.1]
    assert groups[1]["lr"] == pytest.approx(1e-4) and groups[0]["lr"] == 1e-3
    assert all(g["weight_decay"] == 0.01 and g["betas"] == (0.9, 0.99) for g in groups)
    ids = [id(p) for g in groups for p in g["params"]]
    assert len(ids) == len(set(ids))
    assert set(groups[0]["param_names"]) == {"fc.weight", "fc.bias"}
    opt = torch.optim.AdamW(groups)
    assert len(opt.param_groups) == 2


def test_param_groups_tied_weights_once():
    applied = wb.apply_plan(Tied(), {"rules": []})
    groups = applied.param_groups(lr=0.1)
    assert sum(len(g["params"]) for g in groups) == 1


def test_nothing_trainable_refused(resnet18):
    applied = wb.apply_plan(resnet18, {"rules": [{"select": "*", "frozen": True}]})
    with pytest.raises(ValueError, match="the plan leaves nothing trainable"):
        applied.param_groups(lr=1e-3)


def test_progressive_unfreezing_update(resnet18):
    applied = wb.apply_plan(resnet18, FC_ONLY)
    opt = torch.optim.SGD(applied.param_groups(lr=1e-2), momentum=0.9)
    _train(resnet18, opt, steps=1)
    layer4 = sum(p.numel() for p in resnet18.layer4.parameters())
    diff = applied.update(FreezePlan.from_dict({"rules": FC_ONLY["rules"] + [{"select": "layer4", "frozen": False}]}))
    assert applied.counts().trainable == 513_000 + layer4
    assert set(diff.newly_trainable) == {n for n, _ in resnet18.layer4.named_parameters(prefix="layer4")}
    assert not diff.newly_frozen and "layer4.0.bn1" in diff.bn_changed
    assert "unfroze layer4" in diff.describe()
    resnet18.train()
    assert resnet18.layer4[0].bn1.training and not resnet18.layer3[0].bn1.training
    diff2 = applied.update(FreezePlan.from_dict(FC_ONLY))
    assert set(diff2.newly_frozen) == set(diff.newly_trainable)
    assert applied.counts().trainable == 513_000
    diff3 = applied.update(FreezePlan.from_dict({"rules": FC_ONLY["rules"] + [{"select": "fc", "lr_scale": 0.5}]}))
    assert set(diff3.lr_changed) == {"fc.weight", "fc.bias"} and not diff3.newly_frozen


def test_update_with_bad_plan_changes_nothing(resnet18):
    applied = wb.apply_plan(resnet18, FC_ONLY)
    with pytest.raises(PlanError, match="layer9"):
        applied.update(FreezePlan([Rule("layer9", frozen=False)]))
    assert applied.counts().trainable == 513_000


def test_apply_with_unknown_module_leaves_model_untouched(resnet18):
    with pytest.raises(PlanError, match="did you mean 'fc'"):
        wb.apply_plan(resnet18, {"rules": [{"select": "*", "frozen": True}, {"select": "fcc", "frozen": False}]})
    assert all(p.requires_grad for p in resnet18.parameters())


def test_remove_restores_exactly(resnet18):
    resnet18.layer1.requires_grad_(False)  # a state the user had before
    resnet18.eval()
    resnet18.layer2.train()
    flags = {n: p.requires_grad for n, p in resnet18.named_parameters()}
    modes = {n: m.training for n, m in resnet18.named_modules()}
    hooks = (len(resnet18._forward_hooks), len(resnet18._forward_pre_hooks))
    applied = wb.apply_plan(resnet18, FC_ONLY)
    resnet18.train()
    applied.remove()
    assert {n: p.requires_grad for n, p in resnet18.named_parameters()} == flags
    assert {n: m.training for n, m in resnet18.named_modules()} == modes
    assert all("train" not in m.__dict__ for m in resnet18.modules())
    assert (len(resnet18._forward_hooks), len(resnet18._forward_pre_hooks)) == hooks
    with pytest.raises(RuntimeError, match="removed"):
        applied.verify()


def test_apply_from_file_one_line(tmp_path, resnet18):
    path = tmp_path / "plan.json"
    FreezePlan.from_dict(FC_ONLY).save(path)
    applied = wb.apply_plan(resnet18, str(path))
    assert applied.counts().trainable == 513_000
    applied2 = FreezePlan.load(path).apply(copy.deepcopy(resnet18))
    assert applied2.counts().trainable == 513_000
