"""``workbench train``: summary table, config files, exit codes, Ctrl+C, metrics files."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from pathlib import Path

import pytest

import workbench.commands.train as train_cmd
from tests.preload import python_argv
from workbench.cli import main
from workbench.core.plan.rules import FreezePlan, Rule
from workbench.core.training.config import TrainConfig
from workbench.core.training.engine import Trainer
from workbench.core.training.metrics import load_metrics


@pytest.fixture
def fc_plan(tmp_path: Path) -> Path:
    p = tmp_path / "plan.json"
    FreezePlan([Rule("*", frozen=True), Rule("fc", frozen=False)]).save(p)
    return p


QUICK = ["--model", "resnet18", "--num-classes", "10", "--image-size", "32", "--batch-size", "2",
         "--data", "synthetic:16", "--device", "cpu"]


def test_train_prints_progress_and_summary(tmp_path: Path, fc_plan: Path, capsys: pytest.CaptureFixture[str]):
    metrics = tmp_path / "m.jsonl"
    handler = signal.getsignal(signal.SIGINT)  # not always Python's default: a background job ignores SIGINT
    rc = main(["train", *QUICK, "--steps", "3", "--plan", str(fc_plan), "--metrics", str(metrics)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "3/3" in err  # the progress bar
    assert "status       completed: completed 3 steps" in out
    assert "trainable    5,130 of 11,181,642 params (0.0%)" in out
    assert "peak memory" in out and "(peak tensor bytes)" in out and "RSS growth" in out and "median step" in out
    assert "verify       verify OK: 60 frozen tensors" in out
    assert [m.step for m in load_metrics(metrics)] == [0, 1, 2]
    assert signal.getsignal(signal.SIGINT) is handler  # handler restored


def test_config_file_with_flag_overrides(tmp_path: Path, fc_plan: Path, capsys: pytest.CaptureFixture[str]):
    cfg = tmp_path / "cfg.json"
    TrainConfig(model="resnet18", num_classes=10, image_size=32, batch_size=2, steps=50, data="synthetic:16",
                plan=str(fc_plan), optimizer="sgd_momentum", device="cpu").save(cfg)
    rc = main(["train", "--config", str(cfg), "--steps", "2", "--json", "--save", str(tmp_path / "run")])
    out, err = capsys.readouterr()
    assert rc == 0, err
    result = json.loads(out)
    assert result["status"] == "completed" and result["steps"] == 2
    assert result["summary"]["trainable_params"] == 5130 and result["verify"]["ok"]
    saved = TrainConfig.load(tmp_path / "run" / "config.json")
    assert saved.steps == 2 and saved.optimizer == "sgd_momentum" and saved.plan == str(fc_plan)


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--optimizer", "lion"], "config field 'optimizer'"),
        (["--model", "resnet_18"], "resnet18"),
        (["--plan", "missing.json"], "no such plan file"),
        (["--metrics", "m.txt"], r"\.jsonl or \.csv"),
    ],
)
def test_bad_input_is_one_line_exit_2(extra: list[str], match: str, capsys: pytest.CaptureFixture[str]):
    rc = main(["train", *QUICK, "--steps", "1", *extra])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("workbench train: error:") and len(err.strip().splitlines()) == 1
    assert re.search(match, err)


def test_nonfinite_loss_exits_1(fc_plan: Path, capsys: pytest.CaptureFixture[str]):
    rc = main(["train", *QUICK, "--steps", "5", "--plan", str(fc_plan), "--optimizer", "sgd", "--lr", "1e38", "--no-progress"])
    out, err = capsys.readouterr()
    assert rc == 1
    assert "status       nonfinite: loss is" in out
    assert "workbench train: nonfinite: loss is" in err and "Traceback" not in err


def test_ctrl_c_stops_cleanly_with_exit_130(fc_plan: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    class Interrupted(Trainer):
        """Sends SIGINT to this process during step 1, as Ctrl+C would."""

        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            self.step_hook = lambda step: signal.raise_signal(signal.SIGINT) if step == 1 else None

    monkeypatch.setattr(train_cmd, "Trainer", Interrupted)
    handler = signal.getsignal(signal.SIGINT)
    rc = main(["train", *QUICK, "--steps", "50", "--plan", str(fc_plan)])
    out, err = capsys.readouterr()
    assert rc == 130
    assert "status       stopped: stopped at step 2 of 50" in out  # step 1 finished, then it stopped
    assert "verify OK" in out and "stopping after the current step" in err
    assert signal.getsignal(signal.SIGINT) is handler


def test_python_dash_m_workbench_train_help():
    proc = subprocess.run(python_argv("-m", "workbench", "train", "--help"), capture_output=True, text=True)
    assert proc.returncode == 0
    for flag in ("--steps", "--epochs", "--amp", "--channels-last", "--compile", "--metrics", "--save", "--config"):
        assert flag in proc.stdout


def test_model_comes_from_the_plan_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    plan = tmp_path / "plan.json"
    FreezePlan([Rule("*", frozen=True), Rule("fc", frozen=False)],
               model={"source": "torchvision", "name": "resnet18", "num_classes": 10}).save(plan)
    rc = main(["train", "--plan", str(plan), "--image-size", "32", "--batch-size", "2", "--steps", "1",
               "--data", "synthetic:4", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    summary = json.loads(out)["summary"]
    assert summary["trainable_params"] == 5130 and summary["new_heads"] == ["fc"]


def test_train_warns_when_a_plus_b_changes_the_function(tmp_path, capsys):
    from workbench.cli import main
    from workbench.core.plan.rules import FreezePlan

    plan = tmp_path / "ab.json"
    FreezePlan.from_dict({"rules": [
        {"select": "*", "frozen": True},
        {"select": "fc", "frozen": False, "reparam": {"kind": "a_plus_b", "b_init": {"random": {"seed": 3}}}},
    ]}).save(plan)
    rc = main(["train", "--model", "resnet18", "--plan", str(plan), "--steps", "1", "--batch-size", "2",
               "--image-size", "32", "--device", "cpu", "--no-progress"])
    assert rc == 0
    err = capsys.readouterr().err
    assert "warning fc: rule 1: A + B does not equal the loaded weights" in err


def test_schedule_validation_and_classes_in_the_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    rc = main(["train", *QUICK, "--steps", "4", "--scheduler", "cosine", "--warmup-steps", "1", "--val-every", "2",
               "--val-fraction", "0.25", "--lr", "0.01", "--no-progress"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert re.search(r"^classes +10 \(new head: fc\)$", out, re.M)
    assert re.search(r"^validation +after step 3 \(4 samples\): val loss \d+\.\d{4}( \(best \d+\.\d{4} after step 1\))?"
                     r" · acc \d+\.\d %( \(best \d+\.\d %\))?$", out, re.M)
    factor = 0.5 * (1 + __import__("math").cos(__import__("math").pi * 2 / 3))
    assert re.search(rf"^lr +{0.01 * factor:.3g} \(x1\) at the end; cosine, 1 warm-up steps$", out, re.M)
    rc = main(["train", *QUICK, "--steps", "2", "--val-every", "1", "--val-fraction", "0.25", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    s = json.loads(out)["summary"]
    assert s["val_step"] == 1 and isinstance(s["val_loss"], float) and 0 <= s["val_acc"] <= 1
    assert s["best_val_loss"] <= s["val_loss"] and s["best_val_step"] in (0, 1) and s["best_val_acc"] >= s["val_acc"]
    assert s["lr"] == [1e-3] and s["lr_scales"] == [1.0] and s["num_classes"] == 10 and s["scheduler"] == "constant"


def test_unknown_scheduler_is_one_line_naming_the_field_and_choices(capsys: pytest.CaptureFixture[str]):
    rc = main(["train", *QUICK, "--steps", "1", "--scheduler", "step"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "config field 'scheduler'" in err and "constant, cosine, linear, onecycle" in err


def test_summary_names_the_best_validation_when_it_was_not_the_last() -> None:
    from workbench.commands.train import _validation_text

    s = {"val_loss": 0.5, "val_acc": 0.8, "val_step": 9, "val_samples": 4, "best_val_loss": 0.4, "best_val_step": 5}
    assert _validation_text(s) == "after step 9 (4 samples): val loss 0.5000 (best 0.4000 after step 5) · acc 80.0 %"
    assert _validation_text({**s, "best_val_loss": 0.5, "best_val_step": 9}) == "after step 9 (4 samples): val loss 0.5000 · acc 80.0 %"
    assert _validation_text({"start_val_loss": 0.7, "start_val_acc": 0.5}, prefix="start_") == "val loss 0.7000 · acc 50.0 %"
