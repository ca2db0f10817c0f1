"""The cost panel's "every parameter is frozen" line names the loaded model's own head."""

from __future__ import annotations

from typing import Any

from torch import nn

from tests.timeouts import GUI_EVENT_S, ms
from workbench.gui.main_window import MainWindow
from workbench.gui.model_loading import loaded_from_model


class _Tagger(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.head = nn.Linear(16, 3)


def _lines(window: MainWindow) -> list[str]:
    box = window.cost_panel.findings
    return [box.item(i).text() for i in range(box.count())]


def test_every_parameter_frozen_names_the_head(qtbot: Any, window: MainWindow) -> None:
    window.controller.set_loaded(loaded_from_model(_Tagger(), "tagger", spec={"source": "py", "name": "tagger"}))
    assert window.controller.set_value([""], "frozen", True)
    wanted = "(model): every parameter is frozen — unfreeze at least the head (`head`)"
    qtbot.waitUntil(lambda: wanted in _lines(window), timeout=ms(GUI_EVENT_S))
    assert not any("`fc` or `classifier`" in line for line in _lines(window))
