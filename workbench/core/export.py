"""Export a freeze plan as a standalone, readable plain-PyTorch script.

The script needs only ``torch`` and ``torchvision`` (``safetensors`` when a checkpoint or an
A+B tensor file is a ``.safetensors`` file) and no workbench import. On the same model it
reproduces what :func:`workbench.core.freezing.apply.apply_plan` does:

- ``requires_grad`` per parameter, written as a short list of module-path prefixes applied
  in order (the fewest that give every module its flag: the same compaction as
  :func:`workbench.core.freezing.capture.minimal_assignments`);
- BatchNorm modules kept in eval mode across ``model.train()`` by overriding ``train`` on the
  instance, exactly as the workbench's lock does;
- ``W = A + B`` with :mod:`torch.nn.utils.parametrize` and an ``APlusB`` module holding ``A``
  as a buffer (exact mode), or the fused mode (train ``W``, weight decay pulls ``W`` toward
  ``A``);
- optimizer param groups with only trainable parameters, grouped by ``lr_scale``, in the same
  order and with the same keys as :meth:`AppliedPlan.param_groups`;
- a short training loop on random data (replace ``make_batches``), with progressive
  unfreezing when the plan has stages (the optimizer is rebuilt, keeping its state).

``python script.py --describe state.json`` writes the applied state (trainable names and
counts, BatchNorm modes after ``model.train()``, param-group learning rates) without
training, which is how the tests compare it with the workbench.

Not exported: sub-tensor freezing (plan key ``partial``) and stages that change A+B; both
raise :class:`ExportError`.
"""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path
from typing import Any, Mapping

from torch import nn

from workbench.core.atomic import atomic_write
from workbench.core.errors import WorkbenchError
from workbench.core.freezing.capture import cover_paths, minimal_assignments
from workbench.core.models.spec import ModelSpec
from workbench.core.models.tree import ModelTree
from workbench.core.models.zoo import find_head
from workbench.core.plan.reparam_spec import ReparamSpec
from workbench.core.plan.rules import Effective, FreezePlan

__all__ = ["ExportError", "OPTIMIZERS", "export_script", "render_script"]

#: Optimizer names the training skeleton can create, and the constructor it writes.
OPTIMIZERS = {
    "adamw": "torch.optim.AdamW(groups)",
    "adam": "torch.optim.Adam(groups)",
    "sgd": "torch.optim.SGD(groups, momentum=0.9)",
}


class ExportError(WorkbenchError):
    """The plan or the model cannot be exported as a plain script; the message says what to do."""


# ====================================================================== data for the script
def _literal(value: Any, indent: int = 0) -> str:
    """A Python literal, short containers on one line, long ones one item per line."""
    flat = repr(value)
    if len(flat) + indent <= 96 or not isinstance(value, (list, dict)) or not value:
        return flat
    pad = " " * (indent + 4)
    if isinstance(value, list):
        items = [pad + _literal(v, indent + 4) + "," for v in value]
        return "[\n" + "\n".join(items) + "\n" + " " * indent + "]"
    items = [f"{pad}{k!r}: {_literal(v, indent + 4)}," for k, v in value.items()]
    return "{\n" + "\n".join(items) + "\n" + " " * indent + "}"


def _structure_model(spec: ModelSpec) -> tuple[nn.Module, str]:
    """The model's architecture (random weights) and its torchvision name."""
    from workbench.core.models.zoo import load_checkpoint

    if spec.source == "checkpoint":
        result = load_checkpoint(spec.checkpoint, arch=spec.name)  # type: ignore[arg-type]
        arch = spec.name or result.arch
        model = result.model
        if spec.num_classes is not None:
            from workbench.core.models.zoo import replace_head

            replace_head(model, spec.num_classes)
    else:
        arch = spec.name
        model = ModelSpec(
            source=spec.source, name=spec.name, weights=None, checkpoint=spec.checkpoint, num_classes=spec.num_classes
        ).build(allow_download=False)
    if not arch:
        raise ExportError(
            "the checkpoint does not say which torchvision architecture it is; give the model "
            "name (e.g. --model resnet18) so the script can build it"
        )
    return model, arch


def _frozen_settings(tree: ModelTree, eff: Mapping[str, Effective]) -> list[tuple[str, bool]]:
    required = {p: not eff[p].frozen for p, n in tree.nodes.items() if n.own_params}
    return [(p, bool(v)) for p, v in minimal_assignments(tree, required, True)]


def _lr_settings(tree: ModelTree, eff: Mapping[str, Effective]) -> list[tuple[str, float]]:
    required = {p: eff[p].lr_scale for p, n in tree.nodes.items() if n.own_params and not eff[p].frozen}
    return [(p, float(v)) for p, v in minimal_assignments(tree, required, 1.0)]  # type: ignore[arg-type]  # lr scales


