"""The app's Suggest… dialog: plans that fit the device's memory (see :mod:`workbench.core.advisor`).

- :mod:`~workbench.gui.advisor.budget`: the budget a device offers;
- :mod:`~workbench.gui.advisor.chart`: the Pareto chart with the budget line;
- :mod:`~workbench.gui.advisor.dialog`: the dialog (advice off the GUI thread, Apply / Save… / Measure /
  Train each);
- :mod:`~workbench.gui.advisor.train_each`: *Train each*, the plan sweep over the dialog's candidates;
- :mod:`~workbench.gui.advisor.resume`: *Resume*, an unfinished *Train each* found again;
- :mod:`~workbench.gui.advisor.sweep_chart`: the sweep's chart (live in the dialog, a PNG from the CLI).

:func:`add_suggest_action` puts *Suggest…* in a window's menu.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu, QWidget

from workbench.gui import dialogs

if TYPE_CHECKING:
    from workbench.gui.advisor.dialog import SuggestDialog
    from workbench.gui.controller import Controller
    from workbench.gui.training.panel import TrainingPanel

__all__ = ["add_suggest_action", "open_suggest_dialog"]


def open_suggest_dialog(controller: Controller, panel: TrainingPanel, parent: QWidget | None = None) -> SuggestDialog:
    """Build the dialog, pre-filled from the training panel's settings, and start the advice.

    Args:
        controller: the loaded model and the plan.
        panel: the training panel whose device, batch, image size, precision and tokens it takes
            (and, for *Train each*, its data, loss, metric, seed, steps and runs folder).
        parent: the dialog's parent window.

    Returns:
        The dialog (shown by the caller).
    """
    from workbench.gui.advisor.dialog import SuggestDialog  # the advisor loads on first use

    setup = panel.step_setup()
    dialog = SuggestDialog(controller, device=setup.device, batch_size=setup.batch_size, image_size=setup.image_size or 0,
                           amp=setup.amp, seq_len=setup.tokens or 0, train_config=panel.config,
                           runs_folder=panel.runs.store.folder, dataset=panel.runs.trainer_kwargs.get("dataset"),
                           set_auto_freeze=lambda on: panel.set_options(dataclasses.replace(panel.options, auto_freeze=on)),
                           auto_freeze_max=panel.options.auto_freeze_shares()["auto_freeze_max"], parent=parent)
    if panel.length_kind.currentData() == "steps":  # Train each: the run's own length
        dialog.steps.setValue(panel.length.value())
    dialog.sweepRunsWritten.connect(panel.runs.reload)  # the Runs tab lists each candidate as it finishes
    dialog.suggest()
    return dialog


def add_suggest_action(parent: QWidget, menu: QMenu, open_dialog: Callable[[], SuggestDialog]) -> QAction:
    """Add *Suggest…* to ``menu``: it runs the dialog ``open_dialog`` builds.

    Args:
        parent: the action's owner (the main window).
        menu: the menu to add it to.
        open_dialog: builds the dialog (e.g. :func:`open_suggest_dialog` with the window's
            controller and training panel).

    Returns:
        The action.
    """
    action = QAction("&Suggest…", parent)
    action.setStatusTip("Plans that fit the device's memory, and the one that trains the most")
    action.setObjectName("act_suggest")

    def run() -> None:
        dialog = open_dialog()
        dialogs.run_dialog(dialog)
        dialog.reject()  # waits for a computation still running (closing is idempotent)
        dialog.deleteLater()

    action.triggered.connect(run)
    menu.addAction(action)
    return action
