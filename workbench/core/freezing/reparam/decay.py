"""Weight decay of fused-mode full-rank A+B: decay of ``B = W - A``, i.e. of ``W`` toward ``A``.

In exact mode the optimizer decays ``B`` (the parameter) itself. In fused mode the parameter is
``W``, so :func:`adjust_param_groups` moves those parameters into groups of their own with
``weight_decay=0`` and ``reparam_decay=<wd>``, and a step pre-hook registered on *that*
optimizer by :func:`attach` (called by :meth:`AppliedPlan.attach_optimizer`) applies the decay
to ``W - A``. Nothing is registered process-wide: the hook lives and dies with its optimizer, and
it reads the anchors from the handles the applied plan has installed at the time of the step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

__all__ = ["DECAY_KEY", "adjust_param_groups", "attach", "decay_step"]

#: Extra key of optimizer param groups whose fused-mode parameters decay toward A.
DECAY_KEY = "reparam_decay"

#: ``(W, A)`` pairs of every fused-mode full-rank A+B of an applied plan, as it is now.
Anchors = Callable[[], Iterable[tuple[nn.Parameter, Tensor]]]


def adjust_param_groups(
    groups: list[dict[str, Any]], handles: Mapping[str, object], *, weight_decay: float
) -> list[dict[str, Any]]:
    """Give weight decay its A+B meaning in fused mode: decay of ``B``, i.e. ``W`` toward ``A``.

    Args:
        groups: param groups from :meth:`AppliedPlan.param_groups`.
        handles: installed A+B handles by module path.
        weight_decay: the base weight decay.

    Returns:
        The groups, fused-mode full-rank parameters split out where a group decays (the
        optimizer then needs :meth:`AppliedPlan.attach_optimizer` for the decay to act).
    """
    fused = {id(w) for h in handles.values() for w, _ in getattr(h, "fused_anchors", list)()}
    if not fused or not weight_decay:
        return groups
    out: list[dict[str, Any]] = []
    for g in groups:
        wd = g.get("weight_decay", weight_decay)
        idx = [i for i, p in enumerate(g["params"]) if id(p) in fused]
        if not wd or not idx:
            out.append(g)
            continue
        names = g.get("param_names")
        chosen = set(idx)
        keep = [i for i in range(len(g["params"])) if i not in chosen]
        if keep:
            rest = dict(g)
            rest["params"] = [g["params"][i] for i in keep]
            if names is not None:
                rest["param_names"] = [names[i] for i in keep]
            out.append(rest)
        ab = dict(g)
        ab["params"] = [g["params"][i] for i in idx]
        if names is not None:
            ab["param_names"] = [names[i] for i in idx]
        ab["weight_decay"] = 0.0
        ab[DECAY_KEY] = wd
        out.append(ab)
    return out


def decay_step(optimizer: torch.optim.Optimizer, anchors: Iterable[tuple[nn.Parameter, Tensor]]) -> None:
    """Decay ``B = W - A`` of fused A+B before a step, as exact mode decays ``B``.

    Decoupled decay (AdamW, ``decoupled_weight_decay=True``): ``W <- W - lr*wd*(W - A)``.
    Coupled (L2) decay (SGD, Adam, ...): ``grad <- grad + wd*(W - A)``. Only groups made by
    :func:`adjust_param_groups` (key ``reparam_decay``) are touched.

    Args:
        optimizer: the optimizer about to step.
        anchors: ``(W, A)`` pairs.
    """
    decaying = [g for g in optimizer.param_groups if g.get(DECAY_KEY)]
    if not decaying:
        return
    anchor = {id(w): a for w, a in anchors}
    for group in decaying:
        wd = group[DECAY_KEY]
        decoupled = bool(group.get("decoupled_weight_decay", False)) or isinstance(optimizer, torch.optim.AdamW)
        sign = -1.0 if group.get("maximize", False) else 1.0
        lr = group["lr"]
        with torch.no_grad():
            for p in group["params"]:
                a = anchor.get(id(p))
                if a is None or p.grad is None:
                    continue
                if decoupled:
                    p.lerp_(a, lr * wd)
                else:
                    p.grad.add_(p - a, alpha=sign * wd)  # W - A first: no cancellation against the grad


def attach(optimizer: torch.optim.Optimizer, anchors: Anchors) -> RemovableHandle:
    """Register the fused-mode decay as a step pre-hook of this optimizer only.

    Args:
        optimizer: the optimizer built from the applied plan's param groups.
        anchors: called at each step for the ``(W, A)`` pairs in force.

    Returns:
        The hook's handle.
    """

    def hook(opt: torch.optim.Optimizer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        decay_step(opt, anchors())

    return optimizer.register_step_pre_hook(hook)