def _bn_settings(tree: ModelTree, eff: Mapping[str, Effective]) -> list[str]:
    bns = [p for p, n in tree.nodes.items() if n.is_bn]
    on = [p for p in bns if eff[p].bn_eval]
    return cover_paths(tree, on, [p for p in bns if not eff[p].bn_eval])


def _reparam_settings(tree: ModelTree, eff: Mapping[str, Effective]) -> list[tuple[str, dict[str, Any]]]:
    """``(module path prefix, spec)``: every module with parameters under the prefix gets A+B."""
    owners = [p for p, n in tree.nodes.items() if n.own_params]
    specs = list(dict.fromkeys(eff[p].reparam for p in owners if eff[p].reparam))
    out: list[tuple[str, dict[str, Any]]] = []
    for spec in specs:
        assert spec is not None  # only modules with A+B above
        members = [p for p in owners if eff[p].reparam == spec]
        blocked = [p for p in owners if eff[p].reparam != spec]
        for prefix in cover_paths(tree, members, blocked):
            data = spec.to_json()  # the script's literal: plain JSON values
            out.append((prefix, {k: data[k] for k in ("params", "mode", "a", "b_init")}))
    out.sort(key=lambda e: tree.nodes[e[0]].order)
    return out


def _settings(tree: ModelTree, eff: Mapping[str, Effective]) -> dict[str, Any]:
    return {"requires_grad": _frozen_settings(tree, eff), "bn_eval": _bn_settings(tree, eff), "lr_scales": _lr_settings(tree, eff)}


def _stage_table(plan: FreezePlan, tree: ModelTree) -> tuple[list[int], list[int], dict[tuple[int, int], dict[str, Any]]]:
    steps = sorted(st.at_step for st in plan.stages if st.at_step is not None)
    epochs = sorted(st.at_epoch for st in plan.stages if st.at_epoch is not None)

    def counts(thresholds: list[int]) -> list[tuple[int, int]]:  # (count reached, a value reaching it)
        out = [(0, -1)]
        for t in sorted(set(thresholds)):
            out.append((sum(1 for s in thresholds if s <= t), t))
        return out

    base_reparam = _reparam_key_all(plan.resolve(tree))
    table: dict[tuple[int, int], dict[str, Any]] = {}
    for i, step in counts(steps):
        for j, epoch in counts(epochs):
            if (i, j) == (0, 0):
                continue
            at = plan.at(step, epoch)
            eff = at.resolve(tree)
            if _reparam_key_all(eff) != base_reparam:
                raise ExportError(
                    "a stage of this plan switches A+B on or off; the exported script supports stages "
                    "that change frozen, lr_scale and bn_eval only: set A+B in the base rules"
                )
            labels = [st.describe() for st in plan.stages if st.reached(step, epoch)]
            table[(i, j)] = {
                "label": "; ".join(labels),
                "requires_grad": _frozen_settings(tree, eff),
                "bn_eval": _bn_settings(tree, eff),
                "lr_scales": _lr_settings(tree, eff),
            }
    return steps, epochs, table


def _reparam_key_all(eff: Mapping[str, Effective]) -> frozenset[tuple[str, ReparamSpec]]:
    return frozenset((p, e.reparam) for p, e in eff.items() if e.reparam)


def _file_sources(entries: list[tuple[str, dict[str, Any]]]) -> list[str]:
    out = []
    for _, spec in entries:
        for role in ("a", "b_init"):
            src = spec[role]
            if isinstance(src, Mapping) and "file" in src:
                out.append(src["file"])
    return out


def _relocate(entries: list[tuple[str, dict[str, Any]]], base_dir: Path, script_dir: Path | None) -> None:
    """Rewrite A/B file paths so the script finds them (relative to its own folder when inside it)."""
    for _, spec in entries:
        for role in ("a", "b_init"):
            src = spec[role]
            if isinstance(src, Mapping) and "file" in src:
                p = Path(src["file"]).expanduser()
                if not p.is_absolute():
                    p = (base_dir / p).resolve()
                if not p.is_file():
                    raise ExportError(
                        f"A+B {'A' if role == 'a' else 'B'} file {str(p)!r} not found; export with the plan's "
                        "folder as base_dir (--plan resolves it) or fix the path in the plan"
                    )
                spec[role] = {"file": _script_path(p, script_dir)}


def _script_path(path: Path, script_dir: Path | None) -> str:
    """How the script names a file: relative to the script's folder when inside it, else absolute."""
    if script_dir is not None:
        try:
            return path.relative_to(script_dir.resolve()).as_posix()
        except ValueError:
            pass
    return str(path)


