"""Tests of workbench.core.training.step: one step never raises and leaves the model consistent."""

from __future__ import annotations

import math

import torch
from torch import nn

from workbench.core.training.step import ClassificationLoss, TrainStep


def _setup(**kw):
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return model, opt, TrainStep(model, opt, model, ClassificationLoss(), torch.device("cpu"), **kw)


def _batch():
    return torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1])


def test_a_step_trains_and_times_the_compute():
    model, _, step = _setup()
    before = model.weight.detach().clone()
    out = step(0, *_batch())
    assert out.failure is None and out.stepped and not out.nonfinite
    assert math.isfinite(out.loss) and out.t_end >= out.t_start > 0
    assert not torch.equal(model.weight, before)


def test_a_failing_step_reports_instead_of_raising_and_drops_gradients():
    def hook(i: int) -> None:
        if i == 3:
            raise RuntimeError("shapes cannot be multiplied (5x4 and 8x3)")

    model, _, step = _setup(step_hook=hook)
    step(2, *_batch())
    before = model.weight.detach().clone()
    out = step(3, *_batch())
    assert out.failure is not None and not out.failure.oom and not out.stepped
    assert out.failure.message.startswith("step 3 failed: RuntimeError: shapes cannot be multiplied")
    assert "image size" in out.failure.message and "Traceback" in out.failure.traceback
    assert torch.equal(model.weight, before) and all(p.grad is None for p in model.parameters())


def test_out_of_memory_says_what_to_do():
    def forward(x: torch.Tensor) -> torch.Tensor:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    _, _, step = _setup()
    step.forward = forward  # the engine swaps the forward when DDP is rebuilt
    out = step(7, *_batch())
    assert out.failure is not None and out.failure.oom
    assert "out of memory at step 7 with batch size 5 on cpu" in out.failure.message
    assert "lower the batch size (e.g. 2)" in out.failure.message


def test_a_non_finite_loss_skips_the_optimizer_step():
    model, _, step = _setup()
    before = model.weight.detach().clone()
    x, y = _batch()
    out = step(0, x * float("nan"), y)
    assert out.nonfinite and not out.stepped and out.failure is None and math.isnan(out.loss)
    assert torch.equal(model.weight, before) and all(p.grad is None for p in model.parameters())


def test_the_ranks_agree_on_skipping_a_step():
    seen: list[bool] = []

    def agree(bad: bool) -> bool:  # another rank had a non-finite loss
        seen.append(bad)
        return True

    model, _, step = _setup(agree=agree)
    before = model.weight.detach().clone()
    out = step(0, *_batch())
    assert seen == [False] and out.nonfinite and not out.stepped and math.isfinite(out.loss)
    assert torch.equal(model.weight, before)
