"""Editing a plan as the GUI does: put a setting in force on a subtree, keep rules in tree order."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from workbench.core.plan.keys import INHERITED_KEYS, SETTING_KEYS, Effective
from workbench.core.plan.problems import PlanProblem
from workbench.core.plan.rule import Rule, parse_rule
from workbench.core.plan.selectors import is_pattern, matcher
from workbench.core.plan.tree import ModelTree

__all__ = ["Resolver", "set_in_force", "tidy"]

#: The plan's module settings for a list of rules (its other fields fixed).
Resolver = Callable[[list[Rule]], dict[str, Effective]]


def set_in_force(
    rules: list[Rule], path: str, key: str, value: Any, tree: ModelTree, resolve: Resolver
) -> list[Rule]:
    """Set ``key`` for the subtree at ``path`` so that it is in force there, as a click does.

    Explicit settings of ``key`` on modules inside the subtree are removed, and the
    setting is placed after any rule that would otherwise override it. Rules are kept in
    tree order (parents first) where that does not change their meaning.

    Args:
        path: dotted module path (``""`` for the root).
        key: an inherited setting key (:data:`~workbench.core.plan.keys.INHERITED_KEYS`).
        value: the value; ``None`` removes the explicit setting at ``path`` (inherit).
        tree: the model's tree.
        resolve: the plan's resolution of a list of rules (for :func:`tidy`).

    Returns:
        The new rules (``rules`` is changed in place too).

    Raises:
        KeyError: no module at ``path``.
        ValueError: unknown key or invalid value.
    """
    if path not in tree.nodes:
        raise KeyError(f"no module {path!r} in the model")
    if key not in INHERITED_KEYS:
        raise ValueError(f"cannot set {key!r} by path; use one of {', '.join(INHERITED_KEYS)}")
    if value is not None:
        problems: list[PlanProblem] = []
        probe = parse_rule({"select": path or "*", key: value}, 0, None, problems)
        if probe is None:
            raise ValueError(str(problems[0]))
    sel = path or "*"
    prefix = path + "." if path else ""
    # 1. drop explicit settings of `key` inside the subtree (path rules only)
    for r in rules:
        if r.sets(key) and not is_pattern(r.select) and (
            r.select in (path, sel) or (r.select not in ("", "*") and r.select.startswith(prefix))
        ):
            r.unset(key)
    rules[:] = [r for r in rules if not r.empty or r.comment]
    if value is None:
        return rules
    # 2. put it in force: at the end (later rule wins), merged into a rule for the same path
    m = matcher(tree)
    own = next((r for r in reversed(rules) if r.select == sel), None)
    target = own
    if own is not None:
        after = rules[rules.index(own) + 1 :]
        covered = set(m.covered(sel))
        if any(r.sets(key) and covered.intersection(m.covered(r.select)) for r in after):
            target = None
    if target is None:
        target = Rule(select=sel)
        rules.append(target)
    assert probe is not None  # value is not None here: parsed above
    target.take(key, probe)
    rules[:] = tidy(rules, tree, resolve)
    return rules


def tidy(rules: list[Rule], tree: ModelTree, resolve: Resolver) -> list[Rule]:
    """Sort runs of plain-path rules into tree order, when that keeps the meaning.

    Args:
        rules: the plan's rules.
        tree: the model's tree.
        resolve: the plan's resolution of a list of rules.

    Returns:
        The sorted rules, or ``rules`` itself when sorting would change what resolves.
    """
    nodes = tree.nodes
    new: list[Rule] = []
    run: list[Rule] = []

    def flush() -> None:
        run.sort(key=lambda r: -1 if r.select in ("", "*") else nodes[r.select].order)
        new.extend(run)
        run.clear()

    for r in rules:
        if r.select in ("", "*") or (not is_pattern(r.select) and r.select in nodes):
            run.append(r)
        else:
            flush()
            new.append(r)
    flush()
    if all(a is b for a, b in zip(rules, new)) or _same_meaning_in_any_order(rules, new):
        return new  # no rule that could override another changed places with it
    return new if resolve(new) == resolve(rules) else rules


def _reaches(a: str, b: str) -> bool:
    """Whether plain-path selectors ``a`` and ``b`` reach a common module (one holds the other)."""
    if a in ("", "*") or b in ("", "*") or a == b:
        return True
    return a.startswith(b + ".") or b.startswith(a + ".")


def _same_meaning_in_any_order(old: list[Rule], new: list[Rule]) -> bool:
    """Whether reordering the plain-path rules ``old`` into ``new`` keeps the plan's meaning
    without resolving it: every two rules whose order changed set no setting in common or
    reach no module in common (a sufficient test; :func:`tidy` resolves when it fails)."""
    pos = {id(r): i for i, r in enumerate(old)}
    keys = {id(r): {k.name for k in SETTING_KEYS if r.sets(k.name)} for r in old}
    for i, a in enumerate(new):
        for b in new[i + 1:]:
            if pos[id(a)] > pos[id(b)] and keys[id(a)] & keys[id(b)] and _reaches(a.select, b.select):
                return False
    return True