def _uses(entries: list[tuple[str, dict[str, Any]]], what: str) -> bool:
    for _, spec in entries:
        if what == "fused" and spec["mode"] == "fused":
            return True
        for role in ("a", "b_init"):
            src = spec[role]
            if isinstance(src, Mapping) and what in src:
                return True
    return False


# ====================================================================== script text
_HEADER_IMPORTS = '''from __future__ import annotations

import argparse
import json
import types
{extra_imports}from pathlib import Path

import torch
import torchvision
from torch import nn
{parametrize_import}
HERE = Path(__file__).resolve().parent
'''

_MODEL_CODE = '''

def set_module(model: nn.Module, path: str, module: nn.Module) -> None:
    """Replace the submodule at dotted ``path``."""
    parent, _, leaf = path.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, leaf, module)


def replace_head(model: nn.Module, num_classes: int) -> None:
    """New, trainable classification head(s) with ``num_classes`` outputs (no-op when equal)."""
    first = model.get_submodule(HEADS[0])
    out = first.out_features if isinstance(first, nn.Linear) else first.out_channels
    if out == num_classes:
        return
    for path in HEADS:
        try:
            old = model.get_submodule(path)
        except AttributeError:  # e.g. googlenet's auxiliary heads, absent with pretrained weights
            continue
        if isinstance(old, nn.Linear):
            new = nn.Linear(old.in_features, num_classes, bias=old.bias is not None,
                            device=old.weight.device, dtype=old.weight.dtype)
        else:  # squeezenet's 1x1 convolution
            new = nn.Conv2d(old.in_channels, num_classes, kernel_size=old.kernel_size, stride=old.stride,
                            padding=old.padding, bias=old.bias is not None,
                            device=old.weight.device, dtype=old.weight.dtype)
        set_module(model, path, new)
    if isinstance(getattr(model, "num_classes", None), int):
        model.num_classes = num_classes
'''

_CHECKPOINT_CODE = '''

def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """Tensors of a checkpoint (.safetensors, or .pt/.pth read with weights_only=True)."""
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        state = load_file(str(path))
    else:
        state = torch.load(path, map_location="cpu", weights_only=True)
        for key in ("state_dict", "model_state_dict", "model", "module", "net"):
            if isinstance(state, dict) and isinstance(state.get(key), dict):
                state = state[key]
                break
    state = {k.replace("_orig_mod.", ""): v for k, v in state.items() if isinstance(v, torch.Tensor)}
    for prefix in ("module.", "model."):  # DDP / Lightning wrappers
        if state and all(k.startswith(prefix) for k in state):
            state = {k[len(prefix):]: v for k, v in state.items()}
    return state
'''

_BUILD_PLAIN = '''

def build_model() -> nn.Module:
    """The model the plan was made for."""
    if WEIGHTS is None and NUM_CLASSES is not None:
        return torchvision.models.get_model(ARCH, weights=None, num_classes=NUM_CLASSES)
    model = torchvision.models.get_model(ARCH, weights=WEIGHTS)
    if NUM_CLASSES is not None:
        replace_head(model, NUM_CLASSES)
    return model
'''

_BUILD_CHECKPOINT = '''

def build_model() -> nn.Module:
    """The model the plan was made for: architecture, checkpoint weights, then the final head."""
    model = torchvision.models.get_model(ARCH, weights=WEIGHTS)
    path = Path(CHECKPOINT)
    state = read_state_dict(path if path.is_absolute() else HERE / path)
    head = state.get(HEADS[0] + ".weight")
    if head is not None:
        replace_head(model, int(head.shape[0]))  # the checkpoint's own number of classes
    model.load_state_dict(state, strict=False)
    if NUM_CLASSES is not None:
        replace_head(model, NUM_CLASSES)
    return model
'''

