"""Find the part of a tree a plan edit can reach (Qt-free).

A click changes one or two rules. The modules whose settings can change are those the
changed rules reach (their selectors' matches and subtrees); every other module keeps the
rules it had, in the same order, so it keeps its settings. :func:`edit_region` finds that
part, :func:`~workbench.gui.plan.flat.resolve_groups` resolves the plan there only, and
:class:`~workbench.gui.plan.state.PlanState` recounts those rows (and the subtree sums).

Both hold for plans whose settings come from module rules alone: no ``param:`` rules, no
``lr_decay`` and ``"unselected": "train"`` (:func:`supported`); for any other plan the
callers resolve the whole plan with :meth:`FreezePlan.resolve`. Equal results are the
contract, checked by a property test over random edit sequences.
"""

from __future__ import annotations

from collections.abc import Sequence

from workbench.core.models.tree import ModelTree
from workbench.core.plan.rules import FreezePlan, Rule
from workbench.core.plan.selectors import is_param_selector, matcher

__all__ = ["edit_region", "supported"]


def supported(plan: FreezePlan) -> bool:
    """Whether the plan's settings come from module rules alone (see the module doc).

    Args:
        plan: the plan.

    Returns:
        True when :func:`~workbench.gui.plan.flat.resolve_groups` gives what
        :meth:`FreezePlan.resolve` gives.
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
