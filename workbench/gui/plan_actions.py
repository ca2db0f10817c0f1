"""The window's plan actions: what the tree's selection can do (freeze, train only, freeze
before, BatchNorm, A+B, partial freezing), the tree's context menu, filter and expansion,
and which of those actions are enabled.

:class:`PlanActions` is owned by :class:`~workbench.gui.main_window.MainWindow`: it is given
the controller and the tree's widgets, builds the plan-edit actions the window's menus and
toolbar show, and wires the tree, the filter box and the Expand box to them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QPoint, Qt, QTimer
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QComboBox, QLineEdit, QMenu, QWidget

from workbench.core.plan import partial_spec
from workbench.gui.controller import Controller
from workbench.gui.plan import edits as plan_edits
from workbench.gui.plan.partial_dialog import edit_partial
from workbench.gui.plan.reparam_dialog import edit_reparam
from workbench.gui.plan.tree_model import PATH_ROLE, ModuleFilterProxy, ModuleTreeModel
from workbench.gui.plan.tree_view import ModuleTreeView

__all__ = ["DEFAULT_DEPTH", "FILTER_AT_ONCE_BELOW", "FILTER_DELAY_MS", "PlanActions", "make_action"]

#: Tree depth expanded after a model loads (0: the root's children are visible).
DEFAULT_DEPTH = 0
#: Trees with at most this many modules filter at every keystroke.
FILTER_AT_ONCE_BELOW = 2000
#: A larger tree filters this long after the last keystroke.
FILTER_DELAY_MS = 250


def make_action(
    parent: QWidget, text: str, slot: Callable[[], Any], shortcut: QKeySequence | str | list | None = None, tip: str = ""
) -> QAction:
    """A menu action that calls ``slot`` when triggered.

    Args:
        parent: the action's owner (its shortcuts work while this widget's window is active).
        text: the menu text.
        slot: called with no arguments.
        shortcut: one key sequence, or a list of them.
        tip: the tool and status tip.

    Returns:
        The action.
    """
    act = QAction(text, parent)
    if isinstance(shortcut, list):
        act.setShortcuts(shortcut)
    elif shortcut is not None:
        act.setShortcut(QKeySequence(shortcut))
    if tip:
        act.setStatusTip(tip)
        act.setToolTip(tip)
    act.triggered.connect(lambda _checked=False: slot())
    return act


class PlanActions:
    """Plan edits from the tree.

    Args:
        parent: the window (parent of the actions, menus, dialogs and the filter's timer).
        controller: the document whose plan is edited.
        view / proxy / tree_model: the module tree, its filter and its model.
        filter_edit: the filter box.
        depth_box: the Expand box (its data: the depth, -1 for all).

    Attributes:
        act_freeze ... act_partial: the plan-edit actions of the Edit menu and the tree's
            context menu; act_find, act_expand_all, act_collapse_all, act_expand_default: the
            View menu's tree actions.
        selection_actions: the actions that need a selected module.
    """

    def __init__(
        self,
        parent: QWidget,
        controller: Controller,
        view: ModuleTreeView,
        proxy: ModuleFilterProxy,
        tree_model: ModuleTreeModel,
        filter_edit: QLineEdit,
        depth_box: QComboBox,
    ) -> None:
        self._parent = parent
        self.controller = controller
        self.view = view
        self.proxy = proxy
        self.tree_model = tree_model
        self.filter_edit = filter_edit
        self.depth_box = depth_box
        self._filter_debounce = QTimer(parent)
        self._filter_debounce.setSingleShot(True)
        self._filter_debounce.setInterval(FILTER_DELAY_MS)
        self._filter_debounce.timeout.connect(self.apply_filter)
        self._build_actions()
        view.frozenToggleRequested.connect(self.toggle_frozen)
        view.customContextMenuRequested.connect(self._context_menu)
        filter_edit.textChanged.connect(self._filter_changed)
        depth_box.activated.connect(lambda _i: self.expand_to_depth(depth_box.currentData()))

    def _build_actions(self) -> None:
        K = QKeySequence.StandardKey  # noqa: N806 - a short alias keeps the action table readable
        p = self._parent
        self.act_freeze = make_action(p, "Freeze", lambda: self._set_selected("frozen", True), None,
                                      "Freeze the selected modules and everything below them")
        self.act_unfreeze = make_action(p, "Unfreeze", lambda: self._set_selected("frozen", False), None,
                                        "Unfreeze the selected modules and everything below them")
        self.act_toggle = make_action(p, "Toggle Frozen\tSpace", lambda: self.toggle_frozen(self.view.selected_paths()))
        self.act_train_only = make_action(p, "Train Only This", self.train_only, None,
                                          "Freeze everything except the selected modules")
        self.act_freeze_before = make_action(
            p, "Freeze Everything Before This", self.freeze_before, None,
            "Freeze the modules that run before the selected one; it and what follows train (backbone/head split)",
        )
        self.act_bn_on = make_action(p, "All BatchNorm Eval On", lambda: self._bn_everywhere(True), None,
                                     "Every BatchNorm uses its running statistics (eval mode)")
        self.act_bn_off = make_action(p, "All BatchNorm Eval Off", lambda: self._bn_everywhere(False), None,
                                      "Every BatchNorm runs in train mode (updates its statistics)")
        self.act_bn_auto = make_action(p, "BatchNorm Eval Follows Frozen", lambda: self._bn_everywhere(None), None,
                                       "Frozen BatchNorm runs in eval mode, trainable BatchNorm in train mode")
        self.act_ab_on = make_action(p, "A+B On Subtree", lambda: self._set_selected("reparam", dict(plan_edits.A_PLUS_B)),
                                     None, "Train W = A + B: A fixed pretrained weight, B a trainable delta")
        self.act_ab_off = make_action(p, "A+B Off Subtree", lambda: self._set_selected("reparam", False))
        self.act_ab_settings = make_action(p, "A+B Settings…", self.edit_reparam, None,
                                           "Full or low rank (rank, alpha, dropout) and mode of A+B on the selection")
        self.act_inherit_lr = make_action(p, "Reset LR × To Inherited", lambda: self._set_selected("lr_scale", None))
        self.act_remove_unmatched = make_action(p, "Remove Rules That Match Nothing", self.remove_unmatched_rules)
        self.act_partial = make_action(p, "Partial Freezing…", self.edit_partial, None,
                                       "Freeze ranges of a parameter tensor")

        self.act_find = make_action(p, "&Find Module", self.focus_filter, QKeySequence(K.Find))
        self.act_expand_all = make_action(p, "Expand All", lambda: self.expand_to_depth(-1))
        self.act_collapse_all = make_action(p, "Collapse All", self.view.collapseAll)
        self.act_expand_default = make_action(p, "Expand Top Level", lambda: self.expand_to_depth(DEFAULT_DEPTH))
        self.selection_actions = [
            self.act_freeze, self.act_unfreeze, self.act_toggle, self.act_train_only, self.act_freeze_before,
            self.act_inherit_lr, self.act_ab_on, self.act_ab_off, self.act_ab_settings,
        ]
        self.view.selectionModel().selectionChanged.connect(self.update_actions)

    # ------------------------------------------------------------------ tree helpers
    def expand_to_depth(self, depth: int) -> None:
        """Expand the tree: 0 shows the root's children, -1 everything (the Expand box says which)."""
        self._say_depth(depth)
        self.view.collapseAll()
        if depth is None or depth < 0:
            self.view.expand_rows(self.proxy.rows_to_expand())  # a large tree in slices: clicks need not wait
        else:
            self.view.expandToDepth(depth)

    def _say_depth(self, depth: int | None) -> None:
        """Set the Expand box to what the tree shows (-1 or None: every row expanded)."""
        box = self.depth_box
        i = box.findData(-1 if depth is None or depth < 0 else depth)
        if i >= 0 and i != box.currentIndex():
            box.setCurrentIndex(i)

    def focus_filter(self) -> None:
        """Put the keyboard focus in the filter box (Ctrl+F)."""
        self.filter_edit.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.filter_edit.selectAll()

    def _filter_changed(self, text: str) -> None:
        """Typing in the filter box: small trees filter at once; a large tree filters once
        typing pauses (:data:`FILTER_DELAY_MS`), so no keystroke waits for a filter pass."""
        timer = self._filter_debounce
        tree = self.controller.tree
        if not text.strip() or tree is None or len(tree) <= FILTER_AT_ONCE_BELOW:
            timer.stop()
            self.apply_filter()
        else:
            timer.start()

    def apply_filter(self) -> None:
        """Filter the tree by the filter box's text now (shows every row for an empty text).

        The matches are expanded top down in slices (the first at once); the current row stays
        current, and in view, when the filter shows it (clearing the filter keeps the module
        found in sight)."""
        self._filter_debounce.stop()
        text = self.filter_edit.text()
        current = self.view.currentIndex()
        path = current.data(PATH_ROLE) if current.isValid() else None
        self.proxy.set_pattern(text)
        if text.strip():
            self._say_depth(-1)  # every row the filter shows is expanded
            self.view.expand_rows(self.proxy.rows_to_expand())
        else:
            self.expand_to_depth(DEFAULT_DEPTH)
        idx = self.proxy.mapFromSource(self.tree_model.index_of(path)) if path is not None else None
        if idx is not None and idx.isValid():
            self.view.setCurrentIndex(idx)
            self.view.scrollTo(idx)

    def select_path(self, path: str) -> None:
        """Select and show the row of a module (clears a filter that hides it).

        Args:
            path: module path.
        """
        src = self.tree_model.index_of(path)
        if not src.isValid():
            return
        idx = self.proxy.mapFromSource(src)
        if not idx.isValid():
            self.filter_edit.clear()
            idx = self.proxy.mapFromSource(src)
        self.view.scrollTo(idx)
        self.view.setCurrentIndex(idx)
        self.view.selectionModel().select(
            idx, self.view.selectionModel().SelectionFlag.ClearAndSelect | self.view.selectionModel().SelectionFlag.Rows
        )

    def _context_menu(self, pos: QPoint) -> None:
        menu = self.context_menu_for(pos)
        if menu is not None:
            menu.exec(self.view.viewport().mapToGlobal(pos))
            menu.deleteLater()

    def context_menu_for(self, pos: QPoint) -> QMenu | None:
        """The tree's right-click menu for a point in the view's viewport.

        Args:
            pos: viewport coordinates.

        Returns:
            The menu (the caller shows and deletes it), or None outside the rows.
        """
        idx = self.view.indexAt(pos)
        if not idx.isValid():
            return None
        menu = QMenu(self._parent)
        menu.addActions([self.act_freeze, self.act_unfreeze, self.act_train_only, self.act_freeze_before])
        menu.addSeparator()
        menu.addActions([self.act_bn_on, self.act_bn_off, self.act_bn_auto])
        menu.addSeparator()
        menu.addActions([self.act_ab_on, self.act_ab_off, self.act_ab_settings, self.act_inherit_lr, self.act_partial])
        return menu

    # ------------------------------------------------------------------ plan edits
    def _set_selected(self, key: str, value: Any) -> None:
        paths = self.view.selected_paths()
        if paths:
            self.controller.set_value(paths, key, value)

    def toggle_frozen(self, paths: list[str]) -> None:
        """Freeze the given modules, or unfreeze them when all are frozen (Space)."""
        self.controller.toggle_frozen(paths)

    def train_only(self) -> None:
        """Freeze everything except the selected modules."""
        paths = self.view.selected_paths()
        if not paths:
            return
        what = (paths[0] or "(root)") if len(paths) == 1 else f"{len(paths)} modules"
        self.controller.edit(f"Train only {what}", lambda plan, tree: plan_edits.train_only(plan, tree, paths))

    def freeze_before(self) -> None:
        """Freeze what runs before the selected module; it and what follows train."""
        paths = self.view.selected_paths()
        if len(paths) != 1 or not paths[0]:
            return
        path = paths[0]
        self.controller.edit(f"Freeze everything before {path}",
                             lambda plan, tree: plan_edits.freeze_before(plan, tree, path))

    def _bn_everywhere(self, value: bool | None) -> None:
        text = {True: "All BatchNorm eval on", False: "All BatchNorm eval off", None: "BatchNorm eval follows frozen"}
        self.controller.edit(text[value], lambda plan, tree: plan_edits.set_bn_eval_everywhere(plan, tree, value))

    def remove_unmatched_rules(self) -> None:
        """Delete rules whose selector matches no module (one undo step)."""
        self.controller.edit("Remove rules that match nothing", plan_edits.remove_unmatched_rules)

    def edit_reparam(self) -> None:
        """Open the A+B settings dialog (rank, alpha) for the selected modules."""
        paths = self.view.selected_paths()
        if paths:
            edit_reparam(self._parent, self.controller, paths)

    def edit_partial(self) -> None:
        """Open the partial-freezing dialog for the selected module."""
        paths = self.view.selected_paths()
        if len(paths) == 1:
            edit_partial(self._parent, self.controller, paths[0])

    def update_actions(self, *_: Any) -> None:
        """Enable the actions the selection and the plan allow (the selection or the plan changed)."""
        has = bool(self.view.selected_paths()) and self.controller.tree is not None
        for act in self.selection_actions:
            act.setEnabled(has)
        paths = self.view.selected_paths()
        self.act_freeze_before.setEnabled(has and len(paths) == 1 and paths[0] != "")
        self.act_partial.setEnabled(has and len(paths) == 1 and self._partial_possible(paths[0]))
        state = self.controller.state
        self.act_remove_unmatched.setEnabled(
            state is not None and any(p.field == "select" for p in state.problems)
        )

    def _partial_possible(self, path: str) -> bool:
        tree = self.controller.tree
        if tree is None or path not in tree.nodes:
            return False
        probe = {"param": "weight", "dim": 0, "trainable": [[0, 1]]}
        return partial_spec.check(probe, tree.nodes[path]) is None

