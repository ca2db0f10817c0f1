"""Fixtures for the GUI tests: offscreen Qt, private settings, intercepted dialogs, no leaks.

- ``QT_QPA_PLATFORM=offscreen`` is set here, before anything imports Qt.
- ``QSettings`` writes to a temporary folder for the whole session (never the user's), and
  training runs are stored in a temporary folder per test (``WORKBENCH_RUNS_DIR``), and so are
  the start-up tree descriptions (``WORKBENCH_CACHE_DIR``).
- Every dialog of :mod:`workbench.gui.dialogs` is replaced by :class:`DialogRecorder`,
  which records it and returns a scripted answer; the Qt static dialogs raise, so a dialog
  that bypasses the seam fails the test instead of blocking it.
- After each test, a still-running worker ``QThread`` or a top-level widget still alive
  fails the test.
"""

from __future__ import annotations

import gc
import os

from tests.timeouts import GUI_EVENT_S, ms

os.environ["QT_QPA_PLATFORM"] = "offscreen"

from collections import defaultdict, deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import torch
from torch import nn

if TYPE_CHECKING:
    from workbench.gui.main_window import MainWindow
    from workbench.gui.training.plots import PlotsPanel


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test in this folder ``gui`` (``-m "not gui"`` skips them)."""
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.gui)


@pytest.fixture(scope="session", autouse=True)
def _quiet_torch() -> None:
    torch.set_num_threads(1)


@pytest.fixture(scope="session", autouse=True)
def _private_settings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    from PySide6.QtCore import QSettings, QStandardPaths

    from workbench.gui.qt_compat import protect_none_refcount

    protect_none_refcount()  # shiboken6 6.12 on Python 3.11 (see workbench.gui.qt_compat)
    QStandardPaths.setTestModeEnabled(True)
    folder = str(tmp_path_factory.mktemp("qsettings"))
    for fmt in (QSettings.Format.IniFormat, QSettings.Format.NativeFormat):
        for scope in (QSettings.Scope.UserScope, QSettings.Scope.SystemScope):
            QSettings.setPath(fmt, scope, folder)
    yield


@pytest.fixture
def bert_dir(tmp_path: Path) -> Path:
    """A tiny BERT classifier saved with save_pretrained (config.json + model.safetensors)."""
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=64, num_labels=3, architectures=["BertForSequenceClassification"],
    )
    folder = tmp_path / "tiny-bert"
    transformers.BertForSequenceClassification(config).save_pretrained(folder)
    return folder


@pytest.fixture(autouse=True)
def _fresh_settings(_private_settings: None) -> None:
    """Each test starts with empty app settings: a window restores its panel, options and
    layout from them, so a setting one test leaves (a ``py:`` metric, a step count, an option)
    would otherwise reach the next test's window in the same process."""
    from workbench.gui.settings import settings

    store = settings()
    store.clear()
    store.sync()


