"""Plan edits behind the window's clicks and bulk actions (Qt-free).

Each function edits the :class:`~workbench.core.plan.rules.FreezePlan` it is given in place
(the controller passes a copy and pushes the before/after pair on the undo stack). They use
:meth:`FreezePlan.set` and keep plans short: a click that only restores what the modules
would inherit anyway removes the explicit setting instead of adding a rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from workbench.core.plan.fast.layout import layout
from workbench.core.plan.fast.resolve import resolve_groups, supported
from workbench.core.plan.keys import INHERITED_KEYS, Effective, PlanKey, rule_key
from workbench.core.plan.rules import FreezePlan, PlanError
from workbench.core.plan.selectors import is_pattern
from workbench.core.plan.tree import ModelTree

__all__ = [
    "A_PLUS_B",
    "freeze_before",
    "remove_unmatched_rules",
    "set_bn_eval_everywhere",
    "set_minimal",
    "set_on_paths",
    "set_partial",
    "top_paths",
    "train_only",
]

#: The A+B spec the window writes (the reparam module fills in its defaults).
A_PLUS_B: dict[str, Any] = {"kind": "a_plus_b"}


def top_paths(paths: Iterable[str], tree: ModelTree) -> list[str]:
    """The given paths without those inside another given path, in tree order.

    Args:
        paths: module paths (unknown paths are dropped).
        tree: the model's tree.

    Returns:
        Paths none of which is an ancestor of another.
    """
    chosen = sorted({p for p in paths if p in tree.nodes}, key=lambda p: tree.nodes[p].order)
    out: list[str] = []
    for p in chosen:
        if any(q == "" or p.startswith(q + ".") for q in out):
            continue
        out.append(p)
    return out


def _holds(plan: FreezePlan, tree: ModelTree, path: str, key: str, value: Any) -> bool:
    """Whether ``key`` is already in force as ``value`` on the whole subtree at ``path`` (on its
    BatchNorm modules for a key that acts on those only)."""
    row = rule_key(key)
    if supported(plan):  # the subtree only, one check per group of rows with the same settings
        lay = layout(tree)
        start = lay.index[path]
        rows = np.arange(start, lay.end[start], dtype=np.int64)
        group, effectives = resolve_groups(plan, tree, rows)
        if row.batchnorm_only:
            group = group[lay.is_bn[rows]]
        return all(_agrees(effectives[int(g)], row, value) for g in np.unique(group))
    eff = plan.resolve(tree)
    nodes = tree.nodes
    return all(
        _agrees(eff[p], row, value) for p in tree.subtree(path) if not row.batchnorm_only or nodes[p].is_bn
    )


def _agrees(e: Effective, row: PlanKey, value: Any) -> bool:
    """Whether one module's settings have the key of ``row`` as ``value``."""
    return row.agrees(getattr(e, row.name), value)


_UNKNOWN = object()


def _inherited(plan: FreezePlan, tree: ModelTree, path: str, key: str) -> Any:
    """What ``path``'s subtree would get for ``key`` from above if its own rules were removed
    (as :meth:`PlanKey.gui_value` reads it).

    Returns ``_UNKNOWN`` when that cannot be told without resolving the plan (a key that
    follows another, such as ``bn_eval``, a key the subtree does not inherit, or glob /
    ``type:`` rules that may reach inside the subtree).
    """
    row = rule_key(key)
    if row.follows is not None or not row.inherited:
        return _UNKNOWN
    if any(r.sets(key) and is_pattern(r.select) for r in plan.rules):
        return _UNKNOWN
    node = tree.nodes[path].parent
    ancestors = set()
    while node is not None:
        ancestors.add(node.path)
        node = node.parent
    for r in reversed(plan.rules):
        if r.sets(key) and ((path and r.select in ("", "*")) or r.select in ancestors):
            return row.gui_value(r.value(key))
    return row.gui_value(row.default)


def set_minimal(plan: FreezePlan, tree: ModelTree, path: str, key: str, value: Any) -> None:
    """Make ``key`` equal ``value`` on the subtree at ``path`` with as few rules as possible.

    When removing the explicit settings of ``key`` at and below ``path`` already gives
    ``value`` there (the parent provides it), they are removed; otherwise ``value`` is set
    at ``path`` (``FreezePlan.set`` semantics). A switch key (:attr:`PlanKey.switch`)
    compares on/off; the value of a spec key (``reparam``) is always written explicitly.

    Args:
        plan: the plan, edited in place.
        tree: the model's tree.
        path: module path (``""`` for the root).
        key: an inherited setting key (``"frozen"``, ``"bn_eval"``, ``"lr_scale"``,
            ``"reparam"``, ...: a row of :data:`~workbench.core.plan.keys.RULE_KEYS`).
        value: the value; ``None`` removes the explicit settings (inherit). ``reparam``:
            a spec dict to switch A+B on, ``False`` to switch it off.

    Raises:
        KeyError: no module at ``path``, or not a plan key.
        ValueError: invalid key or value (the message says which and what to do).
    """
    if value is None:
        plan.set(path, key, None, tree)
        return
    if key not in INHERITED_KEYS:
        plan.set(path, key, value, tree)  # raises ValueError: says which keys can be set by path
        return
    row = rule_key(key)
    inherited = _inherited(plan, tree, path, key)
    if inherited is not _UNKNOWN and inherited != row.gui_value(value):
        plan.set(path, key, value, tree)  # removing rules cannot give `value`: skip the trial
        return
    trial = plan.copy()
    trial.set(path, key, None, tree)
    simple = not (row.spec is not None and row.is_on(value))  # a spec is always written explicitly
    if simple and _holds(trial, tree, path, key, value):
        plan.rules = trial.rules
        return
    plan.set(path, key, value, tree)


