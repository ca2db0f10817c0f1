"""The Options… dialog's frozen-prefix cache and auto-freeze switches feed TrainConfig as the CLI flags do."""

from __future__ import annotations

from typing import Any

from workbench.core.training.config import TrainConfig
from workbench.gui.training.options_dialog import TrainingOptions, TrainingOptionsDialog, options_tooltip


def test_defaults_cache_where_exact_and_no_auto_freeze() -> None:
    f = TrainingOptions().config_fields()
    assert f["cache_frozen"] == "auto" and f["auto_freeze"] is False
    TrainConfig(**f).validate()
    assert TrainingOptions().summary() == ""


def test_dialog_round_trip_and_config(qtbot: Any, tmp_path: Any) -> None:
    o = TrainingOptions(cache_frozen=False, auto_freeze=True, auto_freeze_every=30)
    d = TrainingOptionsDialog(o, [])
    qtbot.addWidget(d)
    assert not d.cache_frozen.isChecked() and d.auto_freeze.isChecked() and d.auto_every.value() == 30
    got = d.options()
    assert got == o
    cfg = TrainConfig(**got.config_fields()).validate()
    assert cfg.cache_frozen == "off" and cfg.auto_freeze and cfg.auto_freeze_every == 30
    assert "no frozen cache" in got.summary() and "auto-freeze every 30" in got.summary()
    assert "auto-freeze: every 30 steps" in options_tooltip(got)
    d.auto_freeze.setChecked(False)
    assert not d.auto_every.isEnabled() and d.options().config_fields()["auto_freeze"] is False
    d.grab().save(str(tmp_path / "options.png"))
