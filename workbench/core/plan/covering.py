"""Naming sets of modules briefly on a tree (plain data, no torch).

:func:`cover_paths` names a set of modules by the highest paths that hold it
(``["layer1", "layer2"]`` rather than forty leaf paths); :func:`minimal_assignments` finds the
fewest inherited ``(path, value)`` assignments that give every module its value. Plans
captured from a model, exported scripts and findings use them.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping

from workbench.core.plan.tree import ModelTree, ModuleNode

__all__ = ["cover_paths", "minimal_assignments"]

_Missing = object()


def minimal_assignments(
    tree: ModelTree, required: Mapping[str, Hashable], default: Hashable
) -> list[tuple[str, Hashable]]:
    """The fewest ``(path, value)`` assignments, inherited by subtrees, giving every module its value.

    Assignments are applied in the returned order (parents before children); each sets the
    value of the module and its whole subtree, and a later one wins. Modules missing from
    ``required`` may end with any value.

    Args:
        tree: the model's tree.
        required: ``{module path: value}`` for the modules whose value matters.
        default: the value every module has before any assignment.

    Returns:
        ``[(path, value), ...]`` in tree order; ``""`` is the root.
    """
    values: list[Hashable] = [default]
    for v in required.values():
        if v not in values:
            values.append(v)
    order = list(tree.root.walk())  # parents first
    # cost[path][i]: fewest assignments in the subtree when the inherited value is values[i]
    cost: dict[str, list[float]] = {}
    choice: dict[str, list[int]] = {}
    for node in reversed(order):
        need = required.get(node.path, _Missing)
        own_cost = [math.inf] * len(values)
        own_choice = [0] * len(values)
        for j, v in enumerate(values):  # value the node takes
            if need is not _Missing and v != need:
                continue
            below = sum(cost[c.path][j] for c in node.children)
            for i in range(len(values)):  # inherited
                c = below + (0 if i == j else 1)
                if c < own_cost[i] or (c == own_cost[i] and j == i):
                    own_cost[i] = c
                    own_choice[i] = j
        cost[node.path] = own_cost
        choice[node.path] = own_choice
    out: list[tuple[str, Hashable]] = []
    stack: list[tuple[ModuleNode, int]] = [(tree.root, 0)]
    while stack:
        node, inherited = stack.pop()
        j = choice[node.path][inherited]
        if j != inherited:
            out.append((node.path, values[j]))
        stack.extend((c, j) for c in reversed(node.children))
    return out


def cover_paths(tree: ModelTree, members: Iterable[str], blocked: Iterable[str] = ()) -> list[str]:
    """The highest module paths whose subtrees hold members and no blocked module.

    Used to name a set of modules briefly (``["layer1", "layer2"]`` rather than forty leaf
    paths). A member whose own subtree holds a blocked module is returned as itself.

    Args:
        tree: the model's tree.
        members: paths that must be covered.
        blocked: paths that must not be covered; every other module is neutral.

    Returns:
        Paths in tree order.
    """
    member_set, blocked_set = set(members), set(blocked)
    has_member: dict[str, bool] = {}
    has_blocked: dict[str, bool] = {}
    for node in reversed(list(tree.root.walk())):
        has_member[node.path] = node.path in member_set or any(has_member[c.path] for c in node.children)
        has_blocked[node.path] = node.path in blocked_set or any(has_blocked[c.path] for c in node.children)
    out: list[str] = []
    stack = [tree.root]
    while stack:
        node = stack.pop()
        if not has_member[node.path]:
            continue
        if not has_blocked[node.path]:
            out.append(node.path)
            continue
        if node.path in member_set:
            out.append(node.path)
        stack.extend(reversed(node.children))
    return out
