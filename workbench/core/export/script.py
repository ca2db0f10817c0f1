"""Render and write the plain-PyTorch script of a plan.

The script imports ``torch`` and the model's own library only (torchvision, timm,
transformers, or your module for ``py:`` models; ``safetensors`` when a checkpoint or an A+B
tensor file is a ``.safetensors`` file), never the workbench. On the same model it reproduces
what :func:`workbench.core.freezing.apply.apply_plan` and
:meth:`~workbench.core.freezing.plan_handle.AppliedPlan.param_groups` do, from settings
tables the workbench's resolver computed at export time (:mod:`workbench.core.export.tables`):

- ``requires_grad`` per parameter (module prefixes, then single parameters for ``param:``
  rules), ``"unselected": "keep"`` included;
- modules kept in eval mode across ``model.train()`` (``eval``; ``bn_eval`` for BatchNorm) by
  overriding ``train`` on the instance, exactly as the workbench's lock does;
- ``W = A + B`` with :mod:`torch.nn.utils.parametrize` (exact mode) or the fused mode;
- optimizer param groups with only trainable parameters, grouped by ``lr_scale`` (``lr_decay``
  included) and weight decay (``weight_decay`` rules, ``no_decay="auto"``), in the same order
  and with the same keys as ``AppliedPlan.param_groups``;
- a short training loop on random data of the model's kind (images, or token ids within the
  vocabulary as ``model(**batch)``), with progressive unfreezing when the plan has stages.

``python script.py --describe state.json`` writes the applied state without training.
Refused with :class:`ExportError`: sub-tensor freezing (``partial``), low-rank A+B, stages that
change A+B. Activation checkpointing (``checkpoint``) changes memory only and is not in the
script; its docstring says so.
"""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path
from typing import Any

from torch import nn

from workbench.core.atomic import atomic_write
from workbench.core.export.common import OPTIMIZERS, ExportError, literal
from workbench.core.export.model_code import ModelSection, model_section
from workbench.core.export.plan_code import (
    APLUSB_CODE,
    DESCRIBE_CODE,
    FILE_BRANCH,
    FREEZE_CODE,
    FUSED_CODE,
    INSTALL_CODE,
    INSTALL_EXACT_ONLY,
    INSTALL_WITH_FUSED,
    RANDOM_BRANCH,
    SOURCE_CODE,
)
from workbench.core.export.tables import (
    ModelFacts,
    counts,
    plan_tables,
    relocate_files,
    reparam_table,
    stage_tables,
    uses,
)
from workbench.core.models.spec import ModelSpec
from workbench.core.models.tree import ModelTree
from workbench.core.plan.rules import FreezePlan

__all__ = ["export_script", "render_script", "structure_model"]

#: Sources whose structure is built on the meta device for the export (nothing allocated).
_META_SOURCES = ("timm", "hf")


def structure_model(spec: ModelSpec, *, meta: bool = False) -> tuple[nn.Module, str | None]:
    """The model's architecture (random weights, nothing downloaded) and its torchvision name.

    Args:
        spec: where the model comes from.
        meta: build timm and Hugging Face models on the meta device (shapes only) when no
            checkpoint is given.

    Returns:
        ``(model, torchvision architecture name or None)``.

    Raises:
        ModelSourceError: the model cannot be built.
    """
    from workbench.core.models.zoo import load_checkpoint, replace_head

    if spec.source == "checkpoint":
        result = load_checkpoint(spec.checkpoint, arch=spec.name)  # type: ignore[arg-type]
        model = result.model
        if spec.num_classes is not None:
            replace_head(model, spec.num_classes)
        return model, spec.name or result.arch
    plain = ModelSpec(source=spec.source, name=spec.name, weights=None, checkpoint=spec.checkpoint,
                      num_classes=spec.num_classes, origin=spec.origin)
    on_meta = meta and spec.source in _META_SOURCES and spec.checkpoint is None
    return plain.build(allow_download=False, meta=on_meta), spec.name


_HEADER_IMPORTS = '''from __future__ import annotations

import argparse
import fnmatch
import json
import types
{extra_imports}from pathlib import Path

import torch
{model_imports}from torch import nn
{parametrize_import}
HERE = Path(__file__).resolve().parent
'''


