"""FreezePlan.from_model / capture_plan: a script's freezing state back as a compact plan."""

from __future__ import annotations

import itertools
import random
import runpy
import sys

import pytest
import torch
import torchvision
from torch import nn

from workbench.core.export import export_script
from workbench.core.freezing.capture import bn_eval_locked, capture_plan, cover_paths, minimal_assignments
from workbench.core.models.spec import ModelSpec
from workbench.core.models.tree import ModelTree
from workbench.core.plan.rules import FreezePlan, PlanWarning


def _state(model: nn.Module, train: bool = True) -> tuple[list[tuple[str, bool]], list[str]]:
    """requires_grad flags and BatchNorm in eval (after ``model.train()`` unless ``train`` is False)."""
    if train:
        model.train()
    flags = [(n, p.requires_grad) for n, p in model.named_parameters()]
    bn = [n for n, m in model.named_modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and not m.training]
    return flags, bn


def test_script_style_freezing_becomes_three_rules(resnet18):
    """The seed's recipe: freeze everything, new head, freeze_bn after model.train()."""
    model = resnet18
    for p in model.parameters():
        p.requires_grad = False
    model.fc = nn.Linear(512, 10)
    model.train()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.eval()
    plan = FreezePlan.from_model(model)  # delegates to capture_plan
    assert [r.to_dict() for r in plan.rules] == [
        {"select": "*", "frozen": True},
        {"select": "fc", "frozen": False},
    ]  # frozen BatchNorm in eval is what bn_eval's default already does
    assert plan.model["fingerprint"] == ModelTree.from_model(model).fingerprint
    fresh = torchvision.models.resnet18(weights=None, num_classes=10)
    plan.apply(fresh)
    assert _state(fresh) == _state(model, train=False)  # the script's state as captured


def test_frozen_batchnorm_left_training_is_captured_explicitly(resnet18):
    for p in resnet18.parameters():
        p.requires_grad = False
    for p in resnet18.layer4.parameters():
        p.requires_grad = True
    resnet18.train()  # the pitfall: frozen BatchNorm in train mode
    plan = capture_plan(resnet18)
    assert {"select": "type:BatchNorm2d", "bn_eval": False} in [r.to_dict() for r in plan.rules]
    assert len(plan.rules) == 3
    fresh = torchvision.models.resnet18(weights=None)
    plan.apply(fresh)
    assert _state(fresh) == _state(resnet18)


def test_roundtrip_of_a_workbench_plan_with_optimizer():
    plan = FreezePlan.from_dict(
        {
            "rules": [
                {"select": "*", "frozen": True},
                {"select": "layer3", "frozen": False, "lr_scale": 0.01},
                {"select": "layer3.0", "frozen": True},
                {"select": "layer4", "frozen": False, "lr_scale": 0.1},
                {"select": "layer4.0.bn1", "bn_eval": True},
                {"select": "layer4.*.conv2", "reparam": {"kind": "a_plus_b", "params": ["weight"]}},
                {"select": "fc", "frozen": False},
            ]
        }
    )
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None)
    applied = plan.apply(model)
    opt = torch.optim.AdamW(applied.param_groups(lr=1e-3))
    got = capture_plan(model, opt, model_info={"name": "resnet18"})
    assert got.model["name"] == "resnet18"
    assert len(got.rules) <= len(plan.rules) + 1
    fresh = torchvision.models.resnet18(weights=None)
    again = got.apply(fresh)
    assert _state(fresh) == _state(model)
    assert set(again.installed("reparam")) == set(applied.installed("reparam"))
    want = [(g["lr_scale"], g["param_names"]) for g in applied.param_groups(1.0)]
    assert [(g["lr_scale"], g["param_names"]) for g in again.param_groups(1.0)] == want


