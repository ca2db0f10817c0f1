import torch
from torch import nn

import workbench as wb
from workbench.core.checks.verify import tensor_digest


def test_digest_is_exact():
    t = torch.randn(10, 10)
    u = t.clone()
    assert tensor_digest(t) == tensor_digest(u)
    u[3, 3] = torch.nextafter(u[3, 3], torch.tensor(1e9))
    assert tensor_digest(t) != tensor_digest(u)
    assert tensor_digest(t.to(torch.bfloat16)) != tensor_digest(t)
    assert tensor_digest(t.t()) != tensor_digest(t)  # layout-independent bytes of a different tensor
    assert tensor_digest(torch.zeros(0)) == tensor_digest(torch.zeros(0))


def test_verify_catches_frozen_change_bn_drift_and_untrained(resnet18):
    applied = wb.apply_plan(resnet18, {"rules": [{"select": "*", "frozen": True}, {"select": "fc", "frozen": False}]})
    with torch.no_grad():
        resnet18.layer1[0].conv1.weight[0, 0, 0, 0] += 1e-6  # a bug that writes to a frozen weight
    # BN forced into train mode by hand (bypassing the plan) drifts
    nn.Module.train(resnet18.layer2[0].bn1, True)
    resnet18(torch.randn(2, 3, 32, 32))
    report = applied.verify()
    kinds = {(v.kind, v.module) for v in report.violations}
    assert ("frozen_changed", "layer1.0.conv1") in kinds
    assert ("bn_stats_changed", "layer2.0.bn1") in kinds
    assert ("trainable_unchanged", "fc") in kinds
    assert not report.ok and report.module_status["layer1.0.conv1"] == "error"
    assert report.module_status["fc"] == "warning" and report.module_status["layer3.0.conv1"] == "ok"
    assert "FAILED" in report.summary() and report.to_dict()["ok"] is False


def test_verify_after_update_checks_newly_frozen_from_that_moment(resnet18):
    applied = wb.apply_plan(resnet18, {"rules": []})
    with torch.no_grad():
        resnet18.fc.weight.add_(1.0)  # trained while trainable
    applied.update(wb.FreezePlan.from_dict({"rules": [{"select": "fc", "frozen": True}]}))
    report = applied.verify()
    assert not [v for v in report.violations if v.kind == "frozen_changed"]
    with torch.no_grad():
        resnet18.fc.weight.add_(1.0)
    assert any(v.kind == "frozen_changed" and v.name == "fc.weight" for v in applied.verify().violations)


def test_unchanged_bn_affine_and_too_few_steps_are_not_reported(resnet18):
    applied = wb.apply_plan(resnet18, {"rules": []})
    fc_before = [t.detach().clone() for t in resnet18.fc.parameters()]
    with torch.no_grad():  # one real-looking update everywhere except the BatchNorm affine parameters
        for name, p in resnet18.named_parameters():
            if "bn" not in name and "downsample.1" not in name:
                p.add_(1e-3)
    report = applied.verify()
    assert not [v for v in report.violations if v.kind == "trainable_unchanged"]
    with torch.no_grad():
        for p, before in zip(resnet18.fc.parameters(), fc_before):
            p.copy_(before)  # fc back to its snapshot: unchanged
    assert {v.module for v in applied.verify().violations} == {"fc"}
    assert not applied.verify(steps=2).violations and {v.module for v in applied.verify(steps=50).violations} == {"fc"}
