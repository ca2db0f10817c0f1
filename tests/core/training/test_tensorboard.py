"""TensorBoard sink: ``workbench train --tensorboard DIR`` writes every metric, read back with tensorboard."""

from __future__ import annotations

import builtins
from pathlib import Path

import pytest

from workbench.cli import main
from workbench.core.plan.rules import FreezePlan
from workbench.core.training.config import ConfigError, TrainConfig
from workbench.core.training.metrics import MetricsError, StepMetrics
from workbench.core.training.tensorboard import TensorBoardWriter, scalars_of

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")

QUICK = ["--model", "resnet18", "--num-classes", "10", "--image-size", "32", "--batch-size", "2",
         "--data", "synthetic:16", "--device", "cpu"]


def _read(folder: Path) -> event_accumulator.EventAccumulator:
    acc = event_accumulator.EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def test_train_writes_every_metric_to_tensorboard(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    plan = tmp_path / "plan.json"
    FreezePlan.from_dict({
        "rules": [{"select": "*", "frozen": True}, {"select": "fc", "frozen": False}],
        "stages": [{"at_step": 2, "rules": [{"select": "layer4", "frozen": False}], "label": "unfreeze layer4"}],
    }).save(plan)
    logs = tmp_path / "tb"
    rc = main(["train", *QUICK, "--steps", "4", "--plan", str(plan), "--tensorboard", str(logs)])
    err = capsys.readouterr().err
    assert rc == 0, err
    acc = _read(logs)
    tags = set(acc.Tags()["scalars"])
    for tag in ("loss/train", "time/step_s", "time/samples_per_s", "params/trainable", "params/frozen",
                "memory/grad_bytes", "memory/optimizer_state_bytes", "memory/peak_bytes",
                "memory/process_rss_bytes", "lr/group0"):
        assert tag in tags, (tag, sorted(tags))
    assert [e.step for e in acc.Scalars("loss/train")] == [0, 1, 2, 3]
    trainable = [e.value for e in acc.Scalars("params/trainable")]
    assert trainable[0] < trainable[-1]  # the stage unfroze layer4
    texts = set(acc.Tags()["tensors"])
    assert {"events/text_summary", "plan/text_summary"} <= texts
    events = list(acc.Tensors("events/text_summary"))
    assert events and events[0].step == 2
    assert b"layer4" in events[0].tensor_proto.string_val[0]
    # the peak (RSS growth on the CPU) and the absolute process RSS keep their own names
    peak, rss = acc.Scalars("memory/peak_bytes")[-1].value, acc.Scalars("memory/process_rss_bytes")[-1].value
    assert 0 <= peak < rss


def test_scalars_of_writes_new_numeric_fields_and_skips_missing_probes():
    m = StepMetrics(step=3, epoch=0, loss=0.5, step_time_s=0.1, data_time_s=0.0, samples_per_s=20.0,
                    wall_time=0.0, mem_allocated=None, mem_peak=None, mem_reserved=None, trainable_params=10,
                    frozen_params=5, grad_bytes=40, optimizer_state_bytes=80, lr=[1e-3, 1e-4])
    s = scalars_of(m)
    assert s["lr/group1"] == pytest.approx(1e-4) and s["params/frozen"] == 5.0
    assert "memory/allocated_bytes" not in s and "step" not in s and not any("wall" in k for k in s)


def test_missing_tensorboard_is_one_line_naming_the_pip_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    real_import = builtins.__import__

    def no_tensorboard(name: str, *args, **kwargs):
        if name.startswith("torch.utils.tensorboard"):
            raise ImportError("No module named 'tensorboard'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tensorboard)
    with pytest.raises(MetricsError) as e:
        TensorBoardWriter(tmp_path / "tb")
    assert "pip install" in str(e.value) and "\n" not in str(e.value)


def test_config_takes_tensorboard_dir_and_checks_it():
    assert TrainConfig(tensorboard_dir=Path("runs/a")).validate().tensorboard_dir == "runs/a"
    with pytest.raises(ConfigError, match="tensorboard_dir"):
        TrainConfig(tensorboard_dir=3).validate()  # type: ignore[arg-type]
