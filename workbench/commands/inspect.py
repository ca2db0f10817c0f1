"""``workbench inspect``: the module tree of a model, with a plan's effect, as a table or JSON."""

from __future__ import annotations

import argparse
import json
import sys

from workbench.commands.common import (
    CommandError,
    add_meta_argument,
    add_model_arguments,
    load_model_and_plan,
    optimizer_from_arg,
    print_table,
)
from workbench.core.checks.doctor import group_findings
from workbench.core.checks.lint import lint_plan
from workbench.core.formatting import fmt_bytes, fmt_count
from workbench.core.models.memory import DTYPE_BYTES, GPU_SIZES, estimate_memory
from workbench.core.models.tree import ModelTree


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_arguments(p)
    add_meta_argument(p)
    p.add_argument("--depth", type=int, default=None, help="show modules down to this depth (root = 0)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--optimizer", default="adamw", help="optimizer for the memory estimate (sgd, sgd_momentum, adam, adamw)")
    p.add_argument("--dtype", choices=sorted(DTYPE_BYTES),
                   help="also estimate training memory with the weights, gradients and optimizer state in this dtype")


def run(args: argparse.Namespace) -> int:
    if args.depth is not None and args.depth < 0:
        raise CommandError(f"--depth must be 0 (the root) or more, got {args.depth}")
    args.optimizer = optimizer_from_arg(args.optimizer)
    model, spec, plan = load_model_and_plan(args)
    tree = ModelTree.from_model(model)
    applied = plan.apply(model) if plan is not None else None
    if plan is not None and applied is not None:
        tree.refresh(model)
        eff = applied.effective
        counts = applied.counts(args.optimizer)
        findings = group_findings(lint_plan(plan, tree, args.optimizer))  # one line per kind, as doctor prints
    else:
        from workbench.core.freezing.apply import count_parameters

        eff = None
        counts = count_parameters(model.named_parameters(), args.optimizer)
        findings = []
    rows = []
    for node in tree.root.walk():
        if args.depth is not None and node.depth > args.depth:
            continue
        e = eff[node.path] if eff else None
        rows.append(
            {
                "path": node.path,
                "type": node.type_name,
                "params": node.total_params,
                "own_params": node.own_params,
                "trainable": node.trainable_params,
                "frozen": node.total_params - node.trainable_params,
                "bn_eval": (e.bn_eval if e else not node.training) if node.is_bn else None,
                "lr_scale": e.lr_scale if e else 1.0,
            }
        )
    memory = None
    if args.dtype:
        fixed = counts.fixed_bytes * counts.total // counts.param_bytes if counts.param_bytes else 0
        memory = estimate_memory(counts.total, counts.trainable, args.dtype, args.optimizer, fixed=fixed)
    if args.json:
        out = {
            "model": spec.to_dict(),
            "fingerprint": tree.fingerprint,
            "modules": rows,
            "counts": counts.to_dict(),
            "findings": [f.to_dict() for f in findings],
        }
        if memory is not None:
            out["memory"] = memory.to_dict()
        json.dump(out, sys.stdout, indent=1)
        print()
        return 0
    _print_table(rows, tree)
    print()
    print(f"Total params:     {counts.total:,}")
    print(f"Trainable params: {counts.trainable:,} ({100 * counts.trainable_fraction:.1f}%)")
    print(f"Frozen params:    {counts.frozen:,}")
    print(
        f"Training memory ({counts.optimizer}): params+grads+state {fmt_bytes(counts.training_bytes)}"
        f" (full fine-tuning {fmt_bytes(counts.full_ft_bytes)})"
    )
    if memory is not None:
        fits = ", ".join(f"{size // 10**9} GB: {'yes' if memory.fits(size) else 'no'}" for size in GPU_SIZES)
        print(
            f"Training memory ({memory.optimizer}, {memory.dtype}): params {fmt_bytes(memory.param_bytes)}"
            f" + grads {fmt_bytes(memory.grad_bytes)} + state {fmt_bytes(memory.optimizer_bytes)}"
            f" = {fmt_bytes(memory.total_bytes)} (full fine-tuning {fmt_bytes(memory.full_ft_bytes)});"
            f" fits without activations on {fits}"
        )
    for f in findings:
        print(f.one_line())
    return 0


def _print_table(rows: list[dict], tree: ModelTree) -> None:
    head = ("Module", "Type", "Params", "Trainable", "Frozen", "BN eval", "LR×")
    table = []
    for r in rows:
        depth = tree.nodes[r["path"]].depth
        name = "  " * depth + (r["path"].rsplit(".", 1)[-1] if r["path"] else "(root)")
        bn = "" if r["bn_eval"] is None else ("yes" if r["bn_eval"] else "no")
        table.append((name, r["type"], fmt_count(r["params"]), fmt_count(r["trainable"]),
                      fmt_count(r["frozen"]), bn, f"{r['lr_scale']:g}"))
    print_table(head, table, left=2)