_FREEZE_CODE = '''

def owner_of(param_name: str) -> str:
    """Module path owning a parameter (``conv.parametrizations.weight.original`` -> ``conv``)."""
    if param_name.startswith("parametrizations."):
        return ""
    if ".parametrizations." in param_name:
        return param_name.split(".parametrizations.")[0]
    return param_name.rpartition(".")[0]


def under(path: str, prefix: str) -> bool:
    """Whether module ``path`` is ``prefix`` or inside it (``""`` is the whole model)."""
    return prefix == "" or path == prefix or path.startswith(prefix + ".")


def set_requires_grad(model: nn.Module, settings: list[tuple[str, bool]]) -> None:
    """``requires_grad`` of each parameter from the last matching prefix of its owning module."""
    for name, param in model.named_parameters():
        path = owner_of(name)
        trainable = True
        for prefix, value in settings:
            if under(path, prefix):
                trainable = value
        param.requires_grad_(trainable)


def _train_keeping_eval(self: nn.Module, mode: bool = True) -> nn.Module:
    """``train()`` of a BatchNorm kept in eval mode: always eval."""
    nn.Module.train(self, False)
    return self


def set_bn_eval(model: nn.Module, prefixes: list[str]) -> None:
    """Keep the BatchNorm modules under ``prefixes`` in eval mode, even after ``model.train()``.

    Their ``train`` is overridden on the instance, so a later ``model.train()`` cannot put them
    back in train mode (their running statistics stay as loaded). Others are released.
    """
    for path, module in model.named_modules():
        if not isinstance(module, nn.modules.batchnorm._BatchNorm):
            continue
        locked = "train" in module.__dict__
        if any(under(path, p) for p in prefixes):
            if not locked:
                object.__setattr__(module, "train", types.MethodType(_train_keeping_eval, module))
            nn.Module.train(module, False)
        elif locked:
            object.__delattr__(module, "train")
            nn.Module.train(module, model.training)


def lr_scale_of(path: str, scales: list[tuple[str, float]]) -> float:
    """Learning-rate multiplier of a module: the last matching prefix wins."""
    scale = 1.0
    for prefix, value in scales:
        if under(path, prefix):
            scale = value
    return scale


def param_groups(model: nn.Module, lr: float, weight_decay: float, scales: list[tuple[str, float]]) -> list[dict]:
    """Trainable parameters only, each once, one group per learning-rate multiplier (largest first)."""
    groups: dict[float, dict] = {}
    seen: set[int] = set()
    for name, param in model.named_parameters():
        if not param.requires_grad or id(param) in seen:
            continue
        seen.add(id(param))
        scale = lr_scale_of(owner_of(name), scales)
        group = groups.setdefault(scale, {"params": [], "param_names": [], "lr": lr * scale,
                                          "lr_scale": scale, "weight_decay": weight_decay})
        group["params"].append(param)
        group["param_names"].append(name)
    out = [groups[k] for k in sorted(groups, reverse=True)]
{adjust_call}    return out
'''

_APLUSB_CODE = '''

class APlusB(nn.Module):
    """Parametrization ``W = A + B``: A is a fixed buffer, B (the parametrization's ``original``) trains."""

    def __init__(self, a: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("A", a, persistent=True)

    def forward(self, b: torch.Tensor) -> torch.Tensor:
        return self.A + b

    def right_inverse(self, w: torch.Tensor) -> torch.Tensor:
        return w - self.A
'''

_SOURCE_CODE = '''

def make_tensor(source, role: str, key: str, like: torch.Tensor) -> torch.Tensor:
    """A or B for parameter ``key``: "current", "zeros", {{"random": ...}} or {{"file": ...}}."""
    with torch.no_grad():
        if source == "current":
            return like.detach().clone()
        if source == "zeros":
            return torch.zeros_like(like, memory_format=torch.contiguous_format)
{random_branch}{file_branch}    raise ValueError(f"unknown A/B source {{source!r}} for {{key}}")
'''

_RANDOM_BRANCH = '''        if "random" in source:  # the seeded generator of Freeze Workbench: same A/B as the app
            r = source["random"]
            seed = (r["seed"] * 0x9E3779B97F4A7C15 + zlib.crc32(f"{role}:{key}".encode())) % (2**63 - 1)
            g = torch.Generator(device="cpu").manual_seed(seed)
            fn = torch.rand if r["dist"] == "uniform" else torch.randn
            t = fn(tuple(like.shape), generator=g, dtype=torch.float32)
            if r["scale"] != 1.0:
                t.mul_(r["scale"])
            return t.to(device=like.device, dtype=like.dtype)
'''

_FILE_BRANCH = '''        if "file" in source:
            from safetensors.torch import load_file

            path = Path(source["file"])
            tensors = _FILES.setdefault(str(path), load_file(str(path if path.is_absolute() else HERE / path)))
            return tensors[key].to(device=like.device, dtype=like.dtype)
'''

_INSTALL_CODE = '''

def add_a_plus_b(model: nn.Module, entries: list[tuple[str, dict]]) -> None:
    """W = A + B on the parameters of every module under each prefix (A fixed, B trained)."""
    for prefix, spec in entries:
        for path, module in list(model.named_modules()):
            if not under(path, prefix) or "parametrizations" in path.split("."):
                continue
            names = [n for n, _ in module.named_parameters(recurse=False) if not spec["params"] or n in spec["params"]]
            for name in names:
                weight = getattr(module, name)
                key = f"{path}.{name}" if path else name
                a = make_tensor(spec["a"], "a", key, weight)
                b = make_tensor(spec["b_init"], "b", key, weight)
{install_modes}'''

