"""Hostile training settings: whatever a settings file holds for a field of the panel's table or
an option (wrong types, huge or negative numbers, control characters, lists), the panel opens
with a value the field can hold, and the next run's config is built or refused in one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QWidget
from torch import nn

from workbench.core.runs.store import RunStore
from workbench.core.training.config import ConfigError
from workbench.gui.controller import Controller
from workbench.gui.model_loading import loaded_from_model
from workbench.gui.training.options_dialog import TrainingOptions
from workbench.gui.training.panel import TrainingPanel
from workbench.gui.training.panel_fields import OPTION_LIMITS, PANEL_FIELDS, options_settings
from workbench.gui.training.run_controller import RunController

GARBAGE: list[Any] = ["", "lots", "-1", "1e999", "\x00\x01", "9" * 400, ["a", "b"], -7, 10**12, "true"]


@pytest.mark.parametrize("garbage", GARBAGE, ids=repr)
def test_garbage_in_every_training_setting_opens_a_usable_panel(qtbot: Any, tmp_path: Path, garbage: Any) -> None:
    path = str(tmp_path / "s.ini")
    settings = QSettings(path, QSettings.Format.IniFormat)
    keys = [f.setting for f in PANEL_FIELDS] + list(options_settings(TrainingOptions()))
    for key in keys:
        settings.setValue(f"training/{key}", garbage)
    settings.sync()
    owner = QWidget()
    qtbot.addWidget(owner)
    c = Controller(owner)
    c.set_loaded(loaded_from_model(nn.Sequential(nn.Linear(2, 3)), "tiny"))
    panel = TrainingPanel(c, RunController(c, RunStore(tmp_path / "runs"), owner), QSettings(path, QSettings.Format.IniFormat),
                          owner)
    for name, (low, high) in OPTION_LIMITS.items():
        value = getattr(panel.options, name)
        assert low <= value and (high is None or value <= high), (name, value)
    assert panel.batch_size.value() >= 1 and panel.device_box.currentIndex() >= 0
    try:
        panel.config()
    except ConfigError as e:
        assert "\n" not in str(e) and str(e)
    panel.save_settings()  # what was read back is written back without error
