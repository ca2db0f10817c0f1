"""The freeze doctor: every finding from a fixture that reproduces the broken pattern, and no
finding on correct setups (workbench plans on resnet18, mobilenet_v3_small, vit_b_16)."""

from __future__ import annotations

import json
import mmap
import time

import pytest
import torch
import torchvision
from torch import nn

from tests.fixtures.broken_patterns import DataAssignAPlusB, HandWrittenAPlusB, make_a_b
from workbench.cli import main
from workbench.core.checks import doctor
from workbench.core.checks.watch import _growth
from workbench.core.formatting import fmt_bytes
from workbench.core.freezing import partial
from workbench.core.plan.rules import FreezePlan

#: Findings about wall time and process memory: on a shared CI machine other processes move
#: them, so the no-false-positive runs leave them out (their detector is tested on series).
TIMING = {"step-time-growing", "memory-growing"}


def codes(findings) -> dict[str, str]:
    return {f.code: f.severity for f in findings}


def mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 4))


def cnn() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 3), nn.BatchNorm2d(4),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(),
    )


def train(model, opt, steps, make_loss, *, watch_steps=None, before_step=None):
    with doctor.watch(model, opt, steps=watch_steps or steps) as w:
        for _ in range(steps):
            if before_step is not None:
                before_step()
            opt.zero_grad()
            loss = make_loss()
            loss.backward()
            w.after_backward(loss)
            opt.step()
    return w


# ---------------------------------------------------------------- A+B written by hand (seed 000)
def test_hand_written_a_plus_b_with_retain_grad():
    pre = mlp()
    a, b = make_a_b(pre)
    net = HandWrittenAPlusB(pre, b)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    x = torch.randn(4, 32)
    w = train(net, opt, 8, lambda: net(x, a).mean())
    got = codes(w.findings())
    assert got["graph-growing"] == "error"
    assert w.summary()["graph_nodes"][-1] > w.summary()["graph_nodes"][2] > 0
    static = doctor.check(net, opt)
    leaf = next(f for f in static if f.code == "non-leaf-parameter")
    assert leaf.severity == "error" and leaf.path == "pre_model" and "retain_grad" in leaf.message
    assert "parametrize" in leaf.fix


def test_param_data_assign_cuts_b_out_of_the_graph():
    pre = mlp()
    a, b = make_a_b(pre)
    net = DataAssignAPlusB(pre, a, b)
    head = nn.Linear(4, 2)  # something else trains, so backward runs
    model = nn.Sequential(net, head)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    x = torch.randn(4, 32)
    w = train(model, opt, 4, lambda: model(x).mean())
    found = {f.code: f for f in w.findings()}
    assert found["no-gradient"].severity == "error" and found["no-gradient"].path == "0.B"
    assert "4 trainable parameters" in found["no-gradient"].message
    assert found["frozen-changed"].path == "0.pre_model"  # the pretrained weights were overwritten


def test_workbench_a_plus_b_is_clean():
    model = mlp()
    plan = FreezePlan.from_dict({"rules": [{"select": "*", "reparam": {"kind": "a_plus_b"}}]})
    applied = plan.apply(model)
    opt = torch.optim.AdamW(applied.param_groups(1e-3, 0.01))
    x = torch.randn(4, 32)
    w = train(model, opt, 6, lambda: model(x).pow(2).mean())
    assert [f for f in w.findings() if f.code not in TIMING] == []
    assert doctor.check(model, opt, plan) == []


# ---------------------------------------------------------------- gradient hooks (seed 001)
def test_mask_hook_suggests_true_partial_freezing():
    model = mlp()
    mask = torch.ones(16, 32)
    mask[:, 10:] = 0  # "freeze" input columns 10.. by zeroing their gradient
    model[0].weight.register_hook(lambda g: g * mask)
    found = next(f for f in doctor.check(model, torch.optim.AdamW(model.parameters())) if f.code == "grad-hook-mask")
    assert found.severity == "warning" and found.path == "0" and "69%" in found.message
    rule = json.loads(found.fix.split("plan rule ", 1)[1])
    assert rule == {"select": "0", "partial": {"param": "weight", "dim": 1, "trainable": [[0, 10]]}}
    assert partial.parse_spec(rule["partial"]) == rule["partial"]
    fixed = mlp()
    applied = FreezePlan.from_dict({"rules": [rule]}).apply(fixed)  # the suggestion applies as is
    assert doctor.check(fixed, torch.optim.AdamW(applied.param_groups(1e-3))) == []


