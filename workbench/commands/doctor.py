"""``workbench doctor``: check a model and a plan for freezing pitfalls, statically and over real steps."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import torch
from torch import nn

from workbench.commands.common import (
    add_model_arguments,
    add_task_arguments,
    check_positive,
    device_from_arg,
    input_shape_from_arg,
    load_model_and_plan,
)
from workbench.core.checks import doctor
from workbench.core.checks.findings import SEVERITIES, Finding
from workbench.core.checks.lint import unfreeze_head_fix
from workbench.core.optimizers import CHOICES, optimizer_kind
from workbench.core.plan.tree import ModelTree


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_arguments(p, positional=False)
    p.add_argument("--steps", type=int, default=10, help="training steps to watch (0: static checks only); default 10")
    p.add_argument("--batch-size", type=int, default=8, help="synthetic batch size (default 8)")
    p.add_argument("--image-size", type=int, help="input side (default: the model's, e.g. 224)")
    p.add_argument("--device", help="cpu, cuda, cuda:1, mps (default: cuda when available)")
    p.add_argument("--optimizer", choices=CHOICES, default="adamw", help="optimizer of the watched steps")
    p.add_argument("--lr", type=float, default=1e-3, help="base learning rate (default 1e-3)")
    p.add_argument("--data", help="watch the steps on this data instead of synthetic images (a train --data spec, "
                   "e.g. py:FILE.py:FUNC, which runs that code)")
    add_task_arguments(p, metric=False)
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _optimizer(name: str, model: nn.Module, applied: Any, lr: float) -> torch.optim.Optimizer | None:
    """The optimizer of the watched steps; None when nothing is trainable (the checks say so)."""
    if applied is not None:
        try:
            groups: Any = applied.param_groups(lr=lr, weight_decay=0.01 if name == "adamw" else 0.0)
        except ValueError:
            return None
    else:
        groups = [p for p in model.parameters() if p.requires_grad]
        if not groups:
            return None
    optimizer: torch.optim.Optimizer = optimizer_kind(name).build(groups, {"lr": lr})
    return optimizer


def run(args: argparse.Namespace) -> int:
    from workbench.core.training.data import text_task_of

    check_positive(args.lr, "--lr")
    check_positive(args.steps, "--steps", zero_ok=True)
    check_positive(args.batch_size, "--batch-size")
    check_positive(args.image_size, "--image-size")
    device = device_from_arg(args.device)
    model, spec, plan, arch = load_model_and_plan(args)
    applied = plan.apply(model) if plan is not None else None
    model.to(device)
    model.train()
    optimizer = _optimizer(args.optimizer, model, applied, args.lr)
    findings: list[Finding] = doctor.check(model, optimizer, plan)
    if optimizer is None and not any(f.code == "nothing-trainable" for f in findings):  # the linter's, with a plan
        findings = doctor.merge_findings(findings, [_nothing_trainable(ModelTree.from_model(model))])
    watched: doctor.Watch | None = None
    if args.steps > 0 and optimizer is not None and text_task_of(model) is not None:
        watched = _watch_text_model(model, optimizer, args, device)
        findings = doctor.merge_findings(findings, watched.findings(), doctor.check(model, optimizer, plan))
    elif args.steps > 0 and optimizer is not None:
        watched = _watch(model, optimizer, args, spec, device, arch)
        findings = doctor.merge_findings(findings, watched.findings(), doctor.check(model, optimizer, plan))
    errors = sum(f.severity == "error" for f in findings)
    if args.json:
        out = {
            "model": spec.to_dict(),
            "plan": args.plan,
            "steps": args.steps,
            "findings": [f.to_dict() for f in findings],
            "watch": watched.summary() if watched is not None else None,
        }
        json.dump(out, sys.stdout, indent=1)
        print()
        return 1 if errors else 0
    _print(findings, watched)
    return 1 if errors else 0


def _watch(model: nn.Module, optimizer: torch.optim.Optimizer, args: argparse.Namespace, spec: Any,
           device: torch.device, arch: str | None) -> doctor.Watch:
    """Watch ``args.steps`` steps on ``--data``, synthetic ``--input-shape`` tensors, or synthetic images
    (at the side a run of the architecture ``arch`` takes)."""
    from torch.utils.data import default_collate

    from workbench.core.models.zoo import current_num_classes
    from workbench.core.training.batches import batch_to_device, forward_loss
    from workbench.core.training.data_sources import make_dataset
    from workbench.core.training.losses import make_loss
    from workbench.core.training.setup import run_image_size

    shape = input_shape_from_arg(args.input_shape)
    size = run_image_size(args.image_size, spec, model, arch)  # the side the run takes
    classes = current_num_classes(model) or 1000
    n = args.steps * args.batch_size
    data = make_dataset(args.data or f"synthetic:{n}", image_size=size, num_classes=min(classes, 1000), input_shape=shape,
                        transform=None)
    loss_fn = make_loss(args.loss or "cross_entropy")
    with doctor.watch(model, optimizer, steps=args.steps) as watched:
        for step in range(args.steps):
            items = [data[(step * args.batch_size + i) % len(data)] for i in range(args.batch_size)]  # type: ignore[arg-type]
            x, y = batch_to_device(default_collate(items), device)
            optimizer.zero_grad(set_to_none=True)
            loss, _ = forward_loss(model, (x, y), loss_fn)
            loss.backward()
            watched.after_backward(loss)
            optimizer.step()
    return watched


def _watch_text_model(
    model: nn.Module, optimizer: torch.optim.Optimizer, args: argparse.Namespace, device: torch.device
) -> doctor.Watch:
    """Watch ``args.steps`` steps of a text model on synthetic token batches (``model(**batch)``)."""
    from torch.utils.data import default_collate

    from workbench.core.training.batches import forward_loss, move_batch
    from workbench.core.training.data import synthetic_for_model, text_task_of

    data = synthetic_for_model(model, args.steps * args.batch_size)
    task = text_task_of(model) or "classification"
    with doctor.watch(model, optimizer, steps=args.steps) as watched:
        for step in range(args.steps):
            batch = default_collate([data[step * args.batch_size + i] for i in range(args.batch_size)])
            optimizer.zero_grad(set_to_none=True)
            loss, _ = forward_loss(model, move_batch(batch, device), task=task)
            loss.backward()
            watched.after_backward(loss)
            optimizer.step()
    return watched


def _nothing_trainable(tree: ModelTree) -> Finding:
    return Finding(
        "nothing-trainable",
        "error",
        "",
        "every parameter is frozen: no training step can run",
        "the optimizer would get no parameters",
        unfreeze_head_fix(tree),
    )


def _print(findings: list[Finding], watched: doctor.Watch | None) -> None:
    if watched is not None:
        s = watched.summary()
        med = s["step_ms_median"]
        print(f"watched {s['steps']} steps" + (f", median step {med:.1f} ms" if med is not None else ""))
    if not findings:
        print("no freezing pitfalls found")
        return
    for sev in SEVERITIES:
        group = [f for f in findings if f.severity == sev]
        if not group:
            continue
        print(f"\n{sev.upper()}S ({len(group)})")
        for f in group:
            print(f"  [{f.code}] {f.path or '(model)'}: {f.message}")
            if f.why:
                print(f"      why: {f.why}")
            if f.fix:
                print(f"      fix: {f.fix}")
    counts = {s: sum(f.severity == s for f in findings) for s in SEVERITIES}
    print(f"\n{counts['error']} errors, {counts['warning']} warnings, {counts['info']} info")
