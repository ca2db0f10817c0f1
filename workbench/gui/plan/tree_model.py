"""``QAbstractItemModel`` over the model's module tree and the freeze plan.

The adapter only translates: rows come from the controller's
:class:`~workbench.core.models.tree.ModelTree`, check states and counts from its
:class:`~workbench.gui.plan.state.PlanState`, and ``setData`` turns a click into a plan
edit (an undo step) through the controller. After each plan change the rows whose look
changed are found by comparing per-row signatures, and one ``dataChanged`` is emitted per
run of adjacent sibling rows.
"""

from __future__ import annotations

import importlib
import json
from enum import IntEnum
from typing import Any

from PySide6.QtCore import QAbstractItemModel, QModelIndex, QObject, QPersistentModelIndex, QSortFilterProxyModel, Qt
from PySide6.QtGui import QColor, QFont, QGuiApplication, QPalette

from workbench.core.models.tree import ModuleNode
from workbench.gui.controller import Controller
from workbench.core.formatting import fmt_count, fmt_lr
from workbench.gui.plan.edits import A_PLUS_B
from workbench.gui.plan.state import NodeState, deciding_rule

__all__ = [
    "Column",
    "HEADERS",
    "ModuleFilterProxy",
    "ModuleTreeModel",
    "PATH_ROLE",
    "SEARCH_ROLE",
    "VALUE_ROLE",
    "check_value",
]

Index = QModelIndex | QPersistentModelIndex


class Column(IntEnum):
    """Columns of the module tree."""

    MODULE = 0
    TYPE = 1
    PARAMS = 2
    TRAINABLE = 3
    FROZEN = 4
    AB = 5
    BN = 6
    LR = 7


HEADERS = ["Module", "Type", "Params", "Trainable", "Frozen", "A+B", "BN eval", "LR ×"]
_HEADER_TIPS = [
    "Module path in the model (as in plans and scripts)",
    "Module class",
    "Parameters of the module and everything below it",
    "Parameters that train under the plan",
    "Frozen: the parameters do not train (partially checked: some below do)",
    "A+B: train a delta B on top of the fixed pretrained weight A (W = A + B)",
    "BatchNorm in eval mode: running statistics are used and not updated, even in model.train()",
    "Learning-rate multiplier for the module's parameters (double-click to edit; empty = inherit)",
]

#: The module path of a row (``""`` for the root).
PATH_ROLE = int(Qt.ItemDataRole.UserRole) + 1
#: Text the filter box matches: path and class name.
SEARCH_ROLE = int(Qt.ItemDataRole.UserRole) + 2
#: Raw numbers behind the Params/Trainable/LR columns.
VALUE_ROLE = int(Qt.ItemDataRole.UserRole) + 3

_CHECK = {"on": Qt.CheckState.Checked, "off": Qt.CheckState.Unchecked, "mixed": Qt.CheckState.PartiallyChecked}
_RIGHT = int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
_CENTER = int(Qt.AlignmentFlag.AlignCenter)
_LEFT = int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
_FROZEN_COLOR = QColor(61, 111, 168)


def check_value(value: Any) -> bool:
    """Whether a value given to ``setData(..., CheckStateRole)`` means "checked".

    Args:
        value: a ``Qt.CheckState``, an int, or a bool.

    Returns:
        True for Checked and PartiallyChecked.
    """
    if isinstance(value, Qt.CheckState):
        return value != Qt.CheckState.Unchecked
    if isinstance(value, bool):
        return value
    return int(value) != 0


def _muted() -> QColor:
    return QGuiApplication.palette().color(QPalette.ColorRole.PlaceholderText)


