"""Suggest… predicts for the image side the run takes: with the panel's image size left to the model ("model"),
a Hugging Face ViT built for 48-px images is advised at 48 px, the side run_image_size gives its run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.core.advisor.vit_fixtures import vit_folder
from tests.timeouts import GUI_WORKER_S, ms
from workbench.core.training.setup import run_image_size
from workbench.gui.main_window import MainWindow


def test_the_model_side_is_the_runs(qtbot: Any, window: MainWindow, tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    folder = vit_folder(tmp_path / "vit48", 48)
    with qtbot.waitSignal(window.controller.loadFinished, timeout=ms(GUI_WORKER_S)) as blocker:
        window.documents.open_model_folder(str(folder))
    assert blocker.args[0], "the ViT did not load"
    window.training.panel.set_values(image_size=0)  # the model's own side
    assert window.training.panel.step_setup().image_size is None
    d = window.suggest_dialog()
    qtbot.addWidget(d)
    qtbot.waitUntil(lambda: not d.busy, timeout=ms(GUI_WORKER_S))
    model = window.controller.model
    assert model is not None and run_image_size(None, None, model) == 48  # the run of the handed-in model
    assert d.input_size.value() == 48 and d.input_shape()[-2:] == (48, 48)
    assert d.advice is not None and d.advice.input_shape[-2:] == (48, 48)
