"""Candidates for any model: the last k top-level layers when there are no blocks, low rank on convolutions."""

from __future__ import annotations

import torch
from torch import nn

from workbench.core.advisor.advice import advise
from workbench.core.advisor.candidates import generate_candidates, layer_sequence, trainable_names
from workbench.core.advisor.profile import profile_model
from workbench.core.advisor.sweep_candidates import advice_plans


class Flat(nn.Module):
    """CREPE's shape: convolutions each with its BatchNorm, at the top level, then a classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, (9, 1), stride=(4, 1), padding=(4, 0))
        self.conv1_BN = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, (5, 1), padding=(2, 0))
        self.conv2_BN = nn.BatchNorm2d(8)
        self.conv3 = nn.Conv2d(8, 8, (5, 1), padding=(2, 0))
        self.conv3_BN = nn.BatchNorm2d(8)
        self.classifier = nn.Linear(8, 12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x[:, None, :, None]
        for i in (1, 2, 3):
            x = torch.relu(getattr(self, f"conv{i}_BN")(getattr(self, f"conv{i}")(x)))
        return self.classifier(x.mean((2, 3)))


def test_a_model_without_blocks_gets_last_k_layers_and_low_rank_convolutions() -> None:
    model = Flat()
    profile = profile_model(model, (4, 64))
    assert layer_sequence(model, profile, ["classifier"]) == ["conv1", "conv2", "conv3"]
    cands = {c.name: c for c in generate_candidates(model, profile, ranks=(2, 64))}
    last2 = cands["last 2 layers (conv2..conv3) + head"]
    names = trainable_names(last2, model)
    assert {"conv2.weight", "conv2_BN.weight", "conv3.bias", "conv3_BN.bias", "classifier.weight"} <= names
    assert not any(n.startswith(("conv1.", "conv1_BN.")) for n in names)
    assert "last 1 layer (conv3) + head" in cands and "last 3 layers (conv1..conv3) + head" not in cands  # that is full
    low = cands["low-rank A+B r=2 on the conv layers of 3 layers + head"]
    assert not any("r=64" in n for n in cands)  # larger than conv1 allows (8 outputs)
    applied = low.plan.apply(model)
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    assert any("conv1" in n and "wb_lowrank" in n for n in trained) and "classifier.weight" in trained
    out = model(torch.randn(4, 64))
    out.sum().backward()
    applied.remove()
    assert "last 2 layers (conv2..conv3) + head · BN eval" in cands


def test_the_advisor_predicts_every_candidate_of_a_model_without_blocks() -> None:
    advice = advise(Flat(), 2**30, (4, 64), ranks=(2,), dora_ranks=(2,))
    kinds = {a.candidate.kind for a in advice.assessed}
    assert {"head", "last_k", "low_rank", "full_rank", "full"} <= kinds
    low = next(a for a in advice.assessed if a.candidate.kind == "low_rank")
    assert 0 < low.trainable_params < sum(p.numel() for p in Flat().parameters())
    # the sweep's plans (the front, then auto-freeze) include DoRA and full-rank A+B on the convolutions
    plans = [name for name, _plan, _over in advice_plans(advice)]
    assert "DoRA r=2 on the conv layers of 3 layers + head" in plans
    assert "full-rank A+B on the conv layers of 3 layers + head" in plans
