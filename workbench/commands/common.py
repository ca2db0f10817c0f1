"""Argument groups and helpers shared by several subcommands."""

from __future__ import annotations

import argparse

from torch import nn

from workbench.core.plan.rules import FreezePlan
from workbench.core.models.zoo import ModelSpec


def add_model_arguments(p: argparse.ArgumentParser, *, positional: bool = True) -> None:
    """``MODEL``, ``--weights``, ``--checkpoint``, ``--num-classes``, ``--trust-pickle``, ``--plan``."""
    if positional:
        p.add_argument("model", nargs="?", help="torchvision model name (e.g. resnet18); "
                       "optional with --checkpoint when the file records its architecture, or with --plan")
    else:
        p.add_argument("--model", dest="model", help="torchvision model name (e.g. resnet18)")
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
    if args.checkpoint:
        return ModelSpec(source="checkpoint" if not name else "torchvision", name=name,
                         weights=args.weights, checkpoint=args.checkpoint, num_classes=args.num_classes)
    return ModelSpec(name=name, weights=args.weights if args.model else args.weights or info.get("weights"),
                     num_classes=args.num_classes if args.num_classes else info.get("num_classes"))


def load_model_and_plan(args: argparse.Namespace) -> tuple[nn.Module, ModelSpec, FreezePlan | None]:
    """Build the model and read the plan named by the arguments.

    Raises:
        WorkbenchError: bad model name, weights, checkpoint or plan (one-line message).
    """
    plan = FreezePlan.load(args.plan) if getattr(args, "plan", None) else None
    spec = model_spec_from_args(args, plan)
    model = spec.build(trust_pickle=getattr(args, "trust_pickle", False))
    return model, spec, plan
