"""A missing data path is refused with what to choose: a JSONL source is a file, not a folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QWidget
from torch import nn

from workbench.core.runs.store import RunStore
from workbench.core.training.config import ConfigError
from workbench.gui.controller import Controller
from workbench.gui.model_loading import loaded_from_model
from workbench.gui.training.options_dialog import TrainingOptions
from workbench.gui.training.panel import TrainingPanel
from workbench.gui.training.run_controller import RunController


def test_a_missing_jsonl_file_is_called_a_file(qtbot: Any, runs_dir: Path) -> None:
    owner = QWidget()
    qtbot.addWidget(owner)
    c = Controller(owner)
    c.set_loaded(loaded_from_model(nn.Sequential(nn.Linear(2, 3)), "tiny"))
    panel = TrainingPanel(c, RunController(c, RunStore(runs_dir), owner), None, owner)
    panel.set_text_model(True)
    panel.data_box.setCurrentIndex(panel.data_box.findData("text"))
    with pytest.raises(ConfigError, match=r"^choose the file of the .*JSONL.* data \(the … button\)"):
        panel.config()
    panel.data_box.setCurrentIndex(panel.data_box.findData("imagefolder"))
    with pytest.raises(ConfigError, match="^choose the folder of the"):
        panel.config()


def test_a_missing_validation_jsonl_file_is_called_a_file() -> None:
    with pytest.raises(ConfigError, match=r"^choose the file of the validation data \(Options…\)"):
        TrainingOptions(validate=True, val_kind="text").config_fields()
    with pytest.raises(ConfigError, match="^choose the folder of the validation data"):
        TrainingOptions(validate=True, val_kind="imagefolder").config_fields()
