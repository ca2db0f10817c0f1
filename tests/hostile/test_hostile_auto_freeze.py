"""Hostile input to auto-freeze's flags: one line, exit 2, nothing trained."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.cli import main

QUICK = ["train", "--model", "resnet18", "--num-classes", "10", "--image-size", "16", "--batch-size", "8",
         "--data", "synthetic:16", "--device", "cpu", "--no-progress", "--steps", "1", "--auto-freeze"]


@pytest.mark.parametrize("flags, needle", [
    (["--auto-freeze-every=0"], "auto_freeze_every"),
    (["--auto-freeze-every=-5"], "auto_freeze_every"),
    (["--auto-freeze-max=1.5"], "auto_freeze_max"),
    (["--auto-freeze-max=nan"], "auto_freeze_max"),
    (["--auto-freeze-max=-0"], "auto_freeze_max"),
    (["--auto-freeze-threshold=inf"], "auto_freeze_threshold"),
    (["--auto-freeze-threshold=-1"], "auto_freeze_threshold"),
])
def test_bad_values_are_one_line(flags: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main([*QUICK, *flags])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and needle in lines[0] and "Traceback" not in err, err


@pytest.mark.parametrize("value", ["1" * 5000, "[1]", '{"__class__": "os.system"}', "\"50\""])
def test_bad_values_in_a_config_file(value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "cfg.json"
    cfg.write_text('{"auto_freeze": true, "auto_freeze_every": ' + value + "}")
    rc = main(["train", "--config", str(cfg)])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