class ModuleTreeModel(QAbstractItemModel):
    """The module tree with the plan's settings, for a ``QTreeView``.

    The root module is the single top-level row. Internal ids are indices into a flat
    node list, so no Python object is stored in a ``QModelIndex``.

    Args:
        controller: owner of the tree and the plan; edits go through it.
        parent: Qt parent.
    """

    def __init__(self, controller: Controller, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._c = controller
        self._nodes: list[ModuleNode] = []
        self._ids: dict[str, int] = {}
        self._signatures: list[tuple[Any, ...]] = []
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
        self._nodes = list(tree.root.walk()) if tree is not None else []
        self._ids = {n.path: i for i, n in enumerate(self._nodes)}
        self._signatures = self._compute_signatures()
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

    def index(self, row: int, column: int, parent: Index = QModelIndex()) -> QModelIndex:
        if column < 0 or column >= len(HEADERS) or row < 0:
            return QModelIndex()
        if not parent.isValid():
            if row == 0 and self._nodes:
                return self.createIndex(0, column, 0)
            return QModelIndex()
        if parent.column() != 0:
            return QModelIndex()
        p = self._nodes[parent.internalId()]
        if row >= len(p.children):
            return QModelIndex()
        child = p.children[row]
        return self.createIndex(row, column, self._ids[child.path])

    def parent(self, index: Index = QModelIndex()) -> QModelIndex:  # type: ignore[override]
        if not index.isValid():
            return QModelIndex()
        node = self._nodes[index.internalId()]
        if node.parent is None:
            return QModelIndex()
        par = node.parent
        return self.createIndex(0 if par.parent is None else par.row, 0, self._ids[par.path])

    def rowCount(self, parent: Index = QModelIndex()) -> int:
        if not parent.isValid():
            return 1 if self._nodes else 0
        if parent.column() != 0:
            return 0
        return len(self._nodes[parent.internalId()].children)

    def columnCount(self, parent: Index = QModelIndex()) -> int:
        return len(HEADERS)

    def hasChildren(self, parent: Index = QModelIndex()) -> bool:
        return self.rowCount(parent) > 0

    # ------------------------------------------------------------------ data
    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation != Qt.Orientation.Horizontal or not 0 <= section < len(HEADERS):
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return HEADERS[section]
        if role == Qt.ItemDataRole.ToolTipRole:
            return _HEADER_TIPS[section]
        if role == Qt.ItemDataRole.TextAlignmentRole:
            if section in (Column.PARAMS, Column.TRAINABLE):
                return _RIGHT
            if section in (Column.FROZEN, Column.AB, Column.BN, Column.LR):
                return _CENTER
            return _LEFT
        return None

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        state = self._c.state
        node = self._nodes[index.internalId()]
        if state is None:
            return None
        st = state.nodes[node.path]
        col = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return self._display(node, st, col)
        if role == Qt.ItemDataRole.EditRole:
            return fmt_lr(st.lr_scale) if col == Column.LR else self._display(node, st, col)
        if role == Qt.ItemDataRole.CheckStateRole:
            return self._check(st, col)
        if role == Qt.ItemDataRole.ToolTipRole:
            return self._tooltip(node, st, col)
        if role == Qt.ItemDataRole.TextAlignmentRole:
            if col in (Column.PARAMS, Column.TRAINABLE):
                return _RIGHT
            if col == Column.LR:
                return _CENTER
            return _LEFT
        if role == Qt.ItemDataRole.ForegroundRole:
            return self._foreground(node, st, col)
        if role == Qt.ItemDataRole.FontRole:
            if col == Column.LR and node.path in state.explicit.get("lr_scale", ()):
                return self._bold
            if col == Column.MODULE and node.parent is None:
                return self._bold
            return None
        if role == PATH_ROLE:
            return node.path
        if role == SEARCH_ROLE:
            return f"{node.path} {node.type_name}"
        if role == VALUE_ROLE:
            if col == Column.PARAMS:
                return node.total_params
            if col == Column.TRAINABLE:
                return st.trainable
            if col == Column.LR:
                return st.lr_scale
        return None

    def _display(self, node: ModuleNode, st: NodeState, col: int) -> str | None:
        if col == Column.MODULE:
            return node.name
        if col == Column.TYPE:
            return node.type_name
        if col == Column.PARAMS:
            return fmt_count(node.total_params)
        if col == Column.TRAINABLE:
            return fmt_count(st.trainable)
        if col == Column.BN:
            return "auto" if st.bn is not None and st.bn_auto else ""
        if col == Column.LR:
            return fmt_lr(st.lr_scale)
        return ""

    def _check(self, st: NodeState, col: int) -> Qt.CheckState | None:
        if col == Column.FROZEN:
            return _CHECK[st.frozen]
        if col == Column.AB:
            return _CHECK[st.reparam] if st.reparam is not None else None
        if col == Column.BN:
            return _CHECK[st.bn] if st.bn is not None else None
        return None

    def _foreground(self, node: ModuleNode, st: NodeState, col: int) -> QColor | None:
        if col == Column.MODULE:
            return _FROZEN_COLOR if st.frozen == "on" and node.total_params else None
        if col == Column.TYPE:
            return _muted()
        if col == Column.PARAMS and node.total_params == 0:
            return _muted()
        if col == Column.TRAINABLE and st.trainable == 0:
            return _muted()
        if col == Column.LR and (st.lr_scale == 1.0 or st.frozen == "on"):
            return _muted()
        return None

    def _source(self, node: ModuleNode, key: str) -> str:
        tree = self._c.tree
        assert tree is not None
        i = deciding_rule(self._c.plan, tree, node.path, key)
        if i is None:
            return "default"
        sel = self._c.plan.rules[i].select
        if sel in ("", "*"):
            sel = "(root)"
        return f"set here (rule {i})" if sel == (node.path or "(root)") else f"from rule {i}: {sel}"

    def _tooltip(self, node: ModuleNode, st: NodeState, col: int) -> str | None:
        if col == Column.MODULE:
            return f"{node.path or '(root)'} — {node.type_name}"
        if col == Column.TYPE:
            return " → ".join(node.type_names) or node.type_name
        if col in (Column.PARAMS, Column.TRAINABLE):
            own = f"; own {node.own_params:,}" if node.children and node.own_params else ""
            return f"{node.total_params:,} parameters, {st.trainable:,} trainable{own}"
        if col == Column.FROZEN:
            if st.partial:
                loaded = self._c.loaded
                param = st.partial.get("param", "weight")
                name = f"{node.path}.{param}" if node.path else param
                shape = loaded.param_shapes.get(name) if loaded is not None else None
                text = _describe_extension("workbench.core.freezing.partial", st.partial, shape, node.type_name)
                return f"Partially frozen: {text} — {self._source(node, 'partial')}"
            text = {"on": "Frozen", "off": "Trains", "mixed": "Some modules below are frozen"}[st.frozen]
            if st.partial_below:
                text += " (sub-tensor freezing below)"
            return f"{text} — {self._source(node, 'frozen')}. Space toggles the selected rows."
        if col == Column.AB:
            if st.reparam is None:
                return "No parameters to reparameterize"
            text = {"on": "A+B on", "off": "A+B off", "mixed": "A+B on some modules below"}[st.reparam]
            spec = self._c.state.effective[node.path].reparam if self._c.state is not None else None
            if spec and node.own_params:
                text = _describe_extension("workbench.core.freezing.reparam", spec)
            return f"{text} — {self._source(node, 'reparam')}"
        if col == Column.BN:
            if st.bn is None:
                return None
            what = {"on": "eval mode", "off": "train mode", "mixed": "some in eval mode"}[st.bn]
            how = "follows Frozen (frozen BatchNorm runs in eval mode)" if st.bn_auto else self._source(node, "bn_eval")
            return f"BatchNorm {what} — {how}"
        if col == Column.LR:
            text = f"LR × {fmt_lr(st.lr_scale)} — {self._source(node, 'lr_scale')}"
            if st.lr_ignored:
                text += ". Every parameter below is frozen: the multiplier has no effect"
            return text
        return None

    def flags(self, index: Index) -> Qt.ItemFlag:
        if not index.isValid():
            return Qt.ItemFlag.NoItemFlags
        base = Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable
        col = index.column()
        state = self._c.state
        if state is None:
            return base
        st = state.nodes[self._nodes[index.internalId()].path]
        if col == Column.FROZEN:
            return base | Qt.ItemFlag.ItemIsUserCheckable
        if col == Column.AB:
            return base | Qt.ItemFlag.ItemIsUserCheckable if st.reparam is not None else base
        if col == Column.BN:
            return base | Qt.ItemFlag.ItemIsUserCheckable if st.bn is not None else base
        if col == Column.LR:
            return base | Qt.ItemFlag.ItemIsEditable
        return base

    def setData(self, index: Index, value: Any, role: int = Qt.ItemDataRole.EditRole) -> bool:
        """Turn an edit of a cell into a plan edit (one undo step).

        Args:
            index: the cell.
            value: a check state (Frozen, A+B, BN eval) or the LR × text/number.
            role: ``CheckStateRole`` for the check columns, ``EditRole`` for LR ×.

        Returns:
            True when the edit was understood (the plan may be unchanged).
        """
        node = self.node(index)
        if node is None or self._c.state is None:
            return False
        col = index.column()
        path = node.path
        if role == Qt.ItemDataRole.CheckStateRole:
            if not self.flags(index) & Qt.ItemFlag.ItemIsUserCheckable:
                return False
            on = check_value(value)
            if col == Column.FROZEN:
                self._c.set_value([path], "frozen", on)
            elif col == Column.AB:
                self._c.set_value([path], "reparam", dict(A_PLUS_B) if on else False)
            elif col == Column.BN:
                self._c.set_value([path], "bn_eval", on)
            else:
                return False
            return True
        if role == Qt.ItemDataRole.EditRole and col == Column.LR:
            scale = parse_lr(value)
            if scale is False:
                self._c.errorOccurred.emit(
                    "Invalid LR ×", f"{value!r} is not a learning-rate multiplier; enter a number >= 0 "
                    "(1 = base rate, 0.1 = ten times slower), or leave it empty to inherit", ""
                )
                return False
            self._c.set_value([path], "lr_scale", scale)
            return True
        return False

    # ------------------------------------------------------------------ updates
    def _compute_signatures(self) -> list[tuple[Any, ...]]:
        state = self._c.state
        if state is None:
            return [() for _ in self._nodes]
        lr_explicit = state.explicit.get("lr_scale", set())
        return [(state.nodes[n.path], n.path in lr_explicit) for n in self._nodes]

    def _on_plan_changed(self, kind: str) -> None:
        if len(self._signatures) != len(self._nodes):
            return
        new = self._compute_signatures()
        old = self._signatures
        self._signatures = new
        changed = [i for i in range(len(new)) if new[i] != old[i]]
        if not changed:
            return
        last = len(HEADERS) - 1
        by_parent: dict[int, list[int]] = {}
        for i in changed:
            n = self._nodes[i]
            pid = -1 if n.parent is None else self._ids[n.parent.path]
            by_parent.setdefault(pid, []).append(0 if n.parent is None else n.row)
        for pid, rows in by_parent.items():
            parent = QModelIndex() if pid < 0 else self.createIndex(
                0 if self._nodes[pid].parent is None else self._nodes[pid].row, 0, pid
            )
            rows.sort()
            start = prev = rows[0]
            for r in rows[1:] + [None]:  # type: ignore[list-item]
                if r is not None and r == prev + 1:
                    prev = r
                    continue
                self.dataChanged.emit(self.index(start, 0, parent), self.index(prev, last, parent))
                if r is not None:
                    start = prev = r


def parse_lr(value: Any) -> float | None | bool:
    """Read an LR × cell edit.

    Args:
        value: text or number.

    Returns:
        The multiplier, None for an empty text (inherit), or False when it is not a number >= 0.
    """
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        v = float(value)
    else:
        text = str(value).strip().lstrip("×x*").strip()
        if not text:
            return None
        try:
            v = float(text)
        except ValueError:
            return False
    if v != v or v < 0 or v == float("inf"):
        return False
    return v


def _describe_extension(module: str, spec: Any, *args: Any) -> str:
    """``describe(spec, ...)`` of an extension module, or the spec as JSON."""
    try:
        mod = importlib.import_module(module)
        return str(mod.describe(spec, *args))
    except Exception:  # noqa: BLE001 - a tooltip must never break the view
        return json.dumps(spec, default=str)


class ModuleFilterProxy(QSortFilterProxyModel):
    """Filter rows by path or class name; matching rows keep their ancestors visible."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.setRecursiveFilteringEnabled(False)  # on while a pattern is set (see set_pattern)
        self.setFilterRole(SEARCH_ROLE)
        self.setFilterCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.setFilterKeyColumn(0)
        self.setDynamicSortFilter(False)  # the searched text never changes with the plan

    def set_pattern(self, text: str) -> None:
        """Show only rows whose path or type contains ``text`` (and their ancestors).

        Recursive filtering is switched on only while a pattern is set: with it, every
        ``dataChanged`` makes the proxy re-check the changed rows (about 90 ms when freezing
        the root of a 5,000-module tree), without it about 8 ms.

        Args:
            text: the search text (empty shows everything).
        """
        text = text.strip()
        if text:
            self.setRecursiveFilteringEnabled(True)
            self.setFilterFixedString(text)
        else:
            self.setFilterFixedString("")
            self.setRecursiveFilteringEnabled(False)
