"""``QAbstractItemModel`` over the model's module tree and the freeze plan.

The adapter only translates: rows come from the controller's
:class:`~workbench.core.models.tree.ModelTree`, check states and counts from its
:class:`~workbench.gui.plan.state.PlanState`, columns from the table
:data:`~workbench.gui.plan.tree_columns.COLUMNS` (``data``, ``flags``, ``setData`` and
``headerData`` only look a column up there), and ``setData`` turns a click into a plan
edit (an undo step) through the controller. After each plan change the rows whose look
may have changed come from the state (the rows an edit reached, or the rows whose subtree
sums or settings differ between two states, compared as arrays), and one ``dataChanged`` is
emitted per run of adjacent sibling rows. When a change reaches rows under many parents (a
click on the root of a large tree), only the changed rows in view are announced: the view
says which rows it shows (:meth:`ModuleTreeModel.set_rows_in_view`) and reads every other row
afresh when it paints it (a view keeps no copy of a row's data). Without that, one range per
expanded row is announced (collapsed rows are read when they are expanded).

Live columns (gradient norm, update/weight ratio) read the latest
:class:`~workbench.core.training.module_stats.ModuleStats` given to
:meth:`ModuleTreeModel.set_module_stats`; updates are applied at most once per
:data:`LIVE_INTERVAL_MS` and announced over the live columns only, for the rows in view (or
one range per expanded parent; announcing collapsed rows would make a filter proxy map every
collapsed subtree: seconds on a 50,000-module model). The view says which rows are expanded
(:meth:`ModuleTreeModel.set_expanded_test`) and sets the heat colour's range (the values in
view).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np
from PySide6.QtCore import (
    QAbstractItemModel,
    QModelIndex,
    QModelRoleData,
    QModelRoleDataSpan,
    QObject,
    QPersistentModelIndex,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import QFont

from workbench.core.plan.fast.layout import layout
from workbench.core.plan.tree import ModuleNode
from workbench.gui.controller import Controller
from workbench.gui.plan.state import PlanState
from workbench.gui.plan.tree_columns import COLUMNS, HEADERS, Column, check_value, heat_color, parse_lr
from workbench.gui.plan.tree_filter import ModuleFilterProxy

__all__ = [
    "EXPAND_BLOCK",
    "Column",
    "HEADERS",
    "LIVE_COLUMNS",
    "LIVE_INTERVAL_MS",
    "MATCH_CACHE",
    "SEARCH_TEXT_ABOVE",
    "SEARCH_TEXT_AFTER_MS",
    "ModuleFilterProxy",
    "ModuleTreeModel",
    "PATH_ROLE",
    "SEARCH_ROLE",
    "VALUE_ROLE",
    "check_value",
    "parse_lr",
]

Index = QModelIndex | QPersistentModelIndex

#: The module path of a row (``""`` for the root).
PATH_ROLE = int(Qt.ItemDataRole.UserRole) + 1
#: Text the filter box matches: path and class name.
SEARCH_ROLE = int(Qt.ItemDataRole.UserRole) + 2
#: Raw numbers behind the Params/Trainable/LR columns.
VALUE_ROLE = int(Qt.ItemDataRole.UserRole) + 3


#: Positions of the live columns in :data:`COLUMNS`.
#: A plan change that touches rows under more parents than this announces the rows in view only.
ANNOUNCE_ALL_BELOW = 64
LIVE_COLUMNS: tuple[int, ...] = tuple(i for i, c in enumerate(COLUMNS) if c.live is not None)
#: The largest subtree (rows) that :meth:`ModuleTreeModel.expand_order` lets a view lay out at once.
EXPAND_BLOCK = 2000
#: Filter patterns whose matches are kept (Backspace, and typing that extends a pattern).
MATCH_CACHE = 32
#: A tree of more modules than this makes its filter's text once the window is idle after a load
#: (milliseconds after the load: :data:`SEARCH_TEXT_AFTER_MS`), not at the first filter.
SEARCH_TEXT_ABOVE = 2000
SEARCH_TEXT_AFTER_MS = 300
#: Minimum milliseconds between two updates of the live columns.
LIVE_INTERVAL_MS = 1000
_LIVE_ROLES = [
    int(Qt.ItemDataRole.DisplayRole), int(Qt.ItemDataRole.BackgroundRole), int(Qt.ItemDataRole.ToolTipRole), VALUE_ROLE,
]

#: The invalid index Qt passes for "no parent" (one shared default).
_ROOT = QModelIndex()

# Roles as plain ints: ``data`` and ``multiData`` run once per painted cell and role, and reading
# ``Qt.ItemDataRole.X`` goes through the enum's attribute lookup each time.
_DISPLAY = int(Qt.ItemDataRole.DisplayRole)
_EDIT = int(Qt.ItemDataRole.EditRole)
_TOOLTIP = int(Qt.ItemDataRole.ToolTipRole)
_FONT = int(Qt.ItemDataRole.FontRole)
_ALIGN = int(Qt.ItemDataRole.TextAlignmentRole)
_BACKGROUND = int(Qt.ItemDataRole.BackgroundRole)
_FOREGROUND = int(Qt.ItemDataRole.ForegroundRole)
_CHECK_ROLE = int(Qt.ItemDataRole.CheckStateRole)
_BASE_FLAGS = Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable
_CHECKABLE_FLAGS = _BASE_FLAGS | Qt.ItemFlag.ItemIsUserCheckable
_EDITABLE_FLAGS = _BASE_FLAGS | Qt.ItemFlag.ItemIsEditable

class ModuleTreeModel(QAbstractItemModel):
    """The module tree with the plan's settings, for a ``QTreeView``.

    The root module is the single top-level row. Internal ids are indices into a flat
    node list, so no Python object is stored in a ``QModelIndex``.

    Signals:
        liveChanged(): the live columns show new numbers (the view rescales their heat colour).

    Args:
        controller: owner of the tree and the plan; edits go through it.
        parent: Qt parent.
    """

    liveChanged = Signal()

    def __init__(self, controller: Controller, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._stats: Any = None  # the ModuleStats shown
        self._pending_stats: Any = None
        self._has_pending = False
        self._heat: dict[int, tuple[float, float]] = {}  # live column -> log10 range in view
        self._is_expanded: Callable[[str], bool] | None = None
        self._rows_in_view: Callable[[], Iterable[int]] | None = None
        self._notes: Mapping[str, str] = {}
        self._live_timer = QTimer(self)
        self._live_timer.setSingleShot(True)
        self._live_timer.setInterval(LIVE_INTERVAL_MS)
        self._live_timer.timeout.connect(self._apply_pending)
        self._search_timer = QTimer(self)
        self._search_timer.setSingleShot(True)
        self._search_timer.setInterval(SEARCH_TEXT_AFTER_MS)
        self._search_timer.timeout.connect(self.search_text)
        self._c = controller
        self._nodes: list[ModuleNode] = []
        self._ids: dict[str, int] = {}
        self._kids: list[list[int]] = []  # child row ids per row id
        self._row: list[int] = []  # row under the parent per row id (0 for the root)
        self._up: list[int] = []  # parent's row id per row id (-1 for the root)
        self._parent: Any = None  # parent row per row (numpy)
        self._end: Any = None  # one past the last row of each row's subtree (numpy)
        self._search: list[str] | None = None  # "path type" per row, case-folded, for the filter
        self._matches: dict[str, np.ndarray] = {}  # case-folded pattern -> row ids it matches
        #: Rows the last filter match tested (0: a kept pattern; fewer than the tree: a narrower one).
        self.searched = 0
        self._signed: PlanState | None = None  # the state the signatures are of
        self._bold = QFont()
        self._bold.setBold(True)
        controller.modelChanged.connect(self.reload)
        controller.planChanged.connect(self._on_plan_changed)
        self.reload()

    # ------------------------------------------------------------------ structure
    def reload(self) -> None:
        """Rebuild all rows from the controller's tree (a new model was loaded)."""
        self.beginResetModel()
        tree = self._c.tree
        lay = layout(tree) if tree is not None else None
        self._nodes = lay.nodes if lay is not None else []
        self._ids = lay.index if lay is not None else {}
        self._parent = lay.parent if lay is not None else None
        self._end = lay.end if lay is not None else None
        self._kids = [[] for _ in self._nodes]
        self._up = self._parent.tolist() if self._parent is not None else []
        for i, pid in enumerate(self._up):
            if pid >= 0:
                self._kids[pid].append(i)
        self._row = [n.row if n.parent is not None else 0 for n in self._nodes]
        self._search = None
        self._matches = {}
        if len(self._nodes) > SEARCH_TEXT_ABOVE:
            self._search_timer.start()
        else:
            self._search_timer.stop()
        self._signed = self._c.state
        self._stats, self._pending_stats, self._has_pending = None, None, False
        self.endResetModel()

    def node(self, index: Index) -> ModuleNode | None:
        """The tree node of an index (None for the invisible root index)."""
        if not index.isValid():
            return None
        return self._nodes[index.internalId()]

    def path(self, index: Index) -> str | None:
        """The module path of an index."""
        n = self.node(index)
        return n.path if n is not None else None

    def index_of(self, path: str, column: int = 0) -> QModelIndex:
        """The index of the row for ``path`` (invalid when there is none)."""
        i = self._ids.get(path)
        if i is None:
            return QModelIndex()
        return self.createIndex(self._nodes[i].row, column, i)

    def index_for_id(self, row_id: int, column: int = 0) -> QModelIndex:
        """The index of a row id (:meth:`row_id`; invalid when there is none).

        Args:
            row_id: the row's id (its place in :meth:`rows`).
            column: the column.
        """
        if not 0 <= row_id < len(self._nodes) or not 0 <= column < len(COLUMNS):
            return QModelIndex()
        return self.createIndex(self._row[row_id], column, row_id)

    def rows(self) -> list[ModuleNode]:
        """The rows in pre-order (row ids index it); a new list after each :meth:`reload`."""
        return self._nodes

    def parent_ids(self) -> np.ndarray:
        """The parent's row id of each row (-1 for the root), by row id."""
        return self._parent if self._parent is not None else np.zeros(0, dtype=np.int64)

    def expand_order(self, ids: np.ndarray, block: int = EXPAND_BLOCK) -> np.ndarray:
        """The order to expand rows in so that no single expansion lays out many rows.

        A view lays out a row's children when the row is expanded while shown, and only stores
        the wish while one of its ancestors is collapsed (after looking for the row among the
        rows it shows); laying out a row shifts every row below it. So rows whose subtree is
        larger than ``block`` come first, top down (each shows its children only); then the
        rows inside the subtrees of at most ``block`` rows, stored cheaply while the view shows
        few rows; then the top row of each such subtree, which lays it out at once.

        Args:
            ids: row ids to expand, sorted, closed under ancestors (each row's parent is in
                it, but for the root).
            block: the largest subtree laid out at once.

        Returns:
            The same ids in that order.
        """
        ids = np.asarray(ids, dtype=np.int64)
        if not len(ids) or self._end is None:
            return ids
        small = (self._end[ids] - ids) <= block
        rows = ids[small]
        tops = np.zeros(len(rows), dtype=bool)  # a block's top: a small row whose parent is not small
        end = -1
        for k, r in enumerate(rows.tolist()):  # a block's rows follow its top, up to its end
            if r >= end:
                tops[k], end = True, int(self._end[r])
        return np.concatenate([ids[~small], rows[~tops], rows[tops]])

    def row_id(self, row: int, parent: Index = _ROOT) -> int | None:
        """The id of the ``row``-th child of ``parent`` (None when there is none)."""
        if not parent.isValid():
            return 0 if row == 0 and self._nodes else None
        kids = self._kids[parent.internalId()]
        return kids[row] if 0 <= row < len(kids) else None

    def search_rows(self, text: str) -> np.ndarray:
        """Which rows a filter for ``text`` shows: a match in the path or class name (any case)
        and every ancestor of one.

        Args:
            text: the search text (empty: every row).

        Returns:
            A numpy bool per row id.
        """
        n = len(self._nodes)
        if not text:
            return np.ones(n, dtype=bool)
        shown = np.zeros(n, dtype=bool)
        ids = self._direct_matches(text.casefold())
        shown[ids] = True
        parent = self._parent
        while len(ids):  # ancestors, one level per pass
            up = parent[ids]
            up = up[up >= 0]
            ids = np.unique(up[~shown[up]])
            shown[ids] = True
        return shown

    def search_text(self) -> list[str]:
        """The text the filter looks in, per row id: ``"path type"``, case-folded.

        Made once per model: at the first filter, or once the window is idle after the load of
        a tree of more than :data:`SEARCH_TEXT_ABOVE` modules (so the first filter does not wait
        for it).

        Returns:
            One string per row (the model's list: do not change it).
        """
        self._search_timer.stop()
        if self._search is None:
            self._search = [f"{nd.path} {nd.type_name}".casefold() for nd in self._nodes]
        return self._search

    def _direct_matches(self, needle: str) -> np.ndarray:
        """Row ids whose "path type" text contains ``needle`` (case-folded), sorted.

        A pattern's matches are kept (the last :data:`MATCH_CACHE` patterns): Backspace finds
        its pattern's matches again, and a pattern that contains a kept one (typing extends
        it) is looked for among that one's matches only. :attr:`searched` says how many rows
        the last call tested."""
        hit = self._matches.get(needle)
        if hit is not None:
            self._matches[needle] = self._matches.pop(needle)  # most recently used last
            self.searched = 0
            return hit
        search = self.search_text()
        base: np.ndarray | None = None
        for prev, ids in self._matches.items():
            if prev in needle and (base is None or len(ids) < len(base)):
                base = ids
        if base is None:
            hit = np.array([i for i, s in enumerate(search) if needle in s], dtype=np.int64)
            self.searched = len(search)
        else:
            hit = np.array([i for i in base.tolist() if needle in search[i]], dtype=np.int64)
            self.searched = len(base)
        if len(self._matches) >= MATCH_CACHE:
            del self._matches[next(iter(self._matches))]
        self._matches[needle] = hit
        return hit

    def index(self, row: int, column: int, parent: Index = _ROOT) -> QModelIndex:
        if column < 0 or column >= len(COLUMNS) or row < 0:
            return QModelIndex()
        if not parent.isValid():
            if row == 0 and self._nodes:
                return self.createIndex(0, column, 0)
            return QModelIndex()
        if parent.column() != 0:
            return QModelIndex()
        kids = self._kids[parent.internalId()]
        if row >= len(kids):
            return QModelIndex()
        return self.createIndex(row, column, kids[row])

    def parent(self, index: Index = _ROOT) -> QModelIndex:  # type: ignore[override]
        if not index.isValid():
            return QModelIndex()
        pid = self._up[index.internalId()]
        if pid < 0:
            return QModelIndex()
        return self.createIndex(self._row[pid], 0, pid)

    def rowCount(self, parent: Index = _ROOT) -> int:
        if not parent.isValid():
            return 1 if self._nodes else 0
        if parent.column() != 0:
            return 0
        return len(self._kids[parent.internalId()])

    def columnCount(self, parent: Index = _ROOT) -> int:
        return len(COLUMNS)

    def hasChildren(self, parent: Index = _ROOT) -> bool:
        return self.rowCount(parent) > 0

    # ------------------------------------------------------------------ data
    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation != Qt.Orientation.Horizontal or not 0 <= section < len(COLUMNS):
            return None
        col = COLUMNS[section]
        if role == Qt.ItemDataRole.DisplayRole:
            return col.header
        if role == Qt.ItemDataRole.ToolTipRole:
            return col.tooltip
        if role == Qt.ItemDataRole.TextAlignmentRole:
            return col.header_alignment
        return None

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        state = self._c.state
        if state is None:
            return None
        i = index.internalId()
        column = index.column()
        return self._cell(self._nodes[i], state.nodes.at(i), COLUMNS[column], column, int(role))

    def multiData(self, index: Index, roleDataSpan: QModelRoleDataSpan | QModelRoleData) -> None:  # noqa: N803 - Qt's name
        """Every role a view asks for one cell, in one call (a view's item delegate asks for
        seven roles per cell it paints; one ``data`` call each crosses into Python seven times).

        Args:
            index: the cell.
            roleDataSpan: the roles asked for; each gets its value (or stays empty).
        """
        items: Any = (roleDataSpan,) if isinstance(roleDataSpan, QModelRoleData) else roleDataSpan
        state = self._c.state
        if not index.isValid() or state is None:
            for k in range(len(items)):
                items[k].clearData()
            return
        i = index.internalId()
        column = index.column()
        node, st, col = self._nodes[i], state.nodes.at(i), COLUMNS[column]
        cell = self._cell
        for k in range(len(items)):
            item = items[k]
            value = cell(node, st, col, column, item.role())
            if value is not None:
                item.setData(value)
            elif item.data() is not None:  # a view hands empty items; clear one that is not
                item.clearData()

    def _cell(self, node: ModuleNode, st: Any, col: Any, column: int, role: int) -> Any:
        """One role of one cell (``data`` and ``multiData``)."""
        if col.live is not None:
            return self._live_data(col, column, node, st.trainable, role)
        if role in (_DISPLAY, _EDIT):
            return col.display(node, st)
        if role == _CHECK_ROLE:
            return col.check(st) if col.check is not None else None
        if role == _ALIGN:
            return col.alignment
        if role == _FOREGROUND:
            return col.foreground(node, st) if col.foreground is not None else None
        if role == _FONT:
            return self._bold if col.bold is not None and col.bold(self._c, node) else None
        if role == _TOOLTIP:
            tip = col.tip(self._c, node, st) if col.tip is not None else None
            note = self._notes.get(node.path) if column == 0 else None
            return f"{tip}\n{note}" if tip and note else (tip or note)
        if role == PATH_ROLE:
            return node.path
        if role == SEARCH_ROLE:
            return f"{node.path} {node.type_name}"
        if role == VALUE_ROLE:
            return col.value(node, st) if col.value is not None else None
        return None

    def flags(self, index: Index) -> Qt.ItemFlag:
        if not index.isValid():
            return Qt.ItemFlag.NoItemFlags
        state = self._c.state
        if state is None:
            return _BASE_FLAGS
        col = COLUMNS[index.column()]
        if col.toggle and col.check is not None:
            if col.check(state.nodes.at(index.internalId())) is not None:
                return _CHECKABLE_FLAGS
            return _BASE_FLAGS
        if col.editable:
            return _EDITABLE_FLAGS
        return _BASE_FLAGS

    def setData(self, index: Index, value: Any, role: int = Qt.ItemDataRole.EditRole) -> bool:
        """Turn an edit of a cell into a plan edit (one undo step).

        Args:
            index: the cell.
            value: a check state (toggle columns: Frozen, A+B, BN eval) or the text entered
                (edited columns: LR ×).
            role: ``CheckStateRole`` for the toggle columns, ``EditRole`` for the edited ones.

        Returns:
            True when the edit was understood (the plan may be unchanged).
        """
        node = self.node(index)
        if node is None or self._c.state is None:
            return False
        col = COLUMNS[index.column()]
        if col.set_data is None:
            return False
        if role == Qt.ItemDataRole.CheckStateRole and col.toggle:
            if not self.flags(index) & Qt.ItemFlag.ItemIsUserCheckable:
                return False
            return col.set_data(self._c, node.path, check_value(value))
        if role == Qt.ItemDataRole.EditRole and col.editable:
            return col.set_data(self._c, node.path, value)
        return False

    def set_row_notes(self, notes: Mapping[str, str]) -> None:
        """Add a line per module to the Module column's tooltip (output shapes, activations).

        Args:
            notes: ``{module path: text}``, read when a tooltip shows (a mapping that makes
                each text on demand is kept as it is); an empty mapping removes them.
        """
        self._notes = notes

    # ------------------------------------------------------------------ live columns
    @property
    def module_stats(self) -> Any:
        """The :class:`~workbench.core.training.module_stats.ModuleStats` shown, or None."""
        return self._stats

    def set_module_stats(self, stats: Any) -> None:
        """Show a run's latest per-module statistics (None clears the live columns).

        The first update after a quiet second is applied at once, later ones at most once per
        :data:`LIVE_INTERVAL_MS` (the latest wins).

        Args:
            stats: a :class:`~workbench.core.training.module_stats.ModuleStats`, or None.
        """
        if self._live_timer.isActive():
            self._pending_stats, self._has_pending = stats, True
            return
        self._show_stats(stats)
        self._live_timer.start()

    def set_expanded_test(self, is_expanded: Callable[[str], bool] | None) -> None:
        """Say how to tell whether a row is expanded in the view (live updates skip hidden rows).

        Args:
            is_expanded: ``is_expanded(path) -> bool``, asked only for rows with children
                whose ancestors are all expanded; None: every row counts as expanded.
        """
        self._is_expanded = is_expanded

    def set_rows_in_view(self, rows_in_view: Callable[[], Iterable[int]] | None) -> None:
        """Say how to learn which rows the view shows: a change under many parents is then
        announced for those rows only (the view reads the others when it paints them).

        Args:
            rows_in_view: ``rows_in_view() -> row ids`` (:meth:`row_id`) of the rows painted
                now; None: announce every expanded parent's children.
        """
        self._rows_in_view = rows_in_view

    def _in_view(self) -> np.ndarray | None:
        """Ids of the rows in view, sorted (None when no view says)."""
        if self._rows_in_view is None:
            return None
        ids = np.fromiter(self._rows_in_view(), dtype=np.int64)
        return np.unique(ids[(ids >= 0) & (ids < len(self._nodes))])

    def _announce(self, ids: np.ndarray, first: int, last: int, roles: list[int] | None = None) -> None:
        """One ``dataChanged`` per run of adjacent sibling rows among ``ids`` (pre-order row ids),
        over the columns ``first`` to ``last``."""
        by_parent: dict[int, list[int]] = {}
        for i, pid in zip(ids.tolist(), self._parent[ids].tolist()):
            by_parent.setdefault(pid, []).append(0 if pid < 0 else self._nodes[i].row)
        extra = [] if roles is None else [roles]
        for pid, rows in by_parent.items():
            parent = QModelIndex() if pid < 0 else self.createIndex(
                0 if self._nodes[pid].parent is None else self._nodes[pid].row, 0, pid
            )
            rows.sort()
            start = prev = rows[0]
            for r in [*rows[1:], None]:
                if r is not None and r == prev + 1:
                    prev = r
                    continue
                self.dataChanged.emit(self.index(start, first, parent), self.index(prev, last, parent), *extra)
                if r is not None:
                    start = prev = r

    def _apply_pending(self) -> None:
        if self._has_pending:
            stats, self._pending_stats, self._has_pending = self._pending_stats, None, False
            self._show_stats(stats)
            self._live_timer.start()

    def _show_stats(self, stats: Any) -> None:
        self._stats = stats
        if not LIVE_COLUMNS or not self._nodes:
            return
        first, last = LIVE_COLUMNS[0], LIVE_COLUMNS[-1]
        in_view = self._in_view()
        if in_view is not None:
            self._announce(in_view, first, last, _LIVE_ROLES)
            self.liveChanged.emit()
            return
        self.dataChanged.emit(self.index(0, first), self.index(0, last), _LIVE_ROLES)
        for pid in self._expanded_parents():
            node = self._nodes[pid]
            parent = self.createIndex(0 if node.parent is None else node.row, 0, pid)
            self.dataChanged.emit(
                self.index(0, first, parent), self.index(len(node.children) - 1, last, parent), _LIVE_ROLES
            )
        self.liveChanged.emit()

    def _expanded_parents(self) -> Iterator[int]:
        """Ids of the rows with children that are expanded, with all their ancestors, top down."""
        test = self._is_expanded
        stack = [0] if self._nodes[0].children else []
        while stack:
            i = stack.pop()
            node = self._nodes[i]
            if test is not None and not test(node.path):
                continue
            yield i
            stack.extend(self._ids[ch.path] for ch in reversed(node.children) if ch.children)

    def set_heat_ranges(self, ranges: dict[int, tuple[float, float]]) -> bool:
        """Set the values that map to the coolest and warmest heat colour, per live column.

        Args:
            ranges: ``{column: (lowest, highest)}`` of the positive values in view.

        Returns:
            True when a range changed (the view repaints).
        """
        logs = {c: (math.log10(lo), math.log10(hi)) for c, (lo, hi) in ranges.items() if lo > 0 and hi > 0}
        if logs == self._heat:
            return False
        self._heat = logs
        return True

    def _live_data(self, col: Any, column: int, node: ModuleNode, trainable: int, role: int) -> Any:
        stats = self._stats
        value = col.live(stats, node.path) if stats is not None and trainable else None
        if role == _DISPLAY:
            return col.live_format(value) if value is not None else ""
        if role == VALUE_ROLE:
            return value
        if role == _ALIGN:
            return col.alignment
        if role == _BACKGROUND:
            rng = self._heat.get(column)
            if value is None or value <= 0 or rng is None:
                return None
            lo, hi = rng
            return heat_color((math.log10(value) - lo) / (hi - lo) if hi > lo else 1.0)
        if role == _TOOLTIP:
            if stats is None:
                return f"{col.tooltip}. Start a run to measure it."
            if not trainable:
                return f"{col.tooltip}. Frozen: nothing trains here."
            shown = col.live_format(value) if value is not None else "not measured"
            return f"{col.header} {shown} at step {stats.step} — {col.tooltip}"
        if role == PATH_ROLE:
            return node.path
        if role == SEARCH_ROLE:
            return f"{node.path} {node.type_name}"
        return None

    # ------------------------------------------------------------------ updates
    def changed_rows(self, old: PlanState | None, new: PlanState | None) -> np.ndarray:
        """Rows whose look may differ between two states of the loaded tree.

        Args:
            old: the state the rows show now (None: nothing shown yet).
            new: the state in force.

        Returns:
            Pre-order row numbers, sorted (int array).
        """
        if new is None:
            return np.zeros(0, dtype=np.int64)
        if old is None or old.tree is not new.tree or new.tree is not self._c.tree:
            return np.arange(len(self._nodes), dtype=np.int64)
        if new.changed is not None and new.base is old:
            rows = np.asarray(new.changed, dtype=np.int64)  # an edit: only the rows it reached can differ
        else:
            rows = new.rows_differing(old)
        bold = [self._ids[p] for key, paths in new.explicit.items()  # bold where a plain-path rule sets a key
                for p in paths.symmetric_difference(old.explicit.get(key, set())) if p in self._ids]
        if not bold:
            return rows
        mask = np.zeros(len(self._nodes), dtype=bool)
        mask[rows] = True
        mask[bold] = True
        return np.flatnonzero(mask)

    def _on_plan_changed(self, kind: str) -> None:
        state = self._c.state
        if state is not None and state.tree is not self._c.tree:
            return
        changed = self.changed_rows(self._signed, state)
        self._signed = state
        if not len(changed) or not self._nodes:
            return
        last = len(COLUMNS) - 1
        parents = self._parent[changed]
        expanded = self._is_expanded
        distinct = np.zeros(len(self._nodes) + 1, dtype=bool)
        distinct[parents + 1] = True
        many = int(distinct.sum()) > ANNOUNCE_ALL_BELOW
        in_view = self._in_view() if many else None
        if in_view is not None:
            # a change under many parents: announce the changed rows in view only; the view
            # reads the others when it paints them (each announcement costs the view and the
            # filter proxy dozens of calls into this model: seconds on an expanded 50,000-row tree)
            mask = np.zeros(len(self._nodes), dtype=bool)
            mask[changed] = True
            self._announce(in_view[mask[in_view]], 0, last)
            return
        if expanded is not None and many:
            # most of a large tree changed: announce the rows in view, the children of each
            # expanded row whole (collapsed rows are read when they are expanded; each
            # announcement costs the view and the filter proxy dozens of calls into this model)
            if changed[0] == 0:
                self.dataChanged.emit(self.index(0, 0), self.index(0, last))
            for pid in self._expanded_parents():
                node = self._nodes[pid]
                parent = self.createIndex(0 if node.parent is None else node.row, 0, pid)
                self.dataChanged.emit(self.index(0, 0, parent), self.index(len(node.children) - 1, last, parent))
            return
        self._announce(changed, 0, last)

