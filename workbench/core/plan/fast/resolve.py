"""A plan resolved over flat pre-order rows with numpy, and the part of a tree an edit can reach.

:func:`resolve_groups` resolves a plan whose settings come from module rules alone
(:func:`supported`: no ``param:`` rules, no ``lr_decay`` and ``"unselected": "train"``) over
any set of rows: each rule's reach is a mask (its matches' subtree ranges marked with a
difference array), rows that the same rules reach share a group, and each group gets one
:class:`~workbench.core.plan.keys.Effective`. :func:`resolve_rules` is the same over every row
of a tree as ``{path: Effective}``: :meth:`FreezePlan.resolve
<workbench.core.plan.rules.FreezePlan.resolve>` answers with it on large trees.

A click changes one or two rules. The modules whose settings can change are those the changed
rules reach (their selectors' matches and subtrees); every other module keeps the rules it
had, in the same order, so it keeps its settings. :func:`edit_region` finds that part, so that
a plan edit resolves and recounts it only. Equal results are the contract, checked by property
tests over random plans and edit sequences (``tests/core/plan/test_fast_resolve.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from workbench.core.plan.fast.layout import Layout, layout
from workbench.core.plan.keys import DIRECT_KEYS, INHERITED_KEYS, Effective, effective_from
from workbench.core.plan.rule import Rule
from workbench.core.plan.selectors import is_param_selector, matcher
from workbench.core.plan.tree import ModelTree

__all__ = [
    "RulePlan",
    "edit_region",
    "effective_code",
    "group_effectives",
    "resolve_groups",
    "resolve_rules",
    "supported",
]


class RulePlan(Protocol):
    """What the resolver reads of a plan (a :class:`~workbench.core.plan.rules.FreezePlan`)."""

    @property
    def rules(self) -> Sequence[Rule]:
        """The plan's base rules, in order."""

    @property
    def lr_decay(self) -> float | None:
        """Layer-wise learning-rate decay, or None."""

    @property
    def unselected(self) -> str:
        """``"train"`` or ``"keep"``."""


def rules_supported(rules: Sequence[Rule], unselected: str, lr_decay: float | None) -> bool:
    """Whether settings come from module rules alone (see :func:`supported`).

    Args:
        rules: a plan's rules.
        unselected: ``"train"`` or ``"keep"``.
        lr_decay: layer-wise learning-rate decay, or None.

    Returns:
        True when :func:`resolve_groups` gives what the plan's own resolution gives.
    """
    return lr_decay is None and unselected != "keep" and not any(is_param_selector(r.select) for r in rules)


def supported(plan: RulePlan) -> bool:
    """Whether the plan's settings come from module rules alone (see the module doc).

    Args:
        plan: the plan.

    Returns:
        True when :func:`resolve_groups` gives what :meth:`FreezePlan.resolve` gives.
    """
    return rules_supported(plan.rules, plan.unselected, plan.lr_decay)


def _reach(lay: Layout, rows: np.ndarray) -> np.ndarray:
    """Mask of the rows in the subtrees of ``rows``."""
    n = len(lay.paths)
    diff = np.zeros(n + 1, dtype=np.int64)
    np.add.at(diff, rows, 1)
    np.add.at(diff, lay.end[rows], -1)
    return np.cumsum(diff[:n]) > 0


def _direct_mask(lay: Layout, rows: np.ndarray) -> np.ndarray:
    out = np.zeros(len(lay.paths), dtype=bool)
    out[rows] = True
    return out


def resolve_groups(plan: RulePlan | Sequence[Rule], tree: ModelTree, rows: np.ndarray) -> tuple[np.ndarray, list[Effective]]:
    """Effective settings of some rows, as :meth:`FreezePlan.resolve` gives them.

    Each row gets the inherited values of the rules that reach it (a match of the selector
    is the module or one of its ancestors) and the direct values of the rules that match it,
    in rule order; rows left with the same rules share one group.

    Args:
        plan: a :func:`supported` plan, or its rules.
        tree: the model's tree.
        rows: pre-order rows (int array).

    Returns:
        ``(group, effectives)``: a group number per row of ``rows`` and one
        :class:`Effective` per group.
    """
    rules = plan if isinstance(plan, Sequence) else plan.rules
    lay = layout(tree)
    m = matcher(tree)
    index = lay.index
    code = np.zeros(len(rows), dtype=np.int64)
    columns: list[tuple[np.ndarray, dict[str, Any]]] = []
    for rule in rules:
        inherited = {k: rule.value(k) for k in INHERITED_KEYS if rule.sets(k)}
        direct = {k: rule.value(k) for k in DIRECT_KEYS if rule.sets(k)}
        if not (inherited or direct):
            continue
        matched = np.fromiter((index[p] for p in m.direct(rule.select)), dtype=np.int64)
        if not len(matched):
            continue
        for settings, mask_of in ((inherited, _reach), (direct, _direct_mask)):
            if not settings:
                continue
            bit = mask_of(lay, matched)[rows]
            if not bit.any():
                continue
            columns.append((bit, settings))
            code = code * 2 + bit
            if code.max(initial=0) > 1 << 52:
                code = np.unique(code, return_inverse=True)[1].astype(np.int64).reshape(-1)
    first, group = _groups_of(code)
    effectives = []
    for r in first:
        values: dict[str, Any] = {}
        for bit, vals in columns:
            if bit[r]:
                values.update(vals)
        effectives.append(effective_from(values))
    return group.astype(np.int64).reshape(-1), effectives


