"""Render and write the plain-PyTorch script of a training run: model, data, plan, optimizer, loop.

The script imports ``torch`` and the model's own library only (torchvision, timm,
transformers, or your module for ``py:`` models; ``safetensors`` when a checkpoint or an A+B
tensor file is a ``.safetensors`` file), never the workbench. It trains the run a
:class:`~workbench.core.training.config.TrainConfig` describes, as
:class:`~workbench.core.training.engine.Trainer` would, step for step (the differential test
in ``tests/core/export`` compares their losses):

- the model, built the same way (:mod:`workbench.core.export.model_code`), and the plan's
  applied state from settings tables the workbench's resolver computed at export time
  (:mod:`workbench.core.export.tables`): ``requires_grad`` per parameter, modules kept in
  eval mode across ``model.train()``, ``W = A + B`` with :mod:`torch.nn.utils.parametrize`
  (exact mode) or the fused mode, param groups by ``lr_scale`` (``lr_decay`` included) and
  weight decay (``weight_decay`` rules, ``no_decay="auto"``);
- the run's data (:mod:`workbench.core.export.run_section`), seed, batch size, steps or
  epochs, the optimizer with every hyperparameter (:data:`workbench.core.optimizers.OPTIMIZER_TABLE`),
  the schedule and warm-up, AMP, the plan's stages (flags change, the optimizer keeps the
  state of what still trains) and validation (:mod:`workbench.core.export.run_code`).

Every plan key and config field has an export rule (:mod:`workbench.core.export.export_rules`);
what the script cannot carry is refused with :class:`ExportError` naming it.
``python script.py --describe state.json`` writes the applied state without training.
"""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path
from typing import Any

from torch import nn

from workbench.core.atomic import atomic_write
from workbench.core.export.common import ExportError, literal
from workbench.core.export.export_rules import check_exportable, ignored_fields, memory_only_keys
from workbench.core.export.extension_code import LOW_RANK_CODE, LOW_RANK_INSTALL, PARTIAL_CODE
from workbench.core.export.extension_tables import (
    LowRankLayer,
    check_plain,
    extension_counts,
    low_rank_layers,
    partial_table,
)
from workbench.core.export.model_code import model_section
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
from workbench.core.export.run_code import LOOP_CODE, schedule_code, sync_code, task_code
from workbench.core.export.run_section import RunSection, run_section
from workbench.core.export.tables import (
    ModelFacts,
    counts,
    plan_tables,
    relocate_files,
    reparam_table,
    stage_tables,
    uses,
)
from workbench.core.models.heads import current_num_classes, replace_head
from workbench.core.models.meta_copy import meta_copy
from workbench.core.models.script_code import HEAD_CODE, ScriptModel, heads_line
from workbench.core.models.sources import DEFAULT_SOURCE, source_of
from workbench.core.models.spec import ModelSpec
from workbench.core.optimizers import CHOICES
from workbench.core.plan.rules import FreezePlan
from workbench.core.plan.tree import ModelTree
from workbench.core.training.config import ConfigError, TrainConfig

__all__ = ["export_script", "render_script", "structure_model"]

def structure_model(spec: ModelSpec, *, meta: bool = False) -> tuple[nn.Module, str | None]:
    """The model's architecture (random weights, nothing downloaded) and its torchvision name.

    Args:
        spec: where the model comes from.
        meta: build the models of a source whose row says ``export_on_meta`` (timm, Hugging
            Face) on the meta device (shapes only) when no checkpoint is given.

    Returns:
        ``(model, torchvision architecture name or None)``.

    Raises:
        ModelSourceError: the model cannot be built.
    """
    from workbench.core.models.zoo import load_checkpoint, replace_head

    if spec.from_checkpoint_file:
        result = load_checkpoint(spec.checkpoint, arch=spec.name)  # type: ignore[arg-type]
        model = result.model
        if spec.num_classes is not None:
            replace_head(model, spec.num_classes)
        return model, spec.name or result.arch
    plain = ModelSpec(source=spec.source, name=spec.name, weights=None, checkpoint=spec.checkpoint,
                      num_classes=spec.num_classes, origin=spec.origin)
    on_meta = meta and source_of(spec.source).export_on_meta and spec.checkpoint is None
    return plain.build(allow_download=False, meta=on_meta), spec.name


