"""The exported plain-PyTorch script reproduces the workbench's applied state, without the workbench."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torchvision
from safetensors.torch import save_file
from torch import nn

from tests.fixtures.exported import BLOCK_WORKBENCH, run_exported_script
from tests.preload import python_argv
from workbench.cli import main
from workbench.core.export import ExportError, export_script, render_script
from workbench.core.models.spec import ModelSpec
from workbench.core.plan.rules import FreezePlan

#: Frozen backbone, layer4 at lr x0.1, A+B (exact) on trainable convs of layer3, fused A+B with
#: a random A on layer4.1, one BatchNorm explicitly in train mode, everything else BN-eval.
PLAN = {
    "rules": [
        {"select": "*", "frozen": True},
        {"select": "layer3.*.conv1", "frozen": False, "reparam": {"kind": "a_plus_b"}},
        {"select": "layer4", "frozen": False, "lr_scale": 0.1},
        {"select": "layer4.1", "reparam": {"kind": "a_plus_b", "mode": "fused", "a": {"random": {"seed": 3}}}},
        {"select": "layer2.0.bn1", "bn_eval": False},
        {"select": "fc", "frozen": False},
    ]
}
SPEC = ModelSpec(name="resnet18", weights=None, num_classes=10)
KEYS = ("lr", "lr_scale", "weight_decay", "param_names", "reparam_decay")


def _workbench_state(plan: FreezePlan, spec: ModelSpec, lr: float, wd: float, base_dir: Path | None = None):
    torch.manual_seed(0)
    model = spec.build(allow_download=False)
    applied = plan.apply(model, base_dir=base_dir)
    groups = applied.param_groups(lr, wd)
    model.train()
    params = dict(model.named_parameters())
    state = {
        "trainable": [n for n, p in params.items() if p.requires_grad],
        "trainable_count": sum(p.numel() for p in params.values() if p.requires_grad),
        "total_count": sum(p.numel() for p in params.values()),
        "bn_eval": [n for n, m in model.named_modules() if isinstance(m, nn.BatchNorm2d) and not m.training],
        "groups": [{k: g[k] for k in KEYS if k in g} for g in groups],
    }
    return model, applied, state


def test_script_in_subprocess_equals_workbench(tmp_path):
    plan = FreezePlan.from_dict(PLAN)
    script = export_script(plan, SPEC, tmp_path / "resnet18_freeze.py", lr=1e-3, weight_decay=0.01)
    text = script.read_text()
    assert not re.search(r"^\s*(import|from)\s+workbench\b|import_module|__import__", text, re.M)
    compile(text, str(script), "exec")
    out = tmp_path / "state.json"
    blocker = (
        BLOCK_WORKBENCH + "import runpy; "
        f"sys.argv = [{str(script)!r}, '--describe', {str(out)!r}]; runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    res = subprocess.run(python_argv("-c", blocker), capture_output=True, text=True, cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr
    got = json.loads(out.read_text())
    _, _, want = _workbench_state(plan, SPEC, 1e-3, 0.01)
    assert got["trainable"] == want["trainable"]
    assert got["trainable_count"] == want["trainable_count"] and got["total_count"] == want["total_count"]
    assert got["bn_eval"] == want["bn_eval"] and "layer2.0.bn1" not in got["bn_eval"] and "layer4.0.bn1" not in got["bn_eval"]
    assert [{k: g[k] for k in KEYS if k in g} for g in got["groups"]] == want["groups"]
    assert any("parametrizations.weight.original" in n for n in got["trainable"])  # exact A+B
    assert any(g.get("reparam_decay") for g in got["groups"])  # fused A+B decays toward A


def test_script_in_process_has_identical_tensors(tmp_path):
    """Same weights, A, B, flags and modes as the workbench, tensor for tensor."""
    a_file = tmp_path / "a.safetensors"
    torch.manual_seed(0)
    base = SPEC.build(allow_download=False)
    save_file({"fc.weight": torch.randn_like(base.fc.weight)}, str(a_file))
    plan = FreezePlan.from_dict(
        {
            "rules": [
                *PLAN["rules"],
                {"select": "fc", "reparam": {"kind": "a_plus_b", "a": {"file": "a.safetensors"}, "params": ["weight"],
                                             "b_init": {"random": {"seed": 1, "dist": "normal", "scale": 0.01}}}},
            ]
        }
    )
    model, applied, want = _workbench_state(plan, SPEC, 1e-3, 0.01, base_dir=tmp_path)
    script = export_script(plan, SPEC, tmp_path / "s.py", base_dir=tmp_path)
    assert "'a.safetensors'" in script.read_text()  # relative to the script's folder
    ns = run_exported_script(script)
    torch.manual_seed(0)
    mine = ns["build_model"]()
    ns["apply_freeze_plan"](mine)
    mine.train()
    got_sd, want_sd = mine.state_dict(), model.state_dict()
    assert list(got_sd) == list(want_sd)
    for k in want_sd:
        assert torch.equal(got_sd[k], want_sd[k]), k
    assert [(n, p.requires_grad) for n, p in mine.named_parameters()] == [
        (n, p.requires_grad) for n, p in model.named_parameters()
    ]
    assert torch.equal(mine.fc.weight, model.fc.weight)  # W = A + B from the file and the seeded B
    groups = ns["param_groups"](mine, 1e-3, 0.01, ns["BASE"])
    assert [{k: g[k] for k in KEYS if k in g} for g in groups] == want["groups"]


def test_script_trains_with_stages(tmp_path, monkeypatch, capsys):
    spec = ModelSpec(name="mobilenet_v3_small", weights=None, num_classes=5)
    plan = FreezePlan.from_dict(
        {
            "rules": [{"select": "*", "frozen": True}, {"select": "classifier", "frozen": False}],
            "stages": [{"at_step": 2, "label": "unfreeze last block", "rules": [{"select": "features.12", "frozen": False, "lr_scale": 0.1}]}],
        }
    )
    script = export_script(plan, spec, tmp_path / "m.py", optimizer="sgd")
    ns = run_exported_script(script)
    monkeypatch.setattr(sys, "argv", [str(script), "--steps", "4", "--image-size", "32", "--batch-size", "2"])
    ns["main"]()
    out = capsys.readouterr().out
    assert "step 2: stage unfreeze last block" in out
    assert "step 3: loss" in out


def test_stage_settings_follow_the_plan(tmp_path):
    plan = FreezePlan.from_dict(
        {
            "rules": [{"select": "*", "frozen": True}, {"select": "fc", "frozen": False}],
            "stages": [
                {"at_epoch": 1, "rules": [{"select": "layer3", "frozen": False}]},
                {"at_step": 5, "rules": [{"select": "layer4", "frozen": False, "lr_scale": 0.5}]},
            ],
        }
    )
    script = export_script(plan, SPEC, tmp_path / "s.py")
    ns = run_exported_script(script)
    for step, epoch in ((0, 0), (5, 0), (3, 1), (9, 2)):
        torch.manual_seed(0)
        model = ns["build_model"]()
        ns["apply_freeze_plan"](model)
        key = ns["stage_key"](step, epoch)
        if key != (0, 0):
            ns["apply_settings"](model, ns["STAGES"][key])
        settings = ns["STAGES"][key] if key != (0, 0) else ns["BASE"]
        ref = SPEC.build(allow_download=False)
        applied = plan.at(step, epoch).apply(ref)
        assert [n for n, p in model.named_parameters() if p.requires_grad] == [n for n, _ in applied.named_trainable()]
        got = [(g["lr"], g["param_names"]) for g in ns["param_groups"](model, 1.0, 0.0, settings)]
        assert got == [(g["lr"], g["param_names"]) for g in applied.param_groups(1.0)]


def test_checkpoint_model_is_rebuilt_the_same(tmp_path):
    torch.manual_seed(1)
    trained = torchvision.models.resnet18(weights=None, num_classes=7)
    ckpt = tmp_path / "ft.pt"
    torch.save({"state_dict": {f"module.{k}": v for k, v in trained.state_dict().items()}}, ckpt)
    spec = ModelSpec(name="resnet18", checkpoint=str(ckpt), num_classes=3)
    plan = FreezePlan.from_dict({"rules": [{"select": "*", "frozen": True}, {"select": "fc", "frozen": False}]})
    script = export_script(plan, spec, tmp_path / "c.py")
    assert "CHECKPOINT = 'ft.pt'" in script.read_text()
    ns = run_exported_script(script)
    mine = ns["build_model"]()
    assert mine.fc.out_features == 3
    assert torch.equal(mine.layer4[1].conv2.weight, trained.layer4[1].conv2.weight)


def test_low_rank_and_partial_are_the_workbenchs_tensors_names_and_groups(tmp_path):
    """LoRA (exact, random A), DoRA (fused) and sub-tensor freezing in plain PyTorch: the same
    parameters under the same names, the same values, flags and param groups as the workbench."""
    plan = FreezePlan.from_dict({"rules": [
        {"select": "*", "frozen": True},
        {"select": "layer4.1.conv2", "frozen": False, "reparam": {"rank": 4, "alpha": 8, "a": {"random": {"seed": 5}}}},
        {"select": "layer4.0.conv1", "frozen": False, "reparam": {"rank": 2, "alpha": 2, "dora": True, "mode": "fused"}},
        {"select": "layer3.1.conv1", "frozen": False, "partial": {"param": "weight", "dim": 0, "trainable": [[0, 8], [200, 256]]}},
        {"select": "fc", "frozen": False, "partial": {"param": "weight", "dim": 1, "trainable": [[0, 100]]}},
    ]})
    model, applied, want = _workbench_state(plan, SPEC, 1e-3, 0.01)
    script = export_script(plan, SPEC, tmp_path / "s.py", lr=1e-3, weight_decay=0.01)
    text = script.read_text()
    assert "import peft" not in text and "PARTIAL = [" in text and "'rank': 4" in text
    assert f"trainable: {want['trainable_count']:,} of {want['total_count']:,} parameters" in text
    ns = run_exported_script(script)
    torch.manual_seed(0)
    mine = ns["build_model"]()
    ns["apply_freeze_plan"](mine)
    mine.train()
    got = dict(mine.named_parameters())
    assert [(n, p.requires_grad) for n, p in got.items()] == [(n, p.requires_grad) for n, p in model.named_parameters()]
    for n, p in model.named_parameters():
        assert torch.equal(got[n], p), n
    assert "layer4.0.conv1.wb_lowrank.weight.M" in want["trainable"] and "fc.weight_trainable" in want["trainable"]
    groups = ns["param_groups"](mine, 1e-3, 0.01, ns["BASE"])
    assert [{k: g[k] for k in KEYS if k in g} for g in groups] == want["groups"]
    x = torch.randn(2, 3, 32, 32)
    mine.eval()
    model.eval()
    torch.testing.assert_close(mine(x), model(x))


def test_a_stage_changing_partial_freezing_is_refused():
    plan = FreezePlan.from_dict(
        {"rules": [{"select": "*", "frozen": True}],
         "stages": [{"at_step": 1, "rules": [{"select": "fc", "frozen": False,
                                              "partial": {"param": "weight", "dim": 1, "trainable": [[0, 10]]}}]}]}
    )
    with pytest.raises(ExportError, match="a stage of this plan changes sub-tensor freezing"):
        render_script(plan, SPEC)


def test_stage_changing_a_plus_b_is_refused():
    plan = FreezePlan.from_dict(
        {"rules": [{"select": "*", "frozen": True}],
         "stages": [{"at_step": 1, "rules": [{"select": "fc", "frozen": False, "reparam": True}]}]}
    )
    with pytest.raises(ExportError, match="switches A\\+B"):
        render_script(plan, SPEC)


def test_compact_requires_grad_and_bad_optimizer():
    plan = FreezePlan.from_dict({"rules": [{"select": "*", "frozen": True}, {"select": "layer4", "frozen": False}, {"select": "fc", "frozen": False}]})
    text = render_script(plan, SPEC)
    block = text.split("REQUIRES_GRAD = ", 1)[1].split("\n#", 1)[0]
    assert block.count("(") == 3  # ('', False), ('layer4', True), ('fc', True): not one line per parameter
    with pytest.raises(ExportError, match="optimizer 'lamb'"):
        render_script(plan, SPEC, optimizer="lamb")


def test_cli_export_script_and_plan(tmp_path, capsys):
    plan_path = tmp_path / "p.json"
    FreezePlan.from_dict(PLAN).save(plan_path)
    out = tmp_path / "out.py"
    assert main(["export", "--model", "resnet18", "--num-classes", "10", "--plan", str(plan_path), "--to", str(out)]) == 0
    compile(out.read_text(), str(out), "exec")
    js = tmp_path / "out.json"
    assert main(["export", "--model", "resnet18", "--num-classes", "10", "--plan", str(plan_path), "--to", str(js)]) == 0
    saved = FreezePlan.load(js)
    assert saved.model["name"] == "resnet18" and len(saved.model["fingerprint"]) == 64
    assert main(["export", "--plan", str(plan_path), "--to", str(tmp_path / "x.txt")]) == 2
    assert ".py (script) or .json" in capsys.readouterr().err


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_script_trains_on_cuda(tmp_path, monkeypatch, capsys):
    script = export_script(FreezePlan.from_dict(PLAN), SPEC, tmp_path / "s.py")
    ns = run_exported_script(script)
    monkeypatch.setattr(sys, "argv", [str(script), "--steps", "3", "--image-size", "64", "--batch-size", "4", "--device", "cuda"])
    ns["main"]()
    assert "step 2: loss" in capsys.readouterr().out
