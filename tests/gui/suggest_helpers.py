"""What the Suggest dialog's Train each and Resume tests share: a tiny ``py:`` model and an open dialog."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.commands.sweep_fixtures import MODEL as TINY
from tests.timeouts import GUI_WORKER_S, ms
from workbench.gui.advisor.dialog import SuggestDialog
from workbench.gui.main_window import MainWindow
from workbench.gui.model_loading import LoadRequest


def load_tiny(qtbot: Any, window: MainWindow, tmp_path: Path, *, steps: int) -> MainWindow:
    """Load the sweep tests' tiny model into ``window``; train ``steps`` steps on 16-px synthetic data."""
    code = tmp_path / "tiny.py"
    code.write_text(TINY)
    with qtbot.waitSignal(window.controller.loadFinished, timeout=ms(GUI_WORKER_S)) as blocker:
        assert window.controller.load(LoadRequest(f"py:{code}:build"))
    assert blocker.args[0], "the tiny model did not load"
    window.training.panel.set_values(batch_size=4, image_size=16, device="cpu", data="synthetic", steps=steps)
    return window


def open_suggest(qtbot: Any, window: MainWindow, budget: str = "1GB", fitting: int = 2) -> SuggestDialog:
    """Open Suggest… and suggest for ``budget``; at least ``fitting`` front rows must fit it."""
    d = window.suggest_dialog()
    qtbot.addWidget(d)
    qtbot.waitUntil(lambda: not d.busy, timeout=ms(GUI_WORKER_S))
    d.budget.setText(budget)
    assert d.suggest()
    qtbot.waitUntil(lambda: not d.busy, timeout=ms(GUI_WORKER_S))
    assert d.advice is not None and len([i for i in d.advice.front if d.advice.assessed[i].fits]) >= fitting, \
        d.status.text()
    return d
