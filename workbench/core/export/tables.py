"""The plan as the exported script's settings tables, computed by the workbench's own resolver.

Every table is a short list of ``(name prefix, value)`` pairs applied in order, a later pair
winning, that gives each parameter (or module) exactly the value
:meth:`~workbench.core.plan.rules.FreezePlan.resolve_params` (or ``resolve``) gives it:

- module-path prefixes first, the fewest that give every module the value most of its own
  parameters have (:func:`workbench.core.freezing.capture.minimal_assignments`);
- then name patterns such as ``"*.bias"`` where they save entries, and exact parameter names
  for the parameters still different from their module (``param:`` rules such as BitFit,
  ``lr_decay`` inside a block, ``no_decay`` biases).

So ``param:`` selectors, ``lr_decay``, ``weight_decay`` rules, ``no_decay="auto"``,
``eval`` and ``"unselected": "keep"`` all reach the script as data; nothing of the plan
language needs the workbench at run time.
"""

from __future__ import annotations

import fnmatch
from collections import Counter
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from torch import nn

from workbench.core.export.common import ExportError, script_path
from workbench.core.freezing.plan_handle import no_decay_names
from workbench.core.freezing.plan_registry import plan_in_force
from workbench.core.plan.covering import cover_paths, minimal_assignments
from workbench.core.plan.reparam_spec import ReparamSpec
from workbench.core.plan.rules import Effective, FreezePlan
from workbench.core.plan.tree import ModelTree

__all__ = [
    "ModelFacts",
    "counts",
    "param_table",
    "plan_tables",
    "reparam_table",
    "relocate_files",
    "stage_tables",
    "table_value",
    "under",
    "uses",
]

V = TypeVar("V", bound=Hashable)


class ModelFacts:
    """What the tables need from the model beyond its tree.

    Args:
        model: the model the plan is exported for (only read).
        tree: its tree.
        no_decay: ``"auto"``: weight decay 0 for the parameters of
            :func:`workbench.core.freezing.plan_handle.no_decay_names`; None: rules only.

    Attributes:
        tree: the tree.
        initial_grad: ``requires_grad`` each parameter had before any plan (canonical
            names), for ``"unselected": "keep"``.
        no_decay: canonical names that get no weight decay.
    """

    def __init__(self, model: nn.Module, tree: ModelTree, no_decay: str | None = None) -> None:
        if no_decay not in (None, "auto"):
            raise ExportError(f"no_decay must be None or \"auto\", got {no_decay!r}")
        self.tree = tree
        live = plan_in_force(model)
        before: dict[int, tuple[nn.Parameter, bool]] = getattr(live, "_orig_requires_grad", {}) if live else {}
        self.initial_grad = {
            tree.param_name(n): before[id(p)][1] if id(p) in before else p.requires_grad
            for n, p in model.named_parameters()
        }
        self.no_decay = {tree.param_name(n) for n in no_decay_names(model)} if no_decay == "auto" else set()


def table_value(name: str, table: list[tuple[str, Any]], default: Any) -> Any:
    """The value a table gives a dotted name: that of the last prefix it is under.

    The exported script's ``setting_of`` does the same.

    Args:
        name: a module path or canonical parameter name.
        table: ``[(prefix, value)]``; ``""`` is the whole model.
        default: the value when no prefix matches.

    Returns:
        The value.
    """
    value = default
    for prefix, v in table:
        if under(name, prefix):
            value = v
    return value


def under(name: str, prefix: str) -> bool:
    """Whether a dotted name is ``prefix`` or inside it (``""``: everything); a prefix with
    ``*`` is an fnmatch pattern on the whole name (``"*.bias"``).

    Args:
        name: a module path or canonical parameter name.
        prefix: a table entry's key.

    Returns:
        True when the entry applies to the name.
    """
    if "*" in prefix:
        return fnmatch.fnmatchcase(name, prefix)
    return prefix == "" or name == prefix or name.startswith(prefix + ".")


def param_table(tree: ModelTree, values: Mapping[str, V], default: V) -> list[tuple[str, V]]:
    """Module prefixes, then name patterns, then exact parameter names, that give each
    parameter its value.

    The module prefixes are the fewest for the value most of each module's parameters have;
    the patterns (``"*.bias"``, ``"*.norm1.weight"``) are added while each one saves entries;
    exact names fix what is left.

    Args:
        tree: the model's tree.
        values: ``{canonical parameter name: value}`` for the parameters whose value matters.
        default: the value before any entry.

    Returns:
        ``[(module path or parameter name, value)]`` in the order to apply them.
    """
    by_module: dict[str, Counter[V]] = {}
    for name, v in values.items():
        by_module.setdefault(name.rpartition(".")[0], Counter())[v] += 1
    required = {path: c.most_common(1)[0][0] for path, c in by_module.items()}
    base: list[tuple[str, V]] = list(minimal_assignments(tree, required, default))  # type: ignore[arg-type]

    def left(table: list[tuple[str, V]]) -> list[tuple[str, V]]:
        return [(n, v) for n, v in values.items() if table_value(n, table, default) != v]

    exact = left(base)
    candidates: Counter[tuple[str, V]] = Counter()
    for n, v in exact:
        parts = n.split(".")
        for k in (1, 2):
            if len(parts) > k:
                candidates["*." + ".".join(parts[-k:]), v] += 1
    patterns: list[tuple[str, V]] = []
    for (pattern, v), hits in candidates.most_common():
        if hits < 2:
            break
        trial = left(base + patterns + [(pattern, v)])
        if len(trial) + 1 < len(exact):
            patterns.append((pattern, v))
            exact = trial
    return base + patterns + exact


