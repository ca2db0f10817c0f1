"""Exported scripts for timm, Hugging Face and your own model code; the plan language in the script.

Each script runs in a subprocess with ``import workbench`` made impossible, and its own imports
(read with ``ast``) are the model's library and nothing it does not need.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from tests.core.models.hf_fixtures import save_folder, tiny_bert, tiny_gpt2
from workbench.cli import main
from workbench.core.export import ExportError, export_script, render_script
from workbench.core.models.spec import ModelSpec
from workbench.core.plan.rules import FreezePlan

pytest.importorskip("timm")
pytest.importorskip("transformers")

KEYS = ("lr", "lr_scale", "weight_decay", "param_names", "reparam_decay")
STDLIB = {"__future__", "argparse", "fnmatch", "json", "types", "pathlib", "zlib", "importlib"}
VIT = ModelSpec(source="timm", name="vit_tiny_patch16_224", num_classes=5)

FACTORY = '''
import torch
from torch import nn


def make():
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Dropout(0.5),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))
    model[0].weight.requires_grad_(False)  # the factory's own choice, kept by "unselected": "keep"
    return model
'''


def _imports(path: Path) -> set[str]:
    """Top-level names of the modules a script imports (anywhere in it)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def _run(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the script with ``import workbench`` impossible."""
    code = (
        "import sys, runpy; sys.modules['workbench'] = None; "
        f"sys.argv = [{str(script)!r}, *{list(args)!r}]; runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=script.parent, env=env,
                          timeout=300)


def _describe(script: Path) -> dict:
    out = script.parent / "state.json"
    res = _run(script, "--describe", str(out))
    assert res.returncode == 0, res.stderr
    return json.loads(out.read_text())


def _workbench_state(plan: FreezePlan, model: nn.Module, lr: float = 1e-3, wd: float = 0.01,
                     no_decay: str | None = None) -> dict:
    applied = plan.apply(model)
    groups = applied.param_groups(lr, wd, no_decay=no_decay)
    model.train()
    return {
        "trainable": [n for n, p in model.named_parameters() if p.requires_grad],
        "eval": [p for p, m in model.named_modules() if not m.training],
        "groups": [{k: g[k] for k in KEYS if k in g} for g in groups],
    }


def _same(got: dict, want: dict) -> None:
    assert got["trainable"] == want["trainable"]
    assert got["eval"] == want["eval"]
    assert [{k: g[k] for k in KEYS if k in g} for g in got["groups"]] == want["groups"]


# ------------------------------------------------------------------ sources
def test_timm_vit_script_runs_without_workbench_and_needs_only_timm(tmp_path):
    plan = FreezePlan.from_dict({"rules": [{"select": "*", "frozen": True}, {"select": "blocks.11", "frozen": False},
                                           {"select": "head", "frozen": False, "lr_scale": 2.0}]})
    script = export_script(plan, VIT, tmp_path / "vit.py")
    assert _imports(script) - STDLIB == {"torch", "timm"}
    res = _run(script, "--steps", "2", "--batch-size", "2")
    assert res.returncode == 0, res.stderr
    assert "step 1: loss" in res.stdout
    torch.manual_seed(0)
    _same(_describe(script), _workbench_state(plan, VIT.build(allow_download=False)))


@pytest.mark.parametrize("kind", ["bert", "gpt2"])
def test_hf_config_only_folder_script_runs_two_steps(kind, tmp_path):
    model = tiny_bert(num_labels=3) if kind == "bert" else tiny_gpt2()
    folder = save_folder(model, tmp_path / kind, weights="none")  # config.json only
    top = "bert" if kind == "bert" else "transformer"
    plan = FreezePlan.from_dict({"rules": [{"select": "*", "frozen": True},
                                           {"select": f"{top}.encoder.layer.1" if kind == "bert" else f"{top}.h.1",
                                            "frozen": False},
                                           {"select": "classifier" if kind == "bert" else f"{top}.ln_f", "frozen": False}]})
    spec = ModelSpec(source="hf", name=str(folder))
    script = export_script(plan, spec, tmp_path / f"{kind}.py")
    text = script.read_text()
    assert "MODEL_DIR = '" + kind + "'" in text  # inside the script's folder: relative to it
    assert ("TASK = 'classification'" if kind == "bert" else "TASK = 'causal_lm'") in text
    assert _imports(script) - STDLIB == {"torch", "transformers"}
    res = _run(script, "--steps", "2", "--batch-size", "2", "--seq-len", "8")
    assert res.returncode == 0, res.stderr
    assert "step 1: loss" in res.stdout
    _same(_describe(script), _workbench_state(plan, spec.build(allow_download=False)))


def test_hf_folder_with_weights_loads_them(tmp_path):
    ref = tiny_bert(num_labels=2)
    folder = save_folder(ref, tmp_path / "bert")
    plan = FreezePlan.from_dict({"rules": [{"select": "bert.embeddings", "frozen": True}]})
    script = export_script(plan, ModelSpec(source="hf", name=str(folder)), tmp_path / "b.py")
    assert "LOAD_WEIGHTS = True" in script.read_text()
    ns = _namespace(script)
    mine = ns["build_model"]()
    assert torch.equal(mine.bert.encoder.layer[1].output.dense.weight, ref.bert.encoder.layer[1].output.dense.weight)


def test_py_factory_file_script(tmp_path):
    (tmp_path / "net.py").write_text(FACTORY)
    spec = ModelSpec(source="py", name=f"{tmp_path / 'net.py'}:make", num_classes=4)
    plan = FreezePlan.from_dict({"unselected": "keep", "rules": [{"select": "1", "eval": True},
                                                                 {"select": "6", "lr_scale": 0.5}]})
    script = export_script(plan, spec, tmp_path / "p.py")
    assert "MODEL_FILE = 'net.py'" in script.read_text()
    assert _imports(script) - STDLIB == {"torch"}
    res = _run(script, "--steps", "2", "--batch-size", "2", "--image-size", "16")
    assert res.returncode == 0, res.stderr
    got = _describe(script)
    want = _workbench_state(plan, spec.build(allow_download=False))
    _same(got, want)
    assert "0.weight" not in got["trainable"] and "6.weight" in got["trainable"]  # the factory's flag kept


def test_py_module_factory_is_imported_by_name(tmp_path, monkeypatch):
    (tmp_path / "my_nets.py").write_text(FACTORY)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    plan = FreezePlan.from_dict({"rules": [{"select": "0", "frozen": True}]})
    script = export_script(plan, ModelSpec(source="py", name="my_nets:make"), tmp_path / "m.py")
    assert "from my_nets import make as model_factory" in script.read_text()
    assert _imports(script) - STDLIB == {"torch", "my_nets"}
    res = _run(script, "--steps", "2", "--batch-size", "2", "--image-size", "16")
    assert res.returncode == 0, res.stderr


def test_cli_exports_a_timm_script(tmp_path, capsys):
    plan = tmp_path / "p.json"
    FreezePlan.from_dict({"rules": [{"select": "*", "frozen": True}, {"select": "fc", "frozen": False}]}).save(plan)
    out = tmp_path / "r.py"
    assert main(["export", "--model", "timm:resnet10t", "--num-classes", "3", "--plan", str(plan), "--to", str(out),
                 "--no-decay", "auto"]) == 0
    assert "it does not need the workbench" in capsys.readouterr().out
    assert "ARCH = 'resnet10t'" in out.read_text() and _imports(out) - STDLIB == {"torch", "timm"}
    assert "WEIGHT_DECAYS = [('fc.bias', 0.0)]" in out.read_text()  # --no-decay auto: none on the bias


def test_base_text_model_without_head_is_refused(tmp_path):
    from transformers import BertConfig, BertModel

    from tests.core.models.hf_fixtures import TINY_BERT

    folder = save_folder(BertModel(BertConfig(**TINY_BERT, architectures=["BertModel"])), tmp_path / "base", weights="none")
    with pytest.raises(ExportError, match="task head"):
        render_script(FreezePlan.from_dict({"rules": [{"select": "*", "frozen": False}]}),
                      ModelSpec(source="hf", name=str(folder)))


# ------------------------------------------------------------------ plan language in the script
def _namespace(script: Path) -> dict:
    import runpy

    with pytest.MonkeyPatch.context() as mp:
        for name in [m for m in sys.modules if m == "workbench" or m.startswith("workbench.")]:
            mp.delitem(sys.modules, name)
        mp.setitem(sys.modules, "workbench", None)
        return runpy.run_path(str(script), run_name="exported_plan")


def _script_state(script: Path, settings_key: tuple[int, int] | None = None, lr: float = 1e-3, wd: float = 0.01) -> dict:
    ns = _namespace(script)
    torch.manual_seed(0)
    model = ns["build_model"]()
    ns["apply_freeze_plan"](model)
    settings = ns["BASE"] if settings_key is None else ns["STAGES"][settings_key]
    if settings_key is not None:
        ns["apply_settings"](model, settings)
    groups = ns["param_groups"](model, lr, wd, settings)
    model.train()
    return {
        "trainable": [n for n, p in model.named_parameters() if p.requires_grad],
        "eval": [p for p, m in model.named_modules() if not m.training],
        "groups": [{k: g[k] for k in KEYS if k in g} for g in groups],
    }


RESNET = ModelSpec(name="resnet18", weights=None, num_classes=10)

CASES = {
    # BitFit with its own weight decay, and a norm-weights-only lr
    "param_selectors": (RESNET, {"rules": [
        {"select": "*", "frozen": True},
        {"select": "param:*.bias", "frozen": False, "weight_decay": 0.0},
        {"select": "param:layer4.*bn*.weight", "frozen": False, "lr_scale": 0.1},
        {"select": "fc", "frozen": False},
    ]}, None),
    # eval lock on whole subtrees, one module inside released again
    "eval": (RESNET, {"rules": [
        {"select": "layer1", "eval": True}, {"select": "layer3", "eval": True}, {"select": "layer3.1", "eval": False},
    ]}, None),
    # weight decay per rule, a later module rule winning over a param rule
    "weight_decay": (RESNET, {"rules": [
        {"select": "layer2", "weight_decay": 0.1}, {"select": "param:layer2.0.*", "weight_decay": 0.2},
        {"select": "layer2.0.conv1", "weight_decay": 0.3}, {"select": "fc", "weight_decay": 0.0},
    ]}, None),
    "no_decay": (RESNET, {"rules": [{"select": "layer1", "frozen": True}]}, "auto"),
    "lr_decay_timm": (VIT, {"lr_decay": 0.75, "rules": [{"select": "blocks.0", "frozen": True},
                                                        {"select": "blocks.5", "eval": True}]}, "auto"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_plan_keys_reach_the_script(case, tmp_path):
    spec, data, no_decay = CASES[case]
    plan = FreezePlan.from_dict(data)
    script = export_script(plan, spec, tmp_path / "s.py", no_decay=no_decay)
    torch.manual_seed(0)
    want = _workbench_state(plan, spec.build(allow_download=False), no_decay=no_decay)
    got = _script_state(script)
    _same(got, want)
    if case == "param_selectors":
        assert "layer1.0.bn1.bias" in got["trainable"] and "layer1.0.bn1.weight" not in got["trainable"]
    if case == "eval":
        assert "layer1.0.relu" in got["eval"] and "layer3.0.conv1" in got["eval"] and "layer2.0" not in got["eval"]
    if case == "lr_decay_timm":
        assert len({g["lr_scale"] for g in got["groups"]}) > 10


def test_stage_changing_eval_and_weight_decay(tmp_path):
    plan = FreezePlan.from_dict({
        "rules": [{"select": "*", "frozen": True}, {"select": "fc", "frozen": False}],
        "stages": [{"at_step": 3, "rules": [{"select": "layer4", "frozen": False, "eval": True, "weight_decay": 0.5},
                                            {"select": "param:layer3.*.bias", "frozen": False}]}],
    })
    script = export_script(plan, RESNET, tmp_path / "s.py")
    torch.manual_seed(0)
    want = _workbench_state(plan.at(3), RESNET.build(allow_download=False))
    _same(_script_state(script, (1, 0)), want)


def test_describe_in_subprocess_matches_for_plan_keys(tmp_path):
    spec, data, no_decay = CASES["param_selectors"]
    plan = FreezePlan.from_dict({**data, "rules": [*data["rules"], {"select": "layer2", "eval": True}]})
    script = export_script(plan, spec, tmp_path / "s.py", no_decay="auto")
    torch.manual_seed(0)
    _same(_describe(script), _workbench_state(plan, spec.build(allow_download=False), no_decay="auto"))


def test_activation_checkpointing_is_named_not_dropped(tmp_path):
    plan = FreezePlan.from_dict({"rules": [{"select": "layer4", "checkpoint": True}]})
    assert "Not in this script: activation checkpointing" in render_script(plan, RESNET)


def test_bitfit_table_is_one_pattern_not_a_line_per_bias():
    plan = FreezePlan.from_dict({"rules": [{"select": "*", "frozen": True}, {"select": "param:*.bias", "frozen": False},
                                           {"select": "fc", "frozen": False}]})
    text = render_script(plan, RESNET)
    assert "REQUIRES_GRAD = [('', False), ('fc', True), ('*.bias', True)]\n" in text


def test_timm_checkpoint_is_loaded_by_the_script(tmp_path):
    import timm
    from safetensors.torch import save_file

    torch.manual_seed(1)
    trained = timm.create_model("resnet10t", pretrained=False, num_classes=7)
    save_file(trained.state_dict(), str(tmp_path / "ft.safetensors"))
    spec = ModelSpec(source="timm", name="resnet10t", checkpoint=str(tmp_path / "ft.safetensors"), num_classes=3)
    plan = FreezePlan.from_dict({"rules": [{"select": "*", "frozen": True}, {"select": "fc", "frozen": False}]})
    script = export_script(plan, spec, tmp_path / "c.py")
    assert "CHECKPOINT = 'ft.safetensors'" in script.read_text()
    assert _imports(script) - STDLIB == {"torch", "timm", "safetensors"}
    mine = _namespace(script)["build_model"]()
    assert mine.fc.out_features == 3
    assert torch.equal(mine.layer4[0].conv1.weight, trained.layer4[0].conv1.weight)
