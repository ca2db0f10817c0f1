"""Per-module gradient norms and update/weight ratios: equal to a hand computation, frozen modules absent."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from workbench.core.plan.rules import FreezePlan
from workbench.core.training.config import TrainConfig
from workbench.core.training.engine import Trainer
from workbench.core.training.metrics import StepMetrics
from workbench.core.training.module_stats import ModuleStatsProbe, owner_path
from workbench.core.training.step import ClassificationLoss, TrainStep


def _tiny() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Sequential(nn.Linear(6, 5), nn.Linear(5, 3)))


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(8, 4, generator=g), torch.randint(0, 3, (8,), generator=g)


def _hand(model: nn.Module, opt_factory, x: torch.Tensor, y: torch.Tensor) -> dict[str, tuple[float, float]]:
    """Gradient norm and ‖Δw‖/‖w‖ per module and everything below it, by hand on a copy."""
    import copy

    m = copy.deepcopy(model)
    opt = opt_factory(m)
    loss = nn.functional.cross_entropy(m(x), y)
    loss.backward()
    out: dict[str, tuple[float, float]] = {}
    before = {n: p.detach().clone() for n, p in m.named_parameters() if p.requires_grad}
    grads = {n: p.grad.detach().clone() for n, p in m.named_parameters() if p.requires_grad}
    opt.step()
    after = dict(m.named_parameters())
    for path, mod in m.named_modules():
        names = [f"{path}.{n}" if path else n for n, p in mod.named_parameters() if p.requires_grad]
        if not names:
            continue
        g2 = sum(float(grads[n].pow(2).sum()) for n in names)
        u2 = sum(float((after[n].detach() - before[n]).pow(2).sum()) for n in names)
        w2 = sum(float(before[n].pow(2).sum()) for n in names)
        out[path] = (math.sqrt(g2), math.sqrt(u2 / w2))
    return out


@pytest.mark.parametrize("opt_name", ["sgd", "adam"])
def test_values_equal_a_hand_computation(opt_name: str) -> None:
    model = _tiny()
    model[0].requires_grad_(False)  # frozen: absent

    def make(m: nn.Module) -> torch.optim.Optimizer:
        ps = [p for p in m.parameters() if p.requires_grad]
        return torch.optim.SGD(ps, lr=0.1, momentum=0.9) if opt_name == "sgd" else torch.optim.Adam(ps, lr=1e-3)

    x, y = _batch()
    expected = _hand(model, make, x, y)
    probe = ModuleStatsProbe(model, every=3)
    step = TrainStep(model, make(model), model, ClassificationLoss(), torch.device("cpu"), stats=probe)
    out = step(0, x, y)
    assert out.stepped
    stats = probe.take()
    assert stats is not None and stats.step == 0
    assert set(stats.paths) == set(expected) == {"", "2", "2.0", "2.1"}  # "0" is frozen, "1" has none
    for path, (g, r) in expected.items():
        assert stats.grad_norm(path) == pytest.approx(g, rel=1e-5)
        assert stats.update_ratio(path) == pytest.approx(r, rel=1e-4)
    assert probe.take() is None  # handed over once
    step(1, x, y)  # not due: nothing measured
    assert probe.take() is None
    step(3, x, y)
    assert probe.take() is not None


def test_parameters_added_by_a_plan_count_for_their_tree_module() -> None:
    modules = {"", "layer1", "layer1.0", "layer1.0.conv"}
    assert owner_path("layer1.0.conv.parametrizations.weight.original", modules) == "layer1.0.conv"
    assert owner_path("layer1.0.conv.weight", modules) == "layer1.0.conv"
    assert owner_path("bias", modules) == ""


def test_the_engine_reports_stats_every_n_steps_and_never_for_frozen_modules() -> None:
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(32, 4, generator=g), torch.randint(0, 3, (32,), generator=g))
    plan = FreezePlan.from_dict({"format": "freeze-plan", "version": 1, "rules": [{"select": "0", "frozen": True}]})
    seen: list[StepMetrics] = []
    t = Trainer(
        TrainConfig(steps=7, batch_size=4, lr=0.05, num_classes=3), model=_tiny(), dataset=data, plan=plan,
        on_metrics=seen.append, module_stats_every=3,
    )
    assert t.run().ok
    measured = [m for m in seen if m.module_stats is not None]
    assert [m.module_stats.step for m in measured] == [0, 3, 6]
    for m in measured:
        assert set(m.module_stats.paths) == {"", "2", "2.0", "2.1"}  # "0" is frozen
        assert all(v > 0 for v in m.module_stats.grad_sq + m.module_stats.update_sq)
        assert "module_stats" not in m.to_dict() and "module_stats" not in m.csv_header()


def test_off_by_default() -> None:
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(16, 4, generator=g), torch.randint(0, 3, (16,), generator=g))
    seen: list[StepMetrics] = []
    t = Trainer(TrainConfig(steps=2, batch_size=4, num_classes=3), model=_tiny(), dataset=data, on_metrics=seen.append)
    assert t.run().ok
    assert all(m.module_stats is None for m in seen)


def test_every_must_be_positive() -> None:
    with pytest.raises(ValueError, match=">= 1"):
        ModuleStatsProbe(_tiny(), every=0)


def test_history_keeps_the_top_level_modules_of_each_measured_step() -> None:
    from workbench.core.training.module_stats import ModuleStats, ModuleStatsHistory

    h = ModuleStatsHistory(limit=2)
    for step in (0, 20, 40):
        h.add(ModuleStats(step, ("", "layer4", "layer4.0", "fc"), (25.0, 9.0, 9.0, 16.0), (1e-6,) * 4, (1.0,) * 4))
    assert h.paths == ["layer4", "fc"]  # not the root, not nested modules
    assert h.steps["fc"] == [20, 40]  # the oldest went first
    assert h.grad_norm["fc"] == [4.0, 4.0] and h.update_ratio["layer4"] == pytest.approx([1e-3, 1e-3])
    h.clear()
    assert h.paths == []
