"""``workbench export --run FOLDER --to train.py``: the script of a saved run trains it again, loss for loss."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.exported import run_exported_script
from workbench.cli import main
from workbench.core.export import ExportError
from workbench.core.export.from_run import load_run
from workbench.core.plan.rules import FreezePlan

NET = '''
from torch import nn


def make():
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Dropout(0.2),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 10))
'''


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A run saved by ``workbench train --save`` (plain SGD, a plan file with a stage, cosine warm-up)."""
    folder = tmp_path_factory.mktemp("cli_run")
    (folder / "net.py").write_text(NET)
    plan = {"rules": [{"select": "0", "frozen": True}, {"select": "3", "eval": True}],
            "stages": [{"at_step": 3, "rules": [{"select": "0", "frozen": False, "lr_scale": 0.5}]}]}
    (folder / "plan.json").write_text(json.dumps(plan))
    model = f"py:{folder / 'net.py'}:make"
    assert main(["train", "--model", model, "--plan", str(folder / "plan.json"), "--data", "synthetic:48",
                 "--image-size", "8", "--batch-size", "4", "--steps", "8", "--device", "cpu", "--optimizer", "sgd",
                 "--lr", "0.05", "--scheduler", "cosine", "--warmup-steps", "2", "--save", str(folder / "run")]) == 0
    return folder, model


def test_the_script_of_a_cli_run_gives_its_losses(saved_run, tmp_path, capsys):
    folder, model = saved_run
    script = tmp_path / "train.py"
    # the run folder names model code: it is never run because a file names it
    assert main(["export", "--run", str(folder / "run"), "--to", str(script)]) == 2
    err = capsys.readouterr().err
    assert "model code" in err and len(err.strip().splitlines()) == 1 and not script.exists()
    assert main(["export", "--run", str(folder / "run"), "--to", str(script), "--model", model]) == 0
    text = script.read_text()
    assert "momentum=0.0," in text and "SCHEDULER = 'cosine'" in text and "WARMUP_STEPS = 2" in text
    ns = run_exported_script(script)
    got = ns["main"]([])
    want = [json.loads(line)["loss"] for line in (folder / "run" / "metrics.jsonl").read_text().splitlines()
            if '"loss"' in line]
    assert got == pytest.approx(want, rel=1e-5) and len(got) == 8


def test_an_app_run_record_exports(saved_run, tmp_path):
    folder, model = saved_run
    app_run = tmp_path / "20260101-000000-ab12"
    app_run.mkdir()
    config = json.loads((folder / "run" / "config.json").read_text())
    plan = {"rules": [{"select": "layer1", "frozen": True}],
            "stages": [{"at_step": 3, "rules": [{"select": "layer1", "frozen": False}]}]}
    record = {"format": "workbench-run", "version": 1, "id": app_run.name, "name": "#1",
              "config": {**config, "model": None, "plan": None}, "plan": plan,
              "model": {"label": "net", "spec": {"source": "torchvision", "name": "resnet18", "num_classes": 10}}}
    (app_run / "run.json").write_text(json.dumps(record))
    saved = load_run(app_run)
    assert saved.spec.name == "resnet18" and saved.plan.stages and saved.config.optimizer == "sgd"
    assert main(["export", "--run", str(app_run), "--to", str(tmp_path / "app.py")]) == 0
    assert "ARCH = 'resnet18'" in (tmp_path / "app.py").read_text()


def test_bad_run_folders_are_one_line_each(saved_run, tmp_path):
    folder, _ = saved_run
    # the refusals of the run reader `workbench runs` and the app use, each one line naming the folder
    with pytest.raises(ExportError, match="missing: does not exist"):
        load_run(tmp_path / "missing")
    with pytest.raises(ExportError, match="not a run folder"):
        load_run(tmp_path)
    moved = tmp_path / "moved"
    moved.mkdir()
    record = json.loads((folder / "run" / "run.json").read_text())
    record["config"] = {**record["config"], "plan": "no_such_plan.json"}
    (moved / "run.json").write_text(json.dumps(record))
    with pytest.raises(ExportError, match="plan file 'no_such_plan.json' is not found"):
        load_run(moved)
    assert load_run(moved, plan=FreezePlan()).plan.rules == []  # --plan gives it
    (moved / "run.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(ExportError, match="not a workbench run file"):
        load_run(moved)
    (moved / "run.json").write_text(json.dumps({**record, "version": 99}))
    with pytest.raises(ExportError, match="newer than this app reads"):  # what `workbench runs` refuses too
        load_run(moved)