_INSTALL_EXACT_ONLY = '''                parametrize.register_parametrization(module, name, APlusB(a))
                with torch.no_grad():
                    module.parametrizations[name].original.copy_(b)
'''

_INSTALL_WITH_FUSED = '''                if spec["mode"] == "exact":
                    parametrize.register_parametrization(module, name, APlusB(a))
                    with torch.no_grad():
                        module.parametrizations[name].original.copy_(b)
                else:  # fused: train W itself; weight decay pulls W toward A (see fused_decay)
                    if not (spec["a"] == "current" and spec["b_init"] == "zeros"):
                        with torch.no_grad():
                            weight.copy_(a + b)
                    FUSED_A[id(weight)] = a
'''

_FUSED_CODE = '''

# fused A+B: id of parameter W -> its fixed A (weight decay acts on B = W - A)
FUSED_A: dict[int, torch.Tensor] = {}


def split_fused_groups(groups: list[dict], weight_decay: float) -> list[dict]:
    """Fused A+B parameters get their own groups: no plain weight decay, decay toward A instead."""
    if not FUSED_A or not weight_decay:
        return groups
    out = []
    for g in groups:
        idx = [i for i, p in enumerate(g["params"]) if id(p) in FUSED_A]
        if not g.get("weight_decay", weight_decay) or not idx:
            out.append(g)
            continue
        keep = [i for i in range(len(g["params"])) if i not in set(idx)]
        if keep:
            rest = dict(g, params=[g["params"][i] for i in keep], param_names=[g["param_names"][i] for i in keep])
            out.append(rest)
        out.append(dict(g, params=[g["params"][i] for i in idx], param_names=[g["param_names"][i] for i in idx],
                        weight_decay=0.0, reparam_decay=g.get("weight_decay", weight_decay)))
    return out


def fused_decay(optimizer: torch.optim.Optimizer, args, kwargs) -> None:
    """Optimizer step pre-hook: decay B = W - A (decoupled for AdamW, L2 otherwise)."""
    for group in optimizer.param_groups:
        wd = group.get("reparam_decay")
        if not wd:
            continue
        decoupled = bool(group.get("decoupled_weight_decay", False)) or isinstance(optimizer, torch.optim.AdamW)
        sign = -1.0 if group.get("maximize", False) else 1.0
        with torch.no_grad():
            for p in group["params"]:
                a = FUSED_A.get(id(p))
                if a is None or p.grad is None:
                    continue
                if a.device != p.device:  # the model was moved after the plan was applied
                    a = FUSED_A[id(p)] = a.to(p.device)
                if decoupled:
                    p.lerp_(a, group["lr"] * wd)
                else:
                    p.grad.add_(p - a, alpha=sign * wd)
'''

_DESCRIBE_CODE = '''

def describe(model: nn.Module, groups: list[dict]) -> dict:
    """The applied state, as JSON-ready data (compare it with `workbench inspect --plan`)."""
    was = model.training
    model.train()  # BatchNorm kept in eval must stay in eval
    bn_eval = [p for p, m in model.named_modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and not m.training]
    model.train(was)
    params = dict(model.named_parameters())
    return {
        "trainable": [n for n, p in params.items() if p.requires_grad],
        "trainable_count": sum(p.numel() for p in params.values() if p.requires_grad),
        "total_count": sum(p.numel() for p in params.values()),
        "bn_eval": bn_eval,
        "groups": [{k: v for k, v in g.items() if k != "params"} for g in groups],
    }
'''


