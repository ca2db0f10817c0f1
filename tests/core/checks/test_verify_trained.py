"""verify proves the other half: what should train received gradients to the end of the run, and changed.

A run whose adapters silently stopped training (cut out of the graph after the first epoch)
used to verify OK, because verify only checked that frozen tensors stayed put. And a run that
failed at step 0 printed ``verify OK``. These tests hold the promises of docs/bad-input.md.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import workbench as wb
from workbench.core.checks.verify import MIN_STEPS_FOR_ERROR, MIN_STEPS_FOR_UNCHANGED, GradWatch
from workbench.core.freezing.snapshot import DENSE_LOOKS, LOOK_EVERY
from workbench.core.training.config import TrainConfig
from workbench.core.training.engine import Trainer


class _Net(nn.Module):
    """``used`` reaches the loss; ``unused`` never does; ``late`` only for the first ``late_steps`` calls."""

    def __init__(self, late_steps: int = 0) -> None:
        super().__init__()
        self.used = nn.Linear(4, 3)
        self.unused = nn.Linear(4, 3)
        self.late = nn.Linear(4, 3)
        self.late_steps = late_steps
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        out = self.used(x)
        if self.calls <= self.late_steps:
            out = out + self.late(x)
        return out


def _train(net: nn.Module, applied: Any, steps: int, lr: float = 0.1) -> GradWatch:
    opt = torch.optim.SGD(applied.param_groups(lr=lr), lr=lr)
    watch = GradWatch(net, opt)
    gen = torch.Generator().manual_seed(0)
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        net(torch.randn(8, 4, generator=gen)).square().mean().backward()
        opt.step()
        watch.look(step)
    return watch


def _findings(report: Any) -> dict[str, tuple[str, str]]:
    return {v.name: (v.kind, v.severity) for v in report.violations}


def test_a_tensor_that_never_gets_a_gradient_is_named_a_warning_after_a_few_steps() -> None:
    net = _Net()
    applied = wb.apply_plan(net, {"rules": []})
    report = applied.verify(grads=_train(net, applied, 5).seen())
    found = _findings(report)
    assert found["unused.weight"] == ("trainable_no_grad", "warning") and found["unused.bias"][0] == "trainable_no_grad"
    assert "used.weight" not in found and report.ok and report.steps == 5
    assert "received no gradient in any of the run's 5 optimizer steps" in next(
        v.message for v in report.violations if v.name == "unused.weight")


def test_after_many_steps_with_a_learning_rate_it_is_an_error() -> None:
    net = _Net(late_steps=3)
    applied = wb.apply_plan(net, {"rules": []})
    report = applied.verify(grads=_train(net, applied, MIN_STEPS_FOR_ERROR).seen())
    found = _findings(report)
    assert found["unused.weight"] == ("trainable_no_grad", "error")
    # trained for 3 steps, then cut out of the graph: it changed, yet stopped training
    assert found["late.weight"] == ("trainable_grad_stopped", "error")
    # the gradients are read after steps 0-15, then every LOOK_EVERY steps: the last read is after step 95
    assert "up to step 2, then none in the last 93 steps" in next(v.message for v in report.violations if v.name == "late.weight")
    assert not report.ok and "FAILED" in report.summary()
    assert report.module_status["late"] == "error" and report.module_status["used"] == "ok"


def test_without_an_optimizer_that_moves_it_a_long_run_only_warns() -> None:
    net = _Net()
    applied = wb.apply_plan(net, {"rules": []})
    report = applied.verify(grads=_train(net, applied, MIN_STEPS_FOR_ERROR, lr=0.0).seen())
    found = _findings(report)
    assert found["unused.weight"] == ("trainable_no_grad", "warning")
    assert found["used.weight"] == ("trainable_unchanged", "warning")  # gradients, but lr 0
    assert "no optimizer with a learning rate above 0 holds it" in next(
        v.message for v in report.violations if v.name == "used.weight")


def test_a_tensor_with_gradients_that_never_changes_is_an_error_in_a_long_run() -> None:
    class Zeroed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(4, 3)
            self.b = nn.Linear(4, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.a(x) + 0.0 * self.b(x)  # b gets a gradient, always exactly zero

    net = Zeroed()
    applied = wb.apply_plan(net, {"rules": []})
    found = _findings(applied.verify(grads=_train(net, applied, MIN_STEPS_FOR_ERROR).seen()))
    assert found["b.weight"] == ("trainable_unchanged", "error") and "a.weight" not in found


def test_sparse_looks_never_take_a_tensor_still_training_for_one_that_stopped() -> None:
    assert LOOK_EVERY < MIN_STEPS_FOR_UNCHANGED
    net = _Net(late_steps=10**9)
    applied = wb.apply_plan(net, {"rules": []})
    for steps in (DENSE_LOOKS + 1, DENSE_LOOKS + LOOK_EVERY - 1, MIN_STEPS_FOR_ERROR + 3):
        net.calls = 0
        found = _findings(applied.verify(grads=_train(net, applied, steps).seen()))
        assert "late.weight" not in found and found["unused.weight"][0] == "trainable_no_grad", (steps, found)


def test_a_report_without_steps_is_never_ok() -> None:
    net = _Net()
    applied = wb.apply_plan(net, {"rules": []})
    report = applied.verify(grads=GradWatch(net).seen())
    assert not report.violations and not report.trained and report.to_dict()["trained"] is False
    line = report.summary()
    assert "OK" not in line and "nothing trained" in line and "no optimizer step" in line


def _tiny_cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 8, 3), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))


def test_a_run_that_fails_at_step_0_says_it_trained_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    from workbench.commands.train import print_summary

    def boom(step: int) -> None:
        raise RuntimeError("the data went away")

    cfg = TrainConfig(plan={"rules": [{"select": "0", "frozen": True}]}, data="synthetic:8", batch_size=4, steps=4,
                      device="cpu", image_size=8, num_classes=10)
    t = Trainer(cfg, model=_tiny_cnn(), step_hook=boom)
    result = t.run()
    assert result.status == "failed" and result.verify is not None
    assert not result.verify.trained and "OK" not in result.verify.summary()
    print_summary(result)
    out = capsys.readouterr().out
    verify_line = next(ln for ln in out.splitlines() if ln.startswith("verify"))
    assert "OK" not in verify_line and "nothing trained" in verify_line


def test_verify_names_adapters_a_cache_cut_out_of_training(monkeypatch: pytest.MonkeyPatch) -> None:
    """The old cut (first called module owning a trainable parameter) with the graph check off:
    verify alone names the fused adapters that stopped training after the first epoch."""
    from workbench.core.training import frozen_cache

    def old_rule(self: Any, calls: Any) -> int:
        return next(i for i, c in enumerate(calls) if any(p.requires_grad for p in c.module.parameters(recurse=False)))

    monkeypatch.setattr(frozen_cache.FrozenPrefixCache, "_first_acting", old_rule)
    monkeypatch.setattr(frozen_cache.FrozenPrefixCache, "_check_reach", lambda *a, **k: None)
    plan = {"rules": [{"select": "*", "frozen": True},
                      {"select": "2", "frozen": False, "reparam": {"rank": 2, "alpha": 4, "mode": "fused"}},
                      {"select": "6", "frozen": False}]}
    cfg = TrainConfig(plan=plan, data="synthetic:8", batch_size=4, steps=MIN_STEPS_FOR_ERROR, device="cpu",
                      image_size=8, num_classes=10, cache_frozen="on", seed=0)
    t = Trainer(cfg, model=_tiny_cnn())
    result = t.run()
    assert result.status == "completed" and result.summary["frozen_cache"]["cut"] == "6"
    found = _findings(result.verify)
    assert found["2.wb_lowrank.weight.U"] == ("trainable_grad_stopped", "error"), found
    assert found["2.wb_lowrank.weight.V"][0] == "trainable_grad_stopped" and not result.verify.ok
