"""The default demo learns: synthetic data has 10 classes and a built model gets a new head for them."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
import torchvision
from torch import nn

from workbench.cli import main
from workbench.core.training.config import TrainConfig
from workbench.core.training.data import SYNTHETIC_DEFAULT_CLASSES
from workbench.core.training.engine import Trainer
from workbench.core.training.metrics import load_metrics


def test_default_run_learns_ten_synthetic_classes(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """`workbench train --model resnet18` on the default synthetic data: the loss falls clearly.

    The issue's run is 60 steps at 64 px, batch 16; 30 steps at 32 px are asserted here (a stronger
    claim in steps; the loss ends near 3 % of its start, and the run takes a quarter of the CPU time).
    Random weights (no download).
    """
    metrics = tmp_path / "m.jsonl"
    rc = main(["train", "--model", "resnet18", "--steps", "30", "--image-size", "32", "--batch-size", "16",
               "--device", "cpu", "--metrics", str(metrics), "--no-progress"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "classes      10 (new head: fc)" in out
    losses = [m.loss for m in load_metrics(metrics)]
    first, last = statistics.mean(losses[:10]), statistics.mean(losses[-10:])
    assert last < 0.5 * first, losses


def test_synthetic_classes_default_to_ten_for_a_built_model():
    t = Trainer(TrainConfig(model="resnet18", steps=1, image_size=16, batch_size=2, data="synthetic:4"))
    t.setup()
    assert SYNTHETIC_DEFAULT_CLASSES == 10
    assert t.dataset.num_classes == 10 and t.model.fc.out_features == 10 and t.new_heads == ["fc"]
    assert t.num_classes == 10


def test_a_model_handed_in_keeps_its_head_and_the_data_takes_at_most_ten_classes():
    model = torchvision.models.resnet18(weights=None)
    fc = model.fc
    t = Trainer(TrainConfig(steps=1, image_size=16, batch_size=2, data="synthetic:4"), model=model)
    t.setup()
    assert t.model.fc is fc and fc.out_features == 1000 and t.new_heads == []
    assert t.dataset.num_classes == 10 and t.num_classes == 10
    small = nn.Sequential(nn.Flatten(), nn.Linear(3 * 4 * 4, 4))
    t2 = Trainer(TrainConfig(steps=1, image_size=4, batch_size=2, data="synthetic:4"), model=small)
    t2.setup()
    assert t2.dataset.num_classes == 4 and t2.new_heads == []


def test_num_classes_still_wins(capsys: pytest.CaptureFixture[str]):
    rc = main(["train", "--model", "resnet18", "--num-classes", "3", "--steps", "1", "--image-size", "16",
               "--batch-size", "2", "--data", "synthetic:4", "--device", "cpu", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert json.loads(out)["summary"]["num_classes"] == 3
