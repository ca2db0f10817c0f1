"""The array form of the step-memory prediction equals a plain walk over the profile's records."""

from __future__ import annotations

import random
from collections.abc import Collection

import pytest
from torch import nn

from workbench.core.advisor.memory import _activation_peak, _forward_peak, _optimizer_temp, estimate_memory
from workbench.core.advisor.profile import ModelProfile, OpRecord, ParamRecord, SavedStorage, profile_model


def _walk_activation_peak(profile: ModelProfile, trainable: Collection[str], scale: float) -> tuple[int, int, int]:
    """The prediction's definition, one op at a time (the reference)."""
    uses = [p.first_use for p in profile.params if p.name in trainable and p.first_use is not None]
    start = min(uses) if uses else None
    if start is None:
        return 0, 0, 0
    n = len(profile.ops)
    freed_at = [0] * (n + 1)
    saved_total = 0
    for st in profile.saved:
        kept = [s for s in st.saves if s >= start]
        if kept:
            nbytes = int(st.nbytes * scale)
            saved_total += nbytes
            freed_at[min(kept[0], n)] += nbytes
    grad_at = [0] * (n + 1)
    for p in profile.params:
        if p.name in trainable and p.last_use is not None:
            grad_at[p.last_use] += p.nbytes
    alive, grads, peak, largest = saved_total, 0, 0, 0
    for s in range(n - 1, start - 1, -1):
        grads += grad_at[s]
        temp = int(2 * profile.ops[s].out_bytes * scale)
        largest = max(largest, temp)
        peak = max(peak, alive + grads + temp)
        alive -= freed_at[s]
    return saved_total, peak, largest


def _walk_forward_peak(profile: ModelProfile, start: int | None, scale: float) -> int:
    n = len(profile.ops)
    if not profile.transients or not n:
        return 0
    delta = [0] * (n + 2)
    for created, last_use, nbytes, saves in profile.transients:
        kept = start is not None and any(s >= start for s in saves)
        end = n if kept else last_use
        b = int(nbytes * scale)
        delta[created] += b
        delta[min(end, n) + 1] -= b
    alive = peak = 0
    for d in delta:
        alive += d
        peak = max(peak, alive)
    return peak


def _random_profile(rnd: random.Random) -> ModelProfile:
    n = rnd.randint(1, 40)
    ops = [OpRecord(f"m{rnd.randint(0, 5)}", rnd.randint(0, 100), rnd.choice([0, rnd.randint(1, 10**6)]))
           for _ in range(n)]
    params = []
    for i in range(rnd.randint(0, 12)):
        used = sorted(rnd.sample(range(n), k=min(n, rnd.randint(0, 3))))
        numel = rnd.randint(1, 1000)
        params.append(ParamRecord(f"m{i}.w", f"m{i}", numel, numel * rnd.choice([2, 4]),
                                  used[0] if used else None, used[-1] if used else None))
    saved = [SavedStorage(rnd.randint(1, 10**6), tuple(sorted(rnd.sample(range(n + 1), k=rnd.randint(1, min(3, n + 1))))))
             for _ in range(rnd.randint(0, 15))]
    transients = []
    for _ in range(rnd.randint(0, 15)):
        c = rnd.randrange(n)
        transients.append((c, rnd.randint(c, n - 1), rnd.randint(1, 10**6),
                           tuple(sorted(rnd.sample(range(n), k=rnd.randint(0, min(2, n)))))))
    return ModelProfile((2, 3), 24, ops=ops, saved=saved, params=params, transients=transients)


@pytest.mark.parametrize("seed", range(60))
def test_arrays_equal_the_walk_on_random_profiles(seed: int) -> None:
    rnd = random.Random(seed)
    prof = _random_profile(rnd)
    names = [p.name for p in prof.params]
    for _ in range(5):
        trainable = set(rnd.sample(names, k=rnd.randint(0, len(names))))
        for scale in (1.0, 0.5):
            assert _activation_peak(prof, trainable, scale) == _walk_activation_peak(prof, trainable, scale)
            start = rnd.choice([None, *range(len(prof.ops) + 1)])
            assert _forward_peak(prof, start, scale) == _walk_forward_peak(prof, start, scale)
        sizes = [p.nbytes for p in prof.params if p.name in trainable]
        expected = 0 if not sizes else sum(sizes)
        assert _optimizer_temp(prof, trainable, "adamw", foreach=True) == expected
        assert _optimizer_temp(prof, trainable, "sgd", foreach=True) == 0


def test_arrays_equal_the_walk_on_a_real_profile() -> None:
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
    prof = profile_model(model, (4, 3, 16, 16))
    names = [p.name for p in prof.params]
    for k in range(len(names) + 1):
        trainable = set(names[k:])
        for scale in (1.0, 0.5):
            assert _activation_peak(prof, trainable, scale) == _walk_activation_peak(prof, trainable, scale)
        uses = [p.first_use for p in prof.params if p.name in trainable and p.first_use is not None]
        start = min(uses) if uses else None
        assert _forward_peak(prof, start, 1.0) == _walk_forward_peak(prof, start, 1.0)
        est = estimate_memory(prof, trainable, optimizer="adamw", amp="bf16")
        assert est.gradients == sum(p.nbytes for p in prof.params if p.name in trainable)
