"""``workbench inspect``: the module tree of a model, with a plan's effect, as a table or JSON.

The plan's effect comes from the core's plan engine for large trees
(:mod:`workbench.core.plan.fast`) without touching the model, unless the plan installs something
on it (A+B, sub-tensor freezing, checkpointing): then it is applied and read back."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping
from typing import Any

from torch import nn

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
from workbench.core.freezing.counts import Counts, count_parameters
from workbench.core.freezing.plan_handle import INSTALLERS
from workbench.core.models.memory import DTYPE_BYTES, GPU_SIZES, estimate_memory
from workbench.core.plan.fast.counts import Own, count_plan
from workbench.core.plan.fast.layout import layout
from workbench.core.plan.keys import Effective
from workbench.core.plan.rules import FreezePlan
from workbench.core.plan.tree import ModelTree, ModuleNode


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
    model, spec, plan, _arch = load_model_and_plan(args)
    tree = ModelTree.from_model(model)
    rows = _module_rows(model, tree, plan, args)
    counts = rows.counts
    findings = group_findings(lint_plan(plan, tree, args.optimizer)) if plan is not None else []  # one line per kind, as doctor prints
    table = []
    for node in rows.nodes:
        if args.depth is not None and node.depth > args.depth:
            continue
        table.append(rows.row(node))
    memory = None
    if args.dtype:
        fixed = counts.fixed_bytes * counts.total // counts.param_bytes if counts.param_bytes else 0
        memory = estimate_memory(counts.total, counts.trainable, args.dtype, args.optimizer, fixed=fixed)
    if args.json:
        out = {
            "model": spec.to_dict(),
            "fingerprint": tree.fingerprint,
            "modules": table,
            "counts": counts.to_dict(),
            "findings": [f.to_dict() for f in findings],
        }
        if memory is not None:
            out["memory"] = memory.to_dict()
        json.dump(out, sys.stdout, indent=1)
        print()
        return 0
    _print_table(table, tree)
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


class _Rows:
    """The plan's effect per module: from the fast plan engine (module rules on the tree, never
    touching the model), or read back from the model with the plan applied when the plan installs
    something on it (A+B, sub-tensor freezing, checkpointing: only a live model says whether that
    installs)."""

    def __init__(self, tree: ModelTree, counts: Counts, eff: Mapping[str, Effective] | None,
                 params: Callable[[ModuleNode], tuple[int, int]]) -> None:
        self.nodes = list(tree.root.walk())
        self.counts = counts
        self._eff = eff
        self._params = params

    def row(self, node: ModuleNode) -> dict[str, Any]:
        e = self._eff[node.path] if self._eff else None
        params, trainable = self._params(node)
        return {
            "path": node.path,
            "type": node.type_name,
            "params": params,
            "own_params": node.own_params,
            "trainable": trainable,
            "frozen": params - trainable,
            "bn_eval": (e.bn_eval if e else not node.training) if node.is_bn else None,
            "lr_scale": e.lr_scale if e else 1.0,
        }


def _module_rows(model: nn.Module, tree: ModelTree, plan: FreezePlan | None, args: argparse.Namespace) -> _Rows:
    if plan is None:
        counts = count_parameters(model.named_parameters(), args.optimizer)
        return _Rows(tree, counts, None, lambda n: (n.total_params, n.trainable_params))
    if any(r.sets(inst.key) for r in plan.rules for inst in INSTALLERS):
        applied = plan.apply(model)
        tree.refresh(model)
        return _Rows(tree, applied.counts(args.optimizer), applied.effective,
                     lambda n: (n.total_params, n.trainable_params))
    plan.validate(tree)  # what applying checks first: the same PlanError, the same warning
    counted = count_plan(plan, tree)
    t = counted.totals(tree)
    counts = Counts.from_totals(t.total, t.trainable, t.param_bytes, t.trainable_bytes, t.fixed_bytes, args.optimizer)
    lay = layout(tree)
    frozen = counted.sums[:, Own.FROZEN]
    return _Rows(tree, counts, counted.effective(tree),
                 lambda n: (n.total_params, n.total_params - int(frozen[lay.index[n.path]])))


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
