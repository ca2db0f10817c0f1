"""BatchNorm whose running statistics never move (momentum 0, track_running_stats off) in train
mode: the linter, the doctor's static check and its watch all say it and suggest a bn_eval rule."""

from __future__ import annotations

import json

import torch
from torch import nn

import workbench as wb
from tests.fixtures.crepe import crepe_example
from workbench.core.checks import doctor
from workbench.core.checks.bn_stats import CODE
from workbench.core.checks.lint import lint_plan
from workbench.core.models.tree import ModelTree
from workbench.core.plan.rules import FreezePlan

FULL = {"rules": [{"select": "*", "frozen": False}]}


def bn_model(momentum: float | None = 0.0) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv1d(1, 4, 3), nn.BatchNorm1d(4, momentum=momentum), nn.ReLU(),
        nn.Conv1d(4, 4, 3), nn.BatchNorm1d(4, momentum=momentum), nn.Flatten(), nn.Linear(16, 2),
    )  # fmt: skip


def by_code(findings: list[doctor.Finding]) -> dict[str, doctor.Finding]:
    return {f.code: f for f in findings}


def train(model: nn.Module, opt: torch.optim.Optimizer, steps: int = 3) -> doctor.Watch:
    with doctor.watch(model, opt, steps=steps) as w:
        for _ in range(steps):
            opt.zero_grad()
            model(torch.randn(4, 1, 8)).sum().backward()
            opt.step()
    return w


def test_momentum_zero_in_train_mode_is_found_and_the_rule_it_suggests_fixes_it() -> None:
    model = bn_model()
    model.train()
    found = by_code(doctor.check(model))[CODE]
    assert found.severity == "warning" and "2 BatchNorm modules" in found.message and "1, 4" in found.message
    assert "never saw" in found.why
    rule = json.loads(found.fix[found.fix.index("{") :])
    assert rule == {"select": "type:BatchNorm1d", "bn_eval": True}
    plan = FreezePlan.from_dict({"rules": [*FULL["rules"], rule]})
    assert CODE in by_code(lint_plan(FreezePlan.from_dict(FULL), ModelTree.from_model(model)))
    assert CODE not in by_code(lint_plan(plan, ModelTree.from_model(model)))
    applied = plan.apply(model)
    model.train()
    opt = torch.optim.SGD(applied.param_groups(0.1), lr=0.1)
    assert CODE not in by_code(doctor.check(model, opt, plan))
    assert CODE not in by_code(train(model, opt).findings())
    assert model[1].weight.requires_grad  # eval mode, weights still train


def test_the_watch_sees_what_statistics_cannot_show() -> None:
    model = bn_model()
    applied = wb.apply_plan(model, FULL)
    model.train()
    opt = torch.optim.SGD(applied.param_groups(0.1), lr=0.1)
    before = model[1].running_mean.clone()
    w = train(model, opt)
    assert torch.equal(before, model[1].running_mean)  # the stored statistics never moved
    assert by_code(w.findings())[CODE].severity == "warning"


def test_frozen_bn_with_fixed_statistics_left_in_train_mode_gets_this_finding_only() -> None:
    model = bn_model()
    plan = FreezePlan.from_dict({"rules": [{"select": "*", "frozen": True, "bn_eval": False}, {"select": "6", "frozen": False}]})
    linted = by_code(lint_plan(plan, ModelTree.from_model(model)))
    assert CODE in linted and "bn-frozen-train-mode" not in linted  # the statistics do not drift
    applied = plan.apply(model)
    model.train()
    opt = torch.optim.SGD(applied.param_groups(0.1), lr=0.1)
    static = by_code(doctor.check(model, opt, plan))
    assert CODE in static and "bn-frozen-train-mode" not in static
    runtime = by_code(train(model, opt).findings())  # num_batches_tracked counts; no drift finding
    assert CODE in runtime and "bn-frozen-train-mode" not in runtime


def test_track_running_stats_switched_off_with_buffers_kept() -> None:
    model = bn_model(momentum=0.1)
    model.train()
    assert CODE not in by_code(doctor.check(model))  # ordinary BatchNorm: statistics follow batches
    model[4].track_running_stats = False  # buffers kept: eval uses them, training never updates them
    found = by_code(doctor.check(model))[CODE]
    assert found.path == "4" and found.message.startswith("1 BatchNorm module ")
    assert '{"select": "4", "bn_eval": true}' in found.fix
    no_buffers = nn.Sequential(nn.Conv1d(1, 4, 3), nn.BatchNorm1d(4, track_running_stats=False))
    no_buffers.train()  # batch statistics in eval too: nothing differs between the modes
    assert CODE not in by_code(doctor.check(no_buffers))


def test_momentum_none_and_eval_mode_models_are_not_flagged() -> None:
    model = bn_model(momentum=None)  # a cumulative average moves
    model.train()
    assert CODE not in by_code(doctor.check(model))
    fixed = bn_model()
    fixed.eval()
    assert CODE not in by_code(doctor.check(fixed))



def test_crepe_six_batchnorm_layers_with_momentum_zero() -> None:
    crepe = crepe_example()
    model = crepe.build("tiny")
    model.train()
    tree = ModelTree.from_model(model)
    bns = [f"conv{i}_BN" for i in range(1, 7)]
    found = by_code(doctor.check(model))[CODE]
    assert found.message.startswith("6 BatchNorm modules") and "conv1_BN, conv2_BN" in found.message
    assert found.fix.endswith('{"select": "type:BatchNorm2d", "bn_eval": true}')
    assert CODE in by_code(lint_plan(FreezePlan.from_dict(FULL), tree))
    every_bn_eval = FreezePlan.from_dict({"rules": [*FULL["rules"], {"select": "type:BatchNorm2d", "bn_eval": True}]})
    assert CODE not in by_code(lint_plan(every_bn_eval, tree))
    head_only = FreezePlan.from_dict({"rules": [{"select": "*", "frozen": True}, {"select": "classifier", "frozen": False}]})
    assert CODE not in by_code(lint_plan(head_only, tree))  # frozen BatchNorm runs in eval by default
    last_block_bn_train = FreezePlan.from_dict({"rules": [
        {"select": "*", "frozen": True, "bn_eval": False},
        {"select": "conv6", "frozen": False}, {"select": "conv6_BN", "frozen": False}, {"select": "classifier", "frozen": False},
    ]})  # fmt: skip
    linted = by_code(lint_plan(last_block_bn_train, tree))
    assert CODE in linted and "6 BatchNorm modules" in linted[CODE].message
    assert "bn-frozen-train-mode" not in linted
    assert {n for n in bns if tree.nodes[n].bn_stats_fixed} == set(bns)
