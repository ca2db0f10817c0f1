"""Save folders never mix runs; a concurrent run on the same path fails at start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from workbench.cli import main
from workbench.core.plan.rules import FreezePlan, Rule
from workbench.core.training.run_folder import (
    PathLock,
    RunFolderError,
    RunOutputs,
    check_save_folder,
)

QUICK = ["--model", "resnet18", "--num-classes", "10", "--image-size", "32", "--batch-size", "2",
         "--data", "synthetic:16", "--device", "cpu", "--no-progress"]


def _plan(tmp_path: Path, rules: list[Rule], name: str) -> Path:
    p = tmp_path / name
    FreezePlan(rules).save(p)
    return p


def test_reused_folder_refused_then_replaced_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ab = _plan(tmp_path, [Rule("*", frozen=True), Rule("fc", frozen=False, reparam={"kind": "a_plus_b"})], "ab.json")
    fc = _plan(tmp_path, [Rule("*", frozen=True), Rule("fc", frozen=False)], "fc.json")
    save = tmp_path / "run"
    assert main(["train", *QUICK, "--steps", "1", "--plan", str(ab), "--save", str(save)]) == 0
    assert (save / "deltas.safetensors").is_file()
    capsys.readouterr()
    rc = main(["train", *QUICK, "--steps", "1", "--plan", str(fc), "--save", str(save)])
    err = capsys.readouterr().err
    assert rc == 2 and "--overwrite" in err and len(err.strip().splitlines()) == 1
    assert main(["train", *QUICK, "--steps", "1", "--plan", str(fc), "--save", str(save), "--overwrite"]) == 0
    assert not (save / "deltas.safetensors").exists()  # no stale file of the A+B run
    assert "reparam" not in (save / "plan.json").read_text()
    leftovers = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".run"))
    assert leftovers in ([], [".run.lock"])  # the OS lock's empty file may stay; no staging, no old run


def test_folder_with_foreign_files_never_replaced(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    for overwrite in (False, True):
        with pytest.raises(RunFolderError, match="not a run's"):
            check_save_folder(tmp_path, overwrite=overwrite)
    check_save_folder(tmp_path / "new", overwrite=False)


def test_save_path_that_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "x"
    f.write_text("")
    with pytest.raises(RunFolderError, match="is a file"):
        check_save_folder(f, overwrite=True)


_HOLD = (
    "import filelock, sys, time; lock = filelock.FileLock(sys.argv[1]); lock.acquire(); "
    "print('held', flush=True); time.sleep(60)"
)


def _holder(lock_file: Path) -> subprocess.Popen[str]:
    other = subprocess.Popen([sys.executable, "-c", _HOLD, str(lock_file)], stdout=subprocess.PIPE, text=True)
    assert other.stdout is not None and other.stdout.readline().strip() == "held"
    return other


def test_live_lock_refuses_a_concurrent_run(tmp_path: Path) -> None:
    other = _holder(tmp_path / ".run.lock")
    try:
        with pytest.raises(RunFolderError, match="another run is writing the save folder"):
            RunOutputs.open(tmp_path / "run", None)
    finally:
        other.kill()  # killed, not released: the OS frees the lock with the process
        other.wait()
    outputs = RunOutputs.open(tmp_path / "run", None)
    outputs.close()


def test_a_lock_file_left_on_disk_is_not_a_lock(tmp_path: Path) -> None:
    (tmp_path / ".run.lock").write_text("12345")  # what the old pid-file lock left behind
    RunOutputs.open(tmp_path / "run", None).close()


def test_metrics_file_locked_and_written_once(tmp_path: Path) -> None:
    metrics = tmp_path / "m.jsonl"
    first = RunOutputs.open(None, metrics)
    try:
        with pytest.raises(RunFolderError, match="metrics file"):
            PathLock(metrics, "metrics file")  # the same process, a second run: refused too
    finally:
        first.close()
    PathLock(metrics, "metrics file").release()


def test_uncommitted_staging_is_dropped(tmp_path: Path) -> None:
    outputs = RunOutputs.open(tmp_path / "run", None)
    staging = outputs.staging
    assert staging is not None and staging.is_dir()
    outputs.close()  # e.g. a second Ctrl+C during saving
    assert not staging.exists() and not (tmp_path / "run").exists()


def test_second_ctrl_c_while_saving_keeps_the_earlier_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from workbench.core.training.engine import Trainer

    fc = _plan(tmp_path, [Rule("*", frozen=True), Rule("fc", frozen=False)], "fc.json")
    save = tmp_path / "run"
    assert main(["train", *QUICK, "--steps", "1", "--plan", str(fc), "--save", str(save)]) == 0
    before = {p.name: p.read_bytes() for p in save.iterdir()}

    def interrupted_save(self: Trainer, folder: Path, result: object) -> None:
        (folder / "trainable.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "_save", interrupted_save)
    rc = main(["train", *QUICK, "--steps", "1", "--plan", str(fc), "--save", str(save), "--overwrite"])
    assert rc == 130 and "Traceback" not in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in save.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".run") and p.name != ".run.lock"] == []
