"""The activation profile runs in slices that wait for the GUI thread's event loop."""

from __future__ import annotations

import time
from typing import Any

import pytest
from torch import nn

from tests.timeouts import GUI_WORKER_S, ms
from workbench.core.advisor import activations
from workbench.core.advisor.activations import Pacer, profile_activations
from workbench.gui.main_window import MainWindow
from workbench.gui.model_loading import loaded_from_model
from workbench.gui.plan import activation_estimate


def _convs() -> nn.Module:
    """Ten blocks of ten 1×1 convolutions (111 modules) that take the panel's image batch."""
    return nn.Sequential(*[nn.Sequential(*[nn.Conv2d(3, 3, 1) for _ in range(10)]) for _ in range(10)])


def _paced_profile(w: MainWindow, qtbot: Any, monkeypatch: pytest.MonkeyPatch, model: nn.Module) -> Pacer:
    """Load ``model`` with a pause at every checkpoint that only the event loop (or a cancel)
    ends; the profile's pacer once it has paused three times."""
    est = w.activations
    qtbot.waitUntil(lambda: w.controller.model is not None, timeout=ms(GUI_WORKER_S))
    monkeypatch.setattr(activation_estimate, "PACE_SLICE_S", 0.0)  # a pause at every checkpoint
    monkeypatch.setattr(activation_estimate, "PACE_MAX_PAUSE_S", 600.0)  # and only the event loop resumes it
    w.controller.set_loaded(loaded_from_model(model, "convs"))
    qtbot.waitUntil(lambda: est._pacer is not None and est._pacer.pauses >= 3, timeout=ms(GUI_WORKER_S))
    assert est._pacer is not None
    return est._pacer


def test_the_profile_holds_still_while_the_gui_thread_works_and_still_arrives(
    window: MainWindow, qtbot: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = window
    est = w.activations
    model = _convs()
    pacer = _paced_profile(w, qtbot, monkeypatch, model)
    steps = pacer.steps
    # the GUI thread is busy (no event loop from here on): at most the slice it last granted runs
    deadline = time.monotonic() + GUI_WORKER_S
    while not pacer.waiting:
        assert time.monotonic() < deadline, "the profile never paused"
        time.sleep(0.01)
    held = pacer.steps
    assert held <= steps + 1
    time.sleep(0.3)
    assert pacer.steps == held and pacer.waiting
    label = w.cost_panel.activation_label
    qtbot.waitUntil(lambda: not est.busy and "activations <b>" in label.text(), timeout=ms(GUI_WORKER_S))
    assert est.pauses >= pacer.pauses > 111  # every module took a round through the event loop
    act = est.profile()
    plain = profile_activations(model, 4, 32)
    assert not isinstance(act, str) and act is not None
    assert act.shapes == plain.shapes and act.profile.ops == plain.profile.ops
    assert "Step at batch 4 · 32 px" in label.text()


def test_a_new_model_cancels_the_profile_of_the_last_one(
    window: MainWindow, qtbot: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = window
    est = w.activations
    first = _paced_profile(w, qtbot, monkeypatch, _convs())
    monkeypatch.setattr(activation_estimate, "PACE_SLICE_S", 0.005)
    w.controller.set_loaded(loaded_from_model(nn.Sequential(nn.Conv2d(3, 3, 1), nn.Flatten()), "small"))
    assert first.cancelled
    label = w.cost_panel.activation_label
    qtbot.waitUntil(lambda: not est.busy and "activations <b>" in label.text(), timeout=ms(GUI_WORKER_S))
    act = est.profile()
    assert not isinstance(act, str) and act is not None and set(act.shapes) == {"", "0", "1"}


def test_closing_the_window_stops_a_paced_profile(
    window: MainWindow, qtbot: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = window
    est = w.activations
    pacer = _paced_profile(w, qtbot, monkeypatch, _convs())  # only a cancel can end it soon
    est.shutdown()
    assert pacer.cancelled and not est._task.is_running()  # type: ignore[union-attr]


def test_row_notes_are_made_when_read_not_when_the_plan_changes(
    window: MainWindow, qtbot: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = window
    est = w.activations
    qtbot.waitUntil(lambda: w.controller.model is not None, timeout=ms(GUI_WORKER_S))
    w.controller.set_loaded(loaded_from_model(_convs(), "convs"))
    label = w.cost_panel.activation_label
    qtbot.waitUntil(lambda: not est.busy and "activations <b>" in label.text(), timeout=ms(GUI_WORKER_S))
    made: list[tuple[int, ...]] = []
    real = activations.shape_text  # the estimator imports it when it writes a note

    def counting(shape: tuple[int, ...]) -> str:
        made.append(shape)
        return real(shape)

    monkeypatch.setattr(activations, "shape_text", counting)
    notes = est.row_notes()
    assert len(notes) == 111 and made == []  # the root, 10 blocks and 100 convolutions ran
    assert notes["3.4"].startswith("Output 4×3×32×32") and len(made) == 1
    assert notes.get("no.such") is None