def _eval_table(tree: ModelTree, eff: Mapping[str, Effective]) -> list[tuple[str, bool]]:
    """Module prefixes kept in eval mode by the ``eval`` key (kept modules stay as they are)."""
    required = {p: bool(e.eval and not e.kept) for p, e in eff.items()}
    return [(p, bool(v)) for p, v in minimal_assignments(tree, required, False)]


def _bn_table(tree: ModelTree, eff: Mapping[str, Effective]) -> list[str]:
    bns = [p for p, n in tree.nodes.items() if n.is_bn]
    on = [p for p in bns if eff[p].bn_eval and not eff[p].kept]
    return cover_paths(tree, on, [p for p in bns if p not in set(on)])


def plan_tables(plan: FreezePlan, facts: ModelFacts) -> dict[str, Any]:
    """The settings tables of one plan (no stages).

    Args:
        plan: the plan in force.
        facts: the model's tree and flags.

    Returns:
        ``{"requires_grad", "bn_eval", "eval", "lr_scales", "weight_decays"}``: tables of
        ``(prefix, value)`` pairs (``bn_eval``: module prefixes whose BatchNorm modules stay
        in eval). A weight decay of ``None`` means the optimizer's.
    """
    tree = facts.tree
    eff = plan.resolve(tree)
    params = plan.resolve_params(tree)
    grad = {n: facts.initial_grad.get(n, True) if e.kept else not e.frozen for n, e in params.items()}
    trainable = [n for n, g in grad.items() if g]
    decays: dict[str, float | None] = {n: 0.0 if n in facts.no_decay else params[n].weight_decay for n in trainable}
    requires_grad = param_table(tree, grad, True)
    lr_scales = param_table(tree, {n: params[n].lr_scale for n in trainable}, 1.0)
    weight_decays = param_table(tree, decays, None)
    for path, e in eff.items():  # a partly frozen weight's trainable part follows its module, as in the workbench
        if e.partial is not None:
            name = f"{path}.{e.partial.param}_trainable" if path else f"{e.partial.param}_trainable"
            requires_grad.append((name, not e.frozen))
            if not e.frozen:
                lr_scales.append((name, e.lr_scale))
                weight_decays.append((name, e.weight_decay))
    return {"requires_grad": requires_grad, "bn_eval": _bn_table(tree, eff), "eval": _eval_table(tree, eff),
            "lr_scales": lr_scales, "weight_decays": weight_decays}


def counts(plan: FreezePlan, facts: ModelFacts, table: Mapping[str, Any]) -> dict[str, int]:
    """Numbers for the script's docstring: parameters trainable and in all, locked modules.

    Args:
        plan: the plan.
        facts: the model's tree and flags.
        table: the plan's :func:`plan_tables`.

    Returns:
        ``{"total", "trainable", "bn", "bn_eval", "eval", "reparam"}`` (``reparam``: modules with
        full-rank A+B).
    """
    tree = facts.tree
    eff = plan.resolve(tree)
    size = {n: _numel(s) for n, s in tree.param_shapes.items()}
    return {
        "total": sum(size.values()),
        "trainable": sum(k for n, k in size.items() if table_value(n, table["requires_grad"], True)),
        "bn": sum(1 for n in tree.nodes.values() if n.is_bn),
        "bn_eval": sum(1 for p, n in tree.nodes.items() if n.is_bn and eff[p].bn_eval and not eff[p].kept),
        "eval": sum(1 for p in tree.nodes if table_value(p, table["eval"], False)),
        "reparam": sum(1 for p, n in tree.nodes.items()  # full-rank A+B (low rank: export.extension_tables)
                       if n.own_params and (spec := eff[p].reparam) is not None and spec.low_rank is None),
    }


def _numel(shape: tuple[int, ...]) -> int:
    out = 1
    for s in shape:
        out *= s
    return out


