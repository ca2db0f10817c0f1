"""The module tree's filter: a proxy that answers a view from the shown rows' arrays.

A filter shows the rows whose path or class name contains a text, with their ancestors
(:meth:`FilterSource.search_rows`, one pass over the tree's names). The rows shown are then
laid out once, with numpy, as flat lists: the shown children of every row in order, and each
shown row's place under its parent. ``index``, ``parent``, ``rowCount`` and ``hasChildren``
are one list look-up each, so a view that lays out a row costs one call per child.

Qt's ``QSortFilterProxyModel`` asked the filter about every child of each row it mapped, and
it maps every row the view lays out (the view asks whether each row has children): on an
expanded 60,000-module tree the first screen of a filter cost a filter question per sibling of
every row laid out, each one a call into Python. The rows of the proxy and of the tree model
share their internal ids (the tree model's row ids), so mapping an index is ``createIndex``
with the same id, and a cell's data, flags and edits go to the tree model with the proxy's
own index (the tree model reads only the id and the column).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
from PySide6.QtCore import (
    QAbstractItemModel,
    QAbstractProxyModel,
    QModelIndex,
    QModelRoleData,
    QModelRoleDataSpan,
    QObject,
    QPersistentModelIndex,
    Qt,
)

__all__ = ["FilterSource", "ModuleFilterProxy", "ShownRows", "shown_rows"]

Index = QModelIndex | QPersistentModelIndex

#: The invalid index Qt passes for "no parent" (one shared default).
_ROOT = QModelIndex()


class FilterSource(Protocol):
    """What the filter needs of the tree model (:class:`~workbench.gui.plan.tree_model.ModuleTreeModel`)."""

    def rows(self) -> Sequence[Any]:
        """The rows in pre-order (a new list after each reload)."""
        ...

    def parent_ids(self) -> np.ndarray:
        """The parent's row id of each row (-1 for the root)."""
        ...

    def search_rows(self, text: str) -> np.ndarray:
        """A bool per row: shown by a filter for ``text`` (matches and their ancestors)."""
        ...

    def index_for_id(self, row_id: int, column: int = 0) -> QModelIndex:
        """The tree model's index of a row id."""
        ...


class ShownRows:
    """The rows a filter shows, laid out for a view: plain lists, one look-up per question.

    Args:
        parents: the parent's row id of each row (-1 for the root), pre-order.
        shown: a bool per row (each shown row's ancestors shown too), or None for every row.
    """

    __slots__ = ("first", "kids", "place", "root")

    def __init__(self, parents: np.ndarray, shown: np.ndarray | None) -> None:
        n = len(parents)
        ids = np.arange(1, n, dtype=np.int64) if shown is None else np.flatnonzero(shown[1:]) + 1
        par = parents[ids]
        order = np.argsort(par, kind="stable")  # pre-order: a row's children keep their order
        kids = ids[order]
        first = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(par, minlength=n), out=first[1:])
        place = np.full(n, -1, dtype=np.int64)
        place[kids] = np.arange(len(kids), dtype=np.int64) - first[par[order]]
        self.root = n > 0 and (shown is None or bool(shown[0]))
        if self.root:
            place[0] = 0
        #: Shown row ids grouped by parent: the children of ``p`` are ``kids[first[p]:first[p + 1]]``.
        self.kids: list[int] = kids.tolist()
        self.first: list[int] = first.tolist()
        #: The row under its parent of each shown row id (-1: not shown).
        self.place: list[int] = place.tolist()

    def children(self, p: int) -> list[int]:
        """The shown children of row ``p``, in order."""
        return self.kids[self.first[p]:self.first[p + 1]]


def shown_rows(parents: np.ndarray, shown: np.ndarray | None = None) -> ShownRows:
    """Lay out the rows a filter shows (see :class:`ShownRows`).

    Args:
        parents: the parent's row id of each row (-1 for the root), pre-order.
        shown: a bool per row, each shown row's ancestors shown too; None: every row.

    Returns:
        The layout.
    """
    return ShownRows(np.asarray(parents, dtype=np.int64), shown)


