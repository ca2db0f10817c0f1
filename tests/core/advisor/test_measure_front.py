"""measure_front: candidates measured one after another (results handed out as they finish),
a stop flag checked between steps, a peak read from the process (never the prediction), and
step_ratio_noise: a spread wider than the gap between rows is named."""

from __future__ import annotations

import gc

import pytest
from torchvision.models import resnet18

from workbench.core.advisor.advice import Measured, advise, step_ratio_noise
from workbench.core.advisor.measure import PeakMeter, measure_front
from workbench.core.training.config import TrainConfig
from workbench.core.training.metrics import MEMORY_SOURCES


@pytest.fixture(scope="module")
def advice_and_config():
    advice = advise(resnet18(num_classes=10), 60 * 10**6, (4, 3, 16, 16), optimizer="sgd")
    # one candidate of each kind (head, low-rank, a block with BN eval, full): how measure_front
    # hands results out does not depend on how many there are; every candidate of the 14 is
    # measured by test_advise_cli.py::test_measure_adds_measured_cost
    kinds = ("head only", "low-rank A+B r=4 ", "last 1 block (layer4) + head · BN eval", "full fine-tuning")
    advice.front = [i for i in advice.front if advice.assessed[i].candidate.name.startswith(kinds)
                    and not advice.assessed[i].candidate.name.startswith("full fine-tuning ·")]
    assert len(advice.front) == 4
    config = TrainConfig(model={"source": "torchvision", "name": "resnet18"}, num_classes=10, data="synthetic",
                         image_size=16, batch_size=4, optimizer="sgd", device="cpu", allow_download=False)
    return advice, config


def test_results_arrive_one_candidate_at_a_time(advice_and_config, monkeypatch):
    from workbench.core.training import setup

    advice, config = advice_and_config
    for a in advice.assessed:
        a.measured = None
    builds: list[object] = []
    real_build = setup.build_model
    monkeypatch.setattr(setup, "build_model", lambda *a, **k: builds.append(1) or real_build(*a, **k))
    seen: list[tuple[int, Measured]] = []
    ticks: list[tuple[int, int]] = []
    count = measure_front(advice, config, 2, on_result=lambda i, m: seen.append((i, m)),
                          progress=lambda d, t: ticks.append((d, t)))
    assert count == len(advice.front) == len(seen)
    assert len(builds) == 1  # built once; the warm-up and every candidate train a copy (as a sweep's candidates)
    assert sorted(i for i, _ in seen) == sorted(advice.front)
    full = next(i for i in advice.front if advice.assessed[i].candidate.kind == "full"
                and not advice.assessed[i].candidate.bn_eval)
    assert seen[0][0] == full and seen[0][1].step_ratio == 1.0  # the reference first
    for i, m in seen:
        assert advice.assessed[i].measured is m
        assert m.memory_source == MEMORY_SOURCES["cpu"] and m.peak_bytes > 0
        assert m.peak_bytes != advice.assessed[i].memory.peak
        lo, hi = m.step_ratio_range
        assert lo <= m.step_ratio <= hi and m.steps == 2
    assert [d for d, _ in ticks] == list(range(1, len(ticks) + 1)) and ticks[-1][0] == ticks[-1][1]


def test_stop_ends_between_steps(advice_and_config):
    advice, config = advice_and_config
    for a in advice.assessed:
        a.measured = None
    seen: list[int] = []
    frozen = gc.get_freeze_count()  # 0 unless a test before this one froze objects in this process
    count = measure_front(advice, config, 2, on_result=lambda i, m: seen.append(i), stop=lambda: len(seen) >= 1)
    assert count == 1 == len(seen)
    assert sum(a.measured is not None for a in advice.front_assessed) == 1
    assert gc.get_freeze_count() == frozen  # the objects frozen for the measurement's collections are thawed


def test_a_failing_candidate_thaws_the_frozen_objects(advice_and_config):
    advice, config = advice_and_config

    def fail(i: int, m: Measured) -> None:
        raise RuntimeError("caller's callback failed")

    frozen = gc.get_freeze_count()
    with pytest.raises(RuntimeError, match="callback failed"):
        measure_front(advice, config, 1, on_result=fail)
    assert gc.get_freeze_count() == frozen


def test_objects_frozen_by_someone_else_stay_frozen(advice_and_config):
    """The app freezes a loaded model's objects: a measurement keeps that freeze (thawing it would
    make every later collection, a sweep's after each candidate, walk the whole process again)."""
    advice, config = advice_and_config
    mine = not gc.get_freeze_count()
    held = [object()]  # a tracked container, frozen with the rest
    gc.freeze()
    try:
        seen: list[int] = []
        measure_front(advice, config, 1, on_result=lambda i, m: seen.append(i), stop=lambda: len(seen) >= 1)
        assert seen and gc.get_freeze_count() > 0
        assert not any(o is held for o in gc.get_objects())  # still in the permanent generation, not thawed
    finally:
        if mine:
            gc.unfreeze()


def test_peak_meter_sees_memory_freed_before_the_block_ends():
    import torch

    with PeakMeter("cpu") as meter:
        block = torch.ones(64 * 2**20 // 4)  # 64 MiB, touched, then freed inside the block
        del block
    assert meter.source == "peak RSS growth"
    assert meter.peak is not None and meter.peak >= 60 * 2**20


def _m(ratio: float, lo: float, hi: float) -> Measured:
    return Measured(1, ratio, 1.0, "peak RSS growth", (lo, hi), 3)


def test_noise_is_a_spread_wider_than_the_gap_to_another_row():
    rows = [("a", _m(0.80, 0.47, 3.12)), ("b", _m(1.0, 0.99, 1.01)), ("c", None), ("d", _m(0.5, 0.49, 0.51))]
    notes = step_ratio_noise(rows)
    assert "0.47–3.12" in notes[0] and "'b'" in notes[0]  # 0.20 to b, spread 2.65
    assert notes[1:] == ["", "", ""]
    assert step_ratio_noise([("only", _m(1.0, 0.1, 9.0))]) == [""]  # nothing to compare with
