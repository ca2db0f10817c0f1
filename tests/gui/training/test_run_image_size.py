"""The app's run of a loaded model takes the image size the model's spec gives it (run_image_size's), as
Suggest…, ``workbench train`` and the exported script do: a tiny model loaded as torchvision's inception_v3
(299 px, random init: nothing is built with weights or downloaded) trains at 299, not at the 224 a model
handed in without its spec would get."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from PySide6.QtWidgets import QWidget
from torch import nn

from tests.timeouts import GUI_RUN_S, ms
from workbench.core.export import render_script
from workbench.core.models.spec import ModelSpec
from workbench.core.runs.store import RunStore
from workbench.core.training.config import TrainConfig
from workbench.core.training.setup import run_image_size
from workbench.gui.controller import Controller
from workbench.gui.model_loading import loaded_from_model
from workbench.gui.training.run_controller import RunController
from workbench.gui.training.session import run_spec


def _tiny() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 2, 3, stride=8), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2, 3))


def test_the_apps_run_takes_the_loaded_specs_image_size(qtbot: Any, tmp_path: Path) -> None:
    owner = QWidget()
    qtbot.addWidget(owner)
    c = Controller(owner)
    c.set_loaded(loaded_from_model(_tiny(), "inception_v3", spec={"source": "torchvision", "name": "inception_v3"}))
    assert c.model is not None
    side = run_image_size(None, run_spec(c.spec), c.model)  # Suggest…'s answer, and workbench train's for the spec
    assert side == 299 and run_image_size(None, None, c.model) == 224
    runs = RunController(c, RunStore(tmp_path / "runs"), owner)
    config = TrainConfig(data="synthetic:4", batch_size=2, steps=1, device="cpu").validate()  # image size: the model's
    with qtbot.waitSignal(runs.runEnded, timeout=ms(GUI_RUN_S)) as ended:
        assert runs.start(config)
    record = ended.args[0]
    assert record.status == "completed", record.summary
    assert runs.info["image_size"] == record.summary["image_size"] == side
    # the script File ▸ Export exports for the same run
    script = render_script(c.plan, ModelSpec.from_dict({**c.spec, **c.plan.model}), model=c.model, config=config,
                           provided=True)
    assert re.findall(r"^IMAGE_SIZE = (\d+)", script, re.MULTILINE) == [str(side)]


def test_a_model_handed_to_the_window_without_a_spec_runs_at_its_own_size() -> None:
    assert run_spec({}) is None and run_spec({"fingerprint": "abc"}) is None  # it names no model
    spec = run_spec({"source": "torchvision", "name": "inception_v3", "fingerprint": "abc"})
    assert spec is not None and (spec.source, spec.name, spec.weights) == ("torchvision", "inception_v3", None)