_HEADER_IMPORTS = '''from __future__ import annotations

import argparse
import contextlib
import fnmatch
import json
import math
import random
import types
{extra_imports}from collections.abc import Mapping, Sized
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
{model_imports}from torch import nn
{parametrize_import}from torch.utils.data import DataLoader, Dataset, Subset

HERE = Path(__file__).resolve().parent
'''


def _docstring_safe(text: str) -> str:
    """Text that cannot end the docstring, make an escape or start a line (a path, a spec, a description)."""
    return text.replace("\\", "/").replace('"' * 3, "'" * 3).replace("\r", " ").replace("\n", " ")


def _with_head(model: nn.Module, head_classes: int | None) -> nn.Module:
    """``model`` as the run trains it: a meta copy with a head of ``head_classes`` outputs when the
    run replaces the head (the model itself is never changed), else ``model``."""
    if head_classes is None or current_num_classes(model) in (None, head_classes):
        return model
    copy = meta_copy(model)
    replace_head(copy, head_classes)
    return copy


def _docstring(plan: FreezePlan, name: str, section: ScriptModel, c: dict[str, int], has_reparam: bool,
               config: TrainConfig, run: RunSection, layers: list[LowRankLayer], partial: list[Any]) -> list[str]:
    desc = f" ({plan.description})" if plan.description else ""
    desc = _docstring_safe(desc)
    needs = _docstring_safe(section.needs + "".join(f" and {n}" for n in dict.fromkeys(run.needs) if n not in section.needs))
    lines = [f'"""Training run of {_docstring_safe(name)} in plain PyTorch{desc}.', ""]
    lines.append(f"Exported by Freeze Workbench on {_dt.date.today().isoformat()}; needs only {needs}")
    lines.append("(and safetensors for .safetensors files). It trains the run the workbench trains, with the same")
    lines.append("seed, data, batch order, optimizer, schedule and plan:")
    lines += [f"  - {_docstring_safe(line)}" for line in run.summary]
    lines.append(f"  - trainable: {c['trainable']:,} of {c['total']:,} parameters "
                 f"({100.0 * c['trainable'] / max(c['total'], 1):.1f}%)"
                 + (", with the model's own head (the run gives it the data's classes)" if run.fit_to_data else ""))
    if c["bn"]:
        lines.append(f"  - BatchNorm kept in eval mode (across model.train()): {c['bn_eval']} of {c['bn']} modules")
    if c["eval"]:
        lines.append(f"  - modules kept in eval mode (Dropout, DropPath, BatchNorm...): {c['eval']}")
    if has_reparam and c["reparam"]:
        lines.append(f"  - W = A + B (A fixed, B trained) on {c['reparam']} modules")
    if layers:
        kinds = sorted({(lr.low_rank.variant, lr.low_rank.rank) for lr in layers})
        what = ", ".join(f"{'DoRA' if v == 'dora' else 'LoRA'} rank {r}" for v, r in kinds)
        lines.append(f"  - low-rank A+B ({what}) on {len(layers)} layer{'s' if len(layers) > 1 else ''}, in plain PyTorch "
                     "(no PEFT): W = A + (alpha/rank) U V")
        lines.append("    (DoRA: each output row rescaled to its magnitude M); A and the layer's bias fixed, U, V and M train,")
        lines.append("    under the workbench's names (<layer>.parametrizations.weight.0.U, fused: <layer>.wb_lowrank.weight.U)")
    if partial:
        lines.append(f"  - sub-tensor freezing on {len(partial)} weight{'s' if len(partial) > 1 else ''}: "
                     "<layer>.weight_trainable trains, <layer>.weight_frozen never does (the workbench's names)")
    lines.append("  - optimizer param groups: trainable parameters only, one group per learning-rate multiplier"
                 " and weight decay")
    if config.no_decay == "auto":
        lines.append("  - no weight decay for biases, 1-D parameters and the model's no_weight_decay() names")
    if plan.stages:
        n = len(plan.stages)
        lines.append(f"  - {n} stage{'s' if n > 1 else ''} of the plan: flags and eval locks change, the optimizer"
                     " keeps the state of what still trains")
    for k in memory_only_keys(plan):
        lines.append(f"  Not in this script: {k.label} (the plan's '{k.name}'; it changes memory, not the numbers).")
    for f in ignored_fields(config):
        lines.append(f"  Not in this script: the run's '{f}' (where files go and what is cached, not the numbers).")
    lines.append("")
    lines.append("Run:  python THIS.py                         (the run; --steps N, --device cuda ... change it)")
    lines.append("      python THIS.py --losses losses.json    (also writes every step's loss)")
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
    lines.append("# (module path or parameter name, weight decay); None: WEIGHT_DECAY.")
    lines.append(f"WEIGHT_DECAYS = {literal(base['weight_decays'])}")
    lines.append('BASE = {"label": "base", "requires_grad": REQUIRES_GRAD, "bn_eval": BN_EVAL, "eval": EVAL,\n'
                 '        "lr_scales": LR_SCALES, "weight_decays": WEIGHT_DECAYS}')
    steps, epochs, stages = stage_tables(plan, facts) if plan.stages else ([], [], {})
    lines.append("# The plan's stages: settings in force once (step stages, epoch stages) are reached.")
    lines.append(f"STAGE_STEPS = {steps!r}")
    lines.append(f"STAGE_EPOCHS = {epochs!r}")
    lines.append(f"STAGES = {literal(stages)}")
    return lines


