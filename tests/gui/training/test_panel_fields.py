"""The training panel's fields are one table (config name ↔ widget ↔ settings key): every row
is kept in settings and restored, set by its config name and read into the config; the step
setup (device, batch, input size, precision, tokens) is what the cost panel's estimate and the
Suggest… dialog read, not the panel's widgets."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QWidget
from torch import nn

from tests.timeouts import GUI_EVENT_S, ms
from workbench.core.runs.store import RunStore
from workbench.core.training.config import ConfigError
from workbench.gui.controller import Controller
from workbench.gui.model_loading import loaded_from_model
from workbench.gui.training.options_dialog import TrainingOptions
from workbench.gui.training.panel import TrainingPanel
from workbench.gui.training.panel_fields import PANEL_FIELDS, StepSetup, options_settings, widget_value
from workbench.gui.training.run_controller import RunController

#: A value for each row, unlike its default, as ``set_values`` takes it.
CHANGED: dict[str, Any] = {"image_size": 48, "seq_len": 96, "batch_size": 7, "lr": 0.02, "weight_decay": 0.05,
                           "device": "cpu", "amp": "bf16", "channels_last": True, "scheduler": "cosine"}


@pytest.fixture
def make_panel(qtbot: Any, runs_dir: Path) -> Any:
    owners: list[QWidget] = []  # qtbot holds widgets weakly: the panels' owners live as long as the test

    def make(settings: QSettings | None = None) -> TrainingPanel:
        owner = QWidget()
        owners.append(owner)
        qtbot.addWidget(owner)
        c = Controller(owner)
        c.set_loaded(loaded_from_model(nn.Sequential(nn.Linear(2, 3)), "tiny"))
        return TrainingPanel(c, RunController(c, RunStore(runs_dir), owner), settings, owner)

    return make


def test_every_config_row_is_set_by_name_and_read_into_the_config(make_panel: Any) -> None:
    panel = make_panel()
    assert {f.config for f in PANEL_FIELDS if f.config} == set(CHANGED)  # the test covers every row
    panel.set_values(**CHANGED, epochs=3, data="synthetic")
    cfg = panel.config()
    for name, value in CHANGED.items():
        if name != "seq_len":  # an image model: no tokens
            assert getattr(cfg, name) == value, name
    assert cfg.seq_len is None and cfg.epochs == 3 and cfg.steps is None
    panel.set_text_model(True)
    cfg = panel.config()
    assert cfg.seq_len == 96 and cfg.image_size is None and cfg.channels_last is False
    panel.set_values(lr=0.01)
    panel.lr.setText("fast")
    with pytest.raises(ConfigError, match="learning rate 'fast' is not a number"):
        panel.config()
    with pytest.raises(KeyError, match="no field 'nope'"):
        panel.set_values(nope=1)


def test_every_row_and_option_is_kept_between_sessions(make_panel: Any, tmp_path: Path) -> None:
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    panel = make_panel(settings)
    panel.set_values(**CHANGED, epochs=4, data="imagefolder:/data/x")
    options = dataclasses.replace(TrainingOptions(), warmup_steps=9, val_at_start=True, auto_freeze_every=7,
                                  columns={"text": "sentence"}, input_shape="3,32,32")
    panel.set_options(options)
    panel.save_settings()
    again = make_panel(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    for f in PANEL_FIELDS:
        assert widget_value(getattr(again, f.widget)) == widget_value(getattr(panel, f.widget)), f.setting
    assert again.options == options
    assert {f"training/{k}" for k in options_settings(options)} <= set(settings.allKeys())
    # a setting out of its bounds is brought back into them
    settings.setValue("training/val_percent", 400)
    settings.setValue("training/val_kind", "nonsense")
    settings.setValue("training/warmup_steps", -5)
    settings.setValue("training/batch_size", "lots")  # unreadable: the default
    settings.setValue("training/device", "tpu:7")  # no such device here: the list's choice stays
    settings.sync()
    third = make_panel(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    assert third.options.val_percent == 50 and third.options.val_kind == TrainingOptions().val_kind
    assert third.options.warmup_steps == 0 and third.batch_size.value() == 16
    assert third.device_box.currentData() == "auto"


def test_the_step_setup_is_what_the_estimate_and_the_advisor_read(qtbot: Any, make_panel: Any) -> None:
    panel = make_panel()
    panel.set_values(batch_size=5, image_size=40, device="cpu", amp="bf16")
    with qtbot.waitSignal(panel.stepSetupChanged, timeout=ms(GUI_EVENT_S)):
        panel.set_values(batch_size=6)
    setup = panel.step_setup()
    assert setup == StepSetup(device="cpu", batch_size=6, image_size=40, amp="bf16", tokens=None)
    assert dict(setup.config_fields()) == {"batch_size": 6, "image_size": 40, "seq_len": None, "device": "cpu",
                                           "amp": "bf16"}
    panel.set_text_model(True)
    panel.set_values(seq_len=0)
    text = panel.step_setup()
    assert text.image_size is None and text.tokens == panel.tokens()


def test_a_saved_auto_freeze_share_out_of_range_is_ignored_and_said(make_panel: Any, tmp_path: Path,
                                                                    qtbot: Any) -> None:
    from workbench.gui.main_window import MainWindow
    from workbench.gui.settings import settings as app_settings

    saved = {"auto_freeze": True, "auto_freeze_every": 17, "auto_freeze_threshold": -1.0, "auto_freeze_max": 5.0,
             "val_percent": 20, "warmup_steps": 9}
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    for key, value in saved.items():
        settings.setValue(f"training/{key}", value)
    settings.sync()
    panel = make_panel(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    o, d = panel.options, TrainingOptions()
    # what is valid is restored; each refused share is the default
    assert (o.auto_freeze, o.auto_freeze_every, o.val_percent, o.warmup_steps) == (True, 17, 20, 9)
    assert (o.auto_freeze_threshold, o.auto_freeze_max) == (d.auto_freeze_threshold, d.auto_freeze_max)
    problem = panel.settings_problem()
    assert problem is not None
    assert "auto_freeze_threshold = -1.0 was ignored (must be a number > 0" in problem
    assert "auto_freeze_max = 5.0 was ignored (must be a share of the blocks" in problem
    assert "val_percent" not in problem and "warmup_steps" not in problem
    assert make_panel(QSettings(str(tmp_path / "none.ini"), QSettings.Format.IniFormat)).settings_problem() is None
    # the window says it in its status line at start-up
    store = app_settings()
    store.setValue("training/auto_freeze_threshold", float("nan"))
    store.sync()
    window = MainWindow(load_default=False)
    qtbot.addWidget(window)
    message = window.statusBar().currentMessage()
    assert "training settings: saved option auto_freeze_threshold = nan was ignored" in message, message


def test_the_image_size_is_shown_only_for_data_the_run_resizes(make_panel: Any) -> None:
    panel = make_panel()
    image = (panel.image_size, panel._labels["Image"])

    def shown() -> bool:
        assert len({w.isHidden() for w in image}) == 1  # the control and its label together
        return not panel.image_size.isHidden()

    panel.set_values(image_size=48, data="imagefolder:/data/pets")
    assert shown() and panel.config().image_size == 48 == panel.step_setup().image_size
    panel.set_values(data="py:data.py:make")  # your items come as they are: no size to choose
    assert not shown() and panel.config().image_size is None
    assert panel.step_setup().image_size is None  # what the estimate and Suggest… read: no hidden size
    panel.set_values(val="imagefolder:/data/val")  # ... unless the validation images are resized
    assert shown() and panel.config().image_size == 48
    panel.set_values(val=None)
    panel.set_options(dataclasses.replace(panel.options, validate=False))
    assert not shown()
    panel.set_values(data="hf-dataset:/data/frames", input_column="frames")  # arrays
    assert not shown() and panel.config().image_size is None
    panel.set_values(input_column="")  # its images
    assert shown()
    panel.set_values(data="synthetic", input_shape="1024")  # generated samples of that shape
    assert not shown() and panel.config().image_size is None
    panel.set_values(input_shape="")
    assert shown() and panel.config().image_size == 48
    panel.set_text_model(True)  # tokens
    assert not shown() and panel.config().image_size is None and not panel.seq_len.isHidden()
    panel.set_text_model(False)
    assert shown() and panel.seq_len.isHidden()
