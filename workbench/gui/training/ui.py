"""Training in the main window: plots, runs, verification, controls and the Run menu, wired up.

:class:`TrainingUI` builds the training panels into a :class:`~workbench.gui.main_window.MainWindow`:

- the **Plots** tab (:class:`~workbench.gui.training.plots.PlotsPanel`), **Runs** (:class:`~workbench.gui.training.runs_tab.RunsPanel`)
  and **Verify** (:class:`~workbench.gui.training.verify_panel.VerifyPanel`) tabs on the right;
- the training controls (:class:`~workbench.gui.training.panel.TrainingPanel`) under the cost panel;
- a **Run** menu (Start F5, Pause F6, Stop Shift+F5);

and connects them to one :class:`~workbench.gui.training.run_controller.RunController`, which owns the runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QMenu

from workbench.gui import dialogs
from workbench.gui.icons import dot_icon
from workbench.gui.training.plots import PlotsPanel
from workbench.gui.training.run_controller import RunController
from workbench.gui.training.run_store import RunRecord, RunStore
from workbench.gui.training.runs_tab import RunsPanel, default_runs_dir, export_run_csv
from workbench.gui.training.panel import TrainingPanel
from workbench.gui.training.verify_panel import STATUS_COLORS, VerifyPanel

if TYPE_CHECKING:
    from workbench.gui.main_window import MainWindow

__all__ = ["TrainingUI"]


class TrainingUI(QObject):
    """The training side of the window.

    Args:
        window: the main window (its ``right_panel`` tabs, ``bottom_panel`` and menus get the
            training widgets).
        runs_dir: where runs are kept (default: :func:`~workbench.gui.training.runs_tab.default_runs_dir`).

    Attributes:
        runs: the :class:`RunController` (start/stop, records, store).
        plots / runs_panel / verify / panel: the widgets.
        plots_index / runs_index / verify_index: their tab indexes in ``window.right_panel``.
    """

    def __init__(self, window: "MainWindow", runs_dir: str | Path | None = None) -> None:
        super().__init__(window)
        self.window = window
        c = window.controller
        self.store = RunStore(runs_dir or default_runs_dir())
        self.runs = RunController(c, self.store, self)
        self.plots = PlotsPanel(window)
        self.runs_panel = RunsPanel(self.runs, window)
        self.verify = VerifyPanel(window)
        self.panel = TrainingPanel(c, self.runs, getattr(window, "_settings", None), window)

        tabs = window.right_panel
        self.plots_index = tabs.insertTab(1, self.plots, "Plots")
        self.runs_index = tabs.insertTab(2, self.runs_panel, "Runs")
        self.verify_index = tabs.insertTab(3, self.verify, "Verify")
        window.bottom_panel.layout().addWidget(self.panel)

        self.run_menu = QMenu("&Run", window)
        self.run_menu.addActions([self.panel.act_start, self.panel.act_pause, self.panel.act_stop])
        menu_bar = window.menuBar()
        help_menu = next(
            (a for a in menu_bar.actions() if a.menu() is not None and a.text().replace("&", "") == "Help"), None
        )
        if help_menu is not None:
            menu_bar.insertMenu(help_menu, self.run_menu)
        else:
            menu_bar.addMenu(self.run_menu)
        for act in (self.panel.act_start, self.panel.act_pause, self.panel.act_stop):
            window.addAction(act)  # shortcuts work wherever the focus is

        r = self.runs
        r.runStarted.connect(self._run_started)
        r.prepared.connect(self._prepared)
        r.metricsReceived.connect(self.plots.append)
        r.runEnded.connect(self._run_ended)
        r.statusMessage.connect(lambda text: window.statusBar().showMessage(text, 8000))
        r.errorOccurred.connect(lambda title, msg, details: dialogs.error(window, title, msg, details))
        self.runs_panel.selectionChanged.connect(self._runs_selected)
        self.runs_panel.usePlanRequested.connect(self._use_plan)
        self.runs_panel.exportRequested.connect(self._export)
        self.plots.exportCsvRequested.connect(self._export_shown)
        self.verify.moduleActivated.connect(self._select_module)
        diag = getattr(window, "diagnostics", None)
        if diag is not None:
            diag.enable_watch(lambda n: self.panel.start(watch_steps=n))
            r.watchFinished.connect(diag.show_watch)
            r.runEnded.connect(lambda _rec: diag.watch_ended())

    # ------------------------------------------------------------ reactions
    def _run_started(self, record: RunRecord) -> None:
        c = self.window.controller
        total = c.counts.total if c.counts is not None else None
        self.plots.start_run(record, total)
        if self.window.right_panel.currentIndex() in (0, self.runs_index, self.verify_index):
            self.window.right_panel.setCurrentIndex(self.plots_index)
        self.window.right_panel.setTabIcon(self.verify_index, QIcon())

    def _prepared(self, info: dict) -> None:
        record = self.runs.current
        self.plots.set_run_info(info, record.plan if record is not None else None)

    def _run_ended(self, record: RunRecord) -> None:
        self.plots.end_run(record)
        self.verify.show_run(record)
        if self.verify.ok is not None:
            color = STATUS_COLORS["ok" if self.verify.ok else "error"]
            self.window.right_panel.setTabIcon(self.verify_index, dot_icon(color, size=10))

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
        if path and self.window.controller.tree is not None and path in self.window.controller.tree.nodes:
            self.window.select_path(path)

    def _use_plan(self, record: RunRecord) -> None:
        from workbench.core.plan.rules import FreezePlan, PlanError

        try:
            plan = FreezePlan.from_dict(record.plan)
        except PlanError as e:
            dialogs.error(self.window, "Cannot use the run's plan", str(e))
            return

        def replace(target: FreezePlan, _tree: Any) -> None:
            target.rules = [r for r in plan.rules]
            target.stages = [s for s in plan.stages]

        self.window.controller.edit(f"Use plan of {record.name}", replace)

    def _export(self, record: RunRecord) -> None:
        path = export_run_csv(self.window, self.runs, record, self._start_dir())
        if path:
            self.window.statusBar().showMessage(f"Exported {path}", 5000)

    def _export_shown(self) -> None:
        record = self.plots.record
        if record is None:
            self.window.statusBar().showMessage("No run to export yet.", 5000)
            return
        self._export(record)

    def _start_dir(self) -> str:
        c = self.window.controller
        return str(c.path.parent) if c.path is not None else str(Path.home())

    # ------------------------------------------------------------ the end
    def shutdown(self) -> None:
        """Stop a run in progress and wait for its thread (the window is closing)."""
        self.panel.save_settings()
        self.runs.shutdown()

