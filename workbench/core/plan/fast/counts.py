"""Parameter and memory counts of a plan on a tree, per row and per subtree, in named columns.

Over the tree's flat pre-order arrays (:mod:`~workbench.core.plan.fast.layout`) each row's own
contributions are array operations (rows whose settings are plain) or one call per row (A+B,
sub-tensor freezing, kept modules, ``param:`` rules); the subtree sums are one cumulative sum.
:func:`count_plan` counts a whole plan, :func:`recount` only the rows a plan edit can reach
(:func:`~workbench.core.plan.fast.resolve.edit_region`); both give a :class:`PlanRows`, whose
:meth:`PlanRows.totals` are what the cost panel, ``workbench inspect`` and the advisor read.

Columns are named: :class:`Own` for a row's own contributions (the first :data:`SUMMED` of them
are also kept as subtree sums), then one column per :func:`tallied` switch key. A switch key of
the key table has a column of its own when :class:`Own` names one after it (``frozen``,
``reparam``, ``bn_eval``: counted over parameter elements or BatchNorm modules); every other
switch key is tallied over modules, one column each, so a new switch key needs no change here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple, Protocol

import numpy as np

from workbench.core.plan.fast.layout import Layout, layout, subtree_sums
from workbench.core.plan.fast.resolve import (
    RulePlan,
    edit_region,
    effective_code,
    group_effectives,
    resolve_groups,
    supported,
)
from workbench.core.plan.keys import SETTING_KEYS, Effective, PlanKey
from workbench.core.plan.param_counts import frozen_elements
from workbench.core.plan.partial_spec import PartialError, trainable_fraction
from workbench.core.plan.reparam_spec import LOW_RANK_LAYERS, WEIGHT_IN_OUT, ReparamSpec
from workbench.core.plan.tree import ModelTree, ModuleNode

__all__ = [
    "SUMMED",
    "CountedPlan",
    "Own",
    "PlanRows",
    "PlanTotals",
    "count_plan",
    "low_rank_elements",
    "own_tally_keys",
    "recount",
    "tallied",
]


class Own(IntEnum):
    """The columns of a row's own contributions (:attr:`PlanRows.own`).

    The first :data:`SUMMED` are kept as subtree sums too (:attr:`PlanRows.sums`, same index).
    """

    #: Frozen parameter elements (A+B's added elements included when they are frozen).
    FROZEN = 0
    #: Parameter elements under A+B.
    REPARAM = 1
    #: Elements low-rank A+B adds (U, V and a variant's own).
    ADDED = 2
    #: A BatchNorm module in eval mode (0/1).
    BN_EVAL = 3
    #: A BatchNorm module whose ``bn_eval`` follows ``frozen`` (0/1).
    BN_FOLLOWS = 4
    #: Sub-tensor freezing on the module (0/1).
    PARTIAL = 5
    #: Bytes of the frozen elements.
    FROZEN_BYTES = 6
    #: Bytes of the elements low-rank A+B adds.
    ADDED_BYTES = 7
    #: Bytes of full-rank A+B's fixed copy A.
    FIXED_BYTES = 8
    #: Elements of full-rank A+B's fixed copy A.
    FIXED_ELEMENTS = 9
    #: A module with parameters under A+B (0/1).
    REPARAM_MODULE = 10


#: Own columns whose subtree sums are kept (then one per tallied switch key).
SUMMED = 6


def own_tally_keys() -> tuple[str, ...]:
    """The switch keys that :class:`Own` counts in a column named after them.

    Returns:
        Key names in table order (``frozen``, ``bn_eval``, ``reparam``).
    """
    return tuple(k.name for k in SETTING_KEYS if k.switch and k.name.upper() in Own.__members__)


def tallied() -> tuple[PlanKey, ...]:
    """The switch keys counted over modules (one column each after :class:`Own`), in table order.

    Returns:
        Rows of the key table.
    """
    own = own_tally_keys()
    return tuple(k for k in SETTING_KEYS if k.switch and k.name not in own)


def _sum_columns(keys: Sequence[PlanKey]) -> list[int]:
    """The own columns whose subtree sums a count keeps."""
    return [*range(SUMMED), *range(len(Own), len(Own) + len(keys))]


def reparam_bytes(path: str, spec: ReparamSpec, own: int, own_bytes: int, shapes: Mapping[str, tuple[int, ...]]) -> int:
    """Bytes of the fixed tensors A that full-rank A+B adds to a module.

    Args:
        path: the module's path.
        spec: its A+B.
        own: elements of its own parameters.
        own_bytes: bytes of its own parameters (pass ``own`` to count elements).
        shapes: ``{parameter name: shape}``.

    Returns:
        ``own_bytes`` when ``spec`` names no parameters or their shapes are not known, else the
        named parameters' share of it.
    """
    names = spec.params
    if not names or own <= 0:
        return own_bytes
    numel = 0
    for name in names:
        shape = shapes.get(f"{path}.{name}" if path else str(name))
        if shape is None:
            return own_bytes
        numel += math.prod(shape)
    return own_bytes * min(numel, own) // own


def low_rank_elements(node: ModuleNode, spec: ReparamSpec, shapes: Mapping[str, tuple[int, ...]]) -> int | None:
    """Elements (U, V and a variant's own, such as DoRA's magnitude) that low-rank A+B adds to a layer.

    Args:
        node: the layer's tree node.
        spec: the A+B in force on it.
        shapes: ``{parameter name: shape}``.

    Returns:
        The count, or None when the spec is full rank, the layer is not one of
        :data:`~workbench.core.plan.reparam_spec.LOW_RANK_LAYERS`, or its weight's shape is not known.
    """
    if spec.low_rank is None or node.type_name not in LOW_RANK_LAYERS:
        return None
    shape = shapes.get(f"{node.path}.weight" if node.path else "weight")
    if not shape or len(shape) < 2:
        return None
    if node.type_name in WEIGHT_IN_OUT:
        return spec.low_rank.added_elements(shape[1], shape[0])
    return spec.low_rank.added_elements(shape[0], math.prod(shape[1:]))


def _own_frozen(tree: ModelTree, node: ModuleNode, e: Effective) -> int:
    """Frozen elements of a module's own parameters from its own settings (plans without
    ``param:`` rules: :func:`~workbench.core.plan.param_counts.frozen_elements` gives the same)."""
    if e.frozen:
        return node.own_params
    spec = e.partial
    if spec is None:
        return 0
    out = 0
    for short in node.param_names:
        if short != spec.param:
            continue
        shape = tree.param_shapes.get(f"{node.path}.{short}" if node.path else short)
        if shape is None:
            continue
        try:
            out += round(math.prod(shape) * (1.0 - trainable_fraction(spec, shape)))
        except PartialError:
            continue  # does not fit the tensor: reported as a plan problem
    return min(node.own_params, out)


def _own(
    node: ModuleNode, e: Effective, own: int, obytes: int, is_bn: bool, frozen_own: int,
    shapes: Mapping[str, tuple[int, ...]],
) -> list[int]:
    """A row's own contributions, one value per :class:`Own` column."""
    out = [0] * len(Own)
    if own:
        low = low_rank_elements(node, e.reparam, shapes) if e.reparam else None
        if low is not None:
            # A is the layer's own weight, held fixed with its bias; U and V follow "frozen"
            per = obytes // own
            out[Own.ADDED] = low
            out[Own.ADDED_BYTES] = low * per
            out[Own.FROZEN] = own + (low if e.frozen else 0)
            out[Own.FROZEN_BYTES] = obytes + (low * per if e.frozen else 0)
        elif e.kept:  # "unselected": "keep": as the model has it
            out[Own.FROZEN] = own - node.own_trainable
            out[Own.FROZEN_BYTES] = obytes * out[Own.FROZEN] // own
        else:  # frozen, param: rules and partial freezing, element by element
            out[Own.FROZEN] = frozen_own
            out[Own.FROZEN_BYTES] = obytes * frozen_own // own
        if e.reparam and (e.reparam.low_rank is None or node.type_name in LOW_RANK_LAYERS):
            out[Own.REPARAM] = own
            out[Own.REPARAM_MODULE] = 1
            if e.reparam.low_rank is None:
                # A, the fixed copy of the pretrained weights (of the named ones only)
                out[Own.FIXED_BYTES] = reparam_bytes(node.path, e.reparam, own, obytes, shapes)
                out[Own.FIXED_ELEMENTS] = reparam_bytes(node.path, e.reparam, own, own, shapes)
    out[Own.BN_EVAL] = int(e.bn_eval) if is_bn else 0
    out[Own.BN_FOLLOWS] = int(not e.bn_eval_explicit) if is_bn else 0
    out[Own.PARTIAL] = 1 if e.partial else 0
    return out


