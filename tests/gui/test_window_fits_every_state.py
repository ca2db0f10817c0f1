"""The window never grows past a laptop's screen: for every data source of every model kind
(image, text classification, causal LM) with the options left alone or all set, the window's
minimum size hint stays within 1280×720 (a wider hint would push Options…, the right panel's
edge and the status bar off the screen for the rest of the session)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.timeouts import GUI_EVENT_S, GUI_WORKER_S, ms
from workbench.gui.main_window import MainWindow

SCREEN = (1280, 720)
#: Options that lengthen the summary beside Options… (the panel elides it; it must not widen the window).
ALL_OPTIONS = {"warmup_steps": 50, "val_every": 10, "val_fraction": 0.25, "no_decay": True, "val_at_start": True}


@pytest.fixture
def causal_lm_dir(tmp_path: Path) -> Path:
    """A tiny GPT-2 causal LM with weights (opens trainable, with the text data sources)."""
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=100, n_positions=64,
                                     architectures=["GPT2LMHeadModel"])
    folder = tmp_path / "tiny-gpt2"
    transformers.GPT2LMHeadModel(config).save_pretrained(folder)
    return folder


def _open(qtbot: Any, window: MainWindow, folder: Path | None) -> None:
    if folder is None:
        return
    with qtbot.waitSignal(window.controller.loadFinished, timeout=ms(GUI_WORKER_S)) as blocker:
        window.documents.open_model_folder(str(folder))
    assert blocker.args[0], folder


def _every_state(qtbot: Any, window: MainWindow, kind: str) -> list[str]:
    panel = window.training.panel
    seen = []
    for options in ({}, ALL_OPTIONS):
        if options:
            panel.set_values(**options)
        for i in range(panel.data_box.count()):
            panel.data_box.setCurrentIndex(i)
            qtbot.wait(1)  # the panel's rows re-lay out at the next event-loop turn
            hint = window.minimumSizeHint()
            state = f"{kind} · {panel.data_box.itemText(i)} · {'all options' if options else 'defaults'}"
            assert hint.width() <= SCREEN[0] and hint.height() <= SCREEN[1], (state, hint)
            assert window.width() <= SCREEN[0], (state, window.width())
            seen.append(state)
    return seen


@pytest.mark.parametrize("kind", ["image", "text classification", "causal LM"])
def test_the_minimum_size_fits_1280x720_for_every_source_and_options(qtbot: Any, window: MainWindow, kind: str,
                                                                     request: pytest.FixtureRequest) -> None:
    folder = {"image": None, "text classification": "bert_dir", "causal LM": "causal_lm_dir"}[kind]
    window.resize(*SCREEN)
    qtbot.waitUntil(lambda: window.width() == SCREEN[0], timeout=ms(GUI_EVENT_S))
    _open(qtbot, window, request.getfixturevalue(folder) if folder else None)
    seen = _every_state(qtbot, window, kind)
    assert len(seen) >= 4  # two sources at least, both options states
