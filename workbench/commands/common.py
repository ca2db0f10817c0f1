"""Argument groups and helpers shared by several subcommands."""

from __future__ import annotations

import argparse
import contextlib
import sys
import warnings
from collections.abc import Iterator, Sequence

import torch
from torch import nn

from workbench.core.errors import WorkbenchError
from workbench.core.models.sources import CHECKPOINT_SOURCE, DEFAULT_SOURCE, SOURCES, is_structure_only
from workbench.core.models.spec import ModelSpec
from workbench.core.models.zoo import CheckpointKeyMismatch
from workbench.core.plan.rules import FreezePlan


class CommandError(WorkbenchError):
    """A command-line value is out of range or names nothing; the message says which and what to use."""


_SPEC_HELP = ("resnet18 (torchvision), timm:NAME, hf:FOLDER_OR_REPO_ID, py:MODULE:FACTORY or "
              "py:file.py:FACTORY (py: imports and runs that code)")


def add_meta_argument(p: argparse.ArgumentParser) -> None:
    """``--meta``: build the model on the meta device (structure only, nothing allocated)."""
    p.add_argument("--meta", action="store_true",
                   help="structure only: build on the meta device (no weights read, no memory; "
                        "automatic for a Hugging Face folder that holds only config.json)")


def add_model_arguments(p: argparse.ArgumentParser, *, positional: bool = True) -> None:
    """``MODEL``, ``--weights``, ``--checkpoint``, ``--num-classes``, ``--trust-pickle``, ``--plan``."""
    if positional:
        p.add_argument("model", nargs="?", help=f"model spec: {_SPEC_HELP}; "
                       "optional with --checkpoint when the file records its architecture, or with --plan")
    else:
        p.add_argument("--model", dest="model", help=f"model spec: {_SPEC_HELP}")
    p.add_argument("--weights", help="pretrained weights: a torchvision name (IMAGENET1K_V1, DEFAULT) or a timm tag "
                   "(DEFAULT, augreg_in21k); hf: folders bring their own; default: random init")
    p.add_argument("--checkpoint", help="load weights from a .safetensors/.pt/.pth/.bin/.ckpt file")
    p.add_argument("--num-classes", type=int, help="replace the classification head for N classes")
    p.add_argument("--trust-pickle", action="store_true",
                   help="allow a checkpoint that is a full pickled model (runs code from the file: only for files you trust)")
    p.add_argument("--plan", help="freeze plan (.json) to apply")
    strict = p.add_mutually_exclusive_group()
    strict.add_argument("--strict", dest="strict", action="store_true", default=None,
                        help="refuse a --checkpoint whose keys do not match the model exactly")
    strict.add_argument("--non-strict", dest="strict", action="store_false",
                        help="load the matching part of a --checkpoint and list missing/unexpected keys (default)")