class PlanTotals(NamedTuple):
    """What a plan leaves over the whole tree (the numbers behind the cost panel and ``inspect``).

    Attributes:
        total / trainable: parameter elements (A+B's added elements included).
        param_bytes / trainable_bytes: bytes of all / of the trainable parameters.
        fixed_bytes / fixed_elements: full-rank A+B's fixed copies A.
        reparam_modules: modules with parameters under A+B.
        bn_modules / bn_eval_modules: BatchNorm modules, and those in eval mode.
    """

    total: int
    trainable: int
    param_bytes: int
    trainable_bytes: int
    fixed_bytes: int
    fixed_elements: int
    reparam_modules: int
    bn_modules: int
    bn_eval_modules: int


@dataclass
class PlanRows:
    """Per-row numbers of a plan on a tree, kept so that the next edit recounts only what it reaches.

    Attributes:
        own: ``(rows, len(Own) + tallied)`` own contributions (columns :class:`Own`, then the
            tallied switch keys: the module has the key on).
        sums: ``(rows, SUMMED + tallied)`` subtree sums of the first :data:`SUMMED` own columns
            and the tallied keys.
        obytes: bytes of each row's own parameters.
        own_bytes: the ``{path: bytes}`` mapping ``obytes`` came from (None: 4 per element).
        group: group of effective settings per row.
        effectives: settings per group.
        codes: :func:`~workbench.core.plan.fast.resolve.effective_code` per group.
    """

    own: np.ndarray
    sums: np.ndarray
    obytes: np.ndarray
    own_bytes: Mapping[str, int] | None
    group: np.ndarray
    effectives: list[Effective]
    codes: np.ndarray

    def column(self, col: Own) -> int:
        """The sum of an own column over every row.

        Args:
            col: the column.

        Returns:
            The total.
        """
        return int(self.own[:, col].sum())

    def totals(self, tree: ModelTree) -> PlanTotals:
        """What the plan leaves over the whole tree.

        Args:
            tree: the tree the rows were counted on.

        Returns:
            The totals.
        """
        lay = layout(tree)
        n = len(lay.paths)
        added = int(self.sums[0, Own.ADDED]) if n else 0
        frozen = int(self.sums[0, Own.FROZEN]) if n else 0
        param_bytes = int(self.obytes.sum()) + self.column(Own.ADDED_BYTES)
        return PlanTotals(
            total=tree.total_params + added,
            trainable=(int(lay.total[0]) + added - frozen) if n else 0,
            param_bytes=param_bytes,
            trainable_bytes=param_bytes - self.column(Own.FROZEN_BYTES),
            fixed_bytes=self.column(Own.FIXED_BYTES),
            fixed_elements=self.column(Own.FIXED_ELEMENTS),
            reparam_modules=self.column(Own.REPARAM_MODULE),
            bn_modules=int(lay.bn_total[0]) if n else 0,
            bn_eval_modules=int(self.sums[0, Own.BN_EVAL]) if n else 0,
        )

    def effective(self, tree: ModelTree) -> dict[str, Effective]:
        """``{path: Effective}`` of every row (rows of a group share one object).

        Args:
            tree: the tree the rows were counted on.

        Returns:
            The settings in force per module, in pre-order.
        """
        return dict(zip(layout(tree).paths, map(self.effectives.__getitem__, self.group.tolist()), strict=True))

    def trainable_rows(self, tree: ModelTree) -> np.ndarray:
        """Whether each row's subtree holds a trainable parameter element.

        Args:
            tree: the tree the rows were counted on.

        Returns:
            A bool array, one value per pre-order row.
        """
        lay = layout(tree)
        out: np.ndarray = (lay.total + self.sums[:, Own.ADDED] - self.sums[:, Own.FROZEN]) > 0
        return out


