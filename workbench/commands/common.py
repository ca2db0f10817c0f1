"""Argument groups and helpers shared by several subcommands."""

from __future__ import annotations

import argparse

from torch import nn

from workbench.core.plan.rules import FreezePlan
from workbench.core.models.sources import SOURCES, is_structure_only
from workbench.core.models.zoo import ModelSpec


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
    p.add_argument("--weights", help="torchvision weights name (e.g. IMAGENET1K_V1, DEFAULT); default: random init")
    p.add_argument("--checkpoint", help="load weights from a .pt/.pth/.safetensors file")
    p.add_argument("--num-classes", type=int, help="replace the classification head for N classes")
    p.add_argument("--trust-pickle", action="store_true",
                   help="allow a checkpoint that is a full pickled model (runs code from the file: only for files you trust)")
    p.add_argument("--plan", help="freeze plan (.json) to apply")


def model_spec_from_args(args: argparse.Namespace, plan: FreezePlan | None = None) -> ModelSpec:
    """The model spec the arguments (or, failing them, the plan's ``model`` block) describe."""
    info = dict(plan.model) if plan is not None else {}
    name = args.model or info.get("name") or info.get("arch")
    source = "torchvision"
    if not args.model and info.get("source") in SOURCES:
        source = info["source"]  # the plan's model block: {"source": "timm", "name": ...}
    if args.checkpoint:
        return ModelSpec(source="checkpoint" if not name else source, name=name,  # type: ignore[arg-type]
                         weights=args.weights, checkpoint=args.checkpoint, num_classes=args.num_classes)
    return ModelSpec(source=source, name=name,  # type: ignore[arg-type]
                     weights=args.weights if args.model else args.weights or info.get("weights"),
                     num_classes=args.num_classes if args.num_classes else info.get("num_classes"))


def wants_meta(args: argparse.Namespace, spec: ModelSpec) -> bool:
    """Whether to build on the meta device: ``--meta``, or a model with no weights to read."""
    if spec.checkpoint is not None or not spec.name:
        return False
    return bool(getattr(args, "meta", False)) or is_structure_only(spec.source, spec.name)


def load_model_and_plan(args: argparse.Namespace) -> tuple[nn.Module, ModelSpec, FreezePlan | None]:
    """Build the model and read the plan named by the arguments.

    Raises:
        WorkbenchError: bad model name, weights, checkpoint or plan (one-line message).
    """
    plan = FreezePlan.load(args.plan) if getattr(args, "plan", None) else None
    spec = model_spec_from_args(args, plan)
    meta = hasattr(args, "meta") and wants_meta(args, spec)
    model = spec.build(trust_pickle=getattr(args, "trust_pickle", False), meta=meta)
    return model, spec, plan