def resolve_rules(rules: Sequence[Rule], tree: ModelTree) -> dict[str, Effective]:
    """``{path: Effective}`` for every module of ``tree`` from module rules alone
    (:func:`rules_supported`), through :func:`resolve_groups`.

    Args:
        rules: the plan's rules.
        tree: the model's tree.

    Returns:
        The settings in force per module, in pre-order (rows of a group share one object).
    """
    lay = layout(tree)
    group, effectives = resolve_groups(rules, tree, np.arange(len(lay.paths), dtype=np.int64))
    return dict(zip(lay.paths, map(effectives.__getitem__, group.tolist()), strict=True))


def group_effectives(lay: Layout, eff: Mapping[str, Effective]) -> tuple[np.ndarray, list[Effective]]:
    """Rows with equal settings in one group, from a resolution ``{path: Effective}``.

    Args:
        lay: the tree's layout.
        eff: the settings of every row's path (:meth:`FreezePlan.resolve`).

    Returns:
        ``(group, effectives)`` as :func:`resolve_groups` gives them for every row.
    """
    n = len(lay.paths)
    ids: dict[int, int] = {}
    effectives: list[Effective] = []
    seen: dict[int, int] = {}
    group = np.empty(n, dtype=np.int64)
    for i, p in enumerate(lay.paths):
        e = eff[p]
        g = ids.get(id(e))
        if g is None:
            code = effective_code(e)
            g = seen.get(code)
            if g is None:
                g = seen[code] = len(effectives)
                effectives.append(e)
            ids[id(e)] = g
        group[i] = g
    return group, effectives


def _groups_of(code: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first row of each distinct code, and a dense group number per row (in code order)."""
    if len(code) and int(code.max()) < 4 * len(code) + 64:  # few rules: count, no sort
        present = np.bincount(code) > 0
        uniq = np.flatnonzero(present)
        if len(uniq) <= 32:
            dense = np.cumsum(present) - 1
            return np.array([int(np.argmax(code == u)) for u in uniq], dtype=np.int64), dense[code]
    _uniq, first, group = np.unique(code, return_index=True, return_inverse=True)
    return first, group


_CODES: dict[Any, int] = {}


def effective_code(e: Effective) -> int:
    """A number per distinct :class:`Effective` (equal settings, equal numbers; process-wide).

    Args:
        e: effective settings.

    Returns:
        Its number.
    """
    try:
        key: Any = e
        hash(key)
    except TypeError:  # a spec holding lists
        key = ("repr", repr(e))
    code = _CODES.get(key)
    if code is None:
        code = _CODES[key] = len(_CODES)
    return code


def _changed_rules(old: Sequence[Rule], new: Sequence[Rule]) -> list[Rule]:
    """The rules of either list outside their common first and last rules."""
    n = min(len(old), len(new))
    p = 0
    while p < n and old[p] == new[p]:
        p += 1
    s = 0
    while s < n - p and old[len(old) - 1 - s] == new[len(new) - 1 - s]:
        s += 1
    return [*old[p:len(old) - s], *new[p:len(new) - s]]


def edit_region(old: RulePlan, new: RulePlan, tree: ModelTree) -> set[str] | None:
    """The modules whose settings may differ between two plans on ``tree``.

    Args:
        old: the plan before the edit.
        new: the plan after it.
        tree: the model's tree.

    Returns:
        Module paths, closed under descendants (empty when nothing can differ); None when
        the plans differ in more than their rules or either is not :func:`supported`.
    """
    if not (supported(old) and supported(new)) or old.lr_decay != new.lr_decay or old.unselected != new.unselected:
        return None
    m = matcher(tree)
    region: set[str] = set()
    for rule in _changed_rules(old.rules, new.rules):
        covered = m.covered(rule.select)
        if len(covered) == len(m.paths):
            return set(m.paths)
        region.update(covered)
    return region