def test_hook_that_zeroes_everything_and_harmless_hooks():
    model = mlp()
    model[0].weight.register_hook(lambda g: torch.zeros_like(g))
    model[2].weight.register_hook(lambda g: g * 2.0)  # scaling is not freezing
    got = doctor.check(model)
    assert codes(got) == {"grad-hook-zeroes": "warning"}
    assert got[0].path == "0"

    def in_place(g):
        g[:5] = 0  # in place, returns None
    model = mlp()
    model[0].weight.register_hook(in_place)
    assert codes(doctor.check(model)) == {"grad-hook-mask": "warning"}
    assert codes(doctor.check(model, probe_hooks=False)) == {"grad-hook": "info"}


def test_hook_that_cannot_be_probed_is_reported_as_info():
    model = mlp()

    def picky(g):
        raise RuntimeError("only during backward")
    model[0].weight.register_hook(picky)
    got = doctor.check(model)
    assert codes(got) == {"grad-hook": "info"} and "could not probe" in got[0].message


def test_post_accumulate_hook_that_masks_is_probed():
    model = mlp()

    def mask_rows(p):
        p.grad[8:] = 0
    model[0].weight.register_post_accumulate_grad_hook(mask_rows)
    before = model[0].weight.grad
    found = [f for f in doctor.check(model) if f.code == "grad-hook-mask"]
    assert found and '"dim": 0, "trainable": [[0, 8]]' in found[0].fix
    assert model[0].weight.grad is before  # the probe put the gradient back


# ---------------------------------------------------------------- BatchNorm and optimizer (seed 003)
def test_bn_frozen_but_training_and_adam_over_all_params():
    model = cnn()
    for p in model.parameters():
        p.requires_grad = False
    model[3].weight.requires_grad = True
    model[3].bias.requires_grad = True
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)  # all parameters, after freezing
    found = {f.code: f for f in doctor.check(model, opt)}
    assert found["bn-frozen-train-mode"].severity == "warning"
    assert "2 frozen BatchNorm modules" in found["bn-frozen-train-mode"].message
    fio = found["frozen-in-optimizer"]
    assert fio.severity == "warning" and "6 frozen parameters" in fio.message
    frozen_bytes = sum(p.numel() * 4 for p in model.parameters() if not p.requires_grad)
    assert f"would hold {fmt_bytes(2 * frozen_bytes)} (2x their size)" in fio.why
    x = torch.randn(2, 3, 8, 8)
    w = train(model, opt, 3, lambda: model(x).sum())
    runtime = {f.code: f for f in w.findings()}
    assert runtime["bn-frozen-train-mode"].severity == "warning"  # running stats really moved


def test_frozen_param_with_stale_grad_will_move():
    model = mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(2, 32)).sum().backward()
    opt.step()
    opt.zero_grad(set_to_none=False)  # zero grads stay allocated
    for p in model[0].parameters():
        p.requires_grad = False  # "freeze" mid-training without rebuilding the optimizer
    found = {f.code: f for f in doctor.check(model, opt)}
    assert found["frozen-param-stepped"].severity == "error" and found["frozen-param-stepped"].path == "0"
    assert "of optimizer state now" in found["frozen-in-optimizer"].why
    w0 = model[0].weight.detach().clone()
    opt.step()  # the doctor is right: the "frozen" weight moves
    assert not torch.equal(w0, model[0].weight)


def test_model_train_after_bn_eval_undoes_it():
    model = cnn()
    for p in model.parameters():
        p.requires_grad = False
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.eval()
    model.train()  # the classic: bn.eval() first, model.train() later
    assert "bn-frozen-train-mode" in codes(doctor.check(model))
    for m in model.modules():  # the "fix": eval after train() -- until the next train()
        if isinstance(m, nn.BatchNorm2d):
            m.eval()
    found = {f.code: f for f in doctor.check(model)}
    assert found["bn-eval-unlocked"].severity == "warning" and found["bn-eval-unlocked"].path == ""
    head = nn.Linear(4, 2)
    full = nn.Sequential(model, head)
    opt = torch.optim.SGD(head.parameters(), lr=0.1)
    x = torch.randn(2, 3, 8, 8)
    w = train(full, opt, 3, lambda: full(x).sum(), before_step=full.train)  # train() every step
    assert codes(w.findings())["bn-eval-stats-changed"] == "error"