def _main_code(optimizer: str, has_stages: bool, has_fused: bool, section: ModelSection) -> str:
    make_opt = OPTIMIZERS[optimizer]
    hook = "    if any(g.get(\"reparam_decay\") for g in groups):\n        optimizer.register_step_pre_hook(fused_decay)\n" if has_fused else ""
    stage_fn = ""
    stage_loop = ""
    if has_stages:
        stage_fn = '''

def stage_key(step: int, epoch: int) -> tuple[int, int]:
    """How many step stages and epoch stages are reached."""
    return sum(step >= s for s in STAGE_STEPS), sum(epoch >= e for e in STAGE_EPOCHS)
'''
        stage_loop = '''        key = stage_key(step, epoch)
        if key != current:  # progressive unfreezing: new flags, optimizer rebuilt keeping its state
            current = key
            settings = STAGES.get(key, BASE)
            apply_settings(model, settings)
            old, optimizer = optimizer, make_optimizer(model, args.lr, args.weight_decay, settings)
            optimizer.state.update({p: s for p, s in old.state.items() if p.requires_grad})
            print(f"step {step}: stage {settings.get('label', 'base')}")
'''
    size_dest = section.size_arg.lstrip("-").replace("-", "_")
    return f'''

def make_optimizer(model: nn.Module, lr: float, weight_decay: float, settings: dict) -> torch.optim.Optimizer:
    """The optimizer over trainable parameters only, one group per (learning-rate multiplier, weight decay)."""
    groups = param_groups(model, lr, weight_decay, settings)
    optimizer = {make_opt}
{hook}    return optimizer
{stage_fn}

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="training steps on random data")
    parser.add_argument("--steps-per-epoch", type=int, default=100, help="for stages given in epochs")
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE)
    parser.add_argument("{section.size_arg}", type=int, default={section.size_default})
    parser.add_argument("--lr", type=float, default=LR)
    parser.add_argument("--weight-decay", type=float, default=WEIGHT_DECAY, help="of parameters no rule sets")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--describe", metavar="JSON", help="write the applied state to this file and exit")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = build_model()
    apply_freeze_plan(model)
    model.to(args.device)
    optimizer = make_optimizer(model, args.lr, args.weight_decay, BASE)
    state = describe(model, optimizer.param_groups)
    print(f"trainable {{state['trainable_count']:,}} of {{state['total_count']:,}} parameters; "
          f"{{len(state['eval'])}} modules kept in eval; {{len(optimizer.param_groups)}} param groups")
    if args.describe:
        Path(args.describe).write_text(json.dumps(state, indent=1))
        return

    model.train()  # modules kept in eval stay in eval
    current = (0, 0)
    for step, batch in enumerate(make_batches(args.steps, args.batch_size, args.{size_dest}, args.device)):
        epoch = step // args.steps_per_epoch
{stage_loop}        optimizer.zero_grad(set_to_none=True)
        loss = batch_loss(model, batch)
        loss.backward()
        optimizer.step()
        if step % 10 == 0 or step == args.steps - 1:
            print(f"step {{step}}: loss {{loss.item():.4f}}")


if __name__ == "__main__":
    main()
'''


def _refuse_unexportable(plan: FreezePlan, tree: ModelTree) -> None:
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


def _docstring(plan: FreezePlan, name: str, section: ModelSection, c: dict[str, int], has_reparam: bool,
               no_decay: str | None) -> list[str]:
    desc = f" ({plan.description})" if plan.description else ""
    desc = desc.replace("\\", "/").replace('"' * 3, "'" * 3)  # cannot end the docstring
    lines = [f'"""Freeze plan for {name} in plain PyTorch{desc}.', ""]
    lines.append(f"Exported by Freeze Workbench on {_dt.date.today().isoformat()}; needs only {section.needs}")
    lines.append("(and safetensors for .safetensors files). What it does to the model:")
    lines.append(f"  - trainable: {c['trainable']:,} of {c['total']:,} parameters "
                 f"({100.0 * c['trainable'] / max(c['total'], 1):.1f}%)")
    if c["bn"]:
        lines.append(f"  - BatchNorm kept in eval mode (across model.train()): {c['bn_eval']} of {c['bn']} modules")
    if c["eval"]:
        lines.append(f"  - modules kept in eval mode (Dropout, DropPath, BatchNorm...): {c['eval']}")
    if has_reparam:
        lines.append(f"  - W = A + B (A fixed, B trained) on {c['reparam']} modules")
    lines.append("  - optimizer param groups: trainable parameters only, one group per learning-rate multiplier"
                 " and weight decay")
    if no_decay == "auto":
        lines.append("  - no weight decay for biases, 1-D parameters and the model's no_weight_decay() names")
    if plan.stages:
        n = len(plan.stages)
        lines.append(f"  - {n} stage{'s' if n > 1 else ''} of progressive unfreezing")
    if any(r.checkpoint for r in plan.rules) or any(r.checkpoint for st in plan.stages for r in st.rules):
        lines.append("  Not in this script: activation checkpointing (the plan's 'checkpoint'; it saves memory only).")
    lines.append("")
    lines.append("Run:  python THIS.py --steps 100             (trains on random data: replace make_batches)")
    lines.append("      python THIS.py --describe state.json   (writes the applied state, no training)")
    lines.append('"""')
    return lines