class CountedPlan(RulePlan, Protocol):
    """What :func:`count_plan` reads of a plan beyond its rules: its own resolution, for
    plans the fast resolver does not cover (``param:`` rules, ``lr_decay``, kept modules)."""

    def resolve(self, model_or_tree: ModelTree) -> dict[str, Effective]:
        """Settings in force per module."""

    def resolve_params(self, model_or_tree: ModelTree) -> dict[str, Effective]:
        """Settings in force per parameter."""


#: Groups of effective settings kept before dropping those no row uses.
_MAX_GROUPS = 256


def _own_rows(
    tree: ModelTree, lay: Layout, rows: np.ndarray, group: np.ndarray, effectives: Sequence[Effective],
    obytes: np.ndarray, shapes: Mapping[str, tuple[int, ...]], own_frozen: Mapping[str, int] | None,
) -> np.ndarray:
    """Own contributions (:class:`Own`, then the :func:`tallied` keys) of ``rows`` whose
    settings are ``effectives[group]``.

    Rows whose settings are plain (frozen or not, BN eval) are counted with array operations;
    A+B, sub-tensor freezing, kept modules and ``own_frozen`` (``param:`` rules) row by row.
    """
    keys = tallied()
    out = np.zeros((len(rows), len(Own) + len(keys)), dtype=np.int64)
    if not len(rows):
        return out
    ng = len(effectives)
    g_frozen = np.fromiter((e.frozen for e in effectives), dtype=bool, count=ng)
    g_bn_eval = np.fromiter((e.bn_eval for e in effectives), dtype=bool, count=ng)
    g_bn_follows = np.fromiter((not e.bn_eval_explicit for e in effectives), dtype=bool, count=ng)
    g_slow = np.fromiter((bool(e.reparam or e.partial or e.kept) for e in effectives), dtype=bool, count=ng)
    own, ob, is_bn = lay.own[rows], obytes[rows], lay.is_bn[rows]
    fr = g_frozen[group] & (own > 0)
    out[:, Own.FROZEN] = np.where(fr, own, 0)
    out[:, Own.FROZEN_BYTES] = np.where(fr, ob, 0)
    out[:, Own.BN_EVAL] = is_bn & g_bn_eval[group]
    out[:, Own.BN_FOLLOWS] = is_bn & g_bn_follows[group]
    for j, key in enumerate(keys):
        g_on = np.fromiter((key.is_on(getattr(e, key.name)) for e in effectives), dtype=bool, count=ng)
        out[:, len(Own) + j] = g_on[group] & is_bn if key.batchnorm_only else g_on[group]
    slow = np.nonzero(g_slow[group] | (own_frozen is not None))[0]
    for k in slow:
        i = int(rows[k])
        e = effectives[group[k]]
        if not own[k] and not is_bn[k] and not e.partial:
            out[k, :len(Own)] = 0
            continue
        node = lay.nodes[i]
        f = _own_frozen(tree, node, e) if own_frozen is None else own_frozen.get(node.path, 0)
        out[k, :len(Own)] = _own(node, e, int(own[k]), int(ob[k]), bool(is_bn[k]), f, shapes)
    return out


