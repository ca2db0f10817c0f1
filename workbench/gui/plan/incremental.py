"""Resolve a plan on part of a tree, and find the part an edit can reach (Qt-free).

A click changes one or two rules. The modules whose settings can change are those the
changed rules reach (their selectors' matches and subtrees); every other module keeps the
rules it had, in the same order, so it keeps its settings. :func:`edit_region` finds that
part, :func:`resolve_region` resolves the plan there only, and
:class:`~workbench.gui.plan.state.PlanState` recounts those rows and their ancestors.

Both hold for plans whose settings come from module rules alone: no ``param:`` rules, no
``lr_decay`` and ``"unselected": "train"`` (:func:`supported`); for any other plan the
callers resolve the whole plan with :meth:`FreezePlan.resolve`. Equal results are the
contract, checked by a property test over random edit sequences.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from workbench.core.models.tree import ModelTree, ModuleNode
from workbench.core.plan.keys import INHERITED_KEYS, SETTING_KEYS, Effective, effective_from
from workbench.core.plan.rules import FreezePlan, Rule
from workbench.core.plan.selectors import is_param_selector, matcher

__all__ = ["edit_region", "resolve_region", "supported"]

_DIRECT_KEYS = tuple(k.name for k in SETTING_KEYS if not k.inherited)


def supported(plan: FreezePlan) -> bool:
    """Whether the plan's settings come from module rules alone (see the module doc).

    Args:
        plan: the plan.

    Returns:
        True when :func:`resolve_region` gives what :meth:`FreezePlan.resolve` gives.
    """
    return plan.lr_decay is None and plan.unselected != "keep" and not any(
        is_param_selector(r.select) for r in plan.rules
    )


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


def edit_region(old: FreezePlan, new: FreezePlan, tree: ModelTree) -> set[str] | None:
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


#: Above this many modules, :func:`resolve_region` walks each rule's reach instead of each
#: module's ancestors.
_WIDE = 2000


def _covered(tree: ModelTree, matched: Iterable[str]) -> set[str]:
    """The matched modules and their subtrees."""
    out: set[str] = set()
    for p in matched:
        if p not in out:
            out.update(tree.subtree(p))
    return out


def _chain(tree: ModelTree, path: str) -> list[str]:
    """The path and those of its ancestors, root last."""
    out = []
    node: ModuleNode | None = tree.nodes[path]
    while node is not None:
        out.append(node.path)
        node = node.parent
    return out


def resolve_region(plan: FreezePlan, tree: ModelTree, paths: Iterable[str]) -> dict[str, Effective]:
    """Effective settings of some modules, as :meth:`FreezePlan.resolve` gives them.

    Each module gets the inherited values of the rules that reach it (a match of the
    selector is the module or one of its ancestors) and the direct values of the rules that
    match it, in rule order; modules left with the same rules share one ``Effective``.

    Args:
        plan: a :func:`supported` plan.
        tree: the model's tree.
        paths: the modules.

    Returns:
        ``{path: Effective}`` for those modules.
    """
    m = matcher(tree)
    rules: list[tuple[frozenset[str], dict[str, Any], dict[str, Any]]] = []
    for rule in plan.rules:
        inherited = {k: rule.value(k) for k in INHERITED_KEYS if rule.sets(k)}
        direct = {k: rule.value(k) for k in _DIRECT_KEYS if rule.sets(k)}
        if inherited or direct:
            rules.append((frozenset(m.direct(rule.select)), inherited, direct))
    paths = list(paths)
    signatures: dict[str, list[int]] = {p: [] for p in paths}
    if len(paths) > _WIDE:  # many modules: walk each rule's reach once
        for i, (matched, inherited, direct) in enumerate(rules):
            if inherited:
                for p in (m.paths if "" in matched else _covered(tree, matched)):
                    sig = signatures.get(p)
                    if sig is not None:
                        sig.append(2 * i)
            if direct:
                for p in matched:
                    sig = signatures.get(p)
                    if sig is not None:
                        sig.append(2 * i + 1)
    else:  # a few modules: look up each one's ancestors in each rule's matches
        for path in paths:
            chain = _chain(tree, path)
            sig = signatures[path]
            for i, (matched, inherited, direct) in enumerate(rules):
                if inherited and any(p in matched for p in chain):
                    sig.append(2 * i)
                if direct and path in matched:
                    sig.append(2 * i + 1)
    out: dict[str, Effective] = {}
    shared: dict[tuple[int, ...], Effective] = {}
    for path in paths:
        key = tuple(signatures[path])
        eff = shared.get(key)
        if eff is None:
            values: dict[str, Any] = {}
            for s in key:
                _matched, inherited, direct = rules[s // 2]
                values.update(direct if s % 2 else inherited)
            eff = shared[key] = effective_from(values)
        out[path] = eff
    return out
