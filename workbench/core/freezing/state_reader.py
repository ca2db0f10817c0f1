"""Read what a script did to a model and write it as the JSON of a compact freeze plan.

:func:`observed_plan` (behind :func:`workbench.core.freezing.capture.capture_plan` and
:meth:`FreezePlan.from_model`) reads a live model — ``requires_grad`` of every parameter, the mode of
every BatchNorm, A+B parametrizations, sub-tensor freezing — and, optionally, the learning
rates of an optimizer, and writes the *fewest* rules that reproduce that state: ``"*"``
frozen plus ``{"select": "layer4", "frozen": false}`` rather than one rule per parameter.

The compaction is exact. For every inherited key a small dynamic programme over the module
tree finds the minimal set of ``(module path, value)`` assignments, applied parents first,
that gives every module the value observed on it (:func:`minimal_assignments`). The same
helpers serve :mod:`workbench.core.export` (``requires_grad`` by module-path prefixes) and
:mod:`workbench.core.checks.doctor` (findings grouped by module, :func:`cover_paths`).

What cannot be expressed as a plan is reported as a :class:`~workbench.core.plan.problems.PlanWarning`
(a module whose own parameters are partly frozen, different learning rates inside one
module, A+B written by hand) and the closest plan is returned.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn
from torch.nn.utils import parametrize

from workbench.core.freezing.partial import is_partial
from workbench.core.freezing.plan_handle import is_bn_eval_locked
from workbench.core.plan.covering import cover_paths, minimal_assignments
from workbench.core.plan.problems import PlanWarning
from workbench.core.plan.tree import ModelTree, ModuleNode

__all__ = [
    "a_plus_b_names",
    "bn_eval_locked",
    "fixed_parameter_ids",
    "observed_plan",
    "partial_spec",
]

def bn_eval_locked(module: nn.Module) -> bool:
    """Whether ``module.train(True)`` leaves this module in eval mode.

    Recognises the workbench's lock, the lock of an exported script and any ``train``
    override that keeps the module in eval mode. Only modules whose ``train`` is overridden
    (on the instance or the class) are probed; the probe restores every training flag.

    Args:
        module: usually a BatchNorm module.

    Returns:
        True when the module stays in eval mode across ``model.train()``.
    """
    if is_bn_eval_locked(module):
        return True
    override = "train" in module.__dict__ or type(module).train is not nn.Module.train
    if not override:
        return False
    flags = [(m, m.training) for m in module.modules()]
    try:
        module.train(True)
        return not module.training
    except Exception:  # a train() that refuses to be called this way is not a lock we know
        return False
    finally:
        for m, t in flags:
            m.training = t


# ---------------------------------------------------------------- capture
def a_plus_b_names(module: nn.Module) -> list[str]:
    """Tensors of ``module`` parametrized as ``W = A + B`` (the workbench's or an exported script's).

    Args:
        module: any module.

    Returns:
        Names of its tensors whose only parametrization is an ``APlusB`` with a tensor ``A``.
    """
    if not parametrize.is_parametrized(module):
        return []
    out = []
    parametrizations: Any = module.parametrizations
    for name, plist in parametrizations.items():
        if len(plist) == 1 and type(plist[0]).__name__ == "APlusB" and isinstance(
            getattr(plist[0], "A", None), torch.Tensor
        ):
            out.append(name)
    return out


def partial_spec(module: nn.Module) -> dict[str, Any] | None:
    """The sub-tensor freezing spec installed on ``module``, or None.

    Args:
        module: any module.

    Returns:
        ``{"param", "dim", "trainable"}`` as a plan writes it.
    """
    if not is_partial(module):
        return None
    lay: Any = module._partial
    return {"param": lay.param, "dim": lay.dim, "trainable": [list(r) for r in lay.trainable]}


def fixed_parameter_ids(model: nn.Module) -> set[int]:
    """Parameters that never train by construction (frozen slices of sub-tensor freezing).

    Args:
        model: the model.

    Returns:
        ``id()`` of each such parameter.
    """
    out = set()
    for m in model.modules():
        if partial_spec(m) is not None:
            out.add(id(m.weight_frozen))
    return out


def _optimizer_scales(
    optimizer: torch.optim.Optimizer, base_lr: float | None
) -> tuple[dict[int, float], float | None]:
    groups = optimizer.param_groups
    if all("lr_scale" in g for g in groups):
        scales = {id(p): float(g["lr_scale"]) for g in groups for p in g["params"]}
        base = next((g["lr"] / g["lr_scale"] for g in groups if g["lr_scale"]), None)
        return scales, base
    lrs = [float(g["lr"]) for g in groups if g["params"]]
    base = base_lr if base_lr is not None else (max(lrs) if lrs else None)
    if not base:
        return {}, base
    return {id(p): float(f"{g['lr'] / base:.6g}") for g in groups for p in g["params"]}, base


def _majority(values: list[Any]) -> Any:
    return Counter(values).most_common(1)[0][0]


def observed_plan(
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    *,
    base_lr: float | None = None,
    model_info: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A model's freezing state as the JSON of a compact plan.

    Reads, per module: whether its own parameters require grad, whether a BatchNorm stays in
    eval mode while the model trains (put in eval by hand with the model in train mode, or
    locked), ``W = A + B`` parametrizations (the workbench's or an exported script's
    ``APlusB``; captured as ``{"a": "current", "b_init": "zeros"}`` in exact mode: the
    trained B is not part of a plan, use ``export_deltas`` for it) and sub-tensor freezing.
    With an optimizer, the learning rate of each trainable parameter becomes ``lr_scale``
    relative to ``base_lr``.

    Call it with the model in train mode, as the training loop has it: in eval mode every
    BatchNorm is in eval and only locked ones can be told apart.

    Args:
        model: the model as a script left it.
        optimizer: optional; its param groups give ``lr_scale`` per module. Groups made by
            :meth:`AppliedPlan.param_groups` carry their ``lr_scale``; otherwise scales are
            relative to ``base_lr``.
        base_lr: the base learning rate (default: the largest group learning rate).
        model_info: extra keys for the plan's ``model`` block (``name``, ``weights``...).

    Returns:
        The plan's JSON object; parsed, its :meth:`~FreezePlan.resolve` gives every module
        the state observed.

    Warns:
        PlanWarning: a state no plan can express (mixed ``requires_grad`` inside one module,
            several learning rates inside one module, parameters that are not leaves); the
            plan keeps the majority.
    """
    tree = ModelTree.from_model(model)
    problems: list[str] = []
    fixed = fixed_parameter_ids(model)
    own_flags: dict[str, list[bool]] = {}
    own_sizes: dict[str, list[int]] = {}
    non_leaf: list[str] = []
    params_by_owner: dict[str, list[nn.Parameter]] = {}
    seen: set[int] = set()
    for name, p in model.named_parameters():
        if id(p) in seen or id(p) in fixed:
            continue
        seen.add(id(p))
        owner = tree.owner_of(name)
        own_flags.setdefault(owner, []).append(p.requires_grad)
        own_sizes.setdefault(owner, []).append(p.numel())
        params_by_owner.setdefault(owner, []).append(p)
        if not p.is_leaf:
            non_leaf.append(name)
    if non_leaf:
        problems.append(
            f"{len(non_leaf)} parameters are not leaf tensors (A+B written by hand?), e.g. {non_leaf[0]}; "
            "run the freeze doctor on this model"
        )
    # frozen: modules with parameters need a value; the rest are free
    frozen_req: dict[str, bool] = {}
    for owner, flags in own_flags.items():
        if all(flags) or not any(flags):
            frozen_req[owner] = not flags[0]
        else:
            trainable = sum(n for f, n in zip(flags, own_sizes[owner]) if f)
            frozen_req[owner] = trainable * 2 < sum(own_sizes[owner])
            problems.append(
                f"module {owner or '(root)'!r} has some parameters frozen and others trainable; a plan "
                f"freezes modules as a whole, captured it as {'frozen' if frozen_req[owner] else 'trainable'}"
            )
    rules: dict[str, dict[str, Any]] = {}

    def rule(path: str) -> dict[str, Any]:
        r = rules.get(path)
        if r is None:
            r = rules[path] = {"select": path or "*"}
        return r

    for path, value in minimal_assignments(tree, frozen_req, False):
        rule(path)["frozen"] = bool(value)
    frozen_of = _resolve_key(tree, {p: r["frozen"] for p, r in rules.items() if "frozen" in r}, False)

    # lr_scale from the optimizer: only trainable parameters matter
    base = None
    if optimizer is not None:
        scales, base = _optimizer_scales(optimizer, base_lr)
        lr_req: dict[str, float] = {}
        for owner, plist in params_by_owner.items():
            vals = [scales[id(p)] for p in plist if p.requires_grad and id(p) in scales]
            if not vals:
                continue
            if len(set(vals)) > 1:
                problems.append(
                    f"module {owner or '(root)'!r} has parameters in groups with different learning "
                    f"rates; a plan sets lr_scale per module, captured the most common one"
                )
            lr_req[owner] = _majority(vals)
        for path, value in minimal_assignments(tree, lr_req, 1.0):
            rule(path)["lr_scale"] = float(value)  # type: ignore[arg-type]  # the lr scales assigned above

    # BatchNorm modes: explicit only where they differ from "follow frozen"
    root_training = model.training
    want: dict[str, bool] = {}
    for path, node in tree.nodes.items():
        if not node.is_bn:
            continue
        module = model.get_submodule(path) if path else model
        want[path] = bn_eval_locked(module) or (root_training and not module.training)
    type_rule = _bn_rules(tree, want, frozen_of, rule)

    # extensions
    for path in tree.paths():
        module = model.get_submodule(path) if path else model
        names = a_plus_b_names(module)
        if names:
            parametrizations: Any = module.parametrizations
            own = [n for n, _ in module.named_parameters(recurse=False)] + list(parametrizations.keys())
            every = [n for n in dict.fromkeys(own) if n != "parametrizations"]
            params = None if set(names) >= set(every) else names
            rule(path)["reparam"] = {"kind": "a_plus_b", "a": "current", "b_init": "zeros", "mode": "exact", "params": params}
        spec = partial_spec(module)
        if spec is not None:
            rule(path)["partial"] = spec

    ordered = sorted(rules.values(), key=lambda r: -1 if r["select"] == "*" else tree.nodes[r["select"]].order)
    if type_rule is not None:
        pos = 1 if ordered and ordered[0]["select"] == "*" else 0
        ordered.insert(pos, type_rule)
    for msg in problems:
        warnings.warn(PlanWarning(msg), stacklevel=2)
    info: dict[str, Any] = {"fingerprint": tree.fingerprint}
    info.update(dict(model_info or {}))
    desc = "captured from a live model"
    if base is not None:
        desc += f"; lr_scale relative to base lr {base:g}"
    return {
        "format": "freeze-plan",
        "version": 1,
        "description": desc,
        "model": info,
        "rules": [r for r in ordered if len(r) > 1],
    }


