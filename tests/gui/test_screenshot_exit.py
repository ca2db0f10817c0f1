"""``python -m workbench.gui.screenshot``: a wait that times out stops and joins the training thread."""

from __future__ import annotations

import pytest

from tests.timeouts import GUI_WORKER_S
from workbench.gui import screenshot
from workbench.gui.background import running_threads


def test_a_timed_out_wait_joins_the_training_thread_and_says_so_in_one_line(tmp_path, monkeypatch, capsys):
    real_wait = screenshot._wait
    calls: list[int] = []

    def wait(app, done, timeout: float = GUI_WORKER_S) -> None:
        calls.append(1)
        if len(calls) == 1:  # the model load
            return real_wait(app, done, GUI_WORKER_S)
        real_wait(app, lambda: bool(running_threads()), GUI_WORKER_S)  # run #1 is training
        raise TimeoutError("the window did not get there in time")

    monkeypatch.setattr(screenshot, "_wait", wait)
    assert screenshot.main([str(tmp_path)]) == 1
    assert len(calls) == 2
    assert not running_threads(), "the training thread outlived the window"
    err = capsys.readouterr().err
    assert err.strip() == "workbench.gui.screenshot: error: the window did not get there in time"
    assert not list(tmp_path.iterdir())


def test_the_timeout_is_still_an_error_for_callers_of_render(tmp_path, monkeypatch):
    monkeypatch.setattr(screenshot, "_wait", lambda app, done, timeout=0: (_ for _ in ()).throw(TimeoutError("x")))
    with pytest.raises(TimeoutError):
        screenshot.render(tmp_path)
    assert not running_threads()
