"""Exported scripts for timm, Hugging Face and your own model code; the plan language in the script.

Each script runs in a subprocess with ``import workbench`` made impossible, and its own imports
(read with ``ast``) are the model's library and nothing it does not need. The scripts that train
run one after another in ONE subprocess (the ``exported`` fixture), which imports torch, timm and
transformers once instead of a dozen times.
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
from tests.fixtures.exported import run_exported_script
from tests.preload import python_argv
from tests.timeouts import SUBPROCESS_LONG_S
from workbench.cli import main
from workbench.core.export import ExportError, export_script, render_script
from workbench.core.models.spec import ModelSpec
from workbench.core.plan.rules import FreezePlan

pytest.importorskip("timm")
pytest.importorskip("transformers")

KEYS = ("lr", "lr_scale", "weight_decay", "param_names", "reparam_decay")
STDLIB = {"__future__", "argparse", "contextlib", "fnmatch", "json", "math", "random", "types", "collections", "pathlib",
          "typing", "zlib", "importlib",
          "numpy"}  # numpy: seeds loader workers when it is installed (inside try/except ImportError)
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


#: Runs exported scripts one after another in ONE interpreter with ``import workbench`` impossible:
#: each in its own folder as cwd, with its own ``sys.argv``, its output captured; one result per job.
DRIVER = r"""
import contextlib, io, json, os, runpy, sys, traceback
sys.modules["workbench"] = None
jobs_file, results_file = sys.argv[1:3]
jobs = json.load(open(jobs_file))
results = []
for script, args in jobs:
    os.chdir(os.path.dirname(script))
    out, err, code = io.StringIO(), io.StringIO(), 0
    sys.argv = [script, *args]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            code = 1
            traceback.print_exc()
    results.append({"returncode": code, "stdout": out.getvalue(), "stderr": err.getvalue()})
