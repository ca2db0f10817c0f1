"""Open the workbench window on a model a script or notebook already holds.

::

    import torchvision
    import workbench.gui.show

    model = torchvision.models.resnet18()
    plan = workbench.gui.show(model)          # blocks until the window closes
    if plan is not None:
        plan.save("resnet18.plan.json")
        applied = plan.apply(model)

In a notebook, run ``%gui qt`` first so the kernel keeps answering while the window is open.
The module itself is callable (``workbench.gui.show(model)`` is :func:`show`), so the
documented one-liner works once ``workbench.gui.show`` is imported.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from PySide6.QtCore import QEvent, QEventLoop, QObject
from PySide6.QtGui import QCloseEvent
from torch import nn
from torch.utils.data import Dataset

from workbench.core.errors import WorkbenchError
from workbench.core.plan.rules import FreezePlan
from workbench.gui.main_window import MainWindow

__all__ = ["ScriptWindow", "show"]


class ScriptWindow(MainWindow):
    """The main window on a script's model: closing it returns the plan to the script
    instead of asking to save it."""

    def closeEvent(self, event: QCloseEvent) -> None:
        self.documents.ask_to_save = False  # the plan goes back to the caller of show()
        super().closeEvent(event)


class _HideWatcher(QObject):
    """Quits an event loop when the window it watches is hidden (closed, not minimised)."""

    def __init__(self, window: MainWindow, loop: QEventLoop) -> None:
        super().__init__(window)
        self._window, self._loop = window, loop

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:
        if obj is self._window and event.type() == QEvent.Type.Hide and not self._window.isVisible():
            self._loop.quit()
        return False


def show(
    model: nn.Module,
    plan: FreezePlan | None = None,
    data: Dataset[Any] | None = None,
    *,
    label: str | None = None,
) -> FreezePlan | None:
    """Open the window on ``model``, block until it closes, and return the plan as edited.

    Creates the ``QApplication`` when there is none. The window works on ``model`` itself
    (training in the window trains it).

    Args:
        model: The module to look at.
        plan: A plan to start from (validated against the model); default an empty plan.
        data: A dataset for the window's training runs (default: the window's data choice).
        label: Name shown in the title and status bar (default: the model's class name).

    Returns:
        The plan when the window closes, or ``None`` when it has no rules.

    Raises:
        WorkbenchError: ``model`` is not an ``nn.Module``, or the plan does not fit it.
    """
    if not isinstance(model, nn.Module):
        raise WorkbenchError(f"show() needs a torch.nn.Module, got {type(model).__name__}")
    from workbench.gui.app import create_application
    from workbench.gui.model_loading import loaded_from_model

    app = create_application()
    loaded = loaded_from_model(model, label or type(model).__name__, "from your script")
    if plan is not None:
        plan.validate(loaded.tree)
    window = ScriptWindow(load_default=False)
    try:
        window.controller.set_loaded(loaded, plan.copy() if plan is not None else None)
        if data is not None:
            window.training.runs.trainer_kwargs["dataset"] = data
        loop = QEventLoop()
        window.installEventFilter(_HideWatcher(window, loop))
        window.show()
        window.raise_()
        loop.exec()
        result = window.controller.plan.copy()
    finally:
        window.close()
        window.deleteLater()
        app.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    return result if result.rules else None


class _CallableModule(types.ModuleType):
    """This module, callable: ``workbench.gui.show(model, plan, data)`` calls :func:`show`."""

    def __call__(
        self, model: nn.Module, plan: FreezePlan | None = None, data: Dataset[Any] | None = None, **kwargs: Any
    ) -> FreezePlan | None:
        return show(model, plan, data, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
