"""LR schedules (workbench.core.training.schedule): shapes, and every scheduler across a stage that adds a group."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from workbench.core.plan.rules import FreezePlan
from workbench.core.training.config import ConfigError, TrainConfig
from workbench.core.training.engine import Trainer
from workbench.core.training.metrics import StepMetrics
from workbench.core.training.schedule import SCHEDULERS, LrSchedule, lr_factor


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.block = nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.ReLU())
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.block(torch.relu(self.conv(x))).mean((2, 3)))


def _data(n: int = 32) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 3, 6, 6, generator=g), torch.randint(0, 3, (n,), generator=g))


def test_constant_and_warmup():
    assert [lr_factor(s, 10) for s in range(10)] == [1.0] * 10
    assert [lr_factor(s, 10, 4) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]


def test_cosine_and_linear_decay_after_warmup():
    total, warm = 12, 2
    cos = [lr_factor(s, total, warm, "cosine") for s in range(total)]
    lin = [lr_factor(s, total, warm, "linear") for s in range(total)]
    assert cos[:3] == [0.5, 1.0, 1.0] and lin[:3] == [0.5, 1.0, 1.0]
    assert cos[2:] == sorted(cos[2:], reverse=True) and 0 < cos[-1] < 0.05
    assert lin[-1] == pytest.approx(0.1) and lin[7] == pytest.approx(0.5)
    assert cos[7] == pytest.approx(0.5)  # half-way: cos(pi/2)
    assert lr_factor(100, total, warm, "linear") == lin[-1]  # past the end: the last step's factor


@pytest.mark.parametrize("warmup", [0, 7])
def test_onecycle_equals_torch_onecyclelr(warmup: int):
    total = 25
    p = nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=0.1)
    pct = warmup / total if warmup else 0.3
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=total, pct_start=pct, cycle_momentum=False)
    want = []
    for _ in range(total):
        want.append(opt.param_groups[0]["lr"] / 0.1)
        opt.step()
        sched.step()
    assert [lr_factor(s, total, warmup, "onecycle") for s in range(total)] == pytest.approx(want, rel=1e-9)


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown scheduler 'step'.*constant, cosine, linear, onecycle"):
        lr_factor(0, 10, 0, "step")
    with pytest.raises(ValueError, match="total >= 1"):
        LrSchedule("cosine", 0)
    with pytest.raises(ConfigError) as e:
        TrainConfig(scheduler="cosin").validate()
    msg = str(e.value)
    assert "config field 'scheduler'" in msg and "constant, cosine, linear, onecycle" in msg and "'cosine'" in msg
    assert len(msg.splitlines()) == 1
    with pytest.raises(ConfigError, match="config field 'warmup_steps'"):
        TrainConfig(warmup_steps=-1).validate()
    assert TrainConfig(scheduler="One-Cycle").validate().scheduler == "onecycle"


def test_apply_records_base_lr_and_new_groups_join_the_schedule():
    a, b = nn.Parameter(torch.zeros(1)), nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([{"params": [a], "lr": 1e-2}], lr=1e-2)
    sch = LrSchedule("cosine", 10)
    sch.apply(opt, 5)
    opt.add_param_group({"params": [b], "lr": 1e-3})  # as sync_optimizer adds a group: unscheduled lr
    f = sch.apply(opt, 6)
    assert [g["base_lr"] for g in opt.param_groups] == [1e-2, 1e-3]
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([1e-2 * f, 1e-3 * f])


@pytest.mark.parametrize("kind", SCHEDULERS)
def test_every_scheduler_continues_across_a_stage_that_adds_a_group(kind: str):
    plan = FreezePlan.from_dict({
        "format": "freeze-plan", "version": 1,
        "rules": [{"select": "*", "frozen": True}, {"select": "fc", "frozen": False}],
        "stages": [{"at_step": 3, "rules": [{"select": "block", "frozen": False, "lr_scale": 0.5}]}],
    })
    seen: list[StepMetrics] = []
    total, warm, lr = 8, 2, 1e-2
    torch.manual_seed(0)
    t = Trainer(TrainConfig(steps=total, batch_size=4, lr=lr, scheduler=kind, warmup_steps=warm),
                model=Net(), dataset=_data(), plan=plan, on_metrics=seen.append)
    result = t.run()
    assert result.status == "completed", result.message
    assert [m.step for m in seen] == list(range(total))
    assert any("stage 0" in e for e in seen[3].events)
    for m in seen:
        f = lr_factor(m.step, total, warm, kind)
        want_scales = [1.0] if m.step < 3 else [1.0, 0.5]
        assert m.lr_scales == want_scales
        assert m.lr == pytest.approx([lr * s * f for s in want_scales], rel=1e-12), (kind, m.step)
    assert result.summary["scheduler"] == kind and result.summary["lr_scales"] == [1.0, 0.5]
    assert not math.isnan(result.summary["final_loss"])