class ModuleFilterProxy(QAbstractProxyModel):
    """Filter rows by path or class name; matching rows keep their ancestors visible.

    The source is a :class:`~workbench.gui.plan.tree_model.ModuleTreeModel` (anything with the
    methods of :class:`FilterSource`); it may only reset (a new model) and announce data changes,
    which this proxy passes on for the rows it shows.
    """

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._pattern = ""
        self._tree: Any = None  # the source model (a FilterSource)
        self._columns = 0
        self._shown: np.ndarray | None = None  # a bool per row, or None: every row
        self._rows = shown_rows(np.zeros(0, dtype=np.int64))
        self._all: tuple[Any, ShownRows] | None = None  # (the source's row list, its unfiltered layout)
        self._up: list[int] = []  # parent row id per row id

    # ------------------------------------------------------------------ the filter
    def set_pattern(self, text: str) -> None:
        """Show only rows whose path or type contains ``text`` (and their ancestors).

        The proxy is reset (its views collapse and lose their selection) rather than
        re-filtered: re-filtering an expanded 50,000-row tree inserts or removes rows under
        each expanded parent, one view update at a time (seconds); after a reset the views ask
        only about the rows they show. Expand the matches with :meth:`rows_to_expand`.

        Args:
            text: the search text, any case (empty shows everything).
        """
        self.beginResetModel()
        self._pattern = text.strip()
        self._lay_out()
        self.endResetModel()

    @property
    def pattern(self) -> str:
        """The search text in force (stripped; empty: every row)."""
        return self._pattern

    def rows_to_expand(self) -> np.ndarray:
        """The rows to expand to show every row the filter shows: the ancestors of the matches
        (without a pattern: every row with children).

        Returns:
            Row ids of the tree model, sorted (pre-order: parents first).
        """
        src = self._tree
        if src is None or not self._up:
            return np.zeros(0, dtype=np.int64)
        parents = src.parent_ids()
        if self._shown is not None:
            parents = parents[np.flatnonzero(self._shown)]
        return np.unique(parents[parents >= 0])

    def index_for_id(self, row_id: int, column: int = 0) -> QModelIndex:
        """The index of a tree model's row id (invalid when the filter hides it).

        Args:
            row_id: the row's id in the tree model (pre-order).
            column: the column.
        """
        place = self._rows.place
        if not 0 <= row_id < len(place) or place[row_id] < 0 or not 0 <= column < self._columns:
            return QModelIndex()
        return self.createIndex(place[row_id], column, row_id)

    def _lay_out(self) -> None:
        src = self._tree
        rows = src.rows() if src is not None else []
        if not rows:
            self._shown, self._rows, self._up = None, shown_rows(np.zeros(0, dtype=np.int64)), []
            return
        parents = src.parent_ids()
        self._up = parents.tolist()
        if self._pattern:
            self._shown = src.search_rows(self._pattern)
            self._rows = shown_rows(parents, self._shown)
            return
        self._shown = None
        if self._all is None or self._all[0] is not rows:  # kept: clearing a filter lays out nothing
            self._all = (rows, shown_rows(parents))
        self._rows = self._all[1]

    # ------------------------------------------------------------------ the source
    def setSourceModel(self, sourceModel: QAbstractItemModel) -> None:  # noqa: N803 - Qt's name
        """Filter this tree model's rows.

        Args:
            sourceModel: a :class:`~workbench.gui.plan.tree_model.ModuleTreeModel`.

        Raises:
            TypeError: for a model without the tree model's row arrays.
        """
        if not all(hasattr(sourceModel, name) for name in ("rows", "parent_ids", "search_rows", "index_for_id")):
            raise TypeError(f"the module filter shows a module tree model, not a {type(sourceModel).__name__}")
        self.beginResetModel()
        old = self.sourceModel()
        if old is not None:
            for signal, slot in self._wiring(old):
                signal.disconnect(slot)
        super().setSourceModel(sourceModel)
        self._tree = sourceModel
        self._columns = sourceModel.columnCount()
        self._all = None
        for signal, slot in self._wiring(sourceModel):
            signal.connect(slot)
        self._lay_out()
        self.endResetModel()

    def _wiring(self, src: QAbstractItemModel) -> list[tuple[Any, Any]]:
        return [
            (src.modelAboutToBeReset, self._source_resetting),
            (src.modelReset, self._source_reset),
            (src.dataChanged, self._source_data_changed),
            (src.headerDataChanged, self.headerDataChanged),
        ]

    def _source_resetting(self) -> None:
        self.beginResetModel()

    def _source_reset(self) -> None:
        self._all = None
        self._lay_out()
        self.endResetModel()

    def _source_data_changed(self, top_left: QModelIndex, bottom_right: QModelIndex, roles: Sequence[int] = ()) -> None:
        """Pass on a change of sibling rows ``top_left`` to ``bottom_right``: the rows shown among them."""
        if not top_left.isValid() or not bottom_right.isValid():
            return
        first, last = top_left.internalId(), bottom_right.internalId()
        p = self._up[first] if first < len(self._up) else -1
        if p < 0:
            if not self._rows.root:
                return
            a = b = 0
            first = last = 0
        else:
            kids = self._rows.children(p)  # ascending ids: the shown siblings between the two
            lo, hi = bisect_left(kids, first), bisect_right(kids, last)
            if lo >= hi:
                return
            a, b, first, last = lo, hi - 1, kids[lo], kids[hi - 1]
        self.dataChanged.emit(
            self.createIndex(a, top_left.column(), first), self.createIndex(b, bottom_right.column(), last), list(roles)
        )

    # ------------------------------------------------------------------ structure
    def index(self, row: int, column: int, parent: Index = _ROOT) -> QModelIndex:
        if row < 0 or column < 0 or column >= self._columns:
            return QModelIndex()
        if not parent.isValid():
            return self.createIndex(0, column, 0) if row == 0 and self._rows.root else QModelIndex()
        if parent.column() != 0:
            return QModelIndex()
        p = parent.internalId()
        rows = self._rows
        k = rows.first[p] + row
        if k >= rows.first[p + 1]:
            return QModelIndex()
        return self.createIndex(row, column, rows.kids[k])

    def parent(self, index: Index = _ROOT) -> QModelIndex:  # type: ignore[override]
        if not index.isValid():
            return QModelIndex()
        p = self._up[index.internalId()]
        if p < 0:
            return QModelIndex()
        return self.createIndex(self._rows.place[p], 0, p)

    def sibling(self, row: int, column: int, index: Index) -> QModelIndex:
        if index.isValid() and row == index.row() and 0 <= column < self._columns:
            return self.createIndex(row, column, index.internalId())
        return self.index(row, column, self.parent(index))

    def rowCount(self, parent: Index = _ROOT) -> int:
        if not parent.isValid():
            return 1 if self._rows.root else 0
        if parent.column() != 0:
            return 0
        first = self._rows.first
        p = parent.internalId()
        return first[p + 1] - first[p]

    def hasChildren(self, parent: Index = _ROOT) -> bool:
        return self.rowCount(parent) > 0

    def columnCount(self, parent: Index = _ROOT) -> int:
        return self._columns

    def canFetchMore(self, parent: Index) -> bool:
        return False

    def mapToSource(self, proxyIndex: Index) -> QModelIndex:  # noqa: N803 - Qt's name
        if not proxyIndex.isValid() or self._tree is None:
            return QModelIndex()
        return self._tree.index_for_id(proxyIndex.internalId(), proxyIndex.column())

    def mapFromSource(self, sourceIndex: Index) -> QModelIndex:  # noqa: N803 - Qt's name
        if not sourceIndex.isValid():
            return QModelIndex()
        return self.index_for_id(sourceIndex.internalId(), sourceIndex.column())

    # ------------------------------------------------------------------ cells (the tree model's, by id)
    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        return self._tree.data(index, role) if self._tree is not None else None

    def multiData(self, index: Index, roleDataSpan: QModelRoleDataSpan | QModelRoleData) -> None:  # noqa: N803 - Qt's name
        """Every role asked for one cell, from the tree model in one call.

        Args:
            index: a cell of this proxy.
            roleDataSpan: the roles asked for; each gets its value (or stays empty).
        """
        if self._tree is not None:
            self._tree.multiData(index, roleDataSpan)

    def flags(self, index: Index) -> Qt.ItemFlag:
        return self._tree.flags(index) if self._tree is not None else Qt.ItemFlag.NoItemFlags

    def setData(self, index: Index, value: Any, role: int = Qt.ItemDataRole.EditRole) -> bool:
        return bool(self._tree.setData(index, value, role)) if self._tree is not None else False

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        return self._tree.headerData(section, orientation, role) if self._tree is not None else None
