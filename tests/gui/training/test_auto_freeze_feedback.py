"""Auto-freeze feedback in the app: each evaluation in the status line and as a faint tick on the
plots; its threshold and maximum in Options…"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from PySide6.QtWidgets import QWidget
from torch import nn

from workbench.core.runs.store import RunStore
from workbench.core.training.config import TrainConfig
from workbench.gui.controller import Controller
from workbench.gui.model_loading import loaded_from_model
from workbench.gui.training.options_dialog import TrainingOptions, TrainingOptionsDialog, options_tooltip
from workbench.gui.training.plot_markers import marker_text
from workbench.gui.training.run_controller import RunController

EVALUATION = "auto-freeze, step 10: no block flattened (smallest change 34 %, threshold 10 %)"
STAGE = "stage 0 'auto-freeze conv1 .. conv3': froze conv1, conv2, conv3"


def test_an_evaluation_is_a_faint_tick_without_a_label(shown_plots: Any, tmp_path: Path) -> None:
    assert marker_text(EVALUATION) == ("", "tick")
    for width, height in ((1280, 720), (1920, 1080)):
        panel = shown_plots(width, height)
        panel.add_event({"step": 10, "wall_time": 1.0}, EVALUATION)
        panel.add_event({"step": 50, "wall_time": 5.0}, STAGE)
        tick, stage = panel._markers.markers
        assert tick.kind == "tick" and stage.kind == "stage"
        assert [m.kind for g in panel.marker_groups() for m in g] == ["stage"]  # the tick joins no label group
        assert panel._markers.label_texts() == [marker_text(STAGE)[0]]
        assert tick.lines and all(line.toolTip() == EVALUATION for line in tick.lines)
        assert tick.lines[0].pen.color().alpha() < 255 and stage.lines[0].pen.color().alpha() == 255
        assert tick.lines[0].pen.widthF() < stage.lines[0].pen.widthF()
        panel.grab().save(str(tmp_path / f"tick_{width}x{height}.png"))


def test_the_latest_evaluation_goes_to_the_status_line(qtbot: Any, tmp_path: Path) -> None:
    owner = QWidget()
    qtbot.addWidget(owner)
    c = Controller(owner)
    c.set_loaded(loaded_from_model(nn.Sequential(nn.Linear(2, 3)), "tiny"))
    rc = RunController(c, RunStore(tmp_path / "runs"), owner)
    said: list[str] = []
    rc.statusMessage.connect(said.append)
    record = SimpleNamespace(metrics=[], events=[])
    rc.current = record  # type: ignore[assignment]
    rc._on_batch([{"step": 9, "events": []}])
    assert said == []  # nothing evaluated, nothing said
    later = "auto-freeze, step 20: conv1 flattened (change 4 %, threshold 10 %): frozen from step 21"
    rc._on_batch([{"step": 10, "events": [EVALUATION]}, {"step": 20, "events": [later]}])
    assert said == ["Auto-freeze, step 20: conv1 flattened (change 4 %, threshold 10 %): frozen from step 21."]
    assert [e["label"] for e in record.events] == [EVALUATION, later]  # both kept in the run's events


def test_threshold_and_maximum_in_options(qtbot: Any, tmp_path: Path) -> None:
    o = TrainingOptions(auto_freeze=True, auto_freeze_every=20, auto_freeze_threshold=0.25, auto_freeze_max=0.5)
    d = TrainingOptionsDialog(o, [])
    qtbot.addWidget(d)
    assert d.auto_threshold.value() == 25 and d.auto_max.value() == 50 and d.auto_max.isEnabled()
    got = d.options()
    assert got == o
    cfg = TrainConfig(**got.config_fields()).validate()
    assert cfg.auto_freeze_threshold == 0.25 and cfg.auto_freeze_max == 0.5 and cfg.auto_freeze_every == 20
    assert "auto-freeze: every 20 steps, threshold 25 %, at most 50 % of the blocks" in options_tooltip(got)
    d.auto_freeze.setChecked(False)
    assert not d.auto_threshold.isEnabled() and not d.auto_max.isEnabled()
    d.auto_freeze.setChecked(True)
    d.grab().save(str(tmp_path / "options.png"))
    # settings that were damaged give the defaults, which TrainConfig accepts
    bad = TrainingOptions(auto_freeze=True, auto_freeze_threshold=float("nan"), auto_freeze_max=3.0).config_fields()
    assert bad["auto_freeze_threshold"] == 0.1 and bad["auto_freeze_max"] == 0.75
    TrainConfig(**bad).validate()
