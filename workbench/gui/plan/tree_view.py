"""The module tree view: centred checkboxes, a number editor (LR ×), Space to toggle Frozen.

The view shows a :class:`~workbench.gui.plan.tree_model.ModuleTreeModel` (usually through a
:class:`~workbench.gui.plan.tree_model.ModuleFilterProxy`). It never edits the plan itself:
checkbox clicks become ``setData`` calls on the model, Space emits
:attr:`ModuleTreeView.frozenToggleRequested`, and the context menu shows the window's actions.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from PySide6.QtCore import (
    QAbstractItemModel,
    QAbstractProxyModel,
    QEvent,
    QMetaMethod,
    QModelIndex,
    QPersistentModelIndex,
    QPoint,
    QRect,
    QSize,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import QDoubleValidator, QKeyEvent, QMouseEvent, QPainter, QPalette, QResizeEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QHeaderView,
    QLineEdit,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionButton,
    QStyleOptionViewItem,
    QTreeView,
    QWidget,
)

from workbench.gui.plan.tree_columns import COLUMNS, Editor, column_index
from workbench.gui.plan.tree_expand import SlicedExpander
from workbench.gui.plan.tree_filter import ModuleFilterProxy
from workbench.gui.plan.tree_model import LIVE_COLUMNS, PATH_ROLE, VALUE_ROLE, ModuleTreeModel
from workbench.gui.theme import outline_dark_box

__all__ = ["EXPAND_AT_ONCE_BELOW", "FIRST_COLUMNS", "CheckDelegate", "LrDelegate", "ModuleTreeView", "NumberDelegate", "outline_dark_box"]

#: The columns shown first, in this order, whatever the width of the tree (the live columns follow
#: them while a run's numbers are shown).
FIRST_COLUMNS = ("module", "frozen", "reparam", "bn_eval")

#: Trees of up to this many modules are expanded at once; larger ones in slices from the event loop.
EXPAND_AT_ONCE_BELOW = 2000

Index = QModelIndex | QPersistentModelIndex


_SIZES: dict[int, tuple[QStyle, QSize]] = {}  # the check indicator's size per style


def _indicator_size(style: QStyle, widget: QWidget | None) -> QSize:
    """The style's check box size (asked once per style: a paint draws ~100 boxes)."""
    hit = _SIZES.get(id(style))
    if hit is not None and hit[0] is style:
        return hit[1]
    size = style.subElementRect(QStyle.SubElement.SE_CheckBoxIndicator, QStyleOptionButton(), widget).size()
    if not size.isValid() or size.isEmpty():
        size = QSize(16, 16)
    _SIZES[id(style)] = (style, size)
    return size


def _indicator_rect(option: QStyleOptionViewItem, widget: QWidget | None, centered: bool) -> QRect:
    size = _indicator_size(widget.style() if widget is not None else QApplication.style(), widget)
    r = option.rect
    y = r.top() + (r.height() - size.height()) // 2
    x = r.left() + (r.width() - size.width()) // 2 if centered else r.left() + 6
    return QRect(QPoint(x, y), size)


# Flag arithmetic done once: each enum operation is a Python call, and a paint draws ~100 boxes.
_NO_CHECK_FEATURE = ~QStyleOptionViewItem.ViewItemFeature.HasCheckIndicator
_HAS_CHECK_FEATURE = QStyleOptionViewItem.ViewItemFeature.HasCheckIndicator
_BOX_CLEAR = ~(
    QStyle.StateFlag.State_HasFocus | QStyle.StateFlag.State_On | QStyle.StateFlag.State_Off
    | QStyle.StateFlag.State_NoChange
)
_BOX_STATE = {
    int(Qt.CheckState.Checked.value): QStyle.StateFlag.State_On,
    int(Qt.CheckState.Unchecked.value): QStyle.StateFlag.State_Off,
    int(Qt.CheckState.PartiallyChecked.value): QStyle.StateFlag.State_NoChange,
}
_CHECK_ELEMENT = QStyle.PrimitiveElement.PE_IndicatorItemViewItemCheck
_ITEM_ELEMENT = QStyle.ControlElement.CE_ItemViewItem
_NOTE_ALIGN = int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)


