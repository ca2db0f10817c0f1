"""Activation memory and output shapes per module from one meta-device forward pass."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from workbench.core.advisor.activations import (
    DeviceMemory,
    device_memory,
    fit_verdict,
    largest_batch,
    module_activation_bytes,
    output_shapes,
    predict_step,
    profile_activations,
    shape_text,
    unfrozen_param_names,
)
from workbench.core.advisor.profile import AdvisorError


def _net() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
    )


def test_output_shapes_per_module_without_real_compute() -> None:
    model = _net()
    before = [p.detach().clone() for p in model.parameters()]
    shapes, nbytes = output_shapes(model, (4, 3, 32, 32))
    assert shapes["0"] == ((4, 8, 32, 32),)
    assert shapes["2"] == ((4, 16, 16, 16),)
    assert shapes["6"] == ((4, 10),)
    assert shapes[""] == ((4, 10),)
    assert nbytes["2"] == 4 * 16 * 16 * 16 * 4
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # the model is untouched
    assert shape_text((4, 16, 16, 16)) == "4×16×16×16" and shape_text(()) == "scalar"


def test_a_frozen_prefix_keeps_no_activations_and_the_batch_scales_them() -> None:
    model = _net()
    act = profile_activations(model, 4, 32)
    names = [n for n, _ in model.named_parameters()]
    everything = predict_step(act, names, optimizer="sgd")
    head_only = unfrozen_param_names(names, {"0": True, "2": True})
    assert head_only == {"6.weight", "6.bias"}
    head = predict_step(act, head_only, optimizer="sgd")
    assert 0 < head.activations < everything.activations
    per_module = module_activation_bytes(act, head_only)
    assert "0" not in per_module and "2" not in per_module  # frozen prefix: nothing kept
    assert per_module[""] == sum(v for k, v in per_module.items() if k and "." not in k)
    full = module_activation_bytes(act, names)
    assert full["2"] > 0 and full[""] == sum(v for k, v in full.items() if k and "." not in k) > per_module[""]
    double = predict_step(profile_activations(model, 8, 32), names, optimizer="sgd")
    assert double.activations == pytest.approx(2 * everything.activations, rel=0.05)


def test_a_model_that_does_not_take_the_input_says_so() -> None:
    with pytest.raises(AdvisorError, match="shape-only forward pass"):
        output_shapes(nn.Linear(5, 2), (4, 3, 32, 32))


def test_fit_verdicts_and_the_batch_that_fits() -> None:
    pred = predict_step(profile_activations(_net(), 64, 32), [n for n, _ in _net().named_parameters()])
    need = pred.peak
    roomy = DeviceMemory("cpu", 100 * need, 100 * need, "available RAM")
    assert fit_verdict(pred, roomy) == "fits"
    assert fit_verdict(pred, DeviceMemory("cpu", 100 * need, int(need * 1.05), "available RAM")) == "tight"
    short = DeviceMemory("cpu", 100 * need, need // 2, "available RAM")
    assert fit_verdict(pred, short) == "does not fit"
    assert 1 <= largest_batch(pred, short) < 64
    assert fit_verdict(pred, DeviceMemory("cuda:0", pred.without_activations // 2, 0, "GPU memory")) == "impossible"


def test_device_memory_on_the_cpu_is_available_ram() -> None:
    mem = device_memory("cpu")
    assert mem.device == "cpu" and 0 < mem.available <= mem.total and mem.what == "available RAM"