def set_on_paths(plan: FreezePlan, tree: ModelTree, paths: Iterable[str], key: str, value: Any) -> None:
    """:func:`set_minimal` on several subtrees (nested selections count once).

    Args:
        plan: the plan, edited in place.
        tree: the model's tree.
        paths: module paths.
        key: setting key.
        value: the value (see :func:`set_minimal`).

    Raises:
        ValueError: invalid value.
    """
    for p in top_paths(paths, tree):
        set_minimal(plan, tree, p, key, value)


def train_only(plan: FreezePlan, tree: ModelTree, paths: Iterable[str]) -> None:
    """Freeze the whole model except the subtrees at ``paths``.

    Args:
        plan: the plan, edited in place.
        tree: the model's tree.
        paths: the modules that train.
    """
    chosen = top_paths(paths, tree)
    plan.set("", "frozen", True, tree)
    for p in chosen:
        plan.set(p, "frozen", False, tree)


def freeze_before(plan: FreezePlan, tree: ModelTree, path: str) -> None:
    """Freeze every module that runs before ``path``; ``path`` and what follows train.

    Execution order is taken as registration order (``named_modules()``), which is the
    forward order of torchvision classifiers and of ``nn.Sequential``. At the level of
    ``path`` its earlier siblings freeze; at each level above, the siblings before its
    ancestor freeze and those after it train — for a top-level module this is the classic
    backbone/head split.

    Args:
        plan: the plan, edited in place.
        tree: the model's tree.
        path: the first module that trains.

    Raises:
        ValueError: ``path`` is the root (nothing runs before it).
    """
    if not path:
        raise ValueError("choose a module below the root: everything before it is frozen")
    node = tree.nodes[path]
    plan.set("", "frozen", True, tree)
    start = node.row
    while node.parent is not None:
        for sib in node.parent.children[start:]:
            plan.set(sib.path, "frozen", False, tree)
        node = node.parent
        start = node.row + 1


def set_bn_eval_everywhere(plan: FreezePlan, tree: ModelTree, value: bool | None) -> None:
    """Set ``bn_eval`` for every BatchNorm module.

    Args:
        plan: the plan, edited in place.
        tree: the model's tree.
        value: True (eval mode), False (train mode), None (follow ``frozen`` again).
    """
    plan.set("", "bn_eval", value, tree)


def remove_unmatched_rules(plan: FreezePlan, tree: ModelTree) -> int:
    """Delete the rules whose selector matches no module of this model.

    Args:
        plan: the plan, edited in place.
        tree: the model's tree.

    Returns:
        How many rules were removed.
    """
    problems = [p for p in plan.unmatched(tree) if p.field == "select" and p.rule_index is not None]
    base = {p.rule_index for p in problems if p.stage_index is None}
    staged: dict[int, set[int]] = {}
    for p in problems:
        if p.stage_index is not None:
            staged.setdefault(p.stage_index, set()).add(p.rule_index)  # type: ignore[arg-type]
    plan.rules = [r for i, r in enumerate(plan.rules) if i not in base]
    removed = len(base)
    for si in sorted(staged, reverse=True):
        st = plan.stages[si]
        st.rules = [r for i, r in enumerate(st.rules) if i not in staged[si]]
        removed += len(staged[si])
        if not st.rules:
            del plan.stages[si]
    return removed


def set_partial(plan: FreezePlan, tree: ModelTree, path: str, spec: Mapping[str, Any] | None) -> None:
    """Set or remove sub-tensor freezing on one module.

    A rule ``{"select": path, "partial": spec}`` replaces any plain-path rule's ``partial``
    for that module, and the module itself is unfrozen (its trainable ranges must train).

    Args:
        plan: the plan, edited in place.
        tree: the model's tree.
        path: module path.
        spec: ``{"param": "weight", "dim": 0 | 1, "trainable": [[start, stop], ...]}``, or
            None to remove sub-tensor freezing from the module.

    Raises:
        KeyError: no module at ``path``.
        ValueError: the spec is invalid (the message names the sub-field and the fix).
    """
    if path not in tree.nodes:
        raise KeyError(f"no module {path!r} in the model")
    sel = path or "*"
    for r in plan.rules:
        if r.partial is not None and r.select in (path, sel):
            r.partial = None
    plan.rules = [r for r in plan.rules if not r.empty or r.comment]
    if spec is None:
        return
    try:
        rule = FreezePlan.from_dict({"rules": [{"select": sel, "partial": dict(spec)}]}).rules[0]
    except PlanError as e:
        raise ValueError(e.problems[0].message) from None
    set_minimal(plan, tree, path, "frozen", False)
    plan.rules.append(rule)