def _tables_lines(base: dict[str, Any], plan: FreezePlan, facts: ModelFacts) -> list[str]:
    lines = ["# Tables of (module path or parameter name, value), applied in order: a later entry wins;",
             "# \"\" is the whole model. Computed from the plan by Freeze Workbench."]
    lines.append(f"REQUIRES_GRAD = {literal(base['requires_grad'])}")
    lines.append("# BatchNorm modules under these module paths stay in eval mode, even after model.train().")
    lines.append(f"BN_EVAL = {literal(base['bn_eval'])}")
    lines.append("# (module path, kept in eval mode): any module (Dropout, DropPath...), even after model.train().")
    lines.append(f"EVAL = {literal(base['eval'])}")
    lines.append("# (module path or parameter name, learning-rate multiplier).")
    lines.append(f"LR_SCALES = {literal(base['lr_scales'])}")
    lines.append("# (module path or parameter name, weight decay); None: --weight-decay.")
    lines.append(f"WEIGHT_DECAYS = {literal(base['weight_decays'])}")
    lines.append('BASE = {"label": "base", "requires_grad": REQUIRES_GRAD, "bn_eval": BN_EVAL, "eval": EVAL,\n'
                 '        "lr_scales": LR_SCALES, "weight_decays": WEIGHT_DECAYS}')
    if plan.stages:
        steps, epochs, stages = stage_tables(plan, facts)
        lines.append("# Progressive unfreezing: settings in force once (step stages, epoch stages) are reached.")
        lines.append(f"STAGE_STEPS = {steps!r}")
        lines.append(f"STAGE_EPOCHS = {epochs!r}")
        lines.append(f"STAGES = {literal(stages)}")
    return lines