class CheckDelegate(QStyledItemDelegate):
    """Draws a check column's box centred (or left of a short note such as ``auto``).

    A click inside the box calls ``model.setData(index, newState, CheckStateRole)``: a
    partially checked box becomes checked, a checked one unchecked.
    """

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: Index) -> None:
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)  # one multiData call: the check state and the note too
        widget = opt.widget
        style = widget.style() if widget is not None else QApplication.style()
        has_check = bool(opt.features & _HAS_CHECK_FEATURE)
        text = opt.text
        # background (selection, alternate rows) without the default check and text
        opt.features &= _NO_CHECK_FEATURE
        opt.text = ""
        style.drawControl(_ITEM_ELEMENT, opt, painter, widget)
        if not has_check:
            return
        box = QStyleOptionViewItem(opt)
        box.rect = _indicator_rect(option, widget, centered=not text)
        # the view cleared State_Enabled for a disabled cell (it reads the cell's flags)
        box.state = (box.state & _BOX_CLEAR) | _BOX_STATE[int(opt.checkState.value)]
        style.drawPrimitive(_CHECK_ELEMENT, box, painter, widget)
        outline_dark_box(painter, box)
        if text:
            r = QRect(opt.rect)
            r.setLeft(box.rect.right() + 6)
            painter.save()
            painter.setPen(opt.palette.color(QPalette.ColorRole.PlaceholderText))
            painter.drawText(r, _NOTE_ALIGN, text)
            painter.restore()

    def editorEvent(self, event: QEvent, model: QAbstractItemModel, option: QStyleOptionViewItem, index: Index) -> bool:
        flags = index.flags()
        if not (flags & Qt.ItemFlag.ItemIsUserCheckable) or not (flags & Qt.ItemFlag.ItemIsEnabled):
            return False
        state = index.data(Qt.ItemDataRole.CheckStateRole)
        if state is None:
            return False
        if event.type() in (QEvent.Type.MouseButtonPress, QEvent.Type.MouseButtonDblClick):
            assert isinstance(event, QMouseEvent)
            text = index.data(Qt.ItemDataRole.DisplayRole) or ""
            return _indicator_rect(option, option.widget, centered=not text).contains(event.position().toPoint())
        if event.type() != QEvent.Type.MouseButtonRelease:
            return False
        assert isinstance(event, QMouseEvent)
        if event.button() != Qt.MouseButton.LeftButton:
            return False
        text = index.data(Qt.ItemDataRole.DisplayRole) or ""
        if not _indicator_rect(option, option.widget, centered=not text).contains(event.position().toPoint()):
            return False
        check = Qt.CheckState(state) if not isinstance(state, Qt.CheckState) else state
        new = Qt.CheckState.Unchecked if check == Qt.CheckState.Checked else Qt.CheckState.Checked
        return model.setData(index, new, Qt.ItemDataRole.CheckStateRole)

    def sizeHint(self, option: QStyleOptionViewItem, index: Index) -> QSize:
        size = super().sizeHint(option, index)
        return QSize(max(size.width(), 28), size.height())


class NumberDelegate(QStyledItemDelegate):
    """A line editor for a numeric plan key's column (:attr:`Editor.NUMBER`, such as LR ×) that
    accepts numbers >= 0 (``0.1``, ``1e-3``) or empty (inherit); the column's key reads the text."""

    def createEditor(self, parent: QWidget, option: QStyleOptionViewItem, index: Index) -> QWidget:
        editor = QLineEdit(parent)
        validator = QDoubleValidator(0.0, 1e6, 12, editor)
        validator.setNotation(QDoubleValidator.Notation.ScientificNotation)
        editor.setValidator(validator)
        editor.setAlignment(Qt.AlignmentFlag.AlignCenter)
        editor.setPlaceholderText("inherit")
        return editor

    def setEditorData(self, editor: QWidget, index: Index) -> None:
        assert isinstance(editor, QLineEdit)
        editor.setText(str(index.data(Qt.ItemDataRole.EditRole) or ""))
        editor.selectAll()

    def setModelData(self, editor: QWidget, model: QAbstractItemModel, index: Index) -> None:
        assert isinstance(editor, QLineEdit)
        model.setData(index, editor.text(), Qt.ItemDataRole.EditRole)


#: The number editor's first name (LR × was its first column).
LrDelegate = NumberDelegate


