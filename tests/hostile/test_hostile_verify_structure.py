"""verify() cannot be fooled by structure: a frozen tensor that left its place is an error.

Each case keeps the frozen values bit-identical (copies, not new values), so only the identity
and place checks can catch it; the report names the path and what changed.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torchvision.models import resnet18

import workbench as wb

FC_ONLY = {"rules": [{"select": "*", "frozen": True}, {"select": "fc", "frozen": False}]}


@pytest.fixture
def net() -> nn.Module:
    torch.manual_seed(0)
    return resnet18(weights=None, num_classes=4)


def _errors(applied: wb.AppliedPlan) -> dict[str, set[str]]:
    report = applied.verify()
    assert not report.ok
    assert report.summary().startswith("verify FAILED")
    out: dict[str, set[str]] = {}
    for v in report.errors:
        out.setdefault(v.name, set()).add(v.kind)
    return out


def test_wrapped_frozen_conv_is_caught(net: nn.Module) -> None:
    applied = wb.apply_plan(net, FC_ONLY)
    block = net.layer1[0]
    block.conv1 = nn.Sequential(copy.deepcopy(block.conv1))  # same values, new place
    errors = _errors(applied)
    assert errors["layer1.0.conv1.weight"] == {"module_replaced"}
    msg = next(v.message for v in applied.verify().errors if v.name == "layer1.0.conv1.weight")
    assert "layer1.0.conv1 was a Conv2d" in msg and "Sequential now" in msg


def test_frozen_weight_tied_to_another_is_caught(net: nn.Module) -> None:
    applied = wb.apply_plan(net, FC_ONLY)
    with torch.no_grad():
        net.layer1[0].conv1.weight.copy_(net.layer1[0].conv2.weight)  # equal values: only the tie differs
    net.layer1[0].conv2.weight = net.layer1[0].conv1.weight
    errors = _errors(applied)
    assert "frozen_replaced" in errors["layer1.0.conv2.weight"]
    assert "frozen_tied" in errors["layer1.0.conv1.weight"]
    msg = next(v.message for v in applied.verify().errors if v.kind == "frozen_tied")
    assert "shares its storage with layer1.0.conv2.weight" in msg


def test_tie_after_apply_with_equal_values_is_caught() -> None:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3), nn.Linear(3, 2))
    with torch.no_grad():
        m[1].weight.copy_(m[0].weight)
    applied = wb.apply_plan(m, {"rules": [{"select": "*", "frozen": True}, {"select": "2", "frozen": False}]})
    m[1].weight = m[0].weight  # values were equal: a value check alone passes
    errors = _errors(applied)
    assert errors == {"0.weight": {"frozen_tied"}, "1.weight": {"frozen_replaced"}}


def test_whole_frozen_stage_replaced_is_caught(net: nn.Module) -> None:
    applied = wb.apply_plan(net, FC_ONLY)
    net.layer1 = nn.Identity()
    errors = _errors(applied)
    assert all(n.startswith("layer1.") for n in errors) and len(errors) > 10
    assert {k for kinds in errors.values() for k in kinds} == {"module_replaced"}
    assert "module layer1 was a Sequential" in applied.verify().errors[0].message


def test_swapped_frozen_tensors_of_one_shape_are_caught(net: nn.Module) -> None:
    applied = wb.apply_plan(net, FC_ONLY)
    a, b = net.layer1[0].conv1, net.layer1[0].conv2
    a.weight, b.weight = b.weight, a.weight
    errors = _errors(applied)
    assert "frozen_replaced" in errors["layer1.0.conv1.weight"] and "frozen_replaced" in errors["layer1.0.conv2.weight"]


def test_bn_replaced_by_identity_is_caught(net: nn.Module) -> None:
    applied = wb.apply_plan(net, FC_ONLY)
    net.layer2[0].bn1 = nn.Identity()
    errors = _errors(applied)
    assert set(errors) >= {"layer2.0.bn1.weight", "layer2.0.bn1.running_mean", "layer2.0.bn1.running_var"}
    report = applied.verify()
    assert report.module_status["layer2.0.bn1"] == "error"


def test_bn_replaced_by_an_equal_copy_is_caught(net: nn.Module) -> None:
    applied = wb.apply_plan(net, FC_ONLY)
    net.bn1 = copy.deepcopy(net.bn1)  # same type, same values, new tensors
    errors = _errors(applied)
    assert errors["bn1.weight"] == {"frozen_replaced"} and errors["bn1.bias"] == {"frozen_replaced"}


def test_parameter_replaced_by_a_buffer_is_caught(net: nn.Module) -> None:
    applied = wb.apply_plan(net, FC_ONLY)
    conv = net.layer1[0].conv1
    w = conv.weight.detach().clone()
    del conv.weight
    conv.register_buffer("weight", w)
    errors = _errors(applied)
    assert errors["layer1.0.conv1.weight"] == {"kind_changed"}


def test_removed_frozen_module_is_caught(net: nn.Module) -> None:
    applied = wb.apply_plan(net, FC_ONLY)
    del net.layer4[1].conv2
    errors = _errors(applied)
    assert errors["layer4.1.conv2.weight"] == {"module_replaced"}
    assert "module layer4.1.conv2 is gone" in next(v.message for v in applied.verify().errors)


def test_a_plus_b_module_replaced_is_caught(net: nn.Module) -> None:
    plan = {"rules": [*FC_ONLY["rules"], {"select": "layer4.1.conv2", "reparam": {"kind": "a_plus_b"}}]}
    applied = wb.apply_plan(net, plan)
    assert applied.verify().ok
    net.layer4[1].conv2 = nn.Conv2d(512, 512, 3, padding=1, bias=False)
    assert not applied.verify().ok


# ------------------------------------------------------------ what must still pass
def test_ties_present_at_apply_time_pass() -> None:
    m = nn.Sequential(nn.Embedding(5, 3), nn.Linear(3, 5, bias=False), nn.Linear(5, 2))
    m[1].weight = m[0].weight  # tied before the plan, as language models are
    applied = wb.apply_plan(m, {"rules": [{"select": "*", "frozen": True}, {"select": "2", "frozen": False}]})
    assert applied.verify().ok


def test_moving_and_training_the_model_pass(net: nn.Module) -> None:
    applied = wb.apply_plan(net, FC_ONLY)
    net.to("cpu").to(memory_format=torch.channels_last)  # new storage, same parameters
    opt = torch.optim.SGD(applied.param_groups(lr=0.1))
    net.train()
    net(torch.randn(2, 3, 32, 32)).sum().backward()
    opt.step()
    net.fc = nn.Linear(512, 4)  # a trainable head may be replaced
    report = applied.verify()
    assert report.ok, str(report)
    assert report.checked["places"] > 50


def test_trainable_module_wrapped_passes(net: nn.Module) -> None:
    applied = wb.apply_plan(net, FC_ONLY)
    net.fc = nn.Sequential(net.fc)
    assert applied.verify().ok
