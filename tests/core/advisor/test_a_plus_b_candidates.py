"""DoRA and full-rank A+B candidates: predicted against a real run's peak, on the front, in a sweep's plans."""

import pytest
import torch
from torch import nn

from workbench.core.advisor.advice import advise
from workbench.core.advisor.measure import measure_peak
from workbench.core.advisor.sweep_candidates import advice_plans
from workbench.core.freezing.reparam.full import APlusB
from workbench.core.training.config import TrainConfig
from workbench.core.training.data import synthetic_for_model
from workbench.core.training.engine import Trainer

#: 8 px images with 64 channels: the weights weigh about as much as the activations, so a
#: missing weight-sized copy (A, DoRA's product) shows in the peak.
SHAPE = (4, 3, 8, 8)
DORA = "DoRA r=16 on the conv layers of 2 blocks + head"
FULL_RANK = "full-rank A+B on the conv layers of 2 blocks + head"


class Tiny(nn.Module):
    """A stem, two blocks of convolution + BatchNorm, a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 64, 3, padding=1)
        self.block1 = nn.Sequential(nn.Conv2d(64, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU())
        self.block2 = nn.Sequential(nn.Conv2d(64, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU())
        self.fc = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.block2(self.block1(self.stem(x))).mean((2, 3)))


def _model() -> nn.Module:
    torch.manual_seed(0)
    return Tiny()


@pytest.fixture(scope="module")
def advice():
    return advise(_model(), 2**30, SHAPE, optimizer="adamw")


def test_dora_and_full_rank_come_after_low_rank_and_before_full_fine_tuning(advice):
    names = [a.candidate.name for a in advice.assessed if not a.candidate.bn_eval]
    low = [n for n in names if n.startswith("low-rank A+B")]
    assert names.index(DORA) == names.index(low[-1]) + 1
    assert names.index(FULL_RANK) == names.index(DORA) + 1
    assert names.index("full fine-tuning") == names.index(FULL_RANK) + 1


def test_full_rank_predicts_b_and_a_as_large_as_the_weights(advice):
    by_name = {a.candidate.name: a for a in advice.assessed}
    full, fr = by_name["full fine-tuning"], by_name[FULL_RANK]
    adapted = 2 * 64 * 64 * 9 + 2 * 64  # both blocks' convolutions, weight and bias
    assert fr.trainable_params == adapted + 64 * 10 + 10  # every B (as W = A + B), and the head
    assert fr.memory.weights - full.memory.weights == 4 * adapted  # A: a fixed copy of each
    assert fr.memory.optimizer_state == 2 * fr.memory.gradients == 2 * 4 * fr.trainable_params
    # the step of training those layers: backward from block1 on, no weight gradient for the stem
    last2 = by_name["last 2 blocks (block1..block2) + head"]
    assert last2.step_ratio * 0.99 <= fr.step_ratio <= last2.step_ratio


@pytest.mark.parametrize("name", [DORA, FULL_RANK])
def test_predicted_peak_within_15_percent_of_a_real_run(advice, name):
    a = next(x for x in advice.assessed if x.candidate.name == name)
    model = _model()
    data = synthetic_for_model(model, 4 * SHAPE[0], image_size=SHAPE[-1], num_classes=10)
    cfg = TrainConfig(plan=a.candidate.plan.to_dict(), batch_size=SHAPE[0], optimizer="adamw", steps=4,
                      device="cpu", allow_download=False).validate()
    trainer = Trainer(cfg, model=model, dataset=data)
    trainer.setup()
    gen = trainer.steps()
    measured = measure_peak(trainer, gen, 3, name)
    last = list(gen)[-1]
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == a.trainable_params
    assert abs(a.memory.peak - measured) <= 0.15 * measured, (name, a.memory.peak, measured)
    # the run's own CPU peak (peak tensor bytes) holds what a fused full-rank A keeps beside the model
    assert last.mem_peak is not None and abs(a.memory.peak - last.mem_peak) <= 0.15 * last.mem_peak


def test_both_are_on_the_front_and_in_the_sweeps_plans(advice):
    front = [a.candidate.name for a in advice.front_assessed]
    assert DORA in front and FULL_RANK in front
    plans = [name for name, _plan, _over in advice_plans(advice)]
    assert DORA in plans and FULL_RANK in plans
    assert {DORA, FULL_RANK} <= {c["name"] for c in advice.to_dict()["candidates"]}  # advise --json


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
@pytest.mark.parametrize("mode", ["fused", "exact"])
def test_a_user_plans_full_rank_a_plus_b_is_predicted_within_15_percent(mode, optimizer):
    """predict_plan (the prediction of a plan file, as ``workbench bench`` shows it) counts what A+B keeps beside
    the model: fused mode's fixed copies A live in the plan's handles, not in the model (a sixth of the peak here)."""
    from workbench.core.advisor.advice import predict_plan
    from workbench.core.plan import FreezePlan

    plan = FreezePlan.from_dict({"rules": [
        {"select": "*", "frozen": True}, {"select": "fc", "frozen": False},
        {"select": "type:Conv2d", "frozen": False,
         "reparam": {"kind": "a_plus_b", "a": "current", "b_init": "zeros", "mode": mode}}]})
    predicted = predict_plan(_model(), plan, SHAPE, optimizer=optimizer).peak
    model = _model()
    data = synthetic_for_model(model, 4 * SHAPE[0], image_size=SHAPE[-1], num_classes=10)
    cfg = TrainConfig(plan=plan.to_dict(), batch_size=SHAPE[0], optimizer=optimizer, steps=4, device="cpu",
                      allow_download=False).validate()
    trainer = Trainer(cfg, model=model, dataset=data)
    trainer.setup()
    gen = trainer.steps()
    measured = measure_peak(trainer, gen, 3, mode)
    last = list(gen)[-1]
    # exact mode's weight-sized buffers W = A + B, made at set-up and kept, count in both measurements
    assert (mode == "exact") == any(isinstance(m, APlusB) and m._w is not None for m in model.modules())
    assert abs(predicted - measured) <= 0.15 * measured, (mode, predicted, measured)
    assert last.mem_peak is not None and abs(predicted - last.mem_peak) <= 0.15 * last.mem_peak, (mode, last.mem_peak)


def test_exact_a_plus_b_steps_cost_what_fused_ones_do_plus_the_sum() -> None:
    """Exact mode's layers read ``W = A + B``, a tensor the parametrization computes, not a parameter: their weight
    gradients (the gradient reaches B through W) count, so its step costs fused mode's plus the adds."""
    from workbench.core.advisor.predict import step_flops
    from workbench.core.advisor.profile import profile_model
    from workbench.core.models.meta_copy import meta_copy
    from workbench.core.plan import FreezePlan

    flops = {}
    for mode in ("fused", "exact"):
        plan = FreezePlan.from_dict({"rules": [
            {"select": "*", "frozen": True}, {"select": "fc", "frozen": False},
            {"select": "type:Conv2d", "frozen": False,
             "reparam": {"kind": "a_plus_b", "a": "current", "b_init": "zeros", "mode": mode}}]})
        meta = meta_copy(_model())
        plan.apply(meta)
        names = {n for n, p in meta.named_parameters() if p.requires_grad}
        flops[mode] = step_flops(profile_model(meta, SHAPE, trainable=names, in_place=True), names, "sgd")
    # W = A + B per step, counted as forward, as B's gradient, and after the first layer as an input's gradient
    adds = 3 * (3 * 64 * 9 + 64 + 2 * (64 * 64 * 9 + 64))
    assert flops["fused"] < flops["exact"] <= flops["fused"] + adds, flops