def _resolve_key(tree: ModelTree, assigned: Mapping[str, Any], default: Any) -> dict[str, Any]:
    """Values per module after inherited path assignments (parents first)."""
    out: dict[str, Any] = {}
    stack: list[tuple[ModuleNode, Any]] = [(tree.root, default)]
    while stack:
        node, inherited = stack.pop()
        v = assigned.get(node.path, inherited)
        out[node.path] = v
        stack.extend((c, v) for c in node.children)
    return out


def _bn_rules(
    tree: ModelTree,
    want: Mapping[str, bool],
    frozen_of: Mapping[str, bool],
    rule: Callable[[str], dict[str, Any]],
) -> dict[str, Any] | None:
    """Add ``bn_eval`` rules for BatchNorms whose mode differs from their frozen flag.

    Returns a ``type:`` rule to place before the path rules, or None.
    """
    need = {p: w for p, w in want.items() if w != frozen_of[p]}
    if not need:
        return None
    # option 1: a type rule for one value, then path rules for the BatchNorms wanting the other
    best: tuple[int, bool, list[tuple[str, bool]]] | None = None
    for v in (True, False):
        exceptions = _bn_path_rules(tree, want, {p: w for p, w in want.items() if w != v})
        if best is None or 1 + len(exceptions) < best[0]:
            best = (1 + len(exceptions), v, exceptions)
    assert best is not None
    # option 2: path rules only where the mode differs from the frozen flag
    only_paths = _bn_path_rules(tree, want, need)
    if len(only_paths) <= best[0] and not any(p == "" for p, _ in only_paths):
        for path, v in only_paths:
            rule(path)["bn_eval"] = v
        return None
    types_ = {tree.nodes[p].type_name for p in want}
    name = types_.pop() if len(types_) == 1 else "_BatchNorm"
    for path, v in best[2]:
        rule(path)["bn_eval"] = v
    return {"select": f"type:{name}", "bn_eval": best[1]}


def _bn_path_rules(tree: ModelTree, want: Mapping[str, bool], need: Mapping[str, bool]) -> list[tuple[str, bool]]:
    """Path rules setting ``need`` on BatchNorms without changing any other BatchNorm's mode."""
    out: list[tuple[str, bool]] = []
    for v in (True, False):
        members = [p for p, w in need.items() if w == v]
        if not members:
            continue
        blocked = [p for p, w in want.items() if w != v]
        out.extend((p, v) for p in cover_paths(tree, members, blocked))
    return out
