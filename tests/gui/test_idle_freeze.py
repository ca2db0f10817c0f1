"""The window's idle freeze: once the window is idle after a model loads, the objects alive then leave the
garbage collector's sight (``gc.freeze``, so a collection in the middle of a click does not walk a large
model's tree again), and the next model's freeze hands the previous one's back first, so they are freed."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
from torch import nn

from tests.timeouts import GUI_EVENT_S, ms
from workbench.gui import controller
from workbench.gui.main_window import MainWindow
from workbench.gui.model_loading import loaded_from_model

pytestmark = pytest.mark.usefixtures("idle_freeze")


def _cyclic() -> nn.Module:
    """A model only the cyclic collector frees (it refers to itself)."""
    model = nn.Sequential(nn.Linear(2, 2))
    model.__dict__["itself"] = [model]  # a plain attribute, not a submodule
    return model


def test_a_loaded_model_is_frozen_once_idle_and_freed_after_the_next_one_loads(window: MainWindow,
                                                                               qtbot: Any) -> None:
    assert controller.FREEZE_OBJECTS_AFTER_MS < 1000  # the app's own delay: this test runs it as the app does
    gc.unfreeze()
    gc.collect()
    model = _cyclic()
    first = weakref.ref(model)
    window.controller.set_loaded(loaded_from_model(model, "first"))
    del model
    qtbot.waitUntil(lambda: gc.get_freeze_count() > 0, timeout=ms(GUI_EVENT_S))
    assert first() is not None and not any(o is first() for o in gc.get_objects())  # frozen: out of the collector's sight
    window.controller.set_loaded(loaded_from_model(_cyclic(), "second"))
    qtbot.waitUntil(lambda: first() is None, timeout=ms(GUI_EVENT_S))  # thawed, collected, then the rest frozen
    assert gc.get_freeze_count() > 0
