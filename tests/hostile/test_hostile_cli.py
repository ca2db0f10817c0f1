"""Bad input on the command line: one line on stderr, exit 2, never a traceback."""

from __future__ import annotations

import importlib
import json
import os
import signal
from pathlib import Path

import pytest
import torch

import workbench.commands.train as train_cmd
from tests.hostile.makers import nested_json
from workbench import cli
from workbench.cli import main
from workbench.core.plan.rules import FreezePlan, Rule
from workbench.core.training.engine import Trainer

QUICK = ["--model", "resnet18", "--num-classes", "10", "--image-size", "32", "--batch-size", "2",
         "--data", "synthetic:16", "--device", "cpu"]


@pytest.fixture
def plan(tmp_path: Path) -> Path:
    p = tmp_path / "plan.json"
    FreezePlan([Rule("*", frozen=True), Rule("fc", frozen=False)]).save(p)
    return p


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    rc = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return rc, err


def _assert_one_line(rc: int, err: str, *needles: str) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1, err
    for n in needles:
        assert n in lines[0], lines[0]


def test_deeply_nested_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "deep.json"
    p.write_text('{"rules": ' + nested_json(100_000) + "}")
    _assert_one_line(*_run(["inspect", "resnet18", "--plan", str(p)], capsys), "nested")


def test_deeply_nested_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "deep.json"
    p.write_text(nested_json(50_000))
    _assert_one_line(*_run(["train", "--config", str(p)], capsys), "nested")


@pytest.mark.parametrize("flag", ["--plan", "--config"])
def test_dev_zero_is_refused_at_once(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero here")
    argv = ["inspect", "resnet18", "--plan", "/dev/zero"] if flag == "--plan" else ["train", "--config", "/dev/zero"]
    _assert_one_line(*_run(argv, capsys), "not a regular file")


def test_huge_plan_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "huge.json"
    with p.open("wb") as f:
        f.truncate(17 * 1024 * 1024)  # sparse: no disk used
    _assert_one_line(*_run(["inspect", "resnet18", "--plan", str(p)], capsys), "bytes")


@pytest.mark.parametrize("dest, needle", [("missing/dir/x.py", "does not exist"), ("folder.py", "is a folder")])
def test_export_destinations(tmp_path: Path, plan: Path, dest: str, needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "folder.py").mkdir()
    argv = ["export", "--plan", str(plan), "--model", "resnet18", "--to", str(tmp_path / dest)]
    _assert_one_line(*_run(argv, capsys), needle)


def test_export_read_only_destination(tmp_path: Path, plan: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        if os.access(folder, os.W_OK):  # root ignores modes: simulate a read-only file system
            import workbench.commands.export as export_cmd

            real = export_cmd.os.access
            monkeypatch.setattr(export_cmd.os, "access", lambda p, mode: False if Path(p) == folder else real(p, mode))
        _assert_one_line(*_run(["export", "--plan", str(plan), "--model", "resnet18", "--to", str(folder / "x.py")], capsys),
                         "not writable")
    finally:
        folder.chmod(0o700)


def test_export_write_error_is_one_line(tmp_path: Path, plan: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import workbench.core.export.script as core_export

    def fail(*args: object, **kwargs: object) -> None:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(core_export, "atomic_write", fail)
    _assert_one_line(*_run(["export", "--plan", str(plan), "--model", "resnet18", "--to", str(tmp_path / "x.py")], capsys),
                     "Read-only file system")


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["doctor", "--model", "resnet18", "--lr", "-1", "--steps", "0"], "--lr"),
        (["doctor", "--model", "resnet18", "--lr", "nan", "--steps", "0"], "--lr"),
        (["doctor", "--model", "resnet18", "--device", "bogus", "--steps", "0"], "bogus"),
        (["doctor", "--model", "resnet18", "--batch-size", "0"], "--batch-size"),
        (["inspect", "resnet18", "--depth", "-1"], "--depth"),
        (["inspect", "resnet18", "--optimizer", "bogus"], "bogus"),
        (["train", *QUICK[:-2], "--device", "bogus", "--steps", "1"], "device"),
        (["train", *QUICK, "--optimizer", "bogus", "--steps", "1"], "optimizer"),
        (["train", *QUICK, "--plan", "/nonexistent/plan.json", "--steps", "1"], "no such plan file"),
    ],
)
def test_bad_values_one_line(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    _assert_one_line(*_run(argv, capsys), needle)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("command", ["doctor", "train"])
def test_cuda_without_gpu(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["doctor", "--model", "resnet18", "--device", "cuda", "--steps", "0"] if command == "doctor" else \
        ["train", *QUICK[:-2], "--device", "cuda", "--steps", "1"]
    _assert_one_line(*_run(argv, capsys), "CUDA is not available")


def test_ctrl_c_during_start_up(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted(name: str) -> object:
        raise KeyboardInterrupt  # as if Ctrl+C arrived while torch was being imported

    monkeypatch.setattr(cli.importlib, "import_module", interrupted)
    rc, err = _run(["inspect", "resnet18"], capsys)
    assert rc == 130 and err.strip() == "workbench: interrupted"
    monkeypatch.setattr(cli.importlib, "import_module", importlib.import_module)


def test_sigterm_stops_like_ctrl_c(tmp_path: Path, plan: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    class Terminated(Trainer):
        """Sends SIGTERM to this process during step 1, as a job scheduler would."""

        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            self.step_hook = lambda step: signal.raise_signal(signal.SIGTERM) if step == 1 else None

    monkeypatch.setattr(train_cmd, "Trainer", Terminated)
    save = tmp_path / "run"
    rc = main(["train", *QUICK, "--steps", "50", "--plan", str(plan), "--save", str(save)])
    out, err = capsys.readouterr()
    assert rc == 143 and "Traceback" not in err
    assert "status       stopped: stopped at step 2 of 50" in out and "terminated" in err
    assert json.loads((save / "summary.json").read_text())["status"] == "stopped"  # the summary was written
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