def reparam_table(tree: ModelTree, eff: Mapping[str, Effective]) -> list[tuple[str, dict[str, Any]]]:
    """``(module path prefix, spec)``: every module with parameters under the prefix gets A+B.

    Args:
        tree: the model's tree.
        eff: the plan's module settings.

    Returns:
        Entries in tree order.
    """
    owners = [p for p, n in tree.nodes.items() if n.own_params]
    specs = list(dict.fromkeys(eff[p].reparam for p in owners if eff[p].reparam))
    out: list[tuple[str, dict[str, Any]]] = []
    for spec in specs:
        assert spec is not None  # only modules with A+B above
        members = [p for p in owners if eff[p].reparam == spec]
        blocked = [p for p in owners if eff[p].reparam != spec]
        for prefix in cover_paths(tree, members, blocked):
            data = spec.to_json()  # the script's literal: plain JSON values
            entry = {k: data[k] for k in ("params", "mode", "a", "b_init")}
            if spec.low_rank is not None:  # B = (alpha / rank) U V on the supported layers under the prefix
                lr = spec.low_rank
                entry.update(rank=lr.rank, alpha=lr.alpha, dropout=lr.dropout, init=lr.init, variant=lr.variant)
            out.append((prefix, entry))
    out.sort(key=lambda e: tree.nodes[e[0]].order)
    return out


def _reparam_key(eff: Mapping[str, Effective]) -> frozenset[tuple[str, ReparamSpec]]:
    return frozenset((p, e.reparam) for p, e in eff.items() if e.reparam)


def _partial_key(eff: Mapping[str, Effective]) -> frozenset[tuple[str, Any]]:
    return frozenset((p, e.partial) for p, e in eff.items() if e.partial)


def stage_tables(
    plan: FreezePlan, facts: ModelFacts
) -> tuple[list[int], list[int], dict[tuple[int, int], dict[str, Any]]]:
    """The settings in force for each number of reached step stages and epoch stages.

    Args:
        plan: the plan with its stages.
        facts: the model's tree and flags.

    Returns:
        ``(step thresholds, epoch thresholds, {(step stages, epoch stages): tables + "label"})``.

    Raises:
        ExportError: a stage switches A+B on or off.
    """
    tree = facts.tree
    steps = sorted(st.at_step for st in plan.stages if st.at_step is not None)
    epochs = sorted(st.at_epoch for st in plan.stages if st.at_epoch is not None)

    def reached(thresholds: list[int]) -> list[tuple[int, int]]:  # (count reached, a value reaching it)
        out = [(0, -1)]
        for t in sorted(set(thresholds)):
            out.append((sum(1 for s in thresholds if s <= t), t))
        return out

    base_eff = plan.resolve(tree)
    base_reparam, base_partial = _reparam_key(base_eff), _partial_key(base_eff)
    table: dict[tuple[int, int], dict[str, Any]] = {}
    for i, step in reached(steps):
        for j, epoch in reached(epochs):
            if (i, j) == (0, 0):
                continue
            at = plan.at(step, epoch)
            at_eff = at.resolve(tree)
            if _reparam_key(at_eff) != base_reparam:
                raise ExportError(
                    "a stage of this plan switches A+B on or off; the exported script supports stages "
                    "that change frozen, lr_scale, weight_decay, eval and bn_eval only: set A+B in the base rules"
                )
            if _partial_key(at_eff) != base_partial:
                raise ExportError(
                    "a stage of this plan changes sub-tensor freezing ('partial'); the exported script supports stages "
                    "that change frozen, lr_scale, weight_decay, eval and bn_eval only: set 'partial' in the base rules"
                )
            labels = [st.describe() for st in plan.stages if st.reached(step, epoch)]
            table[(i, j)] = {"label": "; ".join(labels), **plan_tables(at, facts)}
    return steps, epochs, table


def relocate_files(entries: list[tuple[str, dict[str, Any]]], base_dir: Path, script_dir: Path | None) -> None:
    """Rewrite A/B file paths so the script finds them (relative to its own folder when inside it).

    Args:
        entries: :func:`reparam_table` output, changed in place.
        base_dir: folder relative plan paths start from.
        script_dir: the script's folder, or None.

    Raises:
        ExportError: a file does not exist.
    """
    for _, spec in entries:
        for role in ("a", "b_init"):
            src = spec[role]
            if isinstance(src, Mapping) and "file" in src:
                p = Path(src["file"]).expanduser()
                if not p.is_absolute():
                    p = (base_dir / p).resolve()
                if not p.is_file():
                    raise ExportError(
                        f"A+B {'A' if role == 'a' else 'B'} file {str(p)!r} not found; export with the plan's "
                        "folder as base_dir (--plan resolves it) or fix the path in the plan"
                    )
                spec[role] = {"file": script_path(p, script_dir)}


def uses(entries: list[tuple[str, dict[str, Any]]], what: str) -> bool:
    """Whether any A+B entry uses fused mode (``"fused"``) or a ``"random"``/``"file"`` source.

    Args:
        entries: :func:`reparam_table` output.
        what: ``"fused"``, ``"random"`` or ``"file"``.

    Returns:
        True when one does.
    """
    for _, spec in entries:
        if what == "fused" and spec["mode"] == "fused":
            return True
        for role in ("a", "b_init"):
            src = spec[role]
            if isinstance(src, Mapping) and what in src:
                return True
    return False