def count_plan(
    plan: CountedPlan, tree: ModelTree, own_bytes: Mapping[str, int] | None = None,
    shapes: Mapping[str, tuple[int, ...]] | None = None,
) -> PlanRows:
    """Resolve ``plan`` on ``tree`` and count every row.

    Args:
        plan: the plan (a :class:`~workbench.core.plan.rules.FreezePlan`).
        tree: the model's tree.
        own_bytes: bytes of each module's own parameters (default: 4 per element).
        shapes: ``{parameter name: shape}`` (canonical names), used to count low-rank A+B's
            added elements and the frozen part of sub-tensor freezing (default: the tree's).

    Returns:
        The rows.
    """
    shapes = tree.param_shapes if shapes is None else shapes
    lay = layout(tree)
    n = len(lay.paths)
    every = np.arange(n, dtype=np.int64)
    own_frozen: Mapping[str, int] | None = None
    if supported(plan):
        group, effectives = resolve_groups(plan, tree, every)
    else:  # param: rules, lr_decay, "unselected": "keep": the plan's own resolve
        eff = plan.resolve(tree)
        own_frozen = frozen_elements(tree, eff, plan.resolve_params(tree))
        group, effectives = group_effectives(lay, eff)
    obytes = lay.own_bytes(own_bytes)
    own_rows = _own_rows(tree, lay, every, group, effectives, obytes, shapes, own_frozen)
    sums = subtree_sums(own_rows[:, _sum_columns(tallied())], lay.end)
    codes = np.fromiter((effective_code(e) for e in effectives), dtype=np.int64, count=len(effectives))
    return PlanRows(own_rows, sums, obytes, own_bytes, group, effectives, codes)


