"""Resolution: the settings in force per module and per parameter, from a plan's rules and a tree."""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from workbench.core.plan.fast.resolve import resolve_rules, rules_supported
from workbench.core.plan.keys import INHERITED_KEYS, PARAM_KEYS, SETTING_KEYS, Effective, cache_key, effective_from
from workbench.core.plan.layer_decay import module_scales, parameter_scales
from workbench.core.plan.rule import Rule
from workbench.core.plan.selectors import is_param_selector, matcher
from workbench.core.plan.tree import ModelTree

__all__ = ["FAST_MODULES", "effectives", "kept_paths", "resolve_modules", "resolve_params", "rule_state"]

#: Trees with at least this many modules resolve a plan of module rules alone with the fast
#: engine (:func:`~workbench.core.plan.fast.resolve.resolve_rules`; equal results, property-tested).
FAST_MODULES = 1000


def rule_state(rules: Sequence[Rule], tree: ModelTree) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """The values rules leave: per module path, and per parameter where a later
    ``param:`` rule overrides its module (a module rule after it wins again)."""
    m = matcher(tree)
    state: dict[str, dict[str, Any]] = {p: {} for p in m.paths}
    over: dict[str, dict[str, Any]] = {}
    for rule in rules:
        if is_param_selector(rule.select):
            values = {k: rule.value(k) for k in PARAM_KEYS if rule.sets(k)}
            for name in m.params(rule.select):
                over.setdefault(name, {}).update(values)
            continue
        inherited = {k: rule.value(k) for k in INHERITED_KEYS if rule.sets(k)}
        if inherited:
            covered = m.covered(rule.select)
            for p in covered:
                state[p].update(inherited)
            wins = [k for k in inherited if k in PARAM_KEYS]
            if over and wins:
                for p in covered:
                    node = tree.nodes[p]
                    for short in node.param_names:
                        o = over.get(f"{p}.{short}" if p else short)
                        if o:
                            for k in wins:
                                o.pop(k, None)
        direct = {k.name: rule.value(k.name) for k in SETTING_KEYS if not k.inherited and rule.sets(k.name)}
        if direct:
            for p in m.direct(rule.select):
                state[p].update(direct)
    return state, over


def kept_paths(rules: Sequence[Rule], unselected: str, tree: ModelTree) -> set[str]:
    """Modules no rule selects, when the plan keeps those as the model has them."""
    if unselected != "keep":
        return set()
    m = matcher(tree)
    selected: set[str] = set()
    for rule in rules:
        if is_param_selector(rule.select):
            selected.update(n.rpartition(".")[0] for n in m.params(rule.select))
        else:
            selected.update(m.covered(rule.select))
    return set(m.paths) - selected


def resolve_modules(rules: Sequence[Rule], unselected: str, lr_decay: float | None, tree: ModelTree) -> dict[str, Effective]:
    """Effective settings of every module (see :meth:`FreezePlan.resolve`).

    Args:
        rules: the plan's rules.
        unselected: ``"train"`` or ``"keep"``.
        lr_decay: layer-wise LR decay, or None.
        tree: the model's tree.

    Returns:
        ``{path: Effective}`` for every module of the tree.
    """
    if len(tree) >= FAST_MODULES and rules_supported(rules, unselected, lr_decay):
        return resolve_rules(rules, tree)
    state, _ = rule_state(rules, tree)
    if lr_decay is not None:
        for p, scale in module_scales(tree, lr_decay).items():
            state[p].setdefault("lr_scale", scale)
    return effectives(state, kept_paths(rules, unselected, tree))


def resolve_params(rules: Sequence[Rule], unselected: str, lr_decay: float | None, tree: ModelTree) -> dict[str, Effective]:
    """Effective settings of every parameter (see :meth:`FreezePlan.resolve_params`).

    Args:
        rules: the plan's rules.
        unselected: ``"train"`` or ``"keep"``.
        lr_decay: layer-wise LR decay, or None.
        tree: the model's tree.

    Returns:
        ``{canonical parameter name: Effective}`` in model order.
    """
    state, over = rule_state(rules, tree)
    scales = parameter_scales(tree, lr_decay) if lr_decay is not None else {}
    kept_modules = kept_paths(rules, unselected, tree)
    values: dict[str, dict[str, Any]] = {}
    kept: set[str] = set()
    for name in tree.param_shapes:
        owner = name.rpartition(".")[0]
        v = {**state[owner], **over.get(name, {})}
        if name in scales:
            v.setdefault("lr_scale", scales[name])
        values[name] = v
        if owner in kept_modules:
            kept.add(name)
    return effectives(values, kept)


def effectives(state: dict[str, dict[str, Any]], kept: AbstractSet[str] = frozenset()) -> dict[str, Effective]:
    """``effective_from`` of each value dict, equal settings shared; ``kept`` names those
    no rule selects under ``"unselected": "keep"``."""
    out: dict[str, Effective] = {}
    cache: dict[tuple[Any, ...], Effective] = {}
    for p, values in state.items():
        is_kept = p in kept
        key = (is_kept, *cache_key(values))
        eff = cache.get(key)
        if eff is None:
            eff = cache[key] = effective_from(values, kept=is_kept)
        out[p] = eff
    return out
