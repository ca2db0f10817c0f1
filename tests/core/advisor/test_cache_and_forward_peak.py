"""The advisor's frozen-prefix cache figures and the forward phase of a frozen backbone."""

from __future__ import annotations

import torch
import torchvision

from workbench.core.advisor.advice import advise
from workbench.core.advisor.memory import _forward_peak, estimate_memory
from workbench.core.advisor.profile import profile_model


def test_head_only_gets_a_cached_step_ratio_and_full_fine_tuning_none() -> None:
    advice = advise(torchvision.models.resnet18(), 1 << 34, (4, 3, 32, 32))
    by_kind = {a.candidate.name: a for a in advice.assessed}
    head = by_kind["head only"]
    assert head.cached_step_ratio is not None and head.cached_step_ratio < head.step_ratio / 5
    assert head.cache_row_bytes == 512 * 4
    full = next(a for a in advice.assessed if a.candidate.kind == "full")
    assert full.cached_step_ratio is None and "cached_step_ratio" not in full.to_dict()["predicted"]
    assert head.to_dict()["predicted"]["cache_bytes_per_sample"] == 2048


def test_frozen_forward_keeps_a_residual_branch_alive() -> None:
    """A frozen bottleneck keeps its input (the identity) while its three convs run: more than
    two op outputs at once."""
    model = torchvision.models.resnet50()
    prof = profile_model(model, (2, 3, 64, 64))
    biggest = max(op.out_bytes for op in prof.ops)
    peak = _forward_peak(prof, None, 1.0)
    assert peak > 2 * biggest
    est = estimate_memory(prof, ["fc.weight", "fc.bias"], optimizer="sgd")
    assert est.temporary >= peak


def test_forward_peak_counts_a_storage_until_its_last_reader() -> None:
    prof = profile_model(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8)), (4, 8))
    assert prof.transients and all(c <= u for c, u, _, _ in prof.transients)


class _Cached(torch.nn.Module):
    """Returns, beside its output, a tensor each layer made early (as GPT-2 returns its
    key/value cache): alive until the forward ends although no later op reads it."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(64, 64) for _ in range(4))

    def forward(self, x: torch.Tensor) -> dict[str, object]:
        kept = []
        for layer in self.layers:
            kept.append(x * 2.0)  # the "cache" entry, read by nothing after
            x = torch.relu(layer(x))
        return {"logits": x, "past": tuple(kept)}


def test_what_the_model_returns_lives_to_the_end_of_forward() -> None:
    prof = profile_model(_Cached(), (16, 64))
    one = 16 * 64 * 4
    n = len(prof.ops)
    kept = [(c, u) for c, u, b, _ in prof.transients if b == one and u == n - 1]
    assert len(kept) >= 5  # four cache entries and the logits
    # the four entries are alive together at the end: the frozen forward's peak holds them all
    assert _forward_peak(prof, None, 1.0) >= 5 * one
