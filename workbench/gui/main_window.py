"""The main window: model source bar, module tree, cost panel, files, undo.

Layout::

    [menu: File Edit View Run Help] [model toolbar: model ▾ weights ▾ classes Load] [plan toolbar]
    ┌ filter / expand ─────────────┬ right_panel (tabs: Plan, Plots, Runs, Verify, Diagnostics) ┐
    │ module tree                  │                                                            │
    ├──────────────────────────────┴────────────────────────────────────────────────────────────┤
    │ cost panel (hidden while a run goes: the plots get its height)                             │
    │ bottom_panel: training controls (data, batch, optimizer, device · Start Pause Stop)       │
    └ status bar: model · device · parameters ───────────────────────────────────────────────────┘

``MainWindow.controller`` owns the model, tree, plan, file and undo history and emits
``planChanged(kind)`` / ``modelChanged()``; ``MainWindow.training``
(:class:`~workbench.gui.training.ui.TrainingUI`) builds the plots, runs and verify tabs, the
training controls and the Run menu, and the window places them. The window's actions are
objects it owns: ``MainWindow.documents``
(:class:`~workbench.gui.document_actions.DocumentActions`: files in and out) and
``MainWindow.plan_actions`` (:class:`~workbench.gui.plan_actions.PlanActions`: plan edits
from the tree, its filter and expansion).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QByteArray, Qt
from PySide6.QtGui import QAction, QCloseEvent, QDragEnterEvent, QDragMoveEvent, QDropEvent, QFont, QIcon, QKeySequence
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMainWindow,
    QPlainTextEdit,
    QProgressBar,
    QSizePolicy,
    QSplitter,
    QTabWidget,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from workbench.core.formatting import fmt_count
from workbench.core.models.sources import SOURCES
from workbench.core.training.config import ConfigError, TrainConfig
from workbench.gui import dialogs, torch_ready
from workbench.gui import settings as app_settings
from workbench.gui.about import show_about
from workbench.gui.advisor import add_suggest_action, open_suggest_dialog
from workbench.gui.controller import Controller
from workbench.gui.diagnostics import DiagnosticsPanel
from workbench.gui.document_actions import DocumentActions
from workbench.gui.icons import dot_icon
from workbench.gui.model_loading import default_request, load_model
from workbench.gui.model_source import ModelSourceBar
from workbench.gui.plan.activation_estimate import ActivationEstimator
from workbench.gui.plan.cost_panel import CostPanel
from workbench.gui.plan.tree_model import ModuleFilterProxy, ModuleTreeModel
from workbench.gui.plan.tree_view import ModuleTreeView
from workbench.gui.plan_actions import DEFAULT_DEPTH, PlanActions, make_action
from workbench.gui.qt_compat import protect_none_refcount
from workbench.gui.theme import add_theme_menu
from workbench.gui.training.layers_plot import LayersPlot
from workbench.gui.training.ui import TrainingUI
from workbench.gui.training.verify_panel import STATUS_COLORS
from workbench.gui.window_geometry import restore_geometry

if TYPE_CHECKING:
    from workbench.gui.advisor.dialog import SuggestDialog

__all__ = ["MainWindow"]


class MainWindow(QMainWindow):
    """The Freeze Workbench window.

    Args:
        load_default: load the start-up model (resnet18, no download) before returning,
            so the tree is never empty.
        parent: Qt parent.

    Attributes:
        controller: owner of model, tree, plan, file and undo history.
        tree_model / proxy / view: the module tree and its filter.
        right_panel: tabs on the right (``Plan``, ``Plots``, ``Runs``, ``Verify``, ``Layers``, ``Diagnostics``).
        diagnostics: the Diagnostics tab.
        bottom_panel: area under the cost panel (``bottom_panel.layout()`` is a
            ``QVBoxLayout``) holding the training controls.
        training: the training side (:class:`~workbench.gui.training.ui.TrainingUI`): plots,
            runs, verification, controls.
        documents: files in and out (:class:`~workbench.gui.document_actions.DocumentActions`).
        plan_actions: plan edits from the tree, its filter and expansion
            (:class:`~workbench.gui.plan_actions.PlanActions`).
        cost_panel: the cost panel.
        source_bar: the model source bar.
    """

    def __init__(self, *, load_default: bool = True, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        protect_none_refcount()  # before the first of many Qt calls (see qt_compat)
        self.setObjectName("MainWindow")
        self.setWindowTitle("Freeze Workbench")
        self.setAcceptDrops(True)
        self.controller = Controller(self)
        self._settings = app_settings.settings()

        self.tree_model = ModuleTreeModel(self.controller, self)
        self.proxy = ModuleFilterProxy(self)
        self.proxy.setSourceModel(self.tree_model)
        self.view = ModuleTreeView(self)
        self.view.setModel(self.proxy)

        self.filter_edit = QLineEdit(self)
        self.filter_edit.setPlaceholderText("Filter modules by path or type (Ctrl+F)")
        self.filter_edit.setClearButtonEnabled(True)
        self.depth_box = QComboBox(self)
        for label, depth in (("Top level", 0), ("2 levels", 1), ("3 levels", 2), ("All", -1)):
            self.depth_box.addItem(label, depth)
        self.depth_box.setToolTip("Expand the tree to a depth")
        self.plan_actions = PlanActions(
            self, self.controller, self.view, self.proxy, self.tree_model, self.filter_edit, self.depth_box
        )
        plan = self.plan_actions

        self.source_bar = ModelSourceBar(self)
        self.cost_panel = CostPanel(self.controller, self)
        self.cost_panel.findingActivated.connect(plan.select_path)
        self.training = TrainingUI(self.controller, self._settings, self)
        self.documents = DocumentActions(
            self, self.controller, self.source_bar, self.training.panel, self._settings, self.statusBar()
        )

        self._build_central()
        self._build_tree_loading()
        self._build_actions()
        self._build_menus()
        self._build_toolbars()
        self._build_status_bar()

        c = self.controller
        c.planChanged.connect(self._plan_changed)
        c.modelChanged.connect(self._model_changed)
        c.dirtyChanged.connect(self._update_title)
        c.pathChanged.connect(self._update_title)
        c.busyChanged.connect(self._busy_changed)
        c.errorOccurred.connect(self._show_error)
        c.undo_stack.canUndoChanged.connect(self.act_undo.setEnabled)
        c.undo_stack.canRedoChanged.connect(self.act_redo.setEnabled)
        t = self.training
        t.statusMessage.connect(self.statusBar().showMessage)
        t.runStarted.connect(self._run_started)
        t.runs.stateChanged.connect(self._collapse_cost_panel)
        t.verifyResult.connect(self._show_verify_result)
        t.moduleActivated.connect(plan.select_path)
        t.runs.moduleStatsReceived.connect(self.tree_model.set_module_stats)
        self._wire_activations()
        t.watch_with(self.diagnostics)
        self._restore_settings()
        #: Problems found at start-up (ignored settings, an unusable run store), said once.
        self.startup_notices = [
            n for n in (app_settings.settings_problem(self._settings), self.training.panel.settings_problem(),
                        self.training.store.problem()) if n
        ]
        if self.startup_notices:
            self.statusBar().showMessage("; ".join(self.startup_notices), 30000)
        if load_default:
            self.controller.set_loaded(load_model(default_request()))
        plan.update_actions()
        self._update_export_actions()
        self._update_title()

    # ------------------------------------------------------------------ building
    # ------------------------------------------------------------ activations and the Start check
    def _wire_activations(self) -> None:
        """The next run's step memory: cost panel line, row tooltips, and the Start check."""
        est = self.activations = ActivationEstimator(self.controller, self)
        panel = self.training.panel
        est.set_settings_source(self._next_run_config)
        panel.stepSetupChanged.connect(est.request)
        est.changed.connect(lambda: self.tree_model.set_row_notes(est.row_notes()))
        self.cost_panel.set_estimator(est)
        self.training.runs.preflight = self._memory_preflight
        self.training.runs.runEnded.connect(self._run_memory)

    def _run_memory(self, record: Any) -> None:
        """The cost panel's last-run line; a start the setup refused leaves it as it was."""
        if record.status != "refused":
            self.cost_panel.show_run_memory(record.summary)

    def _next_run_config(self) -> TrainConfig | None:
        panel = self.training.panel
        try:
            return panel.config()
        except ConfigError:  # e.g. no dataset folder yet: the batch, size and tokens still count
            try:
                # the chosen data's length (a JSONL file's, not synthetic tokens')
                return TrainConfig(**panel.step_setup().config_fields()).validate()
            except ConfigError:
                return None

    def _memory_preflight(self, config: TrainConfig) -> dict[str, Any] | None:
        """Before a run starts: will its batch fit the device? A confirm when not, a refusal when impossible."""
        est = self.activations.estimate(config, compute=True)
        p = est.prediction
        extra: dict[str, Any] = {}
        if p is not None:
            extra = {"predicted_peak_bytes": p.peak, "predicted_activation_bytes": p.activations}
        if est.verdict == "impossible":
            dialogs.error(self, "Cannot start training", est.warning())
            return None
        if est.verdict == "does not fit":
            answer = dialogs.ask(
                self, "Training may run out of memory", est.warning() + "\n\nStart anyway?",
                ["Start Anyway", "Cancel"], "Cancel",
            )
            if answer != "Start Anyway":
                return None
        return extra

    def _build_central(self) -> None:
        left = self.view

        self.right_panel = QTabWidget(self)
        self.right_panel.setObjectName("right_panel")
        self.plan_text = QPlainTextEdit(self)
        self.plan_text.setReadOnly(True)
        self.plan_text.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        mono = QFont("monospace")
        mono.setStyleHint(QFont.StyleHint.TypeWriter)
        self.plan_text.setFont(mono)
        self.plan_text.setToolTip("The plan file as it will be saved (read-only: edit it in the tree)")
        self.plan_summary = QLabel(self)
        self.plan_summary.setWordWrap(True)
        plan_tab = QWidget(self)
        pv = QVBoxLayout(plan_tab)
        pv.setContentsMargins(6, 6, 6, 6)
        pv.addWidget(self.plan_summary)
        pv.addWidget(self.plan_text, 1)
        self.right_panel.addTab(plan_tab, "Plan")
        for widget, title in self.training.tabs:
            self.right_panel.addTab(widget, title)
        self.layers_plot = LayersPlot(self.training.runs, self)
        self.right_panel.addTab(self.layers_plot, "Layers")
        self.right_panel.setTabToolTip(
            self.right_panel.indexOf(self.layers_plot),
            "Update/weight ratio and gradient norm of each top-level module over the run",
        )
        self.diagnostics = DiagnosticsPanel(self.controller, self.plan_actions.select_path, self)
        self.right_panel.addTab(self.diagnostics, "Diagnostics")

        self.splitter = QSplitter(Qt.Orientation.Horizontal, self)
        self.splitter.setObjectName("tree_splitter")
        self.splitter.addWidget(left)
        self.splitter.addWidget(self.right_panel)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 2)
        self.splitter.setChildrenCollapsible(False)

        self.bottom_panel = QWidget(self)
        self.bottom_panel.setObjectName("bottom_panel")
        bl = QVBoxLayout(self.bottom_panel)
        bl.setContentsMargins(0, 0, 0, 0)
        bl.addWidget(self.training.panel)

        central = QWidget(self)
        cv = QVBoxLayout(central)
        cv.setContentsMargins(6, 6, 6, 4)
        cv.setSpacing(6)
        cv.addWidget(self.splitter, 1)
        cv.addWidget(self.cost_panel)
        cv.addWidget(self.bottom_panel)
        self.setCentralWidget(central)

    def _action(
        self, text: str, slot: Callable[[], Any], shortcut: QKeySequence | str | list | None = None, tip: str = ""
    ) -> QAction:
        return make_action(self, text, slot, shortcut, tip)

    def _build_actions(self) -> None:
        K = QKeySequence.StandardKey  # noqa: N806 - a short alias keeps the action table readable
        docs = self.documents
        self.act_new = self._action("&New Plan", docs.new_plan, QKeySequence(K.New), "Start an empty plan")
        self.act_open = self._action("&Open Plan…", docs.open_plan, QKeySequence(K.Open), "Open a freeze plan (.json)")
        self.act_open_ckpt = self._action(
            "Open &Checkpoint…", docs.open_checkpoint, "Ctrl+Shift+O", "Load weights from .safetensors/.pt/.pth/.bin/.ckpt"
        )
        #: One File menu entry per model source that opens from disk (its ``browse`` row).
        self.act_open_sources: dict[str, QAction] = {
            key: self._action(row.browse.action, functools.partial(docs.open_model_path, key), None, row.browse.action_tip)
            for key, row in SOURCES.items() if row.browse is not None
        }
        self.act_save = self._action("&Save", docs.save, QKeySequence(K.Save), "Save the plan")
        self.act_save_as = self._action("Save &As…", docs.save_as, "Ctrl+Shift+S", "Save the plan under a new name")
        self.act_quit = self._action("&Quit", self.close, QKeySequence(K.Quit))
        self.act_export = self._action(
            "Plain PyTorch &Script…", docs.export_script, None, "Write a standalone script that applies the plan"
        )
        self.act_export_plan = self._action(
            "&Plan (JSON)…", docs.export_plan, None, "Write the plan with the model it was made for; the document keeps its file"
        )
        self.act_export_peft = self._action("PEFT &Adapter…", docs.export_peft)

        stack = self.controller.undo_stack
        self.act_undo = self._action("&Undo", stack.undo, QKeySequence(K.Undo))
        self.act_redo = self._action("&Redo", stack.redo, [QKeySequence("Ctrl+Shift+Z"), QKeySequence("Ctrl+Y")])
        self.act_undo.setEnabled(False)
        self.act_redo.setEnabled(False)
        stack.undoTextChanged.connect(lambda t: self.act_undo.setText(f"&Undo {t}".rstrip()))
        stack.redoTextChanged.connect(lambda t: self.act_redo.setText(f"&Redo {t}".rstrip()))

        self.act_about = self._action("&About Freeze Workbench", self.about)

    def _build_menus(self) -> None:
        mb = self.menuBar()
        p = self.plan_actions
        f = mb.addMenu("&File")
        f.addActions([self.act_new, self.act_open, self.act_open_ckpt, *self.act_open_sources.values()])
        self.recent_menu = f.addMenu("Open &Recent")
        self.recent_menu.aboutToShow.connect(lambda: self.documents.fill_recent(self.recent_menu))
        f.addSeparator()
        f.addActions([self.act_save, self.act_save_as])
        export_menu = f.addMenu("&Export")
        export_menu.addActions([self.act_export_plan, self.act_export, self.act_export_peft])
        f.addSeparator()
        f.addAction(self.act_quit)
        e = mb.addMenu("&Edit")
        e.addActions([self.act_undo, self.act_redo])
        e.addSeparator()
        e.addActions([p.act_freeze, p.act_unfreeze, p.act_toggle, p.act_train_only, p.act_freeze_before])
        e.addSeparator()
        e.addActions([p.act_bn_on, p.act_bn_off, p.act_bn_auto])
        e.addSeparator()
        e.addActions([p.act_ab_on, p.act_ab_off, p.act_ab_settings, p.act_inherit_lr, p.act_partial])
        e.addSeparator()
        e.addAction(p.act_remove_unmatched)
        self.act_suggest = add_suggest_action(self, e, self.suggest_dialog)
        #: what builds or measures the model, with its own status tip (off while there is no model)
        self._needs_model = {act: act.statusTip() for act in (self.act_export, self.act_suggest)}
        v = mb.addMenu("&View")
        v.addActions([p.act_find, p.act_expand_default, p.act_expand_all, p.act_collapse_all])
        v.addSeparator()
        self.theme_actions = add_theme_menu(v, self._settings, self)
        mb.addMenu(self.training.menu)
        self.addActions(list(self.training.actions))  # shortcuts work wherever the focus is
        h = mb.addMenu("&Help")
        h.addAction(self.act_about)

    def _build_toolbars(self) -> None:
        tb = QToolBar("Model", self)
        tb.setObjectName("model_toolbar")
        tb.setMovable(False)
        tb.addWidget(self.source_bar)
        self.addToolBar(tb)
        pt = QToolBar("Plan", self)
        pt.setObjectName("plan_toolbar")
        pt.setMovable(False)
        pt.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        pt.addActions([self.act_undo, self.act_redo])
        pt.addSeparator()
        p = self.plan_actions
        pt.addActions([p.act_freeze, p.act_unfreeze, p.act_train_only, p.act_freeze_before])
        pt.addSeparator()
        pt.addActions([p.act_bn_on, p.act_ab_on])
        pt.addSeparator()
        find = QWidget(pt)
        row = QHBoxLayout(find)
        row.setContentsMargins(6, 0, 4, 0)
        row.setSpacing(6)
        row.addWidget(self.filter_edit, 1)
        row.addWidget(QLabel("Expand", find))
        row.addWidget(self.depth_box)
        find.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self.filter_edit.setMinimumWidth(self.filter_edit.fontMetrics().horizontalAdvance("x" * 28))
        pt.addWidget(find)
        self.addToolBarBreak()
        self.addToolBar(pt)
        for act in (self.act_undo, self.act_redo):
            w = pt.widgetForAction(act)
            if w is not None:
                w.setMinimumWidth(w.fontMetrics().horizontalAdvance("Redo") + 16)
        self._plan_toolbar = pt
        # toolbar buttons show short labels; the menus keep the full ones
        self._short_labels = {
            self.act_undo: "Undo",
            self.act_redo: "Redo",
            p.act_train_only: "Train Only",
            p.act_freeze_before: "Freeze Before",
            p.act_bn_on: "BN Eval On",
            p.act_ab_on: "A+B On",
        }
        for act, label in self._short_labels.items():
            act.setIconText(label)

    def _show_device(self) -> None:
        """The status bar's device: what training picks by default (``…`` until torch is imported)."""
        known = torch_ready.known_devices()
        self.device_label.setText(f"device: {known.label() if known is not None else '…'}")

    def _build_status_bar(self) -> None:
        sb = self.statusBar()
        self.busy_label = QLabel(self)
        self.busy_bar = QProgressBar(self)
        self.busy_bar.setRange(0, 0)
        self.busy_bar.setMaximumWidth(140)
        self.busy_bar.setMaximumHeight(14)
        self.busy_label.hide()
        self.busy_bar.hide()
        self.model_label = QLabel(self)
        self.device_label = QLabel(self)
        self._show_device()
        torch_ready.notifier().ready.connect(self._show_device)
        self.params_label = QLabel(self)
        sb.addWidget(self.busy_label)
        sb.addWidget(self.busy_bar)
        sb.addPermanentWidget(self.model_label)
        sb.addPermanentWidget(self.device_label)
        sb.addPermanentWidget(self.params_label)

    # ------------------------------------------------------------------ settings
    def _restore_settings(self) -> None:
        s = self._settings
        restore_geometry(self, s.value("window/geometry"))  # only a saved geometry that fits this screen
        state = s.value("window/state")
        if isinstance(state, QByteArray) and not state.isEmpty():
            self.restoreState(state)
        split = s.value("window/splitter")
        if isinstance(split, QByteArray) and not split.isEmpty():
            self.splitter.restoreState(split)
        else:
            self.splitter.setSizes([800, 480])  # the tree with all its columns; the tabs take the rest
        opt = s.value("cost/optimizer")
        if isinstance(opt, str):
            with contextlib.suppress(ValueError):
                self.controller.set_optimizer(opt)

    def save_settings(self) -> None:
        """Write window geometry, toolbar/splitter state and the optimizer to QSettings."""
        s = self._settings
        s.setValue("window/geometry", self.saveGeometry())
        s.setValue("window/state", self.saveState())
        s.setValue("window/splitter", self.splitter.saveState())
        s.setValue("cost/optimizer", self.controller.optimizer)
        s.sync()

    # ------------------------------------------------------------------ reactions
    def _plan_changed(self, kind: str) -> None:
        c = self.controller
        text = c.plan.to_json()
        if text != self.plan_text.toPlainText():
            self.plan_text.setPlainText(text)
        if c.state is not None:
            self.plan_summary.setText(c.state.summary())
        counts = c.counts
        if counts is not None:
            self.params_label.setText(
                f"{fmt_count(counts.total)} params · {fmt_count(counts.trainable)} trainable"
            )
        self.plan_actions.update_actions()
        self._update_export_actions()

    def _update_export_actions(self) -> None:
        reason = self.documents.peft_refusal()  # off, with the reason, for a plan without low-rank A+B
        self.act_export_peft.setEnabled(not reason)
        tip = reason or "Write the plan's low-rank A+B as a PEFT LoRA adapter folder (peft.PeftModel.from_pretrained loads it)"
        self.act_export_peft.setToolTip(tip)
        self.act_export_peft.setStatusTip(tip)
        self.act_export_plan.setEnabled(self.controller.tree is not None)
        # a described tree (start-up) has no model behind it yet: what builds or measures it waits
        c = self.controller
        no_model = "" if c.model is not None else "The model is still loading" if c.busy or c.waiting else "Load a model first"
        for act, tip in self._needs_model.items():
            act.setEnabled(not no_model)
            act.setStatusTip(no_model or tip)

    def _model_changed(self) -> None:
        c = self.controller
        loaded = c.loaded
        if loaded is None:
            return
        self.model_label.setText(f"{loaded.label} · {loaded.note}")
        self.model_label.setToolTip("\n".join([loaded.note, *loaded.messages]))
        box = self.source_bar.meta_box  # a model built on meta shows as structure only
        if box.isChecked() != bool(loaded.meta):
            box.blockSignals(True)
            box.setChecked(bool(loaded.meta))
            box.blockSignals(False)
        if loaded.spec.get("source") != "checkpoint":
            self.source_bar.set_current(loaded.spec)
        elif loaded.spec.get("name"):
            self.source_bar.set_current({"name": loaded.spec["name"]})
        self.filter_edit.clear()
        self.plan_actions.expand_to_depth(DEFAULT_DEPTH)
        root = self.proxy.index(0, 0)
        if root.isValid():
            self.view.selectionModel().setCurrentIndex(root, self.view.selectionModel().SelectionFlag.NoUpdate)
        if loaded.messages:
            self.statusBar().showMessage("; ".join(loaded.messages), 15000)
        self._update_title()

    def _run_started(self) -> None:
        """Bring the plots forward when a run starts (unless the Diagnostics tab is in use)."""
        if self.right_panel.currentWidget() is not self.diagnostics:
            self.right_panel.setCurrentWidget(self.training.plots)

    def _collapse_cost_panel(self, state: str) -> None:
        """While a run goes the cost panel steps aside, so the plots get its height; it is back
        when the run ends (with the run's measured peak beside the prediction)."""
        self.cost_panel.setVisible(state == "idle")

    def _show_verify_result(self, ok: bool | None) -> None:
        index = self.right_panel.indexOf(self.training.verify)
        if ok is None:
            self.right_panel.setTabIcon(index, QIcon())
        else:
            self.right_panel.setTabIcon(index, dot_icon(STATUS_COLORS["ok" if ok else "error"], size=10))

    def _build_tree_loading(self) -> None:
        """The empty tree's loading state: what is loading, centred in the tree while no model is."""
        self.tree_loading = QLabel(self.view.viewport())
        self.tree_loading.setObjectName("tree_loading")
        self.tree_loading.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.tree_loading.setWordWrap(True)
        self.tree_loading.setStyleSheet("color: palette(mid); font-size: 13pt")
        QVBoxLayout(self.view.viewport()).addWidget(self.tree_loading)
        self.tree_loading.hide()

    def _busy_changed(self, busy: bool, text: str) -> None:
        self.tree_loading.setText(text)
        self.tree_loading.setVisible(busy and self.controller.tree is None)
        self.busy_label.setText(text)
        self.busy_label.setVisible(busy)
        self.busy_bar.setVisible(busy)
        self.source_bar.set_busy(busy)
        for act in (self.act_open, self.act_open_ckpt, *self.act_open_sources.values(), self.act_new):
            act.setEnabled(not busy)
        self._update_export_actions()

    def _show_error(self, title: str, message: str, details: str) -> None:
        dialogs.error(self, title, message, details)

    def _update_title(self, *_: Any) -> None:
        c = self.controller
        name = c.path.name if c.path else "untitled plan"
        model = c.loaded.label if c.loaded else "no model"
        self.setWindowTitle(f"{name}[*] — {model} — Freeze Workbench")
        self.setWindowModified(c.dirty)

    # ------------------------------------------------------------------ misc
    def suggest_dialog(self) -> SuggestDialog:
        """The Suggest… dialog for this window's model and training settings, its advice started."""
        return open_suggest_dialog(self.controller, self.training.panel, self)

    def about(self) -> None:
        """Show the About box (versions, PyTorch build, the device found; copyable)."""
        show_about(self)

    def closeEvent(self, event: QCloseEvent) -> None:
        if not self.documents.maybe_save():
            event.ignore()
            return
        # the activation profile first: it is cancelled at its next slice and lets go of the model
        # lock, which a run that is starting may be waiting for
        self.activations.shutdown()
        self.training.shutdown()  # stops a run within one step and joins its thread
        self.save_settings()
        self.source_bar.wait()
        self.controller.wait()
        event.accept()

    # ------------------------------------------------------------------ drag and drop
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        self.documents.drag_enter(event)

    def dragMoveEvent(self, event: QDragMoveEvent) -> None:
        self.documents.drag_move(event)

    def dropEvent(self, event: QDropEvent) -> None:
        self.documents.drop(event)
