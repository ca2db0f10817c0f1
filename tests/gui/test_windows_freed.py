"""A closed window is freed: nothing the window started (the step-memory estimate's profile on a
worker thread) keeps its Python objects alive. A window kept alive would stay in every later
collection of the process: in a test process, every later test pays for every earlier window."""

from __future__ import annotations

import gc
import weakref
from typing import Any

from PySide6.QtCore import QCoreApplication, QEvent

from tests.timeouts import GUI_EVENT_S, GUI_WORKER_S, ms


def _closed_window_whose_estimate_ran(qtbot: Any) -> weakref.ref[Any]:
    """A weak reference to a window that profiled its model for the step estimate and was then closed."""
    from workbench.gui.main_window import MainWindow

    window = MainWindow()
    qtbot.addWidget(window)  # pytest-qt keeps a weak reference
    window.show()
    qtbot.waitExposed(window, timeout=ms(GUI_EVENT_S))
    window.training.panel.set_values(batch_size=2, image_size=16, device="cpu", data="synthetic")
    window.activations.request()
    # the profile ran (on its worker thread) and its result came back
    qtbot.waitUntil(lambda: window.activations.estimate().prediction is not None, timeout=ms(GUI_WORKER_S))
    window.close()
    window.deleteLater()
    return weakref.ref(window)


def test_a_closed_window_whose_estimate_ran_is_freed(qtbot: Any) -> None:
    gone = _closed_window_whose_estimate_ran(qtbot)
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    gc.collect()
    assert gone() is None, "the closed window's Python objects are still alive"