def test_locked_bn_has_no_findings():
    model = cnn()
    plan = FreezePlan.from_dict({"rules": [{"select": "*", "frozen": True}, {"select": "3", "frozen": False}]})
    applied = plan.apply(model)
    model.train()
    opt = torch.optim.SGD(applied.param_groups(0.1), lr=0.1)
    assert doctor.check(model, opt, plan) == []
    x = torch.randn(2, 3, 8, 8)
    w = train(model, opt, 3, lambda: model(x).sum(), before_step=model.train)
    assert [f for f in w.findings() if f.code not in TIMING] == []


def test_head_replaced_after_the_optimizer_and_duplicate_groups(resnet18):
    for p in resnet18.parameters():
        p.requires_grad = False
    opt = torch.optim.Adam([p for p in resnet18.parameters() if p.requires_grad] or [nn.Parameter(torch.zeros(1))])
    resnet18.fc = nn.Linear(512, 10)  # new head: trainable, but not in the optimizer
    found = {f.code: f for f in doctor.check(resnet18, opt)}
    assert found["trainable-not-in-optimizer"].severity == "error" and found["trainable-not-in-optimizer"].path == "fc"
    assert found["head-only-trainable"].severity == "info" and found["head-only-trainable"].path == "fc"
    opt = torch.optim.SGD([{"params": [resnet18.fc.weight, resnet18.fc.bias]}], lr=0.1)
    opt.param_groups[0]["params"].append(resnet18.fc.bias)  # torch refuses this at construction only
    assert codes(doctor.check(resnet18, opt))["param-in-two-groups"] == "error"


def test_tied_weights_partly_frozen():
    model = mlp()
    model[2].weight = nn.Parameter(model[0].weight.data[:4, :16])  # shares memory with 0.weight
    model[0].weight.requires_grad = False
    found = [f for f in doctor.check(model) if f.code == "tied-partly-frozen"]
    assert found and "0.weight (frozen) shares memory with 2.weight" in found[0].message

    emb = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 10, bias=False))
    emb[1].weight = emb[0].weight  # the same tensor
    plan = FreezePlan.from_dict({"rules": [{"select": "0", "frozen": True}]})
    found = [f for f in doctor.check(emb, plan=plan) if f.code == "tied-partly-frozen"]
    assert found and "the plan freezes 0.weight but trains 1.weight" in found[0].message


def test_model_that_does_not_follow_its_plan(resnet18):
    plan = FreezePlan.from_dict({"rules": [{"select": "*", "frozen": True}, {"select": "fc", "frozen": False}]})
    found = {f.code: f for f in doctor.check(resnet18, plan=plan)}
    assert found["plan-not-applied"].severity == "error" and "apply" in found["plan-not-applied"].fix
    bad = FreezePlan.from_dict({"rules": [{"select": "fc", "lr_scale": 0}]})
    assert codes(doctor.check(resnet18, plan=bad))["lr-scale-zero"] == "warning"  # the linter's findings


def test_zero_and_nonfinite_gradients():
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    x = torch.randn(4, 32)
    w = train(model, opt, 3, lambda: (model[0](x) * 0).sum() + model(x).sum() * 0 + model[2].bias.sum())
    got = {f.code: f for f in w.findings()}
    assert got["zero-gradient"].severity == "error"
    assert got["zero-gradient"].message.endswith("in 3 steps: 0, 2")  # 2.bias did get a gradient
    w = train(model, opt, 2, lambda: model(x).sum() * float("nan"))
    assert codes(w.findings())["nonfinite-gradient"] == "error"


