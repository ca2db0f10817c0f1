"""The app runs model code (``py:``) only after a dialog that shows the file and the function;
a plan naming code, unconfirmed, is refused with the command line's one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.timeouts import GUI_WORKER_S, ms
from workbench.core.plan.rules import FreezePlan
from workbench.gui.main_window import MainWindow
from workbench.gui.model_loading import LoadRequest, load_model, request_for_plan
from workbench.gui.model_source import RUN_CODE_TITLE, confirm_code


@pytest.fixture
def evil(tmp_path: Path) -> tuple[Path, Path]:
    marker = tmp_path / "ran"
    code = tmp_path / "net.py"
    code.write_text(
        "from pathlib import Path\nfrom torch import nn\n\n\n"
        f"def make():\n    Path({str(marker)!r}).touch()\n    return nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))\n"
    )
    return code, marker


def _plan(tmp_path: Path, code: Path) -> Path:
    p = tmp_path / "team.plan.json"
    p.write_text(json.dumps({"format": "freeze-plan", "version": 1, "model": {"source": "py", "name": f"{code}:make"},
                             "rules": [{"select": "0", "frozen": True}]}))
    return p


def test_load_model_refuses_an_unconfirmed_plan_request(tmp_path: Path, evil: tuple[Path, Path]) -> None:
    """Qt-free: the request a plan makes carries its origin; building it is refused by core."""
    code, marker = evil
    request = request_for_plan(FreezePlan.load(_plan(tmp_path, code)), None)
    assert request is not None and request.origin == "the plan's model block"
    with pytest.raises(Exception, match=r"names model code .* --model py:"):
        load_model(request)
    assert not marker.exists()


def test_opening_a_plan_with_code_asks_and_cancel_runs_nothing(
    window: MainWindow, dialogs: Any, tmp_path: Path, evil: tuple[Path, Path]
) -> None:
    code, marker = evil
    before = window.controller.spec
    assert not window.documents.open_plan(str(_plan(tmp_path, code)))  # the recorder answers the default: Cancel
    (_kind, title, question), = dialogs.kinds("ask")
    assert title == RUN_CODE_TITLE and str(code) in question and "def make():" in question
    assert "the plan's model block" in question
    assert not marker.exists() and window.controller.spec == before and not window.controller.busy
    # nothing silent: the status bar says what was not opened
    message = window.statusBar().currentMessage()
    assert message == f"Plan team.plan.json not opened: its model code {code}:make was not run (cancelled)"


def test_the_dialog_shows_what_importing_the_file_runs(
    window: MainWindow, dialogs: Any, tmp_path: Path, evil: tuple[Path, Path]
) -> None:
    """Importing runs the file's top level before make(): the dialog lists it, and says so."""
    code, marker = evil
    at_import = tmp_path / "ran-at-import"
    code.write_text(code.read_text() + f"\n\nPath({str(at_import)!r}).touch()  # runs on import\n")
    assert not window.documents.open_plan(str(_plan(tmp_path, code)))  # Cancel
    (_kind, _title, question), = dialogs.kinds("ask")
    assert "runs this file, then <b>make()</b>" in question
    assert "from pathlib import Path" in question and "touch()  # runs on import" in question
    assert question.index("ran-at-import") < question.index("Then <b>make()</b>")
    assert not at_import.exists() and not marker.exists()


def test_opening_a_plan_with_code_runs_it_after_run(
    window: MainWindow, dialogs: Any, qtbot: Any, tmp_path: Path, evil: tuple[Path, Path]
) -> None:
    code, marker = evil
    dialogs.script("ask", "Run")
    with qtbot.waitSignal(window.controller.loadFinished, timeout=ms(GUI_WORKER_S)) as blocker:
        assert window.documents.open_plan(str(_plan(tmp_path, code)))
    assert blocker.args[0] and marker.exists()
    assert window.controller.spec["source"] == "py" and window.controller.plan.rules[0].select == "0"


def test_controller_alone_refuses_the_plans_code(
    window: MainWindow, dialogs: Any, qtbot: Any, tmp_path: Path, evil: tuple[Path, Path]
) -> None:
    """A path that skips the dialog (the controller opening a plan) gets core's refusal."""
    code, marker = evil
    errors: list[str] = []
    window.controller.errorOccurred.connect(lambda title, text, details: errors.append(text))
    with qtbot.waitSignal(window.controller.loadFinished, timeout=ms(GUI_WORKER_S)) as blocker:
        assert window.controller.open_plan(FreezePlan.load(_plan(tmp_path, code)), _plan(tmp_path, code))
    assert not blocker.args[0] and not marker.exists()
    assert errors and "names model code" in errors[0] and f"--model py:{code}:make" in errors[0]


def test_model_bar_code_asks_first(window: MainWindow, dialogs: Any, evil: tuple[Path, Path]) -> None:
    code, marker = evil
    bar = window.source_bar
    bar.select_source("py", search=False)
    bar.model_box.setEditText(f"{code}:make")
    request = bar.request()
    assert request.origin == "the model bar"
    assert not window.documents.load_model_request(request)  # Cancel
    (_kind, _title, question), = dialogs.kinds("ask")
    assert "Named by" not in question and "def make():" in question and not marker.exists()


def test_confirm_code_passes_other_sources_through(window: MainWindow, dialogs: Any) -> None:
    request = LoadRequest("resnet18", origin="the plan's model block")
    assert confirm_code(window, request) is request and not dialogs.calls