def _main_code(optimizer: str, has_stages: bool, has_fused: bool) -> str:
    make_opt = OPTIMIZERS[optimizer]
    hook = "    if any(g.get(\"reparam_decay\") for g in groups):\n        optimizer.register_step_pre_hook(fused_decay)\n" if has_fused else ""
    stage_fn = ""
    stage_loop = ""
    if has_stages:
        stage_fn = '''

def stage_key(step: int, epoch: int) -> tuple[int, int]:
    """How many step stages and epoch stages are reached."""
    return sum(step >= s for s in STAGE_STEPS), sum(epoch >= e for e in STAGE_EPOCHS)


def apply_settings(model: nn.Module, settings: dict) -> None:
    """requires_grad and BatchNorm modes of one stage."""
    set_requires_grad(model, settings["requires_grad"])
    set_bn_eval(model, settings["bn_eval"])
'''
        stage_loop = '''        key = stage_key(step, epoch)
        if key != current:  # progressive unfreezing: new flags, optimizer rebuilt keeping its state
            current = key
            settings = STAGES.get(key, BASE)
            apply_settings(model, settings)
            old, optimizer = optimizer, make_optimizer(model, args.lr, args.weight_decay, settings["lr_scales"])
            optimizer.state.update({p: s for p, s in old.state.items() if p.requires_grad})
            print(f"step {step}: stage {settings.get('label', 'base')}")
'''
    return f'''

def make_optimizer(model: nn.Module, lr: float, weight_decay: float, scales: list[tuple[str, float]]) -> torch.optim.Optimizer:
    """The optimizer over trainable parameters only, one group per learning-rate multiplier."""
    groups = param_groups(model, lr, weight_decay, scales)
    optimizer = {make_opt}
{hook}    return optimizer
{stage_fn}

def make_batches(steps: int, batch_size: int, image_size: int, device: torch.device):
    """Random images and labels. Replace with your DataLoader."""
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        x = torch.randn(batch_size, 3, image_size, image_size, generator=g)
        y = torch.randint(0, OUTPUTS, (batch_size,), generator=g)
        yield x.to(device), y.to(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="training steps on random data")
    parser.add_argument("--steps-per-epoch", type=int, default=100, help="for stages given in epochs")
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE)
    parser.add_argument("--image-size", type=int, default=IMAGE_SIZE)
    parser.add_argument("--lr", type=float, default=LR)
    parser.add_argument("--weight-decay", type=float, default=WEIGHT_DECAY)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--describe", metavar="JSON", help="write the applied state to this file and exit")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = build_model()
    apply_freeze_plan(model)
    model.to(args.device)
    optimizer = make_optimizer(model, args.lr, args.weight_decay, LR_SCALES)
    state = describe(model, optimizer.param_groups)
    print(f"trainable {{state['trainable_count']:,}} of {{state['total_count']:,}} parameters; "
          f"{{len(state['bn_eval'])}} BatchNorm modules kept in eval; {{len(optimizer.param_groups)}} param groups")
    if args.describe:
        Path(args.describe).write_text(json.dumps(state, indent=1))
        return

    model.train()  # BatchNorm modules kept in eval stay in eval
    loss_fn = nn.CrossEntropyLoss()
    current = (0, 0)
    for step, (x, y) in enumerate(make_batches(args.steps, args.batch_size, args.image_size, args.device)):
        epoch = step // args.steps_per_epoch
{stage_loop}        optimizer.zero_grad(set_to_none=True)
        out = model(x)
        if not isinstance(out, torch.Tensor):  # googlenet / inception return (logits, aux...)
            out = out[0]
        loss = loss_fn(out, y)
        loss.backward()
        optimizer.step()
        if step % 10 == 0 or step == args.steps - 1:
            print(f"step {{step}}: loss {{loss.item():.4f}}")


if __name__ == "__main__":
    main()
'''