@contextlib.contextmanager
def checkpoint_key_policy(args: argparse.Namespace, command: str) -> Iterator[None]:
    """Within the block, a partly matching checkpoint is an error (``--strict``) or one line on stderr.

    Args:
        args: parsed arguments (``strict``: True, False or None for the default, non-strict).
        command: the subcommand, for the message prefix.

    Yields:
        Nothing.

    Raises:
        CheckpointKeyMismatch: with ``--strict``, a checkpoint that does not match exactly.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("error" if getattr(args, "strict", None) else "always", CheckpointKeyMismatch)
        yield
    for w in caught:
        if issubclass(w.category, CheckpointKeyMismatch):
            print(f"workbench {command}: warning: {w.message}", file=sys.stderr)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def add_task_arguments(p: argparse.ArgumentParser, *, loss: bool = True, metric: bool = True) -> None:
    """``--loss``, ``--metric`` and ``--input-shape``: the task of your own data."""
    if loss:
        p.add_argument("--loss", help="cross_entropy (default; class labels), bce (multi-label, on logits), mse, l1, "
                       "or py:FILE.py:FUNC (FUNC(output, target) -> scalar tensor: runs that code)")
    if loss and metric:
        p.add_argument("--metric", help="what validation reports: accuracy (default), top5, or py:FILE.py:FUNC "
                       "(FUNC(output, target) -> a number per batch: runs that code)")
    p.add_argument("--input-shape", metavar="SHAPE",
                   help="one sample's input shape without the batch, e.g. 1024 (audio frames) or 3,224,224 "
                        "(default: the data's first sample, else images)")


def input_shape_from_arg(text: str | None) -> tuple[int, ...] | None:
    """The shape an ``--input-shape`` value names (``1024``, ``3,224,224``, ``3x224x224``).

    Args:
        text: the value, or None (not given).

    Returns:
        The per-sample shape, or None.

    Raises:
        CommandError: not 1 to 8 positive integers.
    """
    from workbench.core.training.config import ConfigError, parse_input_shape

    if text is None:
        return None
    try:
        return parse_input_shape(text)
    except ConfigError as e:
        raise CommandError(f"--input-shape: {e}") from None


def device_from_arg(text: str | None) -> torch.device:
    """The device a ``--device`` value names, available on this machine.

    Args:
        text: ``auto``/None (cuda > mps > cpu), ``cpu``, ``cuda``, ``cuda:N`` or ``mps``.

    Returns:
        The device.

    Raises:
        WorkbenchError: not a device name, or the device is not available here.
    """
    from workbench.core.training.config import ConfigError, TrainConfig
    from workbench.core.training.engine import resolve_device

    try:
        name = TrainConfig().replace(device=text or "auto").device
    except ConfigError:
        raise CommandError(f"--device {text!r} is not a device; use auto, cpu, cuda, cuda:N or mps") from None
    return resolve_device(name)


def print_table(head: Sequence[str], rows: Sequence[Sequence[str]], *, left: int = 1) -> None:
    """Print an aligned text table: a header, a rule, then the rows.

    Args:
        head: column titles.
        rows: cells as text, one sequence per row.
        left: how many leading columns are left-aligned (the rest are right-aligned numbers).
    """
    widths = [max(len(h), *(len(r[c]) for r in rows)) for c, h in enumerate(head)]
    fmt = "  ".join(f"{{:{'<' if c < left else '>'}{w}}}" for c, w in enumerate(widths))
    print(fmt.format(*head))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print(fmt.format(*r))


def check_positive(value: float | None, flag: str, *, zero_ok: bool = False) -> None:
    """Refuse a negative (or zero), infinite or NaN number given for ``flag``.

    Args:
        value: the value (None: not given, accepted).
        flag: the option's name, for the message.
        zero_ok: accept 0.

    Raises:
        CommandError: the value is out of range.
    """
    if value is None:
        return
    ok = value >= 0 if zero_ok else value > 0
    if not (ok and value < float("inf")):
        raise CommandError(f"{flag} must be a finite number {'>= 0' if zero_ok else '> 0'}, got {value!r}")


def optimizer_from_arg(text: str) -> str:
    """The optimizer a ``--optimizer`` value names (aliases accepted).

    Args:
        text: ``sgd``, ``sgd_momentum``, ``adam`` or ``adamw``.

    Returns:
        The canonical name.

    Raises:
        CommandError: an unknown optimizer.
    """
    from workbench.core.training.config import OPTIMIZER_NAMES, ConfigError, TrainConfig

    try:
        return TrainConfig().replace(optimizer=text).optimizer
    except ConfigError:
        raise CommandError(f"--optimizer {text!r} is unknown; use one of {', '.join(OPTIMIZER_NAMES)}") from None


def model_spec_from_args(args: argparse.Namespace, plan: FreezePlan | None = None) -> ModelSpec:
    """The model spec the arguments (or, failing them, the plan's ``model`` block) describe."""
    info = dict(plan.model) if plan is not None else {}
    name = args.model or info.get("name") or info.get("arch")
    source = DEFAULT_SOURCE
    if not args.model and info.get("source") in SOURCES:
        source = info["source"]  # the plan's model block: {"source": "timm", "name": ...}
    # typed on the command line, or named by the plan file (then a py: model is refused when built)
    origin = None if args.model else f"plan file {getattr(args, 'plan', None) or ''}".strip()
    if args.checkpoint:
        return ModelSpec(source=CHECKPOINT_SOURCE if not name else source, name=name,
                         weights=args.weights, checkpoint=args.checkpoint, num_classes=args.num_classes,
                         origin=origin)
    return ModelSpec(source=source, name=name,
                     weights=args.weights if args.model else args.weights or info.get("weights"),
                     num_classes=args.num_classes if args.num_classes else info.get("num_classes"),
                     origin=origin)


def wants_meta(args: argparse.Namespace, spec: ModelSpec) -> bool:
    """Whether to build on the meta device: ``--meta``, or a model with no weights to read."""
    if spec.checkpoint is not None or not spec.name:
        return False
    return bool(getattr(args, "meta", False)) or is_structure_only(spec.source, spec.name)


def load_model_and_plan(args: argparse.Namespace) -> tuple[nn.Module, ModelSpec, FreezePlan | None, str | None]:
    """Build the model and read the plan named by the arguments.

    Returns:
        ``(model, spec, plan, architecture)``: the architecture's name is the spec's, or for a
        checkpoint without one the name its file gives (:meth:`ModelSpec.build_named`; what
        decides the image side a run takes), or None.

    Raises:
        WorkbenchError: bad model name, weights, checkpoint or plan (one-line message).
    """
    plan = FreezePlan.load(args.plan) if getattr(args, "plan", None) else None
    spec = model_spec_from_args(args, plan)
    meta = hasattr(args, "meta") and wants_meta(args, spec)
    with checkpoint_key_policy(args, args.command):
        model, arch = spec.build_named(trust_pickle=getattr(args, "trust_pickle", False), meta=meta)
    return model, spec, plan, arch