@pytest.fixture(autouse=True)
def runs_dir(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A private runs folder for each test (``WORKBENCH_RUNS_DIR``)."""
    folder = tmp_path / "runs"
    monkeypatch.setenv("WORKBENCH_RUNS_DIR", str(folder))
    return folder


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A private cache folder for each test (``WORKBENCH_CACHE_DIR``: the start-up tree descriptions)."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(folder))
    return folder


class DialogRecorder:
    """Stands in for :mod:`workbench.gui.dialogs`.

    Attributes:
        calls: ``(kind, title, text)`` for every dialog shown.
        answers: scripted answers per kind (``"ask"``, ``"open_file"``, ``"save_file"``,
            ``"open_dir"``, ``"choose"``; ``"dialog"``: a function called with the app's dialog, returning
            whether it is accepted), consumed first in, first out.

    With no scripted answer, ``ask`` answers ``"Discard"`` when offered (so closing a
    window with unsaved edits never blocks), else the caller's default; file dialogs
    answer ``""`` (cancelled) and ``choose`` None.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.answers: dict[str, deque[Any]] = defaultdict(deque)

    def script(self, kind: str, *answers: Any) -> None:
        """Queue answers for the next dialogs of ``kind``."""
        self.answers[kind].extend(answers)

    def _next(self, kind: str, fallback: Any) -> Any:
        return self.answers[kind].popleft() if self.answers[kind] else fallback

    def kinds(self, kind: str) -> list[tuple[str, str, str]]:
        """The recorded calls of one kind."""
        return [c for c in self.calls if c[0] == kind]

    def error(self, parent: Any, title: str, message: str, details: str = "") -> None:
        self.calls.append(("error", title, message))

    def info(self, parent: Any, title: str, message: str) -> None:
        self.calls.append(("info", title, message))

    def ask(self, parent: Any, title: str, question: str, choices: Sequence[str], default: str) -> str:
        self.calls.append(("ask", title, question))
        answer = self._next("ask", "Discard" if "Discard" in choices else default)
        assert answer in choices, f"scripted answer {answer!r} is not one of {list(choices)}"
        return answer

    def open_file(self, parent: Any, caption: str, directory: str, filters: str) -> str:
        self.calls.append(("open_file", caption, filters))
        return self._next("open_file", "")

    def open_dir(self, parent: Any, caption: str, directory: str) -> str:
        self.calls.append(("open_dir", caption, directory))
        return self._next("open_dir", "")

    def save_file(self, parent: Any, caption: str, directory: str, filters: str) -> str:
        self.calls.append(("save_file", caption, filters))
        return self._next("save_file", "")

    def choose(self, parent: Any, title: str, label: str, items: Sequence[str], current: str = "") -> str | None:
        self.calls.append(("choose", title, label))
        return self._next("choose", None)

    def run_dialog(self, dialog: Any) -> bool:
        """Run a scripted function on the app's own dialog; its result is "accepted"."""
        self.calls.append(("dialog", dialog.windowTitle(), type(dialog).__name__))
        fill = self._next("dialog", None)
        return bool(fill(dialog)) if fill is not None else False


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a real Qt dialog was opened outside workbench.gui.dialogs")


@pytest.fixture(autouse=True)
def dialogs(monkeypatch: pytest.MonkeyPatch) -> DialogRecorder:
    """Intercept every dialog (see :class:`DialogRecorder`)."""
    from PySide6.QtWidgets import QFileDialog, QInputDialog, QMessageBox

    from workbench.gui import dialogs as real

    rec = DialogRecorder()
    for name in ("error", "info", "ask", "open_file", "open_dir", "save_file", "choose", "run_dialog"):
        monkeypatch.setattr(real, name, getattr(rec, name))
    for cls, names in (
        (QMessageBox, ("exec", "information", "question", "warning", "critical", "about")),
        (QFileDialog, ("exec", "getOpenFileName", "getSaveFileName", "getExistingDirectory")),
        (QInputDialog, ("exec", "getItem", "getText", "getInt", "getDouble")),
    ):
        for name in names:
            monkeypatch.setattr(cls, name, _refuse)
    return rec


#: Longer than any test: the window's idle freeze of a loaded model's objects never comes.
_NEVER_MS = 24 * 3600 * 1000


@pytest.fixture(autouse=True)
def idle_freeze_off(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests run without the controller's idle freeze of a loaded model's objects unless they ask for
    ``idle_freeze`` (``pytest.mark.usefixtures("idle_freeze")``).

    The freeze is a full collection (``gc.unfreeze``, ``gc.collect``, ``gc.freeze``): in the app it walks
    the app's objects once per model, in a test process every earlier test's imports and leftovers too,
    0.3-0.7 s of CPU for almost every window. ``test_idle_freeze.py`` proves what it does; tests that train
    many sweep candidates ask for it, as each candidate's collection then walks only what was made since.
    """
    if "idle_freeze" not in request.fixturenames:
        from workbench.gui import controller

        monkeypatch.setattr(controller, "FREEZE_OBJECTS_AFTER_MS", _NEVER_MS)


@pytest.fixture
def idle_freeze() -> None:
    """The controller freezes a loaded model's objects once the window is idle, as in the app."""


@pytest.fixture(autouse=True)
def collector_thawed() -> Iterator[None]:
    """Hand back what a window froze: the controller freezes a loaded model's objects
    (``gc.freeze``) and only its next load thaws them, so a later test in the same process (a
    sweep or measurement that freezes its own, and checks it thawed them) would start frozen."""
    yield
    if gc.get_freeze_count():
        gc.unfreeze()


@pytest.fixture(autouse=True)
def no_leftovers(qapp: Any) -> Iterator[None]:
    """Fail a test that leaves a worker thread running or a top-level widget alive."""
    yield
    from PySide6.QtCore import QCoreApplication, QEvent
    from PySide6.QtWidgets import QApplication

    from workbench.gui.background import running_threads

    QCoreApplication.processEvents()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    QCoreApplication.processEvents()
    threads = running_threads()
    widgets = [
        w for w in QApplication.topLevelWidgets() if type(w).__name__ != "QTipLabel" and w.objectName() != "qtbot"
    ]
    described = [f"{type(w).__name__}({w.objectName() or w.windowTitle()!r})" for w in widgets]
    for t in threads:  # clean up so later tests are not affected
        t.quit()
        t.wait()
    for w in widgets:
        w.close()
        w.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    if threads:
        pytest.fail(f"{len(threads)} worker thread(s) still running after the test")
    if widgets:
        pytest.fail(f"top-level widgets still alive after the test: {', '.join(described)}")


def _nested_model(width: int = 10, depth: int = 3, leaf: int = 5) -> nn.Module:
    """A model of nested Sequentials with ``width**depth * leaf``-ish modules.

    Args:
        width: children per level.
        depth: levels of Sequentials.
        leaf: Linear modules in each innermost Sequential.

    Returns:
        The model (tiny parameters, many modules).
    """

    def build(level: int) -> nn.Module:
        if level == depth:
            return nn.Sequential(*[nn.Linear(2, 2) for _ in range(leaf)])
        return nn.Sequential(*[build(level + 1) for _ in range(width)])

    return build(1)


@pytest.fixture
def nested_model() -> Any:
    """The factory :func:`_nested_model` (``nested_model(width, depth, leaf)``)."""
    return _nested_model


@pytest.fixture(scope="session")
def _start_up_model() -> tuple[Any, Any]:
    """The window's start-up request and the model it loads, built once per test process."""
    from workbench.gui.model_loading import default_request, load_model

    request = default_request()
    return request, load_model(request)


@pytest.fixture
def window(qtbot: Any, monkeypatch: pytest.MonkeyPatch, _start_up_model: tuple[Any, Any]) -> MainWindow:
    """The main window, shown and exposed, with small training settings (4 × 32 px on the CPU).

    Its start-up model is a copy of one built once per test process (resnet18's random init is 0.1 s of
    every window's build, a copy a third of that), wrapped as the load wraps a model it built; any other
    load builds its model."""
    import copy

    from workbench.gui import main_window
    from workbench.gui.main_window import MainWindow
    from workbench.gui.model_loading import loaded_from_model

    start_request, start_model = _start_up_model
    load = main_window.load_model

    def load_start_up_copy(request: Any) -> Any:
        if request != start_request:
            return load(request)
        block = {k: v for k, v in start_model.spec.items() if k != "fingerprint"}
        return loaded_from_model(copy.deepcopy(start_model.model), start_model.label, start_model.note, block,
                                 list(start_model.messages))

    monkeypatch.setattr(main_window, "load_model", load_start_up_copy)
    w = MainWindow()
    qtbot.addWidget(w)
    w.resize(1200, 800)
    w.show()
    qtbot.waitExposed(w, timeout=ms(GUI_EVENT_S))
    w.training.panel.set_values(batch_size=4, image_size=32, device="cpu", data="synthetic")
    return w


@pytest.fixture
def shown_plots(qtbot: Any) -> Callable[..., PlotsPanel]:
    """A factory of plots panels on their own: ``shown_plots(width, height)`` (or its default
    size) makes one, resized, shown and exposed."""
    from workbench.gui.training.plots import PlotsPanel

    def make(width: int | None = None, height: int | None = None) -> PlotsPanel:
        panel = PlotsPanel()
        qtbot.addWidget(panel)
        if width is not None and height is not None:
            panel.resize(width, height)
        panel.show()
        qtbot.waitExposed(panel, timeout=ms(GUI_EVENT_S))
        return panel

    return make

