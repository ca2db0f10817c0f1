"""A tree as flat pre-order arrays (Qt-free).

A click on the root of a 50,000-module tree must not build 50,000 Python objects. In the
flat layout row ``i`` is the ``i``-th module in pre-order (0 is the root), ``parent[i]`` its
parent's row and ``end[i]`` one past its last descendant, so a subtree is the slice
``[i, end[i])`` and subtree sums are two lookups in a cumulative sum. :class:`LazyMap` gives a
``{path: value}`` view whose values are made from their row when first read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np

from workbench.core.plan.tree import ModelTree, ModuleNode

__all__ = ["Layout", "LazyMap", "layout", "subtree_sums"]

V = TypeVar("V")


@dataclass
class Layout:
    """The static shape of a tree in pre-order (see the module doc).

    Attributes:
        nodes: the tree's nodes in pre-order.
        paths: their paths.
        index: ``{path: row}``.
        parent: parent row per row (-1 for the root).
        end: one past the last row of each row's subtree.
        own / total: parameter elements of each module's own parameters / of its subtree.
        is_bn: BatchNorm modules.
        bn_total: BatchNorm modules in each subtree.
    """

    nodes: list[ModuleNode]
    paths: list[str]
    index: dict[str, int]
    parent: np.ndarray
    end: np.ndarray
    own: np.ndarray
    total: np.ndarray
    is_bn: np.ndarray
    bn_total: np.ndarray
    obytes: dict[int, tuple[Any, np.ndarray]] = field(default_factory=dict)

    def own_bytes(self, own_bytes: Mapping[str, int] | None) -> np.ndarray:
        """Bytes of each row's own parameters (4 per element where ``own_bytes`` has none).

        Args:
            own_bytes: ``{path: bytes}``, or None.

        Returns:
            An int64 array, one value per row (computed once per mapping).
        """
        key = id(own_bytes)
        hit = self.obytes.get(key)
        if hit is not None and hit[0] is own_bytes:
            return hit[1]
        if own_bytes:
            out = np.fromiter((own_bytes.get(p, 4 * int(o)) for p, o in zip(self.paths, self.own)),
                              dtype=np.int64, count=len(self.paths))
        else:
            out = 4 * self.own
        if len(self.obytes) >= 4:
            self.obytes.clear()
        self.obytes[key] = (own_bytes, out)
        return out


_LAYOUTS: dict[int, tuple[ModelTree, Layout]] = {}


def layout(tree: ModelTree) -> Layout:
    """The flat layout of ``tree``, built once per tree (a few kept).

    Args:
        tree: the model's tree.

    Returns:
        Its :class:`Layout`.
    """
    hit = _LAYOUTS.get(id(tree))
    if hit is not None and hit[0] is tree:
        return hit[1]
    nodes = list(tree.root.walk())
    n = len(nodes)
    index = {nd.path: i for i, nd in enumerate(nodes)}
    parents = [index[nd.parent.path] if nd.parent is not None else -1 for nd in nodes]
    ends = list(range(1, n + 1))
    for i in range(n - 1, 0, -1):  # children before their parent: a parent ends where its last child does
        j = parents[i]
        if ends[i] > ends[j]:
            ends[j] = ends[i]
    parent = np.array(parents, dtype=np.int64)
    end = np.array(ends, dtype=np.int64)
    own = np.fromiter((nd.own_params for nd in nodes), dtype=np.int64, count=n)
    is_bn = np.fromiter((nd.is_bn for nd in nodes), dtype=bool, count=n)
    lay = Layout(
        nodes=nodes, paths=[nd.path for nd in nodes], index=index, parent=parent, end=end, own=own,
        total=subtree_sums(own, end), is_bn=is_bn, bn_total=subtree_sums(is_bn.astype(np.int64), end),
    )
    if len(_LAYOUTS) >= 4:
        _LAYOUTS.clear()
    _LAYOUTS[id(tree)] = (tree, lay)
    return lay


def subtree_sums(values: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Sum of ``values`` over each row's subtree.

    Args:
        values: one value (or one row of values) per tree row, in pre-order.
        end: :attr:`Layout.end`.

    Returns:
        An array shaped like ``values``.
    """
    n = values.shape[0]
    c = np.zeros((n + 1, *values.shape[1:]), dtype=values.dtype)
    np.cumsum(values, axis=0, out=c[1:])
    out: np.ndarray = c[end] - c[:n]
    return out


class LazyMap(Mapping[str, V], Generic[V]):
    """``{path: value}`` whose values are made on first read from their row (and kept).

    Args:
        lay: the tree's layout.
        make: ``make(row) -> value``.
    """

    def __init__(self, lay: Layout, make: Callable[[int], V]) -> None:
        self._lay = lay
        self._make = make
        self._made: dict[int, V] = {}

    def __getitem__(self, path: str) -> V:
        return self.at(self._lay.index[path])

    def at(self, row: int) -> V:
        """The value of a pre-order row."""
        v = self._made.get(row)
        if v is None:
            v = self._made[row] = self._make(row)
        return v

    def __contains__(self, path: object) -> bool:
        return path in self._lay.index

    def __iter__(self) -> Iterator[str]:
        return iter(self._lay.paths)

    def __len__(self) -> int:
        return len(self._lay.paths)
