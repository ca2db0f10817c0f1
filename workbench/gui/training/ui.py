"""The training side of the window: plots, runs, verification, controls and the Run menu, wired up.

:class:`TrainingUI` builds the training widgets and connects them to one
:class:`~workbench.gui.training.run_controller.RunController`, which owns the runs. It does not
place them: it exposes them and the window puts them where it wants:

- :attr:`TrainingUI.tabs`: the **Plots** (:class:`~workbench.gui.training.plots.PlotsPanel`),
  **Runs** (:class:`~workbench.gui.training.runs_tab.RunsPanel`) and **Verify**
  (:class:`~workbench.gui.training.verify_panel.VerifyPanel`) tabs, with their titles;
- :attr:`TrainingUI.panel`: the training controls (:class:`~workbench.gui.training.panel.TrainingPanel`);
- :attr:`TrainingUI.menu` and :attr:`TrainingUI.actions`: the **Run** menu (Start F5, Pause F6,
  Stop Shift+F5) and its actions, whose shortcuts should work wherever the focus is.

What the window shows in reaction (the status bar, the tab to bring forward, the Verify tab's
icon, the module to select) travels as signals.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QSettings, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu, QWidget

from workbench.core.plan.rules import FreezePlan, PlanError
from workbench.core.runs.record import RunRecord
from workbench.core.runs.store import RunStore
from workbench.gui import dialogs
from workbench.gui.controller import Controller
from workbench.gui.diagnostics import DiagnosticsPanel
from workbench.gui.training.panel import TrainingPanel
from workbench.gui.training.plots import PlotsPanel
from workbench.gui.training.run_controller import RunController
from workbench.gui.training.runs_tab import RunsPanel, default_runs_dir, export_run_csv
from workbench.gui.training.verify_panel import VerifyPanel

__all__ = ["TrainingUI"]

#: How long a status-bar message of a run stays (milliseconds).
RUN_MESSAGE_MS = 8000
#: How long a status-bar message of an export stays (milliseconds).
EXPORT_MESSAGE_MS = 5000


class TrainingUI(QObject):
    """The training side of the window.

    Args:
        controller: owner of model, tree and plan (runs train its model under its plan).
        settings: where the training controls keep their values (None: not kept).
        parent: the widget that owns the training widgets and the dialogs they open.
        runs_dir: where runs are kept (default: :func:`~workbench.gui.training.runs_tab.default_runs_dir`).

    Attributes:
        runs: the :class:`RunController` (start/stop, records, store).
        plots / runs_panel / verify: the tabs' widgets.
        panel: the training controls.
        menu: the Run menu.

    Signals:
        statusMessage(text, ms): a line for the status bar, shown for ``ms`` milliseconds.
        runStarted(): a run started; its plots are reset (the window may bring them forward).
        verifyResult(ok): the verification of the run that ended passed (True) or not (False);
            None when a run starts (no result yet).
        moduleActivated(path): the user picked a module of the loaded model (Verify tab).
    """

    statusMessage = Signal(str, int)
    runStarted = Signal()
    verifyResult = Signal(object)
    moduleActivated = Signal(str)

    def __init__(
        self,
        controller: Controller,
        settings: QSettings | None,
        parent: QWidget,
        runs_dir: str | Path | None = None,
    ) -> None:
        super().__init__(parent)
        self._owner = parent
        self._c = controller
        self.store = RunStore(runs_dir or default_runs_dir())
        self.runs = RunController(controller, self.store, self)
        self.plots = PlotsPanel(parent)
        self._starting: RunRecord | None = None  # asked for, not set up yet
        self._total: int | None = None
        self._settings = settings
        self._restore_plot_view()
        self.plots.viewChanged.connect(self._save_plot_view)
        self.runs_panel = RunsPanel(self.runs, parent)
        self.verify = VerifyPanel(parent)
        self.panel = TrainingPanel(controller, self.runs, settings, parent)
        self.menu = QMenu("&Run", parent)
        self.menu.addActions(list(self.actions))

        r = self.runs
        r.runStarted.connect(self._run_started)
        r.prepared.connect(self._prepared)
        r.metricsReceived.connect(self._metrics)
        r.runEnded.connect(self._run_ended)
        r.stateChanged.connect(self.plots.set_state)
        r.statusMessage.connect(lambda text: self.statusMessage.emit(text, RUN_MESSAGE_MS))
        r.errorOccurred.connect(lambda title, msg, details: dialogs.error(self._owner, title, msg, details))
        self.runs_panel.selectionChanged.connect(self._runs_selected)
        self.runs_panel.usePlanRequested.connect(self._use_plan)
        self.runs_panel.exportRequested.connect(self._export)
        self.plots.exportCsvRequested.connect(self._export_shown)
        self.verify.moduleActivated.connect(self._select_module)
        controller.modelChanged.connect(self._model_changed)

    # ------------------------------------------------------------ what the window places
    @property
    def tabs(self) -> tuple[tuple[QWidget, str], ...]:
        """The tabs, in order, with their titles: Plots, Runs, Verify."""
        return ((self.plots, "Plots"), (self.runs_panel, "Runs"), (self.verify, "Verify"))

    @property
    def actions(self) -> tuple[QAction, ...]:
        """Start, Pause and Stop (the Run menu's actions)."""
        return (self.panel.act_start, self.panel.act_pause, self.panel.act_stop)

    def watch_with(self, diagnostics: DiagnosticsPanel) -> None:
        """Let the Diagnostics tab start a run that the freeze doctor watches, and show its findings.

        Args:
            diagnostics: the Diagnostics tab.
        """
        diagnostics.enable_watch(lambda n: self.panel.start(watch_steps=n))
        self.runs.watchFinished.connect(diagnostics.show_watch)
        self.runs.runEnded.connect(lambda _rec: diagnostics.watch_ended())

    # ------------------------------------------------------------ reactions
    def _run_started(self, record: RunRecord) -> None:
        """A run was asked for: the plots and the Verify dot change once its setup is done,
        so a start the setup refuses changes nothing on screen but its message."""
        self._starting = record
        self._total = self._c.counts.total if self._c.counts is not None else None

    def _show_started(self) -> None:
        record, self._starting = self._starting, None
        if record is None:
            return
        self.plots.start_run(record, self._total)
        self.runStarted.emit()
        self.verifyResult.emit(None)

    def _prepared(self, info: dict) -> None:
        self._show_started()
        record = self.runs.current
        self.plots.set_run_info(info, record.plan if record is not None else None)

    def _metrics(self, batch: list) -> None:
        self._show_started()
        self.plots.append(batch)

    def _run_ended(self, record: RunRecord) -> None:
        if self._starting is record:  # it never trained: the last run stays on screen
            self._starting = None
            return
        self.plots.end_run(record)
        self.verify.show_run(record)
        if self.verify.ok is not None:
            self.verifyResult.emit(self.verify.ok)

    def _model_changed(self) -> None:
        """A new model: the Verify tab no longer lists the old model's modules (the Runs tab keeps its runs)."""
        if self.runs.state == "idle":
            self.verify.clear()
            self.verifyResult.emit(None)

    def _runs_selected(self, records: list[RunRecord]) -> None:
        overlays = []
        for r in records:
            if r is self.runs.current:
                continue
            overlays.append((r, self.runs_panel.color_index(r), self.runs.load_metrics(r)))
        self.plots.set_overlays(overlays)
        if len(records) == 1 and not records[0].running:
            self.verify.show_run(records[0])

    def _select_module(self, path: str) -> None:
        if path and self._c.tree is not None and path in self._c.tree.nodes:
            self.moduleActivated.emit(path)

    def _use_plan(self, record: RunRecord) -> None:
        try:
            plan = FreezePlan.from_dict(record.plan)
        except PlanError as e:
            dialogs.error(self._owner, "Cannot use the run's plan", str(e))
            return

        def replace(target: FreezePlan, _tree: Any) -> None:
            target.rules = list(plan.rules)
            target.stages = list(plan.stages)

        self._c.edit(f"Use plan of {record.name}", replace)

    def _export(self, record: RunRecord) -> None:
        path = export_run_csv(self._owner, self.runs, record, self._start_dir())
        if path:
            self.statusMessage.emit(f"Exported {path}", EXPORT_MESSAGE_MS)

    def _export_shown(self) -> None:
        record = self.plots.record
        if record is None:
            self.statusMessage.emit("No run to export yet.", EXPORT_MESSAGE_MS)
            return
        self._export(record)

    def _start_dir(self) -> str:
        c = self._c
        return str(c.path.parent) if c.path is not None else str(Path.home())

    # ------------------------------------------------------------ the plots' view
    def _restore_plot_view(self) -> None:
        """Which plots show and whether the legends do, as the user left them."""
        s = self._settings
        if s is None:
            return
        shown = s.value("plots/shown")
        if isinstance(shown, str) and shown:
            self.plots.set_shown_plots(shown.split(","))
        legends = s.value("plots/legends")
        if legends is not None:
            self.plots.set_legends_shown(str(legends).lower() not in ("false", "0"))

    def _save_plot_view(self) -> None:
        s = self._settings
        if s is None:
            return
        chosen = self.plots.chosen_keys  # None: the default set for the width, saved as ""
        s.setValue("plots/shown", ",".join(chosen or []))
        s.setValue("plots/legends", self.plots.legends_shown)

    # ------------------------------------------------------------ the end
    def shutdown(self) -> None:
        """Stop a run in progress and wait for its thread (the window is closing)."""
        self.panel.save_settings()
        self.runs.shutdown()