def test_plain_optimizer_groups_become_lr_scales(resnet18):
    for p in resnet18.parameters():
        p.requires_grad = False
    for p in [*resnet18.layer4.parameters(), *resnet18.fc.parameters()]:
        p.requires_grad = True
    opt = torch.optim.SGD(
        [{"params": resnet18.layer4.parameters(), "lr": 1e-4}, {"params": resnet18.fc.parameters()}], lr=1e-3
    )
    plan = capture_plan(resnet18, opt)
    rules = {r.select: r for r in plan.rules}
    assert rules["layer4"].lr_scale == pytest.approx(0.1) and rules["layer4"].frozen is False
    assert "base lr 0.001" in plan.description


def test_exported_script_model_is_recognised(tmp_path):
    """A model prepared by the exported script (its own APlusB) captures back to the same plan."""
    spec = ModelSpec(name="resnet18", weights=None, num_classes=10)
    plan = FreezePlan.from_dict(
        {"rules": [{"select": "*", "frozen": True}, {"select": "layer4", "frozen": False, "reparam": True}, {"select": "fc", "frozen": False}]}
    )
    script = export_script(plan, spec, tmp_path / "s.py")
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "workbench", None)
        ns = runpy.run_path(str(script), run_name="exported")
    model = ns["build_model"]()
    ns["apply_freeze_plan"](model)
    model.train()
    assert all(bn_eval_locked(m) for m in model.modules() if isinstance(m, nn.BatchNorm2d) and not m.training)
    got = capture_plan(model)
    fresh = spec.build(allow_download=False)
    again = got.apply(fresh)
    assert _state(fresh) == _state(model)
    assert sorted(again.installed("reparam")) == sorted(
        p for p, m in model.named_modules() if p.startswith("layer4") and hasattr(m, "parametrizations")
    )


def test_partial_freezing_is_captured():
    model = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 2))
    plan = FreezePlan.from_dict({"rules": [{"select": "0", "partial": {"param": "weight", "dim": 1, "trainable": [[0, 4]]}}]})
    plan.apply(model)
    got = capture_plan(model)
    assert [r.to_dict() for r in got.rules] == [
        {"select": "0", "partial": {"param": "weight", "dim": 1, "trainable": [[0, 4]]}}
    ]


def test_mixed_flags_inside_one_module_warn():
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    model[0].bias.requires_grad = False
    with pytest.warns(PlanWarning, match="some parameters frozen and others trainable"):
        plan = capture_plan(model)
    assert plan.rules == [] or all(r.frozen in (None, False) for r in plan.rules)  # majority: trainable


def _resolve(tree: ModelTree, assignments, default):
    out = {}
    for path in tree.paths():
        v = default
        for p, val in assignments:
            if p == "" or path == p or path.startswith(p + "."):
                v = val
        out[path] = v
    return out


def test_minimal_assignments_is_minimal_and_correct():
    """Against brute force on a small tree with random requirements."""
    model = nn.Sequential(nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2)), nn.Linear(2, 2), nn.Sequential(nn.Linear(2, 2)))
    tree = ModelTree.from_model(model)
    paths = tree.paths()
    rng = random.Random(0)
    for _ in range(30):
        required = {p: rng.choice([True, False]) for p in paths if rng.random() < 0.7}
        got = minimal_assignments(tree, required, True)
        res = _resolve(tree, got, True)
        assert all(res[p] == v for p, v in required.items())
        best = None
        for choice in itertools.product([None, True, False], repeat=len(paths)):
            assign = [(p, c) for p, c in zip(paths, choice) if c is not None]
            r = _resolve(tree, assign, True)
            if all(r[p] == v for p, v in required.items()):
                best = len(assign) if best is None else min(best, len(assign))
        assert len(got) == best


def test_cover_paths():
    model = nn.Sequential(nn.Sequential(nn.BatchNorm1d(2), nn.BatchNorm1d(2)), nn.Sequential(nn.BatchNorm1d(2), nn.Linear(2, 2)))
    tree = ModelTree.from_model(model)
    assert cover_paths(tree, ["0.0", "0.1", "1.0"], ["1.1"]) == ["0", "1.0"]
    assert cover_paths(tree, ["0.0", "0.1", "1.0"]) == [""]
    assert cover_paths(tree, []) == []