def render_script(
    plan: FreezePlan,
    model_spec: ModelSpec,
    *,
    model: nn.Module | None = None,
    lr: float = 1e-3,
    weight_decay: float = 0.01,
    optimizer: str = "adamw",
    batch_size: int = 32,
    image_size: int | None = None,
    base_dir: str | os.PathLike[str] | None = None,
    script_dir: str | os.PathLike[str] | None = None,
) -> str:
    """The plain-PyTorch script for a plan, as text.

    Args:
        plan: the plan (validated against the model).
        model_spec: where the model comes from (torchvision name and weights, checkpoint,
            number of classes); the script builds the model the same way.
        model: the model, when already built (only its structure is read); otherwise it is
            built from ``model_spec`` with random weights (nothing is downloaded).
        lr: base learning rate of the training skeleton.
        weight_decay: weight decay of every group.
        optimizer: ``"adamw"``, ``"adam"`` or ``"sgd"`` (momentum 0.9).
        batch_size: default batch size of the skeleton.
        image_size: default input side (default: the model's, e.g. 224).
        base_dir: folder for relative A+B file paths in the plan (default: working directory).
        script_dir: folder the script will live in: A+B and checkpoint files inside it are
            written relative to it.

    Returns:
        The script's source code.

    Raises:
        ExportError: sub-tensor freezing, a stage that changes A+B, an unknown optimizer, an
            architecture that cannot be named, a missing A+B file.
        PlanError: the plan does not fit the model.
        ModelSourceError: the model cannot be built from the spec.
    """
    from workbench.core.models.zoo import current_num_classes, model_input_size

    if optimizer not in OPTIMIZERS:
        raise ExportError(f"optimizer {optimizer!r} is not supported by the exported script; use one of {', '.join(OPTIMIZERS)}")
    if model is None:
        model, arch = _structure_model(model_spec)
    else:
        name = model_spec.name
        if not name:
            raise ExportError("the model spec has no architecture name; give the torchvision model name")
        arch = name
    tree = ModelTree.from_model(model)
    plan.validate(tree)
    eff = plan.resolve(tree)
    partial = [p for p, e in eff.items() if e.partial]
    if partial or any(r.partial for st in plan.stages for r in st.rules):
        where = ", ".join(partial[:3]) or "a stage"
        raise ExportError(
            f"sub-tensor freezing ('partial' on {where}) cannot be exported as a plain script; "
            "apply the plan with workbench.apply_plan(model, plan) in your script, or remove 'partial'"
        )
    low_rank = [p for p, e in eff.items() if e.reparam is not None and e.reparam.low_rank is not None]
    if low_rank or any(r.reparam is not None and r.reparam.low_rank is not None for st in plan.stages for r in st.rules):
        where = ", ".join(p or "(root)" for p in low_rank[:3]) or "a stage"
        raise ExportError(
            f"low-rank A+B ('reparam.rank' on {where}) has no plain-script form; write a PEFT adapter with "
            "`workbench export --peft DIR`, or apply the plan with workbench.apply_plan(model, plan) in your script"
        )
    base = _settings(tree, eff)
    steps, epochs, stages = _stage_table(plan, tree)
    reparam = _reparam_settings(tree, eff)
    base_path = Path(base_dir) if base_dir is not None else Path.cwd()
    sdir = Path(script_dir) if script_dir is not None else None
    _relocate(reparam, base_path, sdir)
    has_fused = _uses(reparam, "fused")
    has_random = _uses(reparam, "random")
    has_file = _uses(reparam, "file")
    heads = find_head(model)
    if not heads:
        raise ExportError(f"no classification head found in {type(model).__name__}; the script needs one to build the model")
    outputs = current_num_classes(model) or 1
    size = image_size or model_input_size(arch)
    checkpoint = None
    if model_spec.checkpoint:
        checkpoint = _script_path(Path(model_spec.checkpoint).expanduser().resolve(), sdir)
    weights = None if model_spec.source == "checkpoint" else model_spec.weights

    counts = _counts(tree, eff)
    lines: list[str] = []
    desc = f" ({plan.description})" if plan.description else ""
    desc = desc.replace("\\", "/").replace('"' * 3, "'" * 3)  # cannot end the docstring
    lines.append("#!/usr/bin/env python3")
    lines.append(f'"""Freeze plan for {arch} in plain PyTorch{desc}.')
    lines.append("")
    lines.append(f"Exported by Freeze Workbench on {_dt.date.today().isoformat()}; needs only torch and torchvision")
    lines.append("(and safetensors for .safetensors files). What it does to the model:")
    lines.append(f"  - trainable: {counts['trainable']:,} of {counts['total']:,} parameters "
                 f"({100.0 * counts['trainable'] / max(counts['total'], 1):.1f}%)")
    lines.append(f"  - BatchNorm kept in eval mode (across model.train()): {counts['bn_eval']} of {counts['bn']} modules")
    if reparam:
        lines.append(f"  - W = A + B (A fixed, B trained) on {counts['reparam']} modules")
    lines.append("  - optimizer param groups: trainable parameters only, one group per learning-rate multiplier")
    if plan.stages:
        n = len(plan.stages)
        lines.append(f"  - {n} stage{'s' if n > 1 else ''} of progressive unfreezing")
    lines.append("")
    lines.append("Run:  python THIS.py --steps 100             (trains on random data: replace make_batches)")
    lines.append("      python THIS.py --describe state.json   (writes the applied state, no training)")
    lines.append('"""')
    extra = ("import zlib\n" if has_random else "")
    lines.append(_HEADER_IMPORTS.format(
        extra_imports=extra,
        parametrize_import="from torch.nn.utils import parametrize\n" if reparam else "",
    ).rstrip("\n"))
    lines.append("")
    lines.append("# ---------------------------------------------------------------- the model")
    lines.append(f"ARCH = {arch!r}")
    lines.append(f"WEIGHTS = {weights!r}  # None: random initialisation")
    if checkpoint is not None:
        lines.append(f"CHECKPOINT = {checkpoint!r}")
    lines.append(f"NUM_CLASSES = {model_spec.num_classes!r}  # None: keep the head")
    lines.append(f"HEADS = {heads!r}  # classification head(s), replaced for NUM_CLASSES")
    lines.append(f"OUTPUTS = {outputs!r}")
    lines.append(f"IMAGE_SIZE = {size!r}")
    lines.append(_MODEL_CODE.rstrip("\n"))
    if checkpoint is not None:
        lines.append(_CHECKPOINT_CODE.rstrip("\n"))
        lines.append(_BUILD_CHECKPOINT.rstrip("\n"))
    else:
        lines.append(_BUILD_PLAIN.rstrip("\n"))
    lines.append("")
    lines.append("")
    lines.append("# ---------------------------------------------------------------- the freeze plan")
    lines.append("# (module path prefix, trainable), applied in order: a later entry wins; \"\" is the whole model.")
    lines.append(f"REQUIRES_GRAD = {_literal(base['requires_grad'])}")
    lines.append("# BatchNorm modules under these module paths stay in eval mode, even after model.train().")
    lines.append(f"BN_EVAL = {_literal(base['bn_eval'])}")
    lines.append("# (module path prefix, learning-rate multiplier): a later entry wins.")
    lines.append(f"LR_SCALES = {_literal(base['lr_scales'])}")
    if reparam:
        lines.append("# W = A + B on every parameter (or the listed ones) of the modules under each prefix.")
        lines.append(f"A_PLUS_B = {_literal(reparam)}")
    if plan.stages:
        lines.append("# Progressive unfreezing: settings in force once (step stages, epoch stages) are reached.")
        lines.append(f"STAGE_STEPS = {steps!r}")
        lines.append(f"STAGE_EPOCHS = {epochs!r}")
        lines.append(f"STAGES = {_literal(stages)}")
        lines.append('BASE = {"label": "base", "requires_grad": REQUIRES_GRAD, "bn_eval": BN_EVAL, "lr_scales": LR_SCALES}')
    lines.append(f"LR = {lr!r}")
    lines.append(f"WEIGHT_DECAY = {weight_decay!r}")
    lines.append(f"BATCH_SIZE = {batch_size!r}")
    if has_file:
        lines.append("_FILES: dict[str, dict[str, torch.Tensor]] = {}")
    adjust = "    out = split_fused_groups(out, weight_decay)\n" if has_fused else ""
    lines.append(_FREEZE_CODE.replace("{adjust_call}", adjust).rstrip("\n"))
    if reparam:
        lines.append(_APLUSB_CODE.rstrip("\n"))
        if has_fused:
            lines.append(_FUSED_CODE.rstrip("\n"))
        lines.append(
            _SOURCE_CODE.format(
                random_branch=_RANDOM_BRANCH if has_random else "", file_branch=_FILE_BRANCH if has_file else ""
            ).rstrip("\n")
        )
        lines.append(
            _INSTALL_CODE.replace(
                "{install_modes}", _INSTALL_WITH_FUSED if has_fused else _INSTALL_EXACT_ONLY
            ).rstrip("\n")
        )
    apply_lines = ['', '', 'def apply_freeze_plan(model: nn.Module) -> None:',
                   '    """Apply the plan: A+B first (it creates the B parameters), then flags and BatchNorm modes."""']
    if reparam:
        apply_lines.append("    add_a_plus_b(model, A_PLUS_B)")
    apply_lines.append("    set_requires_grad(model, REQUIRES_GRAD)")
    apply_lines.append("    set_bn_eval(model, BN_EVAL)")
    lines.append("\n".join(apply_lines))
    lines.append(_DESCRIBE_CODE.rstrip("\n"))
    lines.append(_main_code(optimizer, bool(plan.stages), has_fused).rstrip("\n"))
    return "\n".join(lines) + "\n"