def recount(
    prev: PlanRows, old: RulePlan, plan: RulePlan, tree: ModelTree, shapes: Mapping[str, tuple[int, ...]],
) -> tuple[PlanRows, np.ndarray] | None:
    """Count ``plan`` from the rows of the plan before an edit, recounting only the rows the
    edit can reach (:func:`~workbench.core.plan.fast.resolve.edit_region`); the result equals
    :func:`count_plan`'s.

    Args:
        prev: the rows of ``old`` on ``tree``.
        old: the plan before the edit.
        plan: the plan after it.
        tree: the model's tree.
        shapes: as for :func:`count_plan` (the same mapping ``prev`` was counted with).

    Returns:
        ``(rows, touched)``: the new rows and the pre-order rows whose numbers or settings may
        have changed; None when the edit reaches more than half the tree or the plans differ
        in more than their rules (count the whole plan then).
    """
    lay = layout(tree)
    region = edit_region(old, plan, tree)
    if region is None or len(region) > len(lay.paths) // 2:
        return None
    index = lay.index
    idx = np.fromiter(sorted(index[p] for p in region), dtype=np.int64, count=len(region))
    local, new_effs = resolve_groups(plan, tree, idx)
    effectives = [*prev.effectives, *new_effs]
    group = prev.group.copy()
    group[idx] = local + len(prev.effectives)
    codes = np.concatenate([prev.codes, np.fromiter(
        (effective_code(e) for e in new_effs), dtype=np.int64, count=len(new_effs))])
    if len(effectives) > _MAX_GROUPS:  # many edits: keep the groups some row uses
        used, inverse = np.unique(group, return_inverse=True)
        group = inverse.astype(np.int64).reshape(-1)
        effectives = [effectives[int(u)] for u in used]
        codes = codes[used]
    own_rows = prev.own.copy()
    own_rows[idx] = _own_rows(tree, lay, idx, group[idx], effectives, prev.obytes, shapes, None)
    sums = subtree_sums(own_rows[:, _sum_columns(tallied())], lay.end)
    touched_mask = (sums != prev.sums).any(axis=1)
    touched_mask[idx] = True
    rows = PlanRows(own_rows, sums, prev.obytes, prev.own_bytes, group, effectives, codes)
    return rows, np.flatnonzero(touched_mask)
