"""The app's Suggest… dialog: plans that fit the device's memory (see :mod:`workbench.core.advisor`).

- :mod:`~workbench.gui.advisor.budget`: the budget a device offers;
- :mod:`~workbench.gui.advisor.chart`: the Pareto chart with the budget line;
- :mod:`~workbench.gui.advisor.dialog`: the dialog (advice off the GUI thread, Apply / Save… / Measure).

:func:`add_suggest_action` puts *Suggest…* in a window's menu.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu

from workbench.gui import dialogs

if TYPE_CHECKING:
    from workbench.gui.advisor.dialog import SuggestDialog
    from workbench.gui.main_window import MainWindow

__all__ = ["add_suggest_action", "open_suggest_dialog"]


def open_suggest_dialog(window: MainWindow) -> SuggestDialog:
    """Build the dialog for a window, pre-filled from its training controls, and start the advice.

    Args:
        window: the main window.

    Returns:
        The dialog (shown by the caller).
    """
    from workbench.core.training.data import run_seq_len
    from workbench.gui.advisor.dialog import SuggestDialog  # the advisor loads on first use

    panel = window.training.panel
    tokens = run_seq_len(window.controller.model, panel.seq_len.value() or None, "synthetic") if panel.text_model else None
    dialog = SuggestDialog(window.controller, device=str(panel.device_box.currentData()),
                           batch_size=panel.batch_size.value(), image_size=panel.image_size.value(),
                           amp=str(panel.amp_box.currentData()), seq_len=tokens or 0, parent=window)
    dialog.suggest()
    return dialog


def add_suggest_action(window: MainWindow, menu: QMenu) -> QAction:
    """Add *Suggest…* to ``menu``: it opens the dialog for ``window``.

    Args:
        window: the main window.
        menu: the menu to add it to.

    Returns:
        The action.
    """
    action = QAction("&Suggest…", window)
    action.setStatusTip("Plans that fit the device's memory, and the one that trains the most")
    action.setObjectName("act_suggest")

    def run() -> None:
        dialog = open_suggest_dialog(window)
        dialogs.run_dialog(dialog)
        dialog.reject()  # waits for a computation still running (closing is idempotent)
        dialog.deleteLater()

    action.triggered.connect(run)
    menu.addAction(action)
    return action
