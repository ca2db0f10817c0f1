"""Gradient-signal ranking: blocks ordered by measured ‖g‖/‖w‖, and the candidates follow that order."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from workbench.cli import main
from workbench.core.advisor import advise, trainable_names
from workbench.core.advisor.grad_signal import block_grad_signal
from workbench.core.advisor.profile import AdvisorError


class Net(nn.Module):
    """Three blocks and a head; block b1's weights are scaled down 1000x.

    b1's gradient is then large relative to its tiny weights (first), while b0's gradient has to
    pass through b1's tiny weights and nearly vanishes (last).
    """

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.b0 = nn.Sequential(nn.Linear(8, 8), nn.Tanh())
        self.b1 = nn.Sequential(nn.Linear(8, 8), nn.Tanh())
        self.b2 = nn.Sequential(nn.Linear(8, 8), nn.Tanh())
        self.fc = nn.Linear(8, 3)
        with torch.no_grad():
            for p in self.b1.parameters():
                p.mul_(1e-3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.b2(self.b1(self.b0(x))))


def _batches(n: int = 3):
    gen = torch.Generator().manual_seed(1)
    return [(torch.randn(16, 8, generator=gen), torch.randint(3, (16,), generator=gen)) for _ in range(n)]


def _loss(model: nn.Module, batch) -> torch.Tensor:
    return nn.functional.cross_entropy(model(batch[0]), batch[1])


def test_order_follows_the_measured_signal():
    model = Net()
    before = [p.detach().clone() for p in model.parameters()]
    signal = block_grad_signal(model, ["b0", "b1", "b2"], _batches(), _loss)
    assert signal.order == sorted(signal.signal, key=lambda b: -signal.signal[b])
    assert signal.order[0] == "b1" and signal.order[-1] == "b0"
    # the weights are untouched and no gradient is left behind
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))
    assert all(p.grad is None for p in model.parameters())


def test_signal_is_the_relative_gradient_norm_of_the_block():
    model = Net()
    batches = _batches(2)
    signal = block_grad_signal(model, ["b0", "b1", "b2"], batches, _loss)
    expected = 0.0
    for batch in batches:
        model.zero_grad()
        _loss(model, batch).backward()
        g = math.sqrt(sum(float(p.grad.pow(2).sum()) for p in model.b2.parameters()))
        w = math.sqrt(sum(float(p.detach().pow(2).sum()) for p in model.b2.parameters()))
        expected += g / w / len(batches)
    assert signal.signal["b2"] == pytest.approx(expected, rel=1e-5)


def test_top_k_candidates_unfreeze_blocks_in_signal_order():
    model = Net()
    signal = block_grad_signal(model, ["b0", "b1", "b2"], _batches(), _loss)
    advice = advise(model, 10**9, (16, 8), block_order=signal.order)
    top = [a.candidate for a in advice.assessed if a.candidate.kind == "top_k"]
    assert [c.k for c in top] == [1, 2]
    assert trainable_names(top[0], model) == {"b1.0.weight", "b1.0.bias", "fc.weight", "fc.bias"}
    assert {n.split(".")[0] for n in trainable_names(top[1], model)} == {"b1", "b2", "fc"}
    assert not any(a.candidate.kind == "last_k" for a in advice.assessed)
    # a frozen block after a trained one saves nothing for its weight gradients (here its input is
    # the tanh output b1 keeps anyway) and has no gradients or state: top-1 (b1 + head) predicts
    # less than training b1 and everything after it
    depth = advise(model, 10**9, (16, 8))
    last2 = next(a for a in depth.assessed if a.candidate.name.startswith("last 2 blocks"))
    assert advice.assessed[1].candidate is top[0]
    assert 0 < advice.assessed[1].memory.activations <= last2.memory.activations
    assert advice.assessed[1].memory.peak < last2.memory.peak


def test_block_order_must_name_the_blocks():
    model = Net()
    with pytest.raises(AdvisorError, match="block order"):
        advise(model, 10**9, (16, 8), block_order=["b0", "b1"])


def test_cli_rank_by_grad_signal(capsys):
    rc = main(["advise", "resnet18", "--memory", "1GB", "--image-size", "32", "--batch-size", "4", "--device", "cpu",
               "--rank-by", "grad-signal"])
    out, _ = capsys.readouterr()
    assert rc == 0
    assert "by gradient signal" in out and "relative gradient norm" in out
