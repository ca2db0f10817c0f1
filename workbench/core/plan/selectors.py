"""Selectors: which modules a rule's ``select`` reaches (paths, globs, ``type:ClassName``, ``*``),
and which parameters a ``param:GLOB`` selector reaches."""

from __future__ import annotations

import fnmatch
from typing import TYPE_CHECKING

from workbench.core.plan.tree import ModelTree
from workbench.core.suggest import close_matches

if TYPE_CHECKING:  # pragma: no cover - typing only
    from torch import nn

__all__ = ["PARAM_PREFIX", "Matcher", "as_tree", "is_param_selector", "is_pattern", "matcher", "select_paths"]

#: Prefix of a parameter selector: ``"param:*.bias"`` (fnmatch on dotted parameter names).
PARAM_PREFIX = "param:"


def is_param_selector(select: str) -> bool:
    """Whether a selector picks parameters (``"param:GLOB"``) rather than modules.

    Args:
        select: the selector.

    Returns:
        True for ``"param:..."``.
    """
    return select.startswith(PARAM_PREFIX)


def is_pattern(select: str) -> bool:
    """Whether a selector is a glob or ``type:`` selector (it may match many modules).

    Args:
        select: the selector.

    Returns:
        False for ``"*"``, ``""`` and plain dotted paths.
    """
    return select.startswith(("type:", PARAM_PREFIX)) or (select not in ("", "*") and any(c in select for c in "*?["))


class Matcher:
    """Resolves selectors against a tree (cached per tree)."""

    def __init__(self, tree: ModelTree) -> None:
        self.tree = tree
        self._paths = tree.paths()
        self._cache: dict[str, list[str]] = {}
        self._param_cache: dict[str, list[str]] = {}

    @property
    def paths(self) -> list[str]:
        """Every module path of the tree, in tree order."""
        return self._paths

    def direct(self, select: str) -> list[str]:
        """Modules the selector matches directly."""
        hit = self._cache.get(select)
        if hit is not None:
            return hit
        tree = self.tree
        if select in ("", "*"):
            hit = [""]
        elif is_param_selector(select):
            hit = []
        elif select.startswith("type:"):
            cls = select[5:].strip()
            hit = [p for p in self._paths if cls in tree.nodes[p].type_names]
        elif select in tree.nodes:
            hit = [select]
        elif any(c in select for c in "*?["):
            hit = [p for p in self._paths if p and fnmatch.fnmatchcase(p, select)]
        else:
            hit = []
        self._cache[select] = hit
        return hit

    def params(self, select: str) -> list[str]:
        """Parameter names (canonical, in model order) a ``param:GLOB`` selector matches."""
        hit = self._param_cache.get(select)
        if hit is None:
            glob = select[len(PARAM_PREFIX):].strip() if is_param_selector(select) else ""
            hit = [n for n in self.tree.param_shapes if glob and fnmatch.fnmatchcase(n, glob)]
            self._param_cache[select] = hit
        return hit

    def covered(self, select: str) -> list[str]:
        """Modules the selector reaches: the matches and their subtrees (no duplicates)."""
        direct = self.direct(select)
        if direct == [""]:
            return self._paths
        seen: dict[str, None] = {}
        for p in direct:
            if p in seen:
                continue
            for q in self.tree.subtree(p):
                seen[q] = None
        return list(seen)

    def suggest(self, select: str) -> list[str]:
        """Close module paths (``type:`` names, ``param:`` names) for a selector that matches nothing."""
        if is_param_selector(select):
            names = list(self.tree.param_shapes)
            glob = select[len(PARAM_PREFIX):]
            return [PARAM_PREFIX + n for n in close_matches(glob, names, n=3, cutoff=0.6)]
        if select.startswith("type:"):
            names = sorted({n.type_name for n in self.tree.nodes.values()})
            return ["type:" + n for n in close_matches(select[5:], names, n=3, cutoff=0.5)]
        return close_matches(select, [p for p in self._paths if p], n=3, cutoff=0.6)


_MATCHERS: dict[int, tuple[ModelTree, Matcher]] = {}


def matcher(tree: ModelTree) -> Matcher:
    """The (cached) matcher of a tree."""
    hit = _MATCHERS.get(id(tree))
    if hit is None or hit[0] is not tree:
        if len(_MATCHERS) > 8:
            _MATCHERS.clear()
        hit = (tree, Matcher(tree))
        _MATCHERS[id(tree)] = hit
    return hit[1]


def select_paths(selector: str, model_or_tree: nn.Module | ModelTree, *, subtree: bool = True) -> list[str]:
    """Module paths a selector reaches.

    Args:
        selector: ``"*"``, a dotted path, a glob, or ``type:ClassName``.
        model_or_tree: the model or its tree.
        subtree: include the subtrees of the matched modules (as inherited keys do).

    Returns:
        Paths in tree order (empty when nothing matches).
    """
    m = matcher(as_tree(model_or_tree))
    return m.covered(selector) if subtree else list(m.direct(selector))


def as_tree(model_or_tree: nn.Module | ModelTree) -> ModelTree:
    """The tree of a model (a tree is returned as it is).

    Raises:
        TypeError: neither a module nor a tree.
    """
    if isinstance(model_or_tree, ModelTree):
        return model_or_tree
    from torch import nn  # a model comes with torch imported; a tree needs none

    if isinstance(model_or_tree, nn.Module):
        return ModelTree.from_model(model_or_tree)
    raise TypeError(f"expected an nn.Module or a ModelTree, got {type(model_or_tree).__name__}")