class ModuleTreeView(QTreeView):
    """Tree view of the modules with row selection, uniform rows and fixed numeric columns.

    Args:
        parent: Qt parent.

    Signals:
        frozenToggleRequested(paths): Space was pressed on the selected rows (their module paths,
            in view order). Without a receiver, Space does what it does in a plain ``QTreeView``.
    """

    frozenToggleRequested = Signal(list)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setUniformRowHeights(True)
        self.setAlternatingRowColors(True)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.setAllColumnsShowFocus(True)
        self.setEditTriggers(
            QAbstractItemView.EditTrigger.DoubleClicked
            | QAbstractItemView.EditTrigger.EditKeyPressed
            | QAbstractItemView.EditTrigger.SelectedClicked
        )
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.setAnimated(False)
        self.setExpandsOnDoubleClick(True)
        self._delegates: dict[Editor, QStyledItemDelegate] = {
            Editor.CHECK: CheckDelegate(self), Editor.NUMBER: NumberDelegate(self),
        }
        for i, col in enumerate(COLUMNS):
            delegate = self._delegates.get(col.editor)
            if delegate is not None:
                self.setItemDelegateForColumn(i, delegate)
        # the live columns' heat colour spans the values in view: rescaled after new numbers,
        # scrolling, expanding and collapsing (at most every 100 ms)
        self._heat_timer = QTimer(self)
        self._heat_timer.setSingleShot(True)
        self._heat_timer.setInterval(100)
        self._heat_timer.timeout.connect(self.update_heat)
        self.verticalScrollBar().valueChanged.connect(self._heat_timer.start)
        self.expanded.connect(self._heat_timer.start)
        self.collapsed.connect(self._heat_timer.start)
        self.expander = SlicedExpander(self, self._view_index)

    def expand_rows(self, ids: Sequence[int] | np.ndarray) -> None:
        """Expand these rows of the tree model, top down: the first slice now, the rest from the
        event loop (:class:`~workbench.gui.plan.tree_expand.SlicedExpander`); a later call,
        collapsing or a reset cancels what is left.

        Args:
            ids: row ids of the tree model (pre-order: parents first); rows not shown are skipped.
                A tree of up to :data:`EXPAND_AT_ONCE_BELOW` modules is expanded before this returns.
        """
        source = self._tree_model()
        self.expander.start(source.expand_order(np.asarray(ids)) if source is not None else ids)
        if source is None or len(source.rows()) <= EXPAND_AT_ONCE_BELOW:
            self.expander.finish()

    def collapseAll(self) -> None:
        """Collapse every row (and stop expanding rows in slices)."""
        self.expander.cancel()
        super().collapseAll()

    def reset(self) -> None:
        """The model was reset: forget the rows left to expand."""
        self.expander.cancel()
        super().reset()

    def _view_index(self, row_id: int) -> QModelIndex:
        """The index in the view's model of a tree model's row id (invalid when not shown)."""
        model = self.model()
        if isinstance(model, ModuleFilterProxy):  # the same row ids: one look-up
            return model.index_for_id(row_id)
        source = self._tree_model()
        if source is None:
            return QModelIndex()
        return self._from_source(source.index_for_id(row_id))

    def _from_source(self, idx: QModelIndex) -> QModelIndex:
        chain: list[QAbstractProxyModel] = []
        m = self.model()
        while isinstance(m, QAbstractProxyModel):
            chain.append(m)
            m = m.sourceModel()
        for proxy in reversed(chain):
            idx = proxy.mapFromSource(idx)
        return idx

    def setModel(self, model: QAbstractItemModel | None) -> None:
        super().setModel(model)
        source = self._tree_model()
        if source is not None:
            source.liveChanged.connect(self._heat_timer.start)
            source.liveChanged.connect(self._place_live_columns)
            source.modelReset.connect(self._place_live_columns)
            source.set_expanded_test(self._path_expanded)
            source.set_rows_in_view(self._source_rows_in_view)
        self._size_columns()
        self._place_live_columns()

    def _place_live_columns(self) -> None:
        """The module names and the toggles first (Module, Frozen, A+B, BN eval: a narrow view
        keeps them in sight); while a run's numbers are shown the live columns come right after
        the toggles, without numbers they go back to the end."""
        source = self._tree_model()
        live = source is not None and source.module_stats is not None
        header = self.header()
        for n, key in enumerate(FIRST_COLUMNS):
            column = column_index(key)
            if header.visualIndex(column) != n:
                header.moveSection(header.visualIndex(column), n)
        for n, column in enumerate(LIVE_COLUMNS):
            target = len(FIRST_COLUMNS) + n if live else header.count() - len(LIVE_COLUMNS) + n
            if header.visualIndex(column) != target:
                header.moveSection(header.visualIndex(column), target)

    def _tree_model(self) -> ModuleTreeModel | None:
        m = self.model()
        while isinstance(m, QAbstractProxyModel):
            m = m.sourceModel()
        return m if isinstance(m, ModuleTreeModel) else None

    def _path_expanded(self, path: str) -> bool:
        """Whether the row of a module path is expanded here (False when filtered out)."""
        source = self._tree_model()
        if source is None:
            return False
        idx = self._from_source(source.index_of(path))
        return idx.isValid() and self.isExpanded(idx)

    def _source_rows_in_view(self) -> list[int]:
        """Row ids (in the tree model, through any proxies) of the rows in view."""
        chain: list[QAbstractProxyModel] = []
        m = self.model()
        while isinstance(m, QAbstractProxyModel):
            chain.append(m)
            m = m.sourceModel()
        out: list[int] = []
        for idx in self.visible_rows():
            for proxy in chain:
                idx = proxy.mapToSource(idx)
            if idx.isValid():
                out.append(idx.internalId())
        return out

    def visible_rows(self) -> list[QModelIndex]:
        """The first-column indexes of the rows in view, top to bottom."""
        out: list[QModelIndex] = []
        height = self.viewport().height()
        idx = self.indexAt(QPoint(1, 1))
        while idx.isValid() and self.visualRect(idx).top() < height:
            out.append(idx)
            idx = self.indexBelow(idx)
        return out

    def update_heat(self) -> None:
        """Scale the live columns' heat colour over the values in view, and repaint."""
        source = self._tree_model()
        if source is None or not LIVE_COLUMNS:
            return
        ranges: dict[int, tuple[float, float]] = {}
        rows = self.visible_rows() if source.module_stats is not None else []
        for column in LIVE_COLUMNS:
            values = [v for idx in rows if isinstance(v := idx.siblingAtColumn(column).data(VALUE_ROLE), float) and v > 0]
            if values:
                ranges[column] = (min(values), max(values))
        if source.set_heat_ranges(ranges):
            self.viewport().update()

    def _size_columns(self) -> None:
        header = self.header()
        header.setStretchLastSection(False)
        header.setMinimumSectionSize(28)
        fm = self.fontMetrics()
        pad = 22
        widths = 0
        # the module column takes the room the others leave, but never less than a typical
        # nested name (then the view scrolls sideways): see _fit_module_column
        self._module_min = fm.horizontalAdvance("layer1.0.downsample") + 3 * self.indentation() + pad
        for i, col in enumerate(COLUMNS):
            if col.width_text is None:
                self._module_column = i
                header.setSectionResizeMode(i, QHeaderView.ResizeMode.Interactive)
                continue
            w = fm.horizontalAdvance(col.width_text) + pad + col.width_pad
            header.setSectionResizeMode(i, QHeaderView.ResizeMode.Interactive)
            header.resizeSection(i, w)
            widths += w
        header.setDefaultAlignment(Qt.AlignmentFlag.AlignCenter)
        # the module names and the first columns; a narrower view scrolls sideways (the
        # window must fit a 1280 px screen whatever columns the table holds)
        self.setMinimumWidth(min(widths, fm.horizontalAdvance("x" * 36)) + fm.horizontalAdvance("layer1.0.downsample") + 40)
        self._fit_module_column()

    def _fit_module_column(self) -> None:
        """Give the module column the width the other columns leave, at least ``_module_min``."""
        column = getattr(self, "_module_column", None)
        if column is None:
            return
        header = self.header()
        others = sum(header.sectionSize(i) for i in range(header.count()) if i != column)
        header.resizeSection(column, max(self._module_min, self.viewport().width() - others))

    def resizeEvent(self, event: QResizeEvent) -> None:
        """Keep the module column filling the view as the window resizes."""
        super().resizeEvent(event)
        self._fit_module_column()

    def selected_paths(self) -> list[str]:
        """Paths of the selected rows (or the current row when nothing is selected), in view order."""
        sm = self.selectionModel()
        rows = sm.selectedRows(0) if sm is not None else []
        if not rows and self.currentIndex().isValid():
            rows = [self.currentIndex().siblingAtColumn(0)]
        out: list[str] = []
        for idx in sorted(rows, key=lambda i: self.visualRect(i).top()):
            path = idx.data(PATH_ROLE)
            if path is not None and path not in out:
                out.append(path)
        return out

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() == Qt.Key.Key_Space and not (event.modifiers() & ~Qt.KeyboardModifier.KeypadModifier):
            paths = self.selected_paths()
            if paths and self.isSignalConnected(QMetaMethod.fromSignal(self.frozenToggleRequested)):
                self.frozenToggleRequested.emit(paths)
                event.accept()
                return
        super().keyPressEvent(event)
