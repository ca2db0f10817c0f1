"""doctor counts every BatchNorm that changed (A+B included) and groups findings of a kind."""

from __future__ import annotations

import torch
from torch import nn

import workbench as wb
from workbench.core.checks import doctor


def _bn_model() -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(4 * 36, 2))


def test_runtime_bn_count_includes_modules_under_a_plus_b() -> None:
    m = _bn_model()
    applied = wb.apply_plan(m, {"rules": [
        {"select": "*", "frozen": True, "bn_eval": False},
        {"select": "2", "reparam": {"kind": "a_plus_b"}, "frozen": True},
        {"select": "4", "frozen": False},
    ]})
    opt = torch.optim.SGD(applied.param_groups(0.1), lr=0.1)
    with doctor.watch(m, opt, steps=2) as w:
        for _ in range(2):
            opt.zero_grad()
            loss = m(torch.randn(4, 3, 8, 8)).sum()
            loss.backward()
            w.after_backward(loss)
            opt.step()
    bn = [f for f in w.findings() if f.code == "bn-frozen-train-mode"]
    assert len(bn) == 1 and "of 2 frozen BatchNorm modules" in bn[0].message


def test_static_bn_count_includes_modules_under_a_plus_b() -> None:
    m = _bn_model()
    wb.apply_plan(m, {"rules": [{"select": "2", "reparam": {"kind": "a_plus_b"}}]})
    for p in m.parameters():
        p.requires_grad_(False)
    m[4].weight.requires_grad_(True)
    m.train()
    bn = [f for f in doctor.check(m) if f.code == "bn-frozen-train-mode"]
    assert len(bn) == 1 and bn[0].message.startswith("2 frozen BatchNorm modules")


def test_static_findings_of_a_kind_are_one() -> None:
    m = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 2))
    for layer in m:
        layer.weight.register_hook(lambda g: torch.zeros_like(g))
    found = [f for f in doctor.check(m) if f.code == "grad-hook-zeroes"]
    assert len(found) == 1 and "2 more like it" in found[0].message


def test_group_findings_keeps_single_ones() -> None:
    f = doctor.Finding("x", "warning", "a", "msg")
    assert doctor.group_findings([f]) == [f]