def test_growth_detector_needs_a_real_trend():
    flat = [100.0 + (7 * i % 11) - 5 for i in range(30)]  # noise of +-5%
    assert _growth(flat, 0.2, 0.0) is None
    spike = [100.0] * 20 + [400.0] * 2 + [100.0] * 8  # a few slow steps (gc, another process)
    assert _growth(spike, 0.2, 0.0) is None
    rising = [100.0 + 3 * i + (7 * i % 11) - 5 for i in range(30)]
    slope, first, last = _growth(rising, 0.2, 0.0)
    assert slope == pytest.approx(3.0, rel=0.1) and last > first
    assert _growth(rising[:5], 0.2, 0.0) is None  # too few steps to tell


def test_watch_reports_growing_step_time_and_memory():
    """A loop that keeps 16 MB per step and gets slower every step (a leak, simulated).

    Each block is a fresh anonymous mapping with every page touched, so the process RSS grows
    for real whatever earlier tests freed (a tensor could reuse freed heap memory).
    """
    model = mlp()
    kept = []
    w = doctor.watch(model, None, steps=12).start()
    for i in range(12):
        block = mmap.mmap(-1, 16 << 20)
        block.write(b"\1" * (16 << 20))
        kept.append(block)  # 16 MB kept alive
        time.sleep(0.02 * i)  # 0 to 220 ms: a trend well above a loaded machine's noise
        w.step()
    got = {f.code: f for f in w.findings()}
    assert got["memory-growing"].severity == "warning" and "per step" in got["memory-growing"].message
    assert got["step-time-growing"].severity == "warning" and "ms per step" in got["step-time-growing"].message
    for block in kept:
        block.close()


def test_watch_stops_after_steps_and_records_without_optimizer():
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(2, 32)
    with doctor.watch(model, opt, steps=2) as w:
        for _ in range(5):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
            if w.done:
                break
    assert len(w.step_ms) == 2 and w.done
    w2 = doctor.watch(model, None, steps=3).start()
    for _ in range(3):
        model.zero_grad()
        model(x).sum().backward()
        w2.step()
    assert [f for f in w2.findings() if f.code not in TIMING] == []
    assert w2.summary()["steps"] == 3
    with pytest.raises(ValueError, match="steps must be >= 1"):
        doctor.watch(model, opt, steps=0)