def _legacy_config(optimizer: str, lr: float, weight_decay: float, no_decay: str | None, batch_size: int,
                   image_size: int | None) -> TrainConfig:
    """The run of a script exported from a plan alone: 20 steps on synthetic data."""
    if optimizer not in CHOICES:
        raise ExportError(f"optimizer {optimizer!r} is not supported by the exported script; use one of {', '.join(CHOICES)}")
    try:
        return TrainConfig(data="synthetic", steps=20, optimizer=optimizer, lr=lr, weight_decay=weight_decay,
                           no_decay=no_decay, batch_size=batch_size, image_size=image_size).validate()
    except ConfigError as e:
        raise ExportError(str(e)) from None


def render_script(
    plan: FreezePlan,
    model_spec: ModelSpec,
    *,
    model: nn.Module | None = None,
    config: TrainConfig | None = None,
    provided: bool = False,
    lr: float = 1e-3,
    weight_decay: float = 0.01,
    no_decay: str | None = None,
    optimizer: str = "adamw",
    batch_size: int = 32,
    image_size: int | None = None,
    base_dir: str | os.PathLike[str] | None = None,
    script_dir: str | os.PathLike[str] | None = None,
) -> str:
    """The plain-PyTorch script of a training run, as text.

    Args:
        plan: the plan (validated against the model).
        model_spec: where the model comes from (torchvision, checkpoint, ``timm:``, ``hf:`` or
            ``py:``, number of classes); the script builds the model the same way with the
            model's own library.
        model: the model, when already built (only its structure is read); otherwise it is
            built from ``model_spec`` with random weights (timm and Hugging Face models on the
            meta device; nothing is downloaded).
        config: the run (data, seed, length, optimizer, schedule ...); None: 20 steps on
            synthetic data with the settings below.
        provided: the run trains ``model`` as handed to it (the app's runs): synthetic data
            keeps its head, as the engine does for a model it did not build.
        lr: base learning rate (without ``config``).
        weight_decay: weight decay of the parameters no ``weight_decay`` rule reaches (without ``config``).
        no_decay: ``"auto"``: no weight decay for biases, 1-D parameters and the model's
            ``no_weight_decay()`` names (without ``config``).
        optimizer: a name of :data:`workbench.core.optimizers.CHOICES` (without ``config``;
            ``"sgd"`` is plain SGD, momentum 0).
        batch_size: batch size (without ``config``).
        image_size: input side of a vision model (without ``config``; default: the model's).
        base_dir: folder for relative A+B file paths in the plan (default: working directory).
        script_dir: folder the script will live in: files inside it (A+B tensors, checkpoint,
            Hugging Face folder, model code) are written relative to it.

    Returns:
        The script's source code.

    Raises:
        ExportError: a plan key or config field without a plain-script form (named), low-rank
            A+B or sub-tensor freezing the run would refuse (named), a stage that changes A+B or
            sub-tensor freezing, an unknown optimizer, data the script cannot open,
            a model the script cannot rebuild or feed, a missing A+B file.
        PlanError: the plan does not fit the model.
        ModelSourceError: the model cannot be built from the spec.
    """
    as_engine = config is not None and not provided  # build the model as the engine does, then fit its head
    if config is None:
        config = _legacy_config(optimizer, lr, weight_decay, no_decay, batch_size, image_size)
    check_exportable(plan, config)
    if model is None:
        model, arch = structure_model(model_spec, meta=True)
    else:
        arch = model_spec.name
        if not arch and model_spec.from_checkpoint_file:  # every other spec has a name
            raise ExportError("the model spec has no architecture name; give the torchvision model name")
    check_plain(model)
    run = run_section(config, model_spec, model, provided=provided, fit_always=as_engine, arch=arch)
    trained = _with_head(model, run.head_classes)  # the model the run trains: its tables and counts
    tree = ModelTree.from_model(trained)
    plan.validate(tree)
    eff = plan.resolve(tree)
    layers, partial = low_rank_layers(trained, eff), partial_table(trained, eff)
    facts = ModelFacts(trained, tree, config.no_decay)
    sdir = Path(script_dir) if script_dir is not None else None
    base_spec = ModelSpec(source=model_spec.source, name=model_spec.name, weights=model_spec.weights,
                          checkpoint=model_spec.checkpoint, num_classes=None, origin=model_spec.origin)
    section = model_section(base_spec if as_engine else model_spec, arch, model, sdir)
    base = plan_tables(plan, facts)
    reparam = reparam_table(tree, eff)
    relocate_files(reparam, Path(base_dir) if base_dir is not None else Path.cwd(), sdir)
    full_rank = [e for e in reparam if "rank" not in e[1]]
    has_fused, has_random, has_file = uses(full_rank, "fused"), uses(reparam, "random"), uses(reparam, "file")

    name = (arch or "the model") if model_spec.architecture_source == DEFAULT_SOURCE else f"{model_spec.source}:{model_spec.name}"
    lines = ["#!/usr/bin/env python3"]
    c = extension_counts(counts(plan, facts, base), tree, eff, base, layers)
    lines += _docstring(plan, name, section, c, bool(reparam), config, run, layers, partial)
    lines.append(_HEADER_IMPORTS.format(
        extra_imports="import zlib\n" if has_random or layers else "",
        model_imports="".join(line + "\n" for line in section.imports),
        parametrize_import="from torch.nn.utils import parametrize\n" if reparam else "",
    ).rstrip("\n"))
    lines.append("")
    lines.append("# ---------------------------------------------------------------- the model")
    lines += section.constants
    needs_head = (run.head_classes is not None or run.fit_to_data) and "def replace_head(" not in section.code
    if needs_head and not any(c.startswith("HEADS = ") for c in section.constants):
        lines.append(heads_line(model))
    lines.append(section.code.rstrip("\n"))
    if needs_head:
        lines.append(HEAD_CODE.rstrip("\n"))
    elif "def replace_head(" not in section.code:
        lines += ["", "", "def replace_head(model: nn.Module, num_classes: int) -> None:",
                  '    """The run keeps the model\'s head."""']
    lines.append("")
    lines.append("")
    lines.append("# ---------------------------------------------------------------- the data")
    lines += run.constants
    lines.append(run.data_code.rstrip("\n"))
    lines.append("")
    lines.append("")
    lines.append("# ---------------------------------------------------------------- the freeze plan")
    lines += _tables_lines(base, plan, facts)
    if reparam:
        lines.append("# W = A + B on every parameter (or the listed ones) of the modules under each prefix; an entry with a")
        lines.append("# rank: W = A + (alpha / rank) U V on the weight of each Linear, Conv1d/2d, Conv1D and Embedding under it.")
        lines.append(f"A_PLUS_B = {literal(reparam)}")
    if partial:
        lines.append("# Sub-tensor freezing: (module path, the ranges [start, stop) of the weight along dim that train).")
        lines.append(f"PARTIAL = {literal(partial)}")
    if has_file:
        lines.append("_FILES: dict[str, dict[str, torch.Tensor]] = {}")
    adjust = "    out = split_fused_groups(out, weight_decay)\n" if has_fused else ""
    freeze = FREEZE_CODE.replace("{adjust_call}", adjust).replace("{no_decay_auto}", repr(config.no_decay == "auto"))
    lines.append(freeze.rstrip("\n"))
    if reparam:
        lines.append(APLUSB_CODE.rstrip("\n"))
        if has_fused:
            lines.append(FUSED_CODE.rstrip("\n"))
        lines.append(SOURCE_CODE.format(random_branch=RANDOM_BRANCH if has_random else "",
                                        file_branch=FILE_BRANCH if has_file else "").rstrip("\n"))
        install = INSTALL_CODE.replace("{install_modes}", INSTALL_WITH_FUSED if has_fused else INSTALL_EXACT_ONLY)
        lines.append(install.replace("{low_rank_install}", LOW_RANK_INSTALL if layers else "").rstrip("\n"))
        if layers:
            lines.append(LOW_RANK_CODE.rstrip("\n"))
    if partial:
        lines.append(PARTIAL_CODE.rstrip("\n"))
    apply_lines = ['', '', 'def apply_freeze_plan(model: nn.Module) -> None:',
                   '    """Apply the plan: A+B first (it creates the B parameters), then flags and eval-mode locks."""']
    if partial:
        apply_lines.append("    add_partial(model, PARTIAL)")
    if reparam:
        apply_lines.append("    add_a_plus_b(model, A_PLUS_B)")
    apply_lines.append("    apply_settings(model, BASE)")
    lines.append("\n".join(apply_lines))
    lines.append(DESCRIBE_CODE.rstrip("\n"))
    lines.append("")
    lines.append("")
    lines.append("# ---------------------------------------------------------------- the training run")
    lines.append(task_code(run.loss, run.metric, run.loss_ref, run.metric_ref, has_loader=run.py_data).rstrip("\n"))
    lines.append(schedule_code().rstrip("\n"))
    lines.append(sync_code().rstrip("\n"))
    hook = ("    if any(g.get(\"reparam_decay\") for g in optimizer.param_groups):\n"
            "        optimizer.register_step_pre_hook(fused_decay)\n") if has_fused else ""
    loop = LOOP_CODE.replace("{optimizer_call}", run.optimizer_call).replace("{fused_hook}", hook)
    if run.fit_to_data and run.py_data:  # the data's classes when it says so, else the model's own head
        loop = loop.replace("    if HEAD_CLASSES is not None:\n        replace_head(model, HEAD_CLASSES)",
                            "    if (HEAD_CLASSES or data_classes(dataset)) is not None:\n"
                            "        replace_head(model, HEAD_CLASSES or data_classes(dataset))")
    elif run.fit_to_data:
        loop = loop.replace("    if HEAD_CLASSES is not None:\n        replace_head(model, HEAD_CLASSES)",
                            "    if HEAD_CLASSES or dataset.classes:  # the data's classes (targets of numbers: none)\n"
                            "        replace_head(model, HEAD_CLASSES or len(dataset.classes))")
    lines.append(loop.rstrip("\n"))
    return "\n".join(lines) + "\n"


def export_script(
    plan: FreezePlan,
    model_spec: ModelSpec,
    path: str | os.PathLike[str],
    **kwargs: Any,
) -> Path:
    """Write the plain-PyTorch script of a run (atomically).

    Args:
        plan: the plan.
        model_spec: where the model comes from.
        path: destination ``.py`` file.
        **kwargs: options of :func:`render_script` (``model``, ``config``, ``provided``, ``lr``,
            ``weight_decay``, ``no_decay``, ``optimizer``, ``batch_size``, ``image_size``,
            ``base_dir``).

    Returns:
        The path written.

    Raises:
        ExportError: the run cannot be exported as a plain script (see :func:`render_script`).
        PlanError: the plan does not fit the model.
        ModelSourceError: the model cannot be built from the spec.
        OSError: the folder is not writable.
    """
    dest = Path(path)
    kwargs.setdefault("script_dir", dest.parent if str(dest.parent) else Path("."))
    text = render_script(plan, model_spec, **kwargs)
    atomic_write(dest, text)
    return dest
