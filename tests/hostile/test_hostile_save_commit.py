"""A finished run is never lost: a kill at any step of the commit leaves the earlier or the new
run at the save folder, the next run finishes the commit and says so, and files that appear
in the save folder during a run never cost the run its results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.cli import main
from workbench.core.training import run_folder
from workbench.core.training.run_folder import RunFolderError, RunOutputs, check_save_folder, recover_save

QUICK = ["--model", "resnet18", "--num-classes", "10", "--image-size", "32", "--batch-size", "2",
         "--data", "synthetic:8", "--device", "cpu", "--no-progress", "--steps", "1"]


class Killed(BaseException):
    """A kill: nothing after it runs (no except, no close)."""


def _run_in(folder: Path, tag: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(json.dumps({"run": tag}))
    (folder / "plan.json").write_text("{}")


def _which(final: Path) -> str | None:
    try:
        return json.loads((final / "summary.json").read_text())["run"]
    except FileNotFoundError:
        return None


def _hidden(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".run") and p.name != ".run.lock")


def _staged(final: Path) -> RunOutputs:
    out = RunOutputs.open(final, None)
    assert out.staging is not None
    for w in out.writers:  # the engine closes the metrics writers before it saves
        w.close()
    _run_in(out.staging, "new")
    return out


def _kill(out: RunOutputs) -> None:
    """What a kill leaves: no close(); the OS drops the locks with the process."""
    for lock in out._locks:
        lock.release()


STEPS = ["_write_journal", "_exchange", "_swap_in", "_drop_earlier", "_clear_journal"]


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "two-step"])
@pytest.mark.parametrize("step", STEPS)
def test_kill_at_each_step_keeps_a_whole_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str,
                                             exchange: bool) -> None:
    final = tmp_path / "run"
    _run_in(final, "old")
    if not exchange:
        monkeypatch.setattr(run_folder, "_exchange", lambda a, b: False)
    out = _staged(final)
    real = getattr(run_folder, step)

    def killed(*args: object) -> object:
        raise Killed

    monkeypatch.setattr(run_folder, step, killed)
    with pytest.raises(Killed):
        out.commit()
    _kill(out)
    assert _which(final) in ("old", "new")  # never neither
    monkeypatch.setattr(run_folder, step, real)
    state = _which(final)
    note = recover_save(final)
    # the journal is written before the atomic step: from then on the finished run wins
    expected = "old" if step == "_write_journal" else "new"
    assert _which(final) == expected
    if step == "_write_journal":
        assert note is not None and "kept in" in note  # killed before its commit: kept visible, not deleted
        kept = [p for p in tmp_path.iterdir() if p.name.startswith("run.unsaved-")]
        assert len(kept) == 1 and _which(kept[0]) == "new"
    elif step != "_clear_journal" or state != "new":
        assert note is not None and str(final) in note
    assert _hidden(tmp_path) == []
    assert recover_save(final) is None  # nothing left to do


def test_two_step_window_kill_is_rolled_forward(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without an exchange, a kill between moving DIR aside and renaming staging in."""
    final = tmp_path / "run"
    _run_in(final, "old")
    monkeypatch.setattr(run_folder, "_exchange", lambda a, b: False)
    out = _staged(final)
    calls = []
    real_rename = run_folder.os.rename

    def rename(a: object, b: object) -> None:
        calls.append((a, b))
        if len(calls) == 2:
            raise Killed
        real_rename(a, b)

    monkeypatch.setattr(run_folder.os, "rename", rename)
    with pytest.raises(Killed):
        out.commit()
    monkeypatch.setattr(run_folder.os, "rename", real_rename)
    _kill(out)
    assert not final.exists()  # the one window the journal covers
    note = check_save_folder(final, overwrite=True)  # the CLI's start-of-run check recovers first
    assert note is not None and "completed an interrupted save" in note and _which(final) == "new"
    assert _hidden(tmp_path) == []


def test_old_style_half_done_commit_is_put_back(tmp_path: Path) -> None:
    """An older version's kill between its two renames left only ``.run.old-*``."""
    _run_in(tmp_path / ".run.old-1a2b3c4d", "old")
    with pytest.raises(RunFolderError, match="holds the earlier run again.*pass --overwrite"):
        check_save_folder(tmp_path / "run", overwrite=False)  # recovered, then the usual refusal
    assert _which(tmp_path / "run") == "old"
    assert check_save_folder(tmp_path / "run", overwrite=True) is None


def test_foreign_file_during_the_run_keeps_the_results(tmp_path: Path) -> None:
    final = tmp_path / "run"
    out = _staged(final)
    final.mkdir()
    (final / "notes.txt").write_text("mine")  # appeared during the run
    with pytest.raises(RunFolderError, match=r"notes\.txt.*kept in .*run\.unsaved-"):
        out.commit()
    out.close()
    kept = [p for p in tmp_path.iterdir() if p.name.startswith("run.unsaved-")]
    assert len(kept) == 1 and _which(kept[0]) == "new"
    assert (final / "notes.txt").read_text() == "mine" and sorted(p.name for p in final.iterdir()) == ["notes.txt"]


def test_foreign_file_during_a_cli_run_is_one_line_and_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from workbench.core.training.engine import Trainer

    final = tmp_path / "run"
    real_save = Trainer._save

    def save_then_intrude(self: Trainer, folder: Path, result: object) -> None:
        real_save(self, folder, result)
        final.mkdir(exist_ok=True)
        (final / "mine.txt").write_text("x")

    monkeypatch.setattr(Trainer, "_save", save_then_intrude)
    rc = main(["train", *QUICK, "--save", str(final)])
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err, err
    kept = [p for p in tmp_path.iterdir() if p.name.startswith("run.unsaved-")]
    assert len(kept) == 1 and (kept[0] / "trainable.safetensors").is_file() and (kept[0] / "summary.json").is_file()
    assert str(kept[0]) in err


def test_a_successful_commit_replaces_in_one_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    final = tmp_path / "run"
    _run_in(final, "old")
    out = _staged(final)
    seen: list[str | None] = []
    real = run_folder._swap_in

    def watched(f: Path, s: Path, a: Path) -> None:
        seen.append(_which(final))
        real(f, s, a)
        seen.append(_which(final))

    monkeypatch.setattr(run_folder, "_swap_in", watched)
    out.commit()
    out.close()
    assert seen == ["old", "new"] and _hidden(tmp_path) == []


def test_cli_says_what_it_recovered(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    final = tmp_path / "run"
    _run_in(tmp_path / ".run.old-0badc0de", "old")  # an older version's kill between its renames
    rc = main(["train", *QUICK, "--save", str(final), "--overwrite"])
    err = capsys.readouterr().err
    assert rc == 0
    assert "workbench train: recovered an interrupted save" in err and "Traceback" not in err
    assert (final / "trainable.safetensors").is_file() and _hidden(tmp_path) == []


@pytest.mark.parametrize("journal", [
    "{not json",
    json.dumps({"staging": "../../etc", "aside": ".run.old-1", "inode": 1}),
    json.dumps({"staging": ".other.staging-1", "aside": ".run.old-1", "inode": 1}),
    json.dumps([1, 2, 3]),
])
def test_a_hostile_journal_is_one_line_and_touches_nothing(tmp_path: Path, journal: str) -> None:
    final = tmp_path / "run"
    _run_in(final, "old")
    (tmp_path / ".run.commit.json").write_text(journal)
    with pytest.raises(RunFolderError, match="journal .* cannot be read"):
        check_save_folder(final, overwrite=True)
    assert _which(final) == "old"
