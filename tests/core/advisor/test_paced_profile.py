"""A paced profile: the same answer as an unpaced one, and no progress between resumes."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from torch import nn

from workbench.core.advisor.activations import Pacer, ProfileCancelledError, output_shapes, profile_activations
from workbench.core.advisor.profile import meta_copy, paced_train


def _net() -> nn.Module:
    blocks = [nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()) for _ in range(6)]
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), *blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))


class _Run:
    """profile_activations on a thread, paced by ``pacer``."""

    def __init__(self, model: nn.Module, pacer: Pacer) -> None:
        self.result: Any = None
        self.error: BaseException | None = None

        def run() -> None:
            try:
                self.result = profile_activations(model, 2, 16, checkpoint=pacer)
            except BaseException as e:  # the test reads it
                self.error = e

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()


def _wait_for(cond: Any) -> None:
    while not cond():
        time.sleep(0.001)


def test_a_paced_profile_equals_an_unpaced_one_and_pauses_at_every_module_and_op() -> None:
    model = _net()
    plain = profile_activations(model, 2, 16)
    pacer = Pacer(slice_s=0.0)  # every checkpoint ends a slice
    run = _Run(model, pacer)
    while run.thread.is_alive():
        pacer.resume()
        time.sleep(0)
    assert run.error is None
    paced = run.result
    assert paced.shapes == plain.shapes and paced.out_bytes == plain.out_bytes
    assert paced.profile.ops == plain.profile.ops and paced.profile.saved == plain.profile.saved
    assert paced.profile.params == plain.profile.params
    assert pacer.pauses == pacer.steps
    modules = len(list(model.modules()))
    # the copy visits every module, the pass enters and leaves each and runs every op: a pause at each
    assert pacer.steps > 3 * modules + len(plain.profile.ops)


def test_one_step_per_resume_and_none_without() -> None:
    pacer = Pacer(slice_s=0.0, max_pause_s=600)
    assert not pacer.waiting
    run = _Run(_net(), pacer)
    _wait_for(lambda: pacer.pauses == 1)
    time.sleep(0.2)  # the other thread holds still meanwhile
    assert pacer.steps == 1 and pacer.waiting
    for n in (2, 3, 4):
        pacer.resume()
        _wait_for(lambda n=n: pacer.pauses == n)
        assert pacer.steps == n
    pacer.release()
    assert not pacer.waiting
    run.thread.join()
    assert run.error is None and run.result is not None
    assert pacer.pauses == 4  # released: no more pauses


def test_a_slice_runs_many_steps_before_it_pauses() -> None:
    pacer = Pacer(slice_s=600.0)
    run = _Run(_net(), pacer)
    run.thread.join()
    assert run.error is None and pacer.pauses == 0 and pacer.steps > 100


def test_cancel_stops_the_copy_and_the_pass() -> None:
    pacer = Pacer(slice_s=0.0, max_pause_s=600)
    run = _Run(_net(), pacer)
    _wait_for(lambda: pacer.pauses == 1)
    pacer.cancel()
    run.thread.join()
    assert isinstance(run.error, ProfileCancelledError) and pacer.cancelled
    with pytest.raises(ProfileCancelledError):
        meta_copy(_net(), pacer)
    with pytest.raises(ProfileCancelledError):
        output_shapes(_net(), (2, 3, 16, 16), checkpoint=pacer)


def test_a_pause_without_a_resume_ends_after_max_pause() -> None:
    pacer = Pacer(slice_s=0.0, max_pause_s=0.001)
    run = _Run(_net(), pacer)
    run.thread.join()
    assert run.error is None and pacer.pauses == pacer.steps > 100


def test_in_place_profiles_a_meta_copy_without_copying_it_again() -> None:
    model = _net()
    meta = meta_copy(model)
    pacer = Pacer(slice_s=600.0)
    act = profile_activations(meta, 2, 16, checkpoint=pacer, in_place=True)
    plain = profile_activations(model, 2, 16)
    assert act.shapes == plain.shapes and act.profile.ops == plain.profile.ops
    copying = Pacer(slice_s=600.0)
    profile_activations(model, 2, 16, checkpoint=copying)
    assert copying.steps > pacer.steps  # the copy's checkpoints


class _KeepsNormInEval(nn.Module):
    """A block whose own train() leaves its norm in eval mode."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 1)
        self.norm = nn.BatchNorm2d(3)

    def train(self, mode: bool = True) -> _KeepsNormInEval:
        super().train(mode)
        self.norm.eval()
        return self


def test_paced_train_sets_the_modes_train_sets_and_calls_the_checkpoint_per_module() -> None:
    def build() -> nn.Module:
        return nn.Sequential(nn.Conv2d(3, 3, 1), _KeepsNormInEval(), nn.Sequential(nn.Dropout(), _KeepsNormInEval()))

    plain, paced = build().eval(), build().eval()
    plain.train()
    calls: list[int] = []
    paced_train(paced, lambda: calls.append(1))
    assert [m.training for m in paced.modules()] == [m.training for m in plain.modules()]
    assert not paced[1].norm.training and paced[2][1].conv.training
    assert len(calls) == len(list(paced.modules()))
