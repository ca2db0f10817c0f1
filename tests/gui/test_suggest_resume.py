"""Suggest… ▸ Resume: a Train each cancelled after its first candidate resumes in the same sweep folder from a
new dialog; the row done fills at once and is not trained again (counted in the study and the events), the
rest train; the Runs tab takes in each candidate's run as it finishes. A folder that is not a sweep's, another
sweep's folder, or a damaged study is one line and nothing in it changes (issue 34)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from tests.gui.suggest_helpers import load_tiny, open_suggest
from tests.timeouts import GUI_RUN_S, ms
from workbench.gui.advisor.dialog import SuggestDialog
from workbench.gui.main_window import MainWindow

#: the app's idle freeze, as a user has it: each candidate's collection (Optuna's after each trial) walks what it made
pytestmark = pytest.mark.usefixtures("idle_freeze")


optuna = pytest.importorskip("optuna")

STEPS = 2


@pytest.fixture
def tiny(qtbot: Any, window: MainWindow, tmp_path: Path) -> MainWindow:
    return load_tiny(qtbot, window, tmp_path, steps=STEPS)


def _dialog(qtbot: Any, window: MainWindow) -> SuggestDialog:
    d = open_suggest(qtbot, window)
    d.steps.setValue(STEPS)
    return d


def _events(d: SuggestDialog, kinds: dict[str, list[Any]], *, cancel_after_first: bool = False) -> None:
    """Record the sweep's events on the worker thread (``started`` ids, ``resumed`` reports); cancel after the first
    candidate finishes when asked (the sweep then stops before the next one starts)."""
    cancel = d.trainer.cancel

    def on_event(kind: str, data: dict[str, Any]) -> None:
        kinds.setdefault(kind, []).append(data.get("id") if kind != "resumed" else data["report"])
        if kind == "finished" and cancel_after_first:
            cancel.set()

    d.trainer.changed.connect(on_event, Qt.ConnectionType.DirectConnection)


def _sweep_runs(window: MainWindow) -> list[str]:
    return sorted(r.sweep.candidate for r in window.training.panel.runs.records if r.sweep is not None)


def test_a_cancelled_train_each_resumes_and_the_done_row_is_not_trained_again(qtbot: Any, tiny: MainWindow) -> None:
    d = _dialog(qtbot, tiny)
    assert d.resume_button.offer() is None and not d.resume_button.last_action.isEnabled()  # nothing to resume yet
    first: dict[str, list[Any]] = {}
    _events(d, first, cancel_after_first=True)
    assert d.train_each()
    qtbot.waitUntil(lambda: not d.busy, timeout=ms(GUI_RUN_S))
    total = len(d._swept)
    assert len(first["started"]) == 1 and d.trained_rows() == 1 and total >= 2, d.status.text()
    assert "Resume trains the rest" in d.status.text()
    folder = d.trainer.folder
    assert folder is not None
    done = first["started"][0]
    assert len(_sweep_runs(tiny)) == 1  # the Runs tab took in the candidate's run when it finished
    d.close()

    again = _dialog(qtbot, tiny)
    found = again.resume_button.offer()
    assert found is not None and found.folder == folder and found.text.endswith(f"(1 of {total} trained)")
    assert again.resume_button.last_action.isEnabled() and found.text in again.resume_button.last_action.text()
    second: dict[str, list[Any]] = {}
    _events(again, second)
    assert again.resume_button.resume_last(), again.status.text()
    assert again.status.text().startswith("Resuming")
    qtbot.waitUntil(lambda: not again.busy, timeout=ms(GUI_RUN_S))
    (resumed,) = second["resumed"]  # the done row filled before anything trained
    assert [r.id for r in resumed.rows if r.status == "completed" or r.status == "pruned"] == [done]
    assert done not in second["started"] and len(second["started"]) == total - 1, second["started"]
    assert again.trained_rows() == total and again.trainer.folder == folder, again.status.text()
    assert "1 of them before this resume" in again.status.text()
    study = optuna.load_study(study_name="sweep", storage=f"sqlite:///{folder / 'study.db'}")
    finished = [t for t in study.trials if t.params.get("candidate") == done
                and t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)]
    assert len(finished) == 1  # trained once, in the first dialog
    assert len(_sweep_runs(tiny)) == total  # every candidate's run in the Runs tab, with its sweep
    assert again.resume_button.offer() is None  # finished: nothing left to resume


def test_a_folder_that_is_not_this_sweep_s_is_one_line_and_left_as_it_is(qtbot: Any, tiny: MainWindow,
                                                                          tmp_path: Path) -> None:
    d = _dialog(qtbot, tiny)
    plain = tmp_path / "plain"
    plain.mkdir()
    assert not d.resume_button.resume_folder(str(plain))
    assert d.status.text().startswith("Not resumed:") and "not a sweep folder" in d.status.text()

    damaged = tmp_path / "damaged"
    (damaged / "runs").mkdir(parents=True)
    (damaged / "study.db").write_bytes(b"not a database at all")
    assert d.resume_button.resume_folder(str(damaged))
    qtbot.waitUntil(lambda: not d.busy, timeout=ms(GUI_RUN_S))
    text = d.status.text()
    assert text.startswith("Not resumed:") and "not an SQLite database" in text and "\n" not in text
    assert (damaged / "study.db").read_bytes() == b"not a database at all" and d.trained_rows() == 0

    assert d.train_each()  # a sweep of these rows, finished
    qtbot.waitUntil(lambda: not d.busy, timeout=ms(GUI_RUN_S))
    folder = d.trainer.folder
    assert folder is not None and d.trained_rows() == len(d._swept)
    before = (folder / "study.db").read_bytes()
    d.steps.setValue(STEPS + 1)  # another sweep now: its budget differs
    assert d.resume_button.resume_folder(str(folder))
    qtbot.waitUntil(lambda: not d.busy, timeout=ms(GUI_RUN_S))
    text = d.status.text()
    assert text.startswith("Not resumed:") and "another sweep" in text and "steps" in text and "\n" not in text
    assert (folder / "study.db").read_bytes() == before