def _counts(tree: ModelTree, eff: Mapping[str, Effective]) -> dict[str, int]:
    total = sum(n.own_params for n in tree.nodes.values())
    trainable = sum(n.own_params for p, n in tree.nodes.items() if not eff[p].frozen)
    bn = sum(1 for n in tree.nodes.values() if n.is_bn)
    bn_eval = sum(1 for p, n in tree.nodes.items() if n.is_bn and eff[p].bn_eval)
    reparam = sum(1 for p, n in tree.nodes.items() if n.own_params and eff[p].reparam)
    return {"total": total, "trainable": trainable, "bn": bn, "bn_eval": bn_eval, "reparam": reparam}


def export_script(
    plan: FreezePlan,
    model_spec: ModelSpec,
    path: str | os.PathLike[str],
    **kwargs: Any,
) -> Path:
    """Write the plain-PyTorch script for a plan (atomically).

    Args:
        plan: the plan.
        model_spec: where the model comes from.
        path: destination ``.py`` file.
        **kwargs: options of :func:`render_script` (``model``, ``lr``, ``weight_decay``,
            ``optimizer``, ``batch_size``, ``image_size``, ``base_dir``).

    Returns:
        The path written.

    Raises:
        ExportError: the plan cannot be exported as a plain script (see :func:`render_script`).
        PlanError: the plan does not fit the model.
        ModelSourceError: the model cannot be built from the spec.
        OSError: the folder is not writable.
    """
    dest = Path(path)
    kwargs.setdefault("script_dir", dest.parent if str(dest.parent) else Path("."))
    text = render_script(plan, model_spec, **kwargs)
    atomic_write(dest, text)
    return dest