def render_script(
    plan: FreezePlan,
    model_spec: ModelSpec,
    *,
    model: nn.Module | None = None,
    lr: float = 1e-3,
    weight_decay: float = 0.01,
    no_decay: str | None = None,
    optimizer: str = "adamw",
    batch_size: int = 32,
    image_size: int | None = None,
    base_dir: str | os.PathLike[str] | None = None,
    script_dir: str | os.PathLike[str] | None = None,
) -> str:
    """The plain-PyTorch script for a plan, as text.

    Args:
        plan: the plan (validated against the model).
        model_spec: where the model comes from (torchvision, checkpoint, ``timm:``, ``hf:`` or
            ``py:``, number of classes); the script builds the model the same way with the
            model's own library.
        model: the model, when already built (only its structure is read); otherwise it is
            built from ``model_spec`` with random weights (timm and Hugging Face models on the
            meta device; nothing is downloaded).
        lr: base learning rate of the training skeleton.
        weight_decay: weight decay of the parameters no ``weight_decay`` rule reaches.
        no_decay: ``"auto"``: no weight decay for biases, 1-D parameters and the model's
            ``no_weight_decay()`` names, as ``AppliedPlan.param_groups(no_decay="auto")``.
        optimizer: ``"adamw"``, ``"adam"`` or ``"sgd"`` (momentum 0.9).
        batch_size: default batch size of the skeleton.
        image_size: default input side of a vision model (default: the model's, e.g. 224).
        base_dir: folder for relative A+B file paths in the plan (default: working directory).
        script_dir: folder the script will live in: files inside it (A+B tensors, checkpoint,
            Hugging Face folder, model code) are written relative to it.

    Returns:
        The script's source code.

    Raises:
        ExportError: sub-tensor freezing, low-rank A+B, a stage that changes A+B, an unknown
            optimizer, a model the script cannot rebuild or feed, a missing A+B file.
        PlanError: the plan does not fit the model.
        ModelSourceError: the model cannot be built from the spec.
    """
    if optimizer not in OPTIMIZERS:
        raise ExportError(f"optimizer {optimizer!r} is not supported by the exported script; use one of {', '.join(OPTIMIZERS)}")
    if model is None:
        model, arch = structure_model(model_spec, meta=True)
    else:
        arch = model_spec.name
        if not arch and model_spec.source in ("torchvision", "checkpoint"):
            raise ExportError("the model spec has no architecture name; give the torchvision model name")
    tree = ModelTree.from_model(model)
    plan.validate(tree)
    _refuse_unexportable(plan, tree)
    facts = ModelFacts(model, tree, no_decay)
    sdir = Path(script_dir) if script_dir is not None else None
    section = model_section(model_spec, arch, model, sdir, image_size)
    base = plan_tables(plan, facts)
    reparam = reparam_table(tree, plan.resolve(tree))
    relocate_files(reparam, Path(base_dir) if base_dir is not None else Path.cwd(), sdir)
    has_fused, has_random, has_file = uses(reparam, "fused"), uses(reparam, "random"), uses(reparam, "file")

    name = (f"{model_spec.source}:{model_spec.name}" if model_spec.source not in ("torchvision", "checkpoint")
            else arch or "the model")
    lines = ["#!/usr/bin/env python3"]
    lines += _docstring(plan, name, section, counts(plan, facts, base), bool(reparam), no_decay)
    lines.append(_HEADER_IMPORTS.format(
        extra_imports="import zlib\n" if has_random else "",
        model_imports="".join(line + "\n" for line in section.imports),
        parametrize_import="from torch.nn.utils import parametrize\n" if reparam else "",
    ).rstrip("\n"))
    lines.append("")
    lines.append("# ---------------------------------------------------------------- the model")
    lines += section.constants
    lines.append(section.code.rstrip("\n"))
    lines.append("")
    lines.append("")
    lines.append("# ---------------------------------------------------------------- the data (replace with yours)")
    lines += section.data_constants
    lines.append(section.data_code.rstrip("\n"))
    lines.append("")
    lines.append("")
    lines.append("# ---------------------------------------------------------------- the freeze plan")
    lines += _tables_lines(base, plan, facts)
    if reparam:
        lines.append("# W = A + B on every parameter (or the listed ones) of the modules under each prefix.")
        lines.append(f"A_PLUS_B = {literal(reparam)}")
    lines.append(f"LR = {lr!r}")
    lines.append(f"WEIGHT_DECAY = {weight_decay!r}")
    lines.append(f"BATCH_SIZE = {batch_size!r}")
    if has_file:
        lines.append("_FILES: dict[str, dict[str, torch.Tensor]] = {}")
    adjust = "    out = split_fused_groups(out, weight_decay)\n" if has_fused else ""
    lines.append(FREEZE_CODE.replace("{adjust_call}", adjust).rstrip("\n"))
    if reparam:
        lines.append(APLUSB_CODE.rstrip("\n"))
        if has_fused:
            lines.append(FUSED_CODE.rstrip("\n"))
        lines.append(SOURCE_CODE.format(random_branch=RANDOM_BRANCH if has_random else "",
                                        file_branch=FILE_BRANCH if has_file else "").rstrip("\n"))
        lines.append(INSTALL_CODE.replace("{install_modes}", INSTALL_WITH_FUSED if has_fused else INSTALL_EXACT_ONLY).rstrip("\n"))
    apply_lines = ['', '', 'def apply_freeze_plan(model: nn.Module) -> None:',
                   '    """Apply the plan: A+B first (it creates the B parameters), then flags and eval-mode locks."""']
    if reparam:
        apply_lines.append("    add_a_plus_b(model, A_PLUS_B)")
    apply_lines.append("    apply_settings(model, BASE)")
    lines.append("\n".join(apply_lines))
    lines.append(DESCRIBE_CODE.rstrip("\n"))
    lines.append(_main_code(optimizer, bool(plan.stages), has_fused, section).rstrip("\n"))
    return "\n".join(lines) + "\n"


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
            ``no_decay``, ``optimizer``, ``batch_size``, ``image_size``, ``base_dir``).

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