json.dump(results, open(results_file, "w"))
"""


def _run_all(jobs: list[tuple[Path, list[str]]], folder: Path) -> list[dict]:
    """Run every (script, args) job in one subprocess (one torch/timm/transformers import for all)."""
    (folder / "jobs.json").write_text(json.dumps([(str(s), a) for s, a in jobs]))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(python_argv("-c", DRIVER, str(folder / "jobs.json"), str(folder / "results.json")),
                          capture_output=True, text=True, cwd=folder, env=env, timeout=SUBPROCESS_LONG_S)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads((folder / "results.json").read_text())


class Exported:
    """One exported script: its plan and spec, and what running it and ``--describe`` gave."""

    def __init__(self, script: Path, plan: FreezePlan, spec: ModelSpec, run_args: list[str] | None) -> None:
        self.script, self.plan, self.spec, self.run_args = script, plan, spec, run_args
        self.run: dict = {}
        self.described: dict = {}


def _export_all(folder: Path) -> dict[str, Exported]:
    """The scripts the subprocess tests check, exported side by side, each in a folder of its own."""
    out: dict[str, Exported] = {}
    vit_plan = FreezePlan.from_dict({"rules": [{"select": "*", "frozen": True}, {"select": "blocks.11", "frozen": False},
                                               {"select": "head", "frozen": False, "lr_scale": 2.0}]})
    (folder / "vit").mkdir()
    out["vit"] = Exported(export_script(vit_plan, VIT, folder / "vit" / "vit.py"), vit_plan, VIT,
                          ["--steps", "2", "--batch-size", "2"])
    for kind in ("bert", "gpt2"):
        model = tiny_bert(num_labels=3) if kind == "bert" else tiny_gpt2()
        (folder / kind).mkdir()
        save_folder(model, folder / kind / kind, weights="none")  # config.json only
        top = "bert" if kind == "bert" else "transformer"
        plan = FreezePlan.from_dict({"rules": [{"select": "*", "frozen": True},
                                               {"select": f"{top}.encoder.layer.1" if kind == "bert" else f"{top}.h.1",
                                                "frozen": False},
                                               {"select": "classifier" if kind == "bert" else f"{top}.ln_f",
                                                "frozen": False}]})
        spec = ModelSpec(source="hf", name=str(folder / kind / kind))
        out[kind] = Exported(export_script(plan, spec, folder / kind / f"{kind}.py"), plan, spec,
                             ["--steps", "2", "--batch-size", "2", "--seq-len", "8"])
    (folder / "py").mkdir()
    (folder / "py" / "net.py").write_text(FACTORY)
    spec = ModelSpec(source="py", name=f"{folder / 'py' / 'net.py'}:make", num_classes=4)
    plan = FreezePlan.from_dict({"unselected": "keep", "rules": [{"select": "1", "eval": True},
                                                                 {"select": "6", "lr_scale": 0.5}]})
    out["py_file"] = Exported(export_script(plan, spec, folder / "py" / "p.py"), plan, spec,
                              ["--steps", "2", "--batch-size", "2", "--image-size", "16"])
    (folder / "pymod").mkdir()
    (folder / "pymod" / "my_nets.py").write_text(FACTORY)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder / "pymod")
        mp.syspath_prepend(str(folder / "pymod"))
        plan = FreezePlan.from_dict({"rules": [{"select": "0", "frozen": True}]})
        spec = ModelSpec(source="py", name="my_nets:make")
        out["py_module"] = Exported(export_script(plan, spec, folder / "pymod" / "m.py"), plan, spec,
                                    ["--steps", "2", "--batch-size", "2", "--image-size", "16"])
        sys.modules.pop("my_nets", None)
    spec, data, _ = CASES["param_selectors"]
    plan = FreezePlan.from_dict({**data, "rules": [*data["rules"], {"select": "layer2", "eval": True}]})
    (folder / "keys").mkdir()
    out["keys"] = Exported(export_script(plan, spec, folder / "keys" / "s.py", no_decay="auto"), plan, spec, None)
    return out


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Exported]:
    """Every subprocess case: each script trains 2 steps and writes ``--describe``, all in one subprocess."""
    folder = tmp_path_factory.mktemp("exported")
    cases = _export_all(folder)
    jobs: list[tuple[Path, list[str]]] = []
    for case in cases.values():
        if case.run_args is not None:
            jobs.append((case.script, case.run_args))
        jobs.append((case.script, ["--describe", str(case.script.parent / "state.json")]))
    results = iter(_run_all(jobs, folder))
    for case in cases.values():
        if case.run_args is not None:
            case.run = next(results)
        described = next(results)
        assert described["returncode"] == 0, described["stderr"]
        case.described = json.loads((case.script.parent / "state.json").read_text())
    return cases


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
def test_timm_vit_script_runs_without_workbench_and_needs_only_timm(exported):
    case = exported["vit"]
    assert _imports(case.script) - STDLIB == {"torch", "timm"}
    assert case.run["returncode"] == 0, case.run["stderr"]
    assert "step 1: loss" in case.run["stdout"]
    torch.manual_seed(0)
    _same(case.described, _workbench_state(case.plan, VIT.build(allow_download=False)))


@pytest.mark.parametrize("kind", ["bert", "gpt2"])
def test_hf_config_only_folder_script_runs_two_steps(kind, exported):
    case = exported[kind]
    text = case.script.read_text()
    assert "MODEL_DIR = '" + kind + "'" in text  # inside the script's folder: relative to it
    assert ("TASK = 'classification'" if kind == "bert" else "TASK = 'causal_lm'") in text
    assert _imports(case.script) - STDLIB == {"torch", "transformers"}
    assert case.run["returncode"] == 0, case.run["stderr"]
    assert "step 1: loss" in case.run["stdout"]
    _same(case.described, _workbench_state(case.plan, case.spec.build(allow_download=False)))


def test_hf_folder_with_weights_loads_them(tmp_path):
    ref = tiny_bert(num_labels=2)
    folder = save_folder(ref, tmp_path / "bert")
    plan = FreezePlan.from_dict({"rules": [{"select": "bert.embeddings", "frozen": True}]})
    script = export_script(plan, ModelSpec(source="hf", name=str(folder)), tmp_path / "b.py")
    assert "LOAD_WEIGHTS = True" in script.read_text()
    ns = run_exported_script(script)
    mine = ns["build_model"]()
    assert torch.equal(mine.bert.encoder.layer[1].output.dense.weight, ref.bert.encoder.layer[1].output.dense.weight)


def test_py_factory_file_script(exported):
    case = exported["py_file"]
    assert "MODEL_FILE = 'net.py'" in case.script.read_text()
    assert _imports(case.script) - STDLIB == {"torch"}
    assert case.run["returncode"] == 0, case.run["stderr"]
    want = _workbench_state(case.plan, case.spec.build(allow_download=False))
    _same(case.described, want)
    assert "0.weight" not in case.described["trainable"] and "6.weight" in case.described["trainable"]  # factory's flag


def test_py_module_factory_is_imported_by_name(exported):
    case = exported["py_module"]
    assert "from my_nets import make as model_factory" in case.script.read_text()
    assert _imports(case.script) - STDLIB == {"torch", "my_nets"}
    assert case.run["returncode"] == 0, case.run["stderr"]
    assert case.described["trainable"] and not any(n.startswith("0.") for n in case.described["trainable"])


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
def _script_state(script: Path, settings_key: tuple[int, int] | None = None, lr: float = 1e-3, wd: float = 0.01) -> dict:
    ns = run_exported_script(script)
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


def test_describe_in_subprocess_matches_for_plan_keys(exported):
    case = exported["keys"]
    torch.manual_seed(0)
    _same(case.described, _workbench_state(case.plan, case.spec.build(allow_download=False), no_decay="auto"))


def test_activation_checkpointing_is_named_not_dropped(tmp_path):
    plan = FreezePlan.from_dict({"rules": [{"select": "layer4", "checkpoint": True}]})
    assert "Not in this script: Checkpointing (the plan's 'checkpoint'" in render_script(plan, RESNET)


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
    mine = run_exported_script(script)["build_model"]()
    assert mine.fc.out_features == 3
    assert torch.equal(mine.layer4[0].conv1.weight, trained.layer4[0].conv1.weight)
