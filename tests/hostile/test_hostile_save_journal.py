"""The save journal is a reader like any other, recovery deletes only what the save made, and a
kill at every step of the commit (a fault hook, not random timing) leaves the earlier run or the
new one at the save folder."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.preload import python_argv
from tests.timeouts import RECOVERY_S
from workbench.core.training import run_folder
from workbench.core.training.run_folder import (
    COMMIT_STEPS,
    OWNER_FILE,
    RunFolderError,
    RunOutputs,
    check_save_folder,
    recover_save,
)

ROOT = Path(__file__).resolve().parents[2]


class Killed(BaseException):
    """A kill: nothing after it runs (no except, no close)."""


def _run_in(folder: Path, tag: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(json.dumps({"run": tag}))
    (folder / "plan.json").write_text("{}")


def _which(final: Path) -> str | None:
    try:
        return json.loads((final / "summary.json").read_text())["run"]
    except (FileNotFoundError, NotADirectoryError):
        return None


def _hidden(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(".run") and p.name != ".run.lock")


def _staged(final: Path) -> RunOutputs:
    out = RunOutputs.open(final, None)
    assert out.staging is not None
    for w in out.writers:
        w.close()
    _run_in(out.staging, "new")
    return out


@pytest.fixture(params=[True, False], ids=["exchange", "two-step"])
def exchange(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[bool]:
    if not request.param:
        monkeypatch.setattr(run_folder, "_exchange", lambda a, b: False)
    yield request.param


def _after_kill(tmp_path: Path, final: Path, step: str, earlier: bool, reached: bool = True) -> None:
    """What must hold after a kill at ``step``: a whole run now, the right one after recovery."""
    if not reached:  # the two-step window is no step of an exchange, nor of a first save: it committed
        step = "done"
    now = _which(final)
    window = step == "swap-in"  # the one window the journal covers: the earlier run is aside
    assert now in ("old", "new") or (now is None and (window or not earlier)), now  # never a mix
    note = recover_save(final)
    # the earlier run is marked before the atomic step: from then on the finished run wins;
    # killed sooner, the earlier run stays and the finished one is kept in a visible folder
    before_mark = step == "journal" or (step == "mark" and earlier)
    assert _which(final) == (("old" if earlier else None) if before_mark else "new")
    kept = [p for p in tmp_path.iterdir() if p.name.startswith("run.unsaved-")]
    if before_mark:
        assert note is not None and "kept in" in note and len(kept) == 1 and _which(kept[0]) == "new"
        assert not (kept[0] / OWNER_FILE).exists()
    else:
        assert kept == []
    if step not in ("unmark", "done"):
        assert note is not None and str(final) in note, note
    assert _hidden(tmp_path) == [] and not (final / OWNER_FILE).exists()
    assert recover_save(final) is None  # nothing left to do


@pytest.mark.parametrize("earlier", [True, False], ids=["replacing", "first-save"])
@pytest.mark.parametrize("step", COMMIT_STEPS)
def test_an_exception_at_every_step_keeps_a_whole_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      exchange: bool, step: str, earlier: bool) -> None:
    final = tmp_path / "run"
    if earlier:
        _run_in(final, "old")
    out = _staged(final)
    reached: list[str] = []

    def hook(name: str) -> None:
        reached.append(name)
        if name == step:
            raise Killed

    monkeypatch.setattr(run_folder, "commit_fault_hook", hook)
    with contextlib.suppress(Killed):
        out.commit()
    monkeypatch.setattr(run_folder, "commit_fault_hook", None)
    assert (step in reached) == (step != "swap-in" or (not exchange and earlier)), reached
    for lock in out._locks:  # what a kill leaves: no close(); the OS drops the locks
        lock.release()
    _after_kill(tmp_path, final, step, earlier, step in reached)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork: a real process death at each step")
@pytest.mark.parametrize("step", COMMIT_STEPS)
def test_a_process_ended_at_every_step_keeps_a_whole_run(tmp_path: Path, exchange: bool, step: str) -> None:
    """The commit runs in a child that ``os._exit``s at the step: no finally, no close, no flush."""
    final = tmp_path / "run"
    _run_in(final, "old")
    pid = os.fork()
    if pid == 0:  # the child: stage, commit, and die at the step
        code = 3
        try:
            out = _staged(final)
            run_folder.commit_fault_hook = lambda name: os._exit(9) if name == step else None
            out.commit()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.WEXITSTATUS(status)
    assert code == (0 if step == "swap-in" and exchange else 9), code
    _after_kill(tmp_path, final, step, True, code == 9)


# ---------------------------------------------------------------- the journal as a reader
def _journal(tmp_path: Path) -> Path:
    return tmp_path / ".run.commit.json"


def _plant(tmp_path: Path, kind: str) -> None:
    j = _journal(tmp_path)
    if kind == "fifo":
        os.mkfifo(j)
    elif kind == "dev-zero-link":
        j.symlink_to("/dev/zero")
    elif kind == "link-to-a-journal":
        (tmp_path / "elsewhere.json").write_text("{}")
        j.symlink_to(tmp_path / "elsewhere.json")
    elif kind == "huge":
        with j.open("wb") as f:
            f.truncate(200 * 1024 * 1024)  # sparse
    elif kind == "not-utf8":
        j.write_bytes(b'{"staging": "\xff\xfe"}')
    elif kind == "truncated":
        j.write_text('{"format": "workbench-save-journal", "token": "ab')
    elif kind == "folder":
        j.mkdir()


KINDS = ["fifo", "dev-zero-link", "link-to-a-journal", "huge", "not-utf8", "truncated", "folder"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs")
def test_a_hostile_journal_is_one_line_exit_2_and_left_in_place(tmp_path: Path) -> None:
    """``train --save DIR`` with each journal, in a process with a memory cap and a ceiling on its wait."""
    cases = []
    for kind in KINDS:
        folder = tmp_path / kind
        folder.mkdir()
        _run_in(folder / "run", "old")
        _plant(folder, kind)
        cases.append(str(folder / "run"))
    code = textwrap.dedent("""
        import contextlib, io, json, resource, sys
        import workbench.commands.train  # torch and the rest, before the cap
        from workbench.cli import main
        used = int(open('/proc/self/statm').read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (used + 2**30, resource.RLIM_INFINITY))
        for save in json.loads(sys.argv[1]):
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                rc = main(["train", "--model", "resnet18", "--steps", "1", "--device", "cpu", "--save", save,
                           "--overwrite"])
            print(json.dumps([rc, err.getvalue()]), flush=True)
    """)
    r = subprocess.run(python_argv("-c", code, json.dumps(cases)), capture_output=True, text=True, cwd=ROOT,
                       timeout=RECOVERY_S)
    assert r.returncode == 0, r.stderr
    results = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(results) == len(KINDS)
    for kind, save, (rc, err) in zip(KINDS, cases, results, strict=True):
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert rc == 2 and len(lines) == 1 and "Traceback" not in err, (kind, err)
        assert "journal" in lines[0] and "cannot be read" in lines[0], (kind, lines[0])
        assert os.path.lexists(_journal(Path(save).parent)), kind  # left in place, for the user to look at
        assert _which(Path(save)) == "old", kind
    assert "symbolic link" in results[KINDS.index("dev-zero-link")][1]


def _token_journal(tmp_path: Path, **fields: object) -> dict[str, object]:
    data: dict[str, object] = {"format": "workbench-save-journal", "token": "ab" * 16, "staging": ".run.staging-abcdefgh",
                               "aside": ".run.old-0badc0de", "inode": os.lstat(tmp_path / "run").st_ino,
                               "earlier_inode": None}
    data.update(fields)
    _journal(tmp_path).write_text(json.dumps(data))
    return data


def test_a_planted_journal_naming_a_hidden_user_folder_deletes_nothing(tmp_path: Path) -> None:
    """The attack of the report: the journal names ``.run.keepme`` as the earlier run."""
    _run_in(tmp_path / "run", "old")
    _run_in(tmp_path / ".run.keepme", "mine")
    _token_journal(tmp_path, aside=".run.keepme", staging=".run.keepme")
    with pytest.raises(RunFolderError, match=r"\.run\.keepme.*not a .* name this program makes") as e:
        check_save_folder(tmp_path / "run", overwrite=True)
    assert "\n" not in str(e.value)
    assert _which(tmp_path / ".run.keepme") == "mine" and _which(tmp_path / "run") == "old"


def test_folders_with_the_generated_names_but_not_the_token_are_left_alone(tmp_path: Path) -> None:
    """Exact names, right inodes, but no token inside: not provably this program's, never deleted."""
    _run_in(tmp_path / "run", "new")
    _run_in(tmp_path / ".run.old-0badc0de", "mine")
    _run_in(tmp_path / ".run.staging-abcdefgh", "mine too")
    _token_journal(tmp_path, earlier_inode=os.lstat(tmp_path / ".run.old-0badc0de").st_ino)
    with pytest.raises(RunFolderError, match=r"cannot prove it made \(found: run, \.run\.staging-abcdefgh, "
                                             r"\.run\.old-0badc0de\); nothing was changed"):
        recover_save(tmp_path / "run")
    assert _which(tmp_path / ".run.old-0badc0de") == "mine" and _which(tmp_path / ".run.staging-abcdefgh") == "mine too"
    assert _journal(tmp_path).exists()