# ---------------------------------------------------------------- no false positives
CASES = {
    "resnet18": (
        lambda: torchvision.models.resnet18(weights=None, num_classes=10),
        [
            {"select": "*", "frozen": True},
            {"select": "layer4", "frozen": False, "lr_scale": 0.1},
            {"select": "layer4.*.conv1", "reparam": {"kind": "a_plus_b"}},
            {"select": "layer4.1.conv2", "reparam": {"kind": "a_plus_b", "mode": "fused"}},
            {"select": "fc", "frozen": False},
        ],
        32,
    ),
    "mobilenet_v3_small": (
        lambda: torchvision.models.mobilenet_v3_small(weights=None, num_classes=10),
        [
            {"select": "*", "frozen": True},
            {"select": "features.12", "frozen": False},
            {"select": "classifier", "frozen": False},
            {"select": "classifier.0", "reparam": True},
        ],
        32,
    ),
    # vit_b_16's modules (12 encoder layers, class token, heads) at a width of 32; the full-size
    # model is checked by test_no_findings_on_full_size_vit_b_16_static
    "vit_b_16_layout": (
        lambda: torchvision.models.VisionTransformer(image_size=32, patch_size=16, num_layers=12, num_heads=2,
                                                     hidden_dim=32, mlp_dim=64, num_classes=10),
        [
            {"select": "*", "frozen": True},
            {"select": "encoder.layers.encoder_layer_11", "frozen": False, "lr_scale": 0.5},
            {"select": "heads", "frozen": False},
        ],
        32,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_no_findings_on_workbench_plans(name):
    build, rules, size = CASES[name]
    torch.manual_seed(0)
    model = build()
    plan = FreezePlan.from_dict({"rules": rules})
    applied = plan.apply(model)
    opt = torch.optim.AdamW(applied.param_groups(1e-3, 0.01))
    model.train()
    assert doctor.check(model, opt, plan) == []
    x, y = torch.randn(2, 3, size, size), torch.tensor([1, 2])
    w = train(model, opt, 3, lambda: nn.functional.cross_entropy(model(x), y), before_step=model.train)
    assert [f for f in w.findings() if f.code not in TIMING] == []
    assert doctor.check(model, opt, plan) == []


def test_no_findings_on_full_size_vit_b_16_static():
    model = torchvision.models.vit_b_16(weights=None)
    plan = FreezePlan.from_dict({"rules": [{"select": "*", "frozen": True}, {"select": "heads", "frozen": False}]})
    applied = plan.apply(model)
    assert doctor.check(model, torch.optim.AdamW(applied.param_groups(1e-3)), plan) == []


# ---------------------------------------------------------------- command line
def test_cli_doctor_exit_codes(tmp_path, capsys):
    good = tmp_path / "good.json"
    FreezePlan.from_dict({"rules": [{"select": "*", "frozen": True}, {"select": "fc", "frozen": False}]}).save(good)
    argv = ["doctor", "--model", "resnet18", "--num-classes", "4", "--steps", "3", "--image-size", "32", "--batch-size", "2"]
    assert main([*argv, "--plan", str(good), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["watch"]["steps"] == 3
    assert not [f for f in out["findings"] if f["severity"] == "error"]
    bad = tmp_path / "bad.json"
    FreezePlan.from_dict({"rules": [{"select": "*", "frozen": True}]}).save(bad)  # nothing trains
    assert main(["doctor", "--model", "resnet18", "--steps", "0", "--plan", str(bad)]) == 1
    text = capsys.readouterr().out
    assert "ERRORS (1)" in text and "[nothing-trainable]" in text and "fix:" in text


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_watch_on_cuda_measures_device_memory():
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None, num_classes=10)
    plan = FreezePlan.from_dict({"rules": [{"select": "*", "frozen": True}, {"select": "layer4", "frozen": False},
                                           {"select": "fc", "frozen": False}]})
    applied = plan.apply(model)
    model.cuda().train()
    opt = torch.optim.AdamW(applied.param_groups(1e-3, 0.01))
    x, y = torch.randn(4, 3, 64, 64, device="cuda"), torch.tensor([1, 2, 3, 4], device="cuda")
    w = train(model, opt, 8, lambda: nn.functional.cross_entropy(model(x), y))
    assert w.memory_kind == "cuda_allocated" and min(w.memory) > 0
    assert [f for f in w.findings() if f.code not in TIMING] == []
    assert doctor.check(model, opt, plan) == []


def test_dropout_in_a_frozen_subtree_is_flagged_until_eval_locks_it():
    timm = pytest.importorskip("timm")
    import workbench as wb

    model = timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, depth=2, num_classes=5,
        drop_path_rate=0.2, proj_drop_rate=0.1, drop_rate=0.3,
    )
    plan = FreezePlan.from_dict({"rules": [{"select": "*", "frozen": True}, {"select": "head", "frozen": False}]})
    wb.apply_plan(model, plan)
    model.train()
    found = [f for f in doctor.check(model) if f.code == "dropout-in-frozen"]
    assert len(found) == 1 and found[0].path == "blocks" and '"eval": true' in found[0].fix
    assert "head_drop" not in found[0].message  # dropout feeding the trainable head is wanted
    locked = FreezePlan.from_dict({"rules": plan.to_dict()["rules"] + [{"select": "blocks", "eval": True}]})
    model2 = timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, depth=2, num_classes=5,
        drop_path_rate=0.2, proj_drop_rate=0.1,
    )
    wb.apply_plan(model2, locked)
    model2.train()
    assert not [f for f in doctor.check(model2) if f.code == "dropout-in-frozen"]


def test_bitfit_applied_follows_its_plan():
    import workbench as wb

    model = torchvision.models.resnet18(num_classes=4)
    plan = FreezePlan.from_dict({"rules": [{"select": "*", "frozen": True}, {"select": "param:*.bias", "frozen": False}]})
    wb.apply_plan(model, plan)
    model.train()
    assert "plan-not-applied" not in {f.code for f in doctor.check(model, plan=plan)}
    model.fc.weight.requires_grad_(True)
    assert "plan-not-applied" in {f.code for f in doctor.check(model, plan=plan)}
