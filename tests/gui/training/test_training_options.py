"""The schedule, warm-up, no-decay and validation controls feed TrainConfig as the CLI flags do."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QWidget
from torch import nn

from workbench.commands.train import add_arguments, config_from_args
from workbench.core.runs.store import RunStore
from workbench.core.training.config import ConfigError
from workbench.core.training.tensorboard import tensorboard_available
from workbench.gui.controller import Controller
from workbench.gui.model_loading import loaded_from_model
from workbench.gui.training.options_dialog import HELD_OUT, TENSORBOARD_IN_RUN, TrainingOptions, TrainingOptionsDialog
from workbench.gui.training.panel import DATASETS, SCHEDULES, TrainingPanel
from workbench.gui.training.run_controller import RunController

FIELDS = ("scheduler", "warmup_steps", "no_decay", "val", "val_every", "val_fraction", "seq_len",
          "text_column", "label_column", "image_column")


def _cli(*flags: str) -> dict[str, Any]:
    p = argparse.ArgumentParser()
    add_arguments(p)
    cfg = config_from_args(p.parse_args(list(flags)))
    return {k: getattr(cfg, k) for k in FIELDS}


def _panel(qtbot: Any, runs_dir: Path, settings: QSettings | None = None) -> TrainingPanel:
    owner = QWidget()
    qtbot.addWidget(owner)
    c = Controller(owner)
    c.set_loaded(loaded_from_model(nn.Sequential(nn.Linear(2, 3)), "tiny"))
    runs = RunController(c, RunStore(runs_dir), owner)
    panel = TrainingPanel(c, runs, settings, owner)
    panel.keep_owner = owner  # type: ignore[attr-defined]  # the owner lives as long as the panel
    return panel


def _fields(panel: TrainingPanel) -> dict[str, Any]:
    cfg = panel.config()
    return {k: getattr(cfg, k) for k in FIELDS}


def test_defaults_equal_the_cli_defaults(qtbot: Any, runs_dir: Path) -> None:
    panel = _panel(qtbot, runs_dir)
    assert _fields(panel) == _cli()
    assert panel.options_label.full_text() == ""
    assert [panel.schedule_box.itemData(i) for i in range(panel.schedule_box.count())] == [v for _l, v in SCHEDULES]


@pytest.mark.parametrize(
    ("values", "flags"),
    [
        ({"scheduler": "onecycle", "warmup_steps": 7}, ["--scheduler", "onecycle", "--warmup-steps", "7"]),
        ({"scheduler": "cosine", "no_decay": "auto"}, ["--scheduler", "cosine", "--no-decay", "auto"]),
        ({"val_every": 5}, ["--val-every", "5"]),
        ({"val_every": 4, "val_fraction": 0.25}, ["--val-every", "4", "--val-fraction", "0.25"]),
        ({"val": "imagefolder:/data/val"}, ["--val", "imagefolder:/data/val"]),
        ({"val": "cifar10:/data/c10", "val_every": 20}, ["--val", "cifar10:/data/c10", "--val-every", "20"]),
        ({"scheduler": "linear"}, ["--scheduler", "linear"]),
    ],
)
def test_controls_map_onto_the_config_like_the_cli_flags(
    qtbot: Any, runs_dir: Path, values: dict[str, Any], flags: list[str]
) -> None:
    panel = _panel(qtbot, runs_dir)
    panel.set_values(**values)
    assert _fields(panel) == _cli(*flags)


@pytest.mark.parametrize(("values", "flags"), [
    ({}, []),
    ({"seq_len": 48}, ["--seq-len", "48"]),
    ({"seq_len": 2, "scheduler": "cosine"}, ["--seq-len", "2", "--scheduler", "cosine"]),
])
def test_text_model_tokens_map_onto_the_config_like_the_cli_flag(
    qtbot: Any, runs_dir: Path, values: dict[str, Any], flags: list[str]
) -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=64, num_labels=2)
    panel = _panel(qtbot, runs_dir)
    panel.set_text_model(True, transformers.BertForSequenceClassification(config))
    panel.set_values(**values)
    assert _fields(panel) == _cli(*flags)
    assert panel.config().image_size is None  # tokens, not pixels


def test_options_dialog_edits_a_copy_and_cancel_changes_nothing(qtbot: Any, runs_dir: Path, dialogs: Any) -> None:
    panel = _panel(qtbot, runs_dir)

    def fill(d: TrainingOptionsDialog) -> bool:
        d.warmup.setValue(12)
        d.no_decay.setChecked(True)
        d.validate.setChecked(True)
        d.source.setCurrentIndex(d.source.findData(HELD_OUT))
        d.percent.setValue(20)
        d.every.setValue(0)  # a held-out split validates every N >= 1 steps
        return False

    dialogs.script("dialog", fill)
    assert not panel.edit_options()
    assert panel.options == TrainingOptions() and _fields(panel) == _cli()

    dialogs.script("dialog", lambda d: fill(d) or True)
    assert panel.edit_options()
    assert _fields(panel) == _cli("--warmup-steps", "12", "--no-decay", "auto", "--val-every", "1", "--val-fraction", "0.2")
    assert panel.options_label.full_text() == "warm-up 12 · val every 1 (20 % held out) · no decay on biases/norms"
    assert "validation: 20 % of the training data held out, every 1 steps" in panel.options_button.toolTip()

    def folder(d: TrainingOptionsDialog) -> bool:
        d.source.setCurrentIndex(d.source.findData("imagefolder"))
        assert d.every.minimum() == 0 and d.every.specialValueText() == "at the end only"
        d.every.setValue(0)
        return True

    dialogs.script("dialog", folder)
    assert panel.edit_options()
    with pytest.raises(ConfigError, match="folder of the validation data"):
        panel.config()  # no folder chosen: one clear line, nothing started
    assert panel.start() is False
    assert any("validation data" in text for kind, _t, text in dialogs.calls if kind == "error")

    dialogs.script("dialog", lambda d: d.path.setText("/data/val") or True)
    assert panel.edit_options()
    assert _fields(panel) == _cli("--warmup-steps", "12", "--no-decay", "auto", "--val", "imagefolder:/data/val")
    kinds = {d for _l, d in DATASETS} - {"synthetic"}
    dialog = TrainingOptionsDialog(panel.options, DATASETS, panel)
    assert {dialog.source.itemData(i) for i in range(1, dialog.source.count())} == kinds
    dialog.deleteLater()


def test_settings_persist_between_sessions(qtbot: Any, runs_dir: Path, tmp_path: Path) -> None:
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    panel = _panel(qtbot, runs_dir, settings)
    panel.set_values(scheduler="onecycle", warmup_steps=3, no_decay="auto", val="imagefolder:/v", val_every=9, seq_len=96)
    panel.save_settings()
    again = _panel(qtbot, runs_dir, QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    assert again.options == panel.options and _fields(again) == _fields(panel)
    assert again.schedule_box.currentData() == "onecycle"
    assert again.seq_len.value() == 96  # the Tokens of a text model are kept too
    broken = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    broken.setValue("training/val_kind", "no-such-kind")
    broken.setValue("training/val_percent", "lots")
    broken.setValue("training/seq_len", "-5")
    broken.sync()
    third = _panel(qtbot, runs_dir, QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    assert third.options.val_kind == HELD_OUT and third.options.val_percent == 10  # defaults, nothing raised
    assert third.seq_len.value() == 0  # out of range: the default


def test_controls_are_locked_while_a_run_trains(qtbot: Any, runs_dir: Path) -> None:
    panel = _panel(qtbot, runs_dir)
    panel._state_changed("running")
    assert not panel.schedule_box.isEnabled() and not panel.options_button.isEnabled()
    panel._state_changed("idle")
    assert panel.schedule_box.isEnabled() and panel.options_button.isEnabled()


def test_tensorboard_option_writes_into_the_run_folder_and_is_kept(qtbot: Any, runs_dir: Path, tmp_path: Path) -> None:
    assert TrainingOptions().config_fields()["tensorboard_dir"] is None
    assert TrainingOptions(tensorboard=True).config_fields()["tensorboard_dir"] == TENSORBOARD_IN_RUN
    assert "TensorBoard" in TrainingOptions(tensorboard=True).summary()
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    panel = _panel(qtbot, runs_dir, settings)
    panel.set_options(TrainingOptions(tensorboard=True))
    panel.save_settings()
    again = _panel(qtbot, runs_dir, settings)
    assert again.options.tensorboard and again.config().tensorboard_dir == TENSORBOARD_IN_RUN
    dialog = TrainingOptionsDialog(TrainingOptions(tensorboard=True), [])
    qtbot.addWidget(dialog)
    assert dialog.options().tensorboard == tensorboard_available()


def test_cache_and_auto_freeze_options_are_kept_between_sessions(qtbot: Any, runs_dir: Path, tmp_path: Path) -> None:
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    panel = _panel(qtbot, runs_dir, settings)
    assert panel.config().cache_frozen == "auto" and not panel.config().auto_freeze  # the defaults
    panel.set_options(TrainingOptions(cache_frozen=False, auto_freeze=True, auto_freeze_every=17))
    panel.save_settings()
    again = _panel(qtbot, runs_dir, QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    assert (again.options.cache_frozen, again.options.auto_freeze, again.options.auto_freeze_every) == (False, True, 17)
    cfg = again.config()
    assert (cfg.cache_frozen, cfg.auto_freeze, cfg.auto_freeze_every) == ("off", True, 17)
    broken = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    broken.setValue("training/auto_freeze_every", "often")
    broken.setValue("training/cache_frozen", "maybe")
    broken.sync()
    third = _panel(qtbot, runs_dir, QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    assert third.options.auto_freeze_every == TrainingOptions().auto_freeze_every  # a bad value: the default
    assert third.options.cache_frozen is False and third.options.auto_freeze  # "maybe" is not true; the rest kept


def test_hf_dataset_columns_map_like_the_cli_flags_and_are_kept(qtbot: Any, runs_dir: Path, tmp_path: Path) -> None:
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    panel = _panel(qtbot, runs_dir, settings)
    panel.set_values(text_column="sentence", label_column="stars")
    assert _fields(panel) == _cli("--text-column", "sentence", "--label-column", "stars")
    assert "columns text=sentence, label=stars" in panel.options_label.full_text()
    panel.set_values(label_column="")  # back to the default name
    assert _fields(panel) == _cli("--text-column", "sentence")
    panel.save_settings()
    again = _panel(qtbot, runs_dir, QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    assert again.options.columns == {"text": "sentence"} and _fields(again) == _fields(panel)

    dialog = TrainingOptionsDialog(again.options, [])
    qtbot.addWidget(dialog)
    assert dialog.column_edits["text"].text() == "sentence" and dialog.column_edits["image"].placeholderText() == "image"
    dialog.column_edits["image"].setText("  pixels ")
    dialog.column_edits["text"].setText("")
    assert dialog.options().columns == {"image": "pixels"}
    assert dialog.options().config_fields()["image_column"] == "pixels"
    assert dialog.options().config_fields()["text_column"] is None
