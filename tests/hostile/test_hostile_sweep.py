"""Hostile input to ``workbench sweep``: one line, exit 2, and no earlier study lost.

An empty candidate list, a budget of 0, a broken ``--retain`` dataset, a study file that is a
FIFO or not a database, and a folder holding another sweep's study.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

optuna = pytest.importorskip("optuna")

from tests.commands.sweep_fixtures import sweep_argv
from workbench.cli import main


def _fails_in_one_line(argv: list[str], capsys: pytest.CaptureFixture[str], *words: str) -> str:
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own check of a number
        code = int(e.code or 0)
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("workbench sweep: error: ")
    for w in words:
        assert w in err, err
    return err


@pytest.mark.parametrize(("flag", "value", "words"), [
    ("--steps", "0", ("--steps must be a positive integer",)),
    ("--seconds", "0", ("--seconds must be a positive finite number",)),
    ("--seconds", "nan", ("--seconds", "finite number")),
    ("--eval-every", "0", ("--eval-every must be a positive integer",)),
    ("--lr", "-1", ("--lr must be a positive finite number",)),
])
def test_a_budget_of_zero_and_bad_numbers(tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str,
                                          value: str, words: tuple[str, ...]) -> None:
    argv = sweep_argv(tmp_path, tmp_path / "sw")
    if flag == "--seconds":
        argv[argv.index("--steps"):argv.index("--steps") + 2] = []
    argv += [flag, value]
    _fails_in_one_line(argv, capsys, *words)
    assert not (tmp_path / "sw" / "study.db").exists()


def test_an_empty_candidate_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = sweep_argv(tmp_path, tmp_path / "sw")
    i = argv.index("--plans")
    del argv[i:i + 4]
    _fails_in_one_line(argv, capsys, "--memory SIZE", "--plans FILE")
    _fails_in_one_line(argv + ["--memory", "1B"], capsys, "below the model's own weights")
    assert not (tmp_path / "sw").exists()


def test_a_broken_retain_dataset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fails_in_one_line(sweep_argv(tmp_path, tmp_path / "sw", "--retain", f"imagefolder:{tmp_path / 'nothing'}"),
                       capsys, "--retain imagefolder:")
    (tmp_path / "bad_data.py").write_text(
        "import torch\n\nclass Bad(torch.utils.data.Dataset):\n    def __len__(self):\n        return 4\n\n"
        "    def __getitem__(self, i):\n        raise ValueError('sample %d is unreadable' % i)\n\n"
        "def data():\n    return Bad()\n")
    err = _fails_in_one_line(sweep_argv(tmp_path, tmp_path / "sw", "--retain", f"py:{tmp_path / 'bad_data.py'}:data"),
                             capsys, "--retain py:")
    assert "0" in err
    assert not (tmp_path / "sw" / "study.db").exists()


def test_a_study_file_that_is_a_fifo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "sw"
    folder.mkdir()
    os.mkfifo(folder / "study.db")
    _fails_in_one_line(sweep_argv(tmp_path, folder), capsys, "is not a regular file")
    assert (folder / "study.db").is_fifo()


@pytest.mark.parametrize("content", [b"not a database at all\n" * 10, b"SQLite format 3\x00" + b"\xff" * 4000])
def test_a_study_file_that_is_not_a_database(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes) -> None:
    folder = tmp_path / "sw"
    folder.mkdir()
    (folder / "study.db").write_bytes(content)
    _fails_in_one_line(sweep_argv(tmp_path, folder), capsys, "study")
    assert (folder / "study.db").read_bytes() == content


def test_another_sweep_in_the_folder_is_refused_and_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "sw"
    assert main(sweep_argv(tmp_path, folder, "--no-prune", steps=1) + ["--eval-every", "1"]) in (0, 1)
    capsys.readouterr()
    before = sqlite3.connect(folder / "study.db").execute("select count(*) from trials").fetchone()[0]
    assert before == 3
    _fails_in_one_line(sweep_argv(tmp_path, folder, "--no-prune", "--lr", "0.5", steps=1) + ["--eval-every", "1"],
                       capsys, "is another sweep", "left as it is")
    study = optuna.load_study(study_name="sweep", storage=f"sqlite:///{folder / 'study.db'}")
    assert len(study.get_trials()) == before
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.get_trials())
