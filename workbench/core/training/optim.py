"""Keeping a live optimizer in step with a changing freeze plan.

When a plan changes mid-training (live edits, stages, progressive unfreezing), the optimizer
must drop newly frozen parameters with their state, take in newly trainable ones with fresh
state, and keep the state of parameters that stay trainable. :func:`sync_optimizer` does this
by parameter identity; the engine and the Lightning callback both use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

__all__ = ["sync_optimizer"]


def _group_signature(
    group: Mapping[str, Any], keys: tuple[str, ...], defaults: Mapping[str, Any] | None = None
) -> tuple[Any, ...]:
    """The settings of a group that decide where a parameter belongs; a key the group leaves
    out is the optimizer's default (an optimizer group has it filled in)."""
    fallback = defaults or {}
    return tuple(_hashable(group.get(k, fallback.get(k))) for k in keys)


def _hashable(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    return v


def sync_optimizer(
    optimizer: torch.optim.Optimizer, target: list[dict[str, Any]], *, keep_empty_groups: bool = False
) -> dict[str, int]:
    """Make an optimizer hold exactly the parameters of ``target`` groups, keeping state.

    ``target`` is what :meth:`AppliedPlan.param_groups` returns for the plan now in force
    (its groups carry the values of the key table's ``group`` keys; a key a target group
    leaves out means the optimizer's default). Parameters are matched by identity:

    - a parameter no longer in ``target`` (newly frozen, or replaced when an extension was
      re-installed) leaves its group; its ``optimizer.state`` entry is deleted and its
      ``.grad`` set to None;
    - a parameter new in ``target`` joins the optimizer group with the same settings
      (``lr_scale``, ``weight_decay`` ...), or a new group (``add_param_group``), with fresh
      state;
    - a parameter that stays keeps its state (same tensor object as the state key); if its
      settings changed (another ``lr_scale``) it moves to the matching group with its state.

    Empty groups are removed, unless ``keep_empty_groups`` (learning-rate schedulers address
    groups by index, so a training framework that owns a scheduler needs them kept).

    Args:
        optimizer: the optimizer (its groups may carry ``param_names`` and ``lr_scale``).
        target: the wanted groups (``params`` plus settings; ``lr`` is taken from them for
            new groups).
        keep_empty_groups: keep groups that lose all their parameters.

    Returns:
        Counts: ``removed``, ``added``, ``moved``, ``kept`` parameters.
    """
    keys = tuple(sorted({k for g in target for k in g if k not in ("params", "param_names", "lr")}))
    named = bool(optimizer.param_groups) and "param_names" in optimizer.param_groups[0]
    want: dict[int, tuple[nn.Parameter, str | None, tuple[Any, ...], dict[str, Any]]] = {}
    order: list[int] = []
    for g in target:
        sig = _group_signature(g, keys, optimizer.defaults)
        names = g.get("param_names") or [None] * len(g["params"])
        for p, n in zip(g["params"], names):
            want[id(p)] = (p, n, sig, g)
            order.append(id(p))
    stats = {"removed": 0, "added": 0, "moved": 0, "kept": 0}
    present: set[int] = set()
    for group in optimizer.param_groups:
        sig = _group_signature(group, keys, optimizer.defaults)
        keep_p: list[nn.Parameter] = []
        keep_n: list[str] = []
        names = group.get("param_names") or [None] * len(group["params"])
        for p, n in zip(group["params"], names):
            w = want.get(id(p))
            if w is None:
                optimizer.state.pop(p, None)
                p.grad = None
                stats["removed"] += 1
                continue
            if w[2] != sig:
                stats["moved"] += 1  # leaves this group, keeps its state; re-added below
                continue
            keep_p.append(p)
            keep_n.append(w[1] if w[1] is not None else (n or ""))
            present.add(id(p))
            stats["kept"] += 1
        group["params"] = keep_p
        if named:
            group["param_names"] = keep_n
    if not keep_empty_groups:
        optimizer.param_groups[:] = [g for g in optimizer.param_groups if g["params"]]
    new_groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    with_state = {id(q) for q in optimizer.state}
    for pid in order:
        if pid in present:
            continue
        p, n, sig, template = want[pid]
        if pid not in with_state:
            stats["added"] += 1
        host = next((g for g in optimizer.param_groups if _group_signature(g, keys, optimizer.defaults) == sig), None)
        if host is not None:
            host["params"].append(p)
            if named:
                host["param_names"].append(n or "")
            present.add(pid)
            continue
        ng = new_groups.get(sig)
        if ng is None:
            ng = new_groups[sig] = {k: v for k, v in template.items() if k not in ("params", "param_names")}
            ng["params"] = []
            if named:
                ng["param_names"] = []
        ng["params"].append(p)
        if named:
            ng["param_names"].append(n or "")
        present.add(pid)
    for ng in new_groups.values():
        optimizer.add_param_group(ng)
    return stats