def test_a_forged_token_cannot_make_recovery_replace_the_users_run(tmp_path: Path) -> None:
    """A planted staging folder holding the journal's token: the user's run was never marked, so it
    stays, and the planted folder is only moved to a visible name (nothing deleted)."""
    _run_in(tmp_path / "run", "mine")
    planted = tmp_path / ".run.staging-abcdefgh"
    _run_in(planted, "planted")
    (planted / OWNER_FILE).write_text("ab" * 16)
    _token_journal(tmp_path, inode=os.lstat(planted).st_ino, earlier_inode=os.lstat(tmp_path / "run").st_ino)
    note = recover_save(tmp_path / "run")
    assert note is not None and "kept in" in note
    assert _which(tmp_path / "run") == "mine"
    assert [_which(p) for p in tmp_path.iterdir() if p.name.startswith("run.unsaved-")] == ["planted"]


def test_a_staging_named_user_folder_without_a_journal_is_left_alone(tmp_path: Path) -> None:
    _run_in(tmp_path / ".run.staging-abcdefgh", "mine")
    _run_in(tmp_path / ".run.staging-notours", "mine")  # not even a generated name
    note = recover_save(tmp_path / "run")
    assert note is not None and "left alone (not made by this program): .run.staging-abcdefgh" in note
    assert _which(tmp_path / ".run.staging-abcdefgh") == "mine" and _which(tmp_path / ".run.staging-notours") == "mine"


def test_a_planted_fifo_where_the_mark_goes_never_blocks_the_commit(tmp_path: Path) -> None:
    """The token is written to a fresh file renamed over: a pipe planted at its name is never opened."""
    final = tmp_path / "run"
    _run_in(final, "old")
    out = _staged(final)
    os.mkfifo(final / OWNER_FILE)
    out.commit()
    out.close()
    assert _which(final) == "new" and _hidden(tmp_path) == []
