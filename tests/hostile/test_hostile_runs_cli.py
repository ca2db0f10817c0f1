"""``workbench runs`` on hostile run folders: a FIFO, a symlink loop, a huge, truncated, deeply
nested or non-UTF-8 run file is one line on stderr, never a hang or a traceback; the other
runs are still read, and the exit code is 2 only when no run can be read."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.run_folders import app_run, save_folder
from tests.hostile.makers import nested_json
from workbench.cli import main
from workbench.core.runs.store import RunStore

pytestmark = pytest.mark.skipif(os.name == "nt", reason="symlinks and FIFOs")


def _app_folder(tmp_path: Path) -> Path:
    rec = app_run(RunStore(tmp_path / "store"), "#1 app", [10, 10], [2, 2])
    assert rec.folder is not None
    return rec.folder


def _fifo_run_json(tmp_path: Path) -> Path:
    folder = _app_folder(tmp_path)
    (folder / "run.json").unlink()
    os.mkfifo(folder / "run.json")
    return folder


def _fifo_summary(tmp_path: Path) -> Path:
    folder = save_folder(tmp_path / "cli", [10], [1])
    (folder / "summary.json").unlink()
    os.mkfifo(folder / "summary.json")
    return folder


def _fifo_as_the_run(tmp_path: Path) -> Path:
    os.mkfifo(tmp_path / "pipe")
    return tmp_path / "pipe"


def _loop_as_the_run(tmp_path: Path) -> Path:
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    return tmp_path / "loop"


def _loop_run_json(tmp_path: Path) -> Path:
    folder = _app_folder(tmp_path)
    (folder / "run.json").unlink()
    (folder / "run.json").symlink_to(folder / "run.json")
    return folder


def _huge_summary(tmp_path: Path) -> Path:
    folder = save_folder(tmp_path / "cli", [10], [1])
    with (folder / "summary.json").open("w") as f:
        f.write('{"x": "' + "a" * (17 * 2**20) + '"}')
    return folder


def _truncated_run_json(tmp_path: Path) -> Path:
    folder = _app_folder(tmp_path)
    text = (folder / "run.json").read_text()
    (folder / "run.json").write_text(text[: len(text) // 2])
    return folder


def _nested_run_json(tmp_path: Path) -> Path:
    folder = _app_folder(tmp_path)
    (folder / "run.json").write_text(nested_json(100_000))
    return folder


def _non_utf8_run_json(tmp_path: Path) -> Path:
    folder = _app_folder(tmp_path)
    (folder / "run.json").write_bytes(b'{"format": "workbench-run", "name": "\xff\xfe"}')
    return folder


def _wrong_types_summary(tmp_path: Path) -> Path:
    folder = save_folder(tmp_path / "cli", [10], [1])
    (folder / "summary.json").write_text(json.dumps({"status": "completed", "summary": [1, 2]}))
    return folder


BAD_RUNS: dict[str, Callable[[Path], Path]] = {
    "fifo run.json": _fifo_run_json,
    "fifo summary.json": _fifo_summary,
    "fifo named as the run": _fifo_as_the_run,
    "symlink loop named as the run": _loop_as_the_run,
    "run.json a symlink loop": _loop_run_json,
    "huge summary.json": _huge_summary,
    "truncated run.json": _truncated_run_json,
    "deeply nested run.json": _nested_run_json,
    "non-UTF-8 run.json": _non_utf8_run_json,
    "summary of the wrong shape": _wrong_types_summary,
}


@pytest.mark.parametrize("make", BAD_RUNS.values(), ids=BAD_RUNS.keys())
@pytest.mark.parametrize("action", ["list", "show", "compare"])
def test_a_hostile_run_is_one_line_and_the_good_runs_are_read(
    make: Callable[[Path], Path], action: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = make(tmp_path)
    good = [save_folder(tmp_path / f"good{i}", [10, 10], [2, 2]) for i in range(2)]
    assert main(["runs", action, str(bad), *map(str, good)]) == 0
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and str(bad) in captured.err and "Traceback" not in captured.err
    assert "good0" in captured.out and "good1" in captured.out
    assert main(["runs", action, str(bad)]) == 2  # nothing else to read
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "Traceback" not in err


def _metrics_fifo(folder: Path) -> None:
    (folder / "metrics.jsonl").unlink()
    os.mkfifo(folder / "metrics.jsonl")


def _metrics_huge_line(folder: Path) -> None:
    with (folder / "metrics.jsonl").open("a") as f:
        f.write("9" * (2 << 20) + "\n")


def _metrics_truncated(folder: Path) -> None:
    text = (folder / "metrics.jsonl").read_text()
    (folder / "metrics.jsonl").write_text(text[:-40])


def _metrics_non_utf8(folder: Path) -> None:
    with (folder / "metrics.jsonl").open("ab") as f:
        f.write(b"\xff\xfe\x00garbage\n")


def _metrics_linked_out(folder: Path) -> None:
    (folder / "metrics.jsonl").unlink()
    (folder / "metrics.jsonl").symlink_to("/dev/zero")


BAD_METRICS: dict[str, Callable[[Path], None]] = {
    "fifo": _metrics_fifo,
    "huge line": _metrics_huge_line,
    "truncated": _metrics_truncated,
    "non-UTF-8": _metrics_non_utf8,
    "linked out of the folder": _metrics_linked_out,
}


@pytest.mark.parametrize("spoil", BAD_METRICS.values(), ids=BAD_METRICS.keys())
def test_hostile_metrics_keep_the_summary_s_numbers(
    spoil: Callable[[Path], None], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = save_folder(tmp_path / "bad", [30, 30, 30], [5, 5, 5])
    good = save_folder(tmp_path / "good", [10, 10, 10], [5, 5, 5])
    spoil(bad)
    assert main(["runs", "compare", str(good), str(bad)]) == 0
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "metrics not read" in captured.err and "Traceback" not in captured.err
    assert "good vs bad: step time 0.33×" in captured.out  # from the summary: the run is still compared (bad is the oldest)
