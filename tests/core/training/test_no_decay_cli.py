"""``--no-decay auto``: biases and 1-D parameters get no weight decay in the run's optimizer."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.cli import main
from workbench.core.training.config import ConfigError, TrainConfig
from workbench.core.training.engine import Trainer


def test_no_decay_auto_reaches_the_optimizer(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    cfg = TrainConfig(model="resnet18", num_classes=4, image_size=32, batch_size=2, steps=1, data="synthetic:8",
                      device="cpu", weight_decay=0.1, no_decay="auto")
    trainer = Trainer(cfg)
    trainer.run()
    wd = {n: g["weight_decay"] for g in trainer.optimizer.param_groups for n in g["param_names"]}
    assert wd["fc.bias"] == 0.0 and wd["bn1.weight"] == 0.0 and wd["fc.weight"] == 0.1 and wd["conv1.weight"] == 0.1
    rc = main(["train", "--model", "resnet18", "--num-classes", "4", "--image-size", "32", "--batch-size", "2",
               "--data", "synthetic:8", "--device", "cpu", "--steps", "1", "--no-decay", "auto",
               "--save", str(tmp_path / "run")])
    assert rc == 0, capsys.readouterr().err
    assert TrainConfig.load(tmp_path / "run" / "config.json").no_decay == "auto"


def test_bad_no_decay_names_the_field():
    with pytest.raises(ConfigError, match="no_decay"):
        TrainConfig(no_decay="always").validate()
