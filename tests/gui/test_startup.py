"""Start-up: a window with a loading state before torch and the model are there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt

from tests.preload import python_argv
from tests.timeouts import GUI_EVENT_S, GUI_WORKER_S, SUBPROCESS_S, ms
from workbench.core.models import tree_cache
from workbench.core.models.tree import ModelTree
from workbench.gui.app import _described_tree, _open_window
from workbench.gui.startup import HeavyImports, StartupWindow, loading_text

ROOT = Path(__file__).resolve().parents[2]


def test_the_first_window_needs_neither_torch_nor_pyqtgraph() -> None:
    code = (
        "import sys; import workbench.cli, workbench.commands.gui, workbench.gui.app, workbench.gui.startup; "
        "heavy = [m for m in ('torch', 'torchvision', 'pyqtgraph') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False,
                          env={"PYTHONPATH": str(ROOT), "QT_QPA_PLATFORM": "offscreen", "PATH": ""})
    assert proc.returncode == 0, proc.stderr


def test_startup_window_shows_the_model_bar_and_a_loading_tree(qtbot: Any) -> None:
    shell = StartupWindow("vit_b_16")
    qtbot.addWidget(shell)
    shell.show()
    assert shell.model_box.currentText() == "vit_b_16" and not shell.model_box.isEnabled()
    assert shell.loading_label.isVisible() and shell.loading_label.text() == "Loading PyTorch and vit_b_16…"
    assert shell.tree.topLevelItemCount() == 0
    assert loading_text(None) == "Loading PyTorch…"


def test_heavy_imports_report_a_missing_module_in_one_line(qtbot: Any) -> None:
    imports = HeavyImports(["json", "no_such_module_for_workbench"])
    with qtbot.waitSignal(imports.imported, timeout=ms(GUI_EVENT_S)) as blocker:
        imports.start()
    imports.wait()
    error, details = blocker.args
    assert error.startswith("cannot import no_such_module_for_workbench") and "reinstall" in error
    assert "\n" not in error and "Traceback" in details


def test_window_shows_a_loading_state_until_the_model_is_loaded(qtbot: Any) -> None:
    shell = StartupWindow("resnet18")  # closed and deleted when the full window replaces it
    shell.show()
    window = _open_window(shell, path=None, model=None)  # deletes itself when closed
    c = window.controller
    try:
        assert c.busy and c.tree is None  # shown first, the model loads behind it
        assert window.isVisible() and not shell.isVisible()
        assert window.tree_loading.isVisible() and window.tree_loading.text().startswith("Loading resnet18")
        assert window.tree_model.rowCount() == 0
        qtbot.waitUntil(lambda: c.tree is not None, timeout=ms(GUI_WORKER_S))
        assert not window.tree_loading.isVisible() and window.tree_model.rowCount() > 0
    finally:
        qtbot.waitUntil(lambda: not c.busy and not c.checking, timeout=ms(GUI_WORKER_S))
        window.close()


def test_a_missing_model_folder_says_so_and_opens_the_default(qtbot: Any, dialogs: Any, tmp_path: Any) -> None:
    shell = StartupWindow("hf")
    shell.show()
    missing = tmp_path / "no" / "such" / "folder"
    window = _open_window(shell, path=None, model=f"hf:{missing}")
    c = window.controller
    try:
        title, message = dialogs.kinds("error")[-1][1:3]
        assert title == "Cannot load model" and f"{missing} does not exist" in message
        assert "cache" not in message and "resnet18" in message
        qtbot.waitUntil(lambda: c.tree is not None, timeout=ms(GUI_WORKER_S))  # the default, not an empty window
        assert c.loaded is not None and c.loaded.label.startswith("resnet18")
    finally:
        qtbot.waitUntil(lambda: not c.busy and not c.checking, timeout=ms(GUI_WORKER_S))
        window.close()


def test_the_start_up_placeholder_spans_the_empty_tree(qtbot: Any) -> None:
    shell = StartupWindow("resnet18")
    qtbot.addWidget(shell)
    shell.resize(1280, 720)
    shell.show()
    qtbot.waitExposed(shell, timeout=ms(GUI_EVENT_S))
    label, viewport = shell.loading_label, shell.tree.viewport()
    qtbot.waitUntil(lambda: label.width() >= viewport.width() - 24, timeout=ms(GUI_EVENT_S))
    assert label.fontMetrics().horizontalAdvance(label.text()) < label.width()  # the whole text, not cut


# Run in a fresh interpreter: records each request for a heavy module (on any thread) and each
# start-up event, and ends the process at the first paint with what it saw by then.
_ORDER_PROBE = """
import importlib.abc, json, os, sys
seen = []
class Probe(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name in ("torch", "torchvision", "pyqtgraph", "workbench.gui.main_window"):
            seen.append("import " + name)
        return None
sys.meta_path.insert(0, Probe())
from workbench.gui import app, startup
def trace(event):
    seen.append(event)
    if event == "first-paint":
        print(json.dumps(seen), flush=True)
        os._exit(0)
startup.trace = trace
sys.exit(app.main([]))
"""


def _run_probe(code: str, tmp_path: Path, **extra_env: str) -> list[Any]:
    """Run ``code`` in a fresh interpreter (offscreen, settings and cache in ``tmp_path``); its last line, as JSON."""
    env = {"PYTHONPATH": str(ROOT), "QT_QPA_PLATFORM": "offscreen", "PATH": "", "HOME": str(tmp_path),
           "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_CACHE_HOME": str(tmp_path / "cache"), **extra_env}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          check=False, env=env, timeout=GUI_EVENT_S)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert isinstance(seen, list)
    return seen


# Replaces torch and the library in the start-up imports by one light module.
_LIGHT_IMPORTS = (
    "class Light(startup.HeavyImports):\n"
    "    def __init__(self, parent=None):\n"
    "        super().__init__(['json'], parent)\n"
    "startup.HeavyImports = Light"
)


def test_the_window_is_painted_before_torch_or_the_full_window_is_imported(tmp_path: Path) -> None:
    assert _run_probe(_ORDER_PROBE, tmp_path) == ["first-paint"]


def test_imports_start_when_the_first_window_is_never_painted(tmp_path: Path) -> None:
    # a start-up window that never shows (as when it opens minimized): the imports still start
    code = _ORDER_PROBE.replace('event == "first-paint"', 'event == "imports-done"').replace(
        "startup.trace = trace",
        "startup.trace = trace\n"
        "startup.StartupWindow.show = lambda self: None\n" + _LIGHT_IMPORTS,
    )
    assert _run_probe(code, tmp_path) == ["imported-json", "imports-done"]


def test_a_window_that_cannot_be_built_is_one_dialog_and_exit_code_2(tmp_path: Path) -> None:
    # a main-window module that fails to import (or a window that raises while it is built) ends
    # start-up with the error dialog and exit code 2, instead of leaving the start-up window waiting
    code = _ORDER_PROBE.replace('event == "first-paint"', 'False').replace(
        "startup.trace = trace",
        "startup.trace = trace\n" + _LIGHT_IMPORTS + "\n"
        "def broken(shell, **kwargs):\n"
        "    raise ImportError('cannot import name SweepTag')\n"
        "app._open_window = broken\n"
        "from workbench.gui import dialogs\n"
        "dialogs.error = lambda parent, title, message, details='': seen.append(title + ': ' + message)\n"
        "code = app.main([])\n"
        "print(json.dumps(seen + ['exit %d' % code]), flush=True)\n"
        "os._exit(0)",
    )
    seen = _run_probe(code, tmp_path)
    assert seen[-2:] == ["Cannot start Freeze Workbench: the main window could not be built: ImportError: "
                         "cannot import name SweepTag", "exit 2"]


def _describe_resnet18(model: Any, folder: Path) -> Path:
    path = tree_cache.write_tree("torchvision", "resnet18", None, tree_cache.rows_of_tree(ModelTree.from_model(model)),
                                 folder=folder)
    assert path is not None
    return path


# Ends at the first paint of a described tree, with what the start-up window shows by then.
_PREVIEW_PROBE = _ORDER_PROBE.replace('event == "first-paint"', 'event == "cached-tree"').replace(
    "        print(json.dumps(seen), flush=True)",
    "        from PySide6.QtWidgets import QApplication\n"
    "        shell = next(w for w in QApplication.topLevelWidgets() if w.objectName() == 'StartupWindow')\n"
    "        root = shell.tree.topLevelItem(0)\n"
    "        seen.extend([root.text(2), root.childCount(), shell.notice.text(), 'torch' in sys.modules])\n"
    "        print(json.dumps(seen), flush=True)",
)


def test_a_described_tree_is_painted_before_torch_is_imported(tmp_path: Path, resnet18: Any) -> None:
    _describe_resnet18(resnet18, tmp_path / "described")
    seen = _run_probe(_PREVIEW_PROBE, tmp_path, WORKBENCH_CACHE_DIR=str(tmp_path / "described"))
    assert seen == ["first-paint", "cached-tree", "11.7M", 10,
                    "Loading PyTorch… resnet18's tree is from the last start; the checkboxes work once the model "
                    "has loaded.", False]


def test_the_live_tree_replaces_the_described_one(qtbot: Any, cache_dir: Path, resnet18: Any) -> None:
    path = _describe_resnet18(resnet18, cache_dir)
    shell = StartupWindow("resnet18", preview=_described_tree("resnet18"))  # deleted when the window replaces it
    shell.show()
    assert shell.tree.topLevelItemCount() == 1 and not shell.loading_label.isVisible() and shell.notice.isVisible()
    root = shell.tree.topLevelItem(0)
    layer1 = root.child(4) if root is not None else None
    assert layer1 is not None and layer1.text(0) == "layer1"
    shell.tree.setCurrentItem(layer1)
    layer1.setExpanded(True)
    shell.tree.itemClicked.emit(layer1, 0)  # the plan waits for the model, and the status bar says so
    assert shell.status_label.text().startswith("layer1: still loading resnet18; this row stays selected")
    assert not layer1.flags() & Qt.ItemFlag.ItemIsUserCheckable
    path.unlink()
    shell.imports_done()  # torch is there: the line says the model loads
    assert shell.notice.text().startswith("Loading resnet18… resnet18's tree is from the last start")
    window = _open_window(shell, path=None, model=None)
    c = window.controller
    gone: list[bool] = []
    try:
        assert c.busy and c.tree is None and not window.isVisible() and shell.isVisible()
        shell.destroyed.connect(lambda: gone.append(True))
        qtbot.waitUntil(window.isVisible, timeout=ms(GUI_WORKER_S))
        assert c.tree is not None and window.tree_model.rowCount() > 0
        qtbot.waitUntil(lambda: bool(gone), timeout=ms(GUI_EVENT_S))  # closed and deleted
        current = window.proxy.mapToSource(window.view.currentIndex())
        assert window.tree_model.path(current) == "layer1"  # the picked row and the opened one carry over
        assert window.view.isExpanded(window.proxy.mapFromSource(window.tree_model.index_of("layer1")))
        qtbot.waitUntil(path.is_file, timeout=ms(GUI_EVENT_S))  # described again for the next start
        assert len(tree_cache.read_tree_checked("torchvision", "resnet18", folder=cache_dir).rows) == len(c.tree.nodes)
    finally:
        qtbot.waitUntil(lambda: not c.busy and not c.checking, timeout=ms(GUI_WORKER_S))
        window.close()


def test_closing_the_start_up_window_while_the_model_loads_closes_the_window(
    qtbot: Any, cache_dir: Path, resnet18: Any
) -> None:
    _describe_resnet18(resnet18, cache_dir)
    shell = StartupWindow("resnet18", preview=_described_tree("resnet18"))
    shell.show()
    window = _open_window(shell, path=None, model=None)
    closed: list[bool] = []
    window.destroyed.connect(lambda: closed.append(True))
    shell.close()  # the user closes the only window on screen: the app ends, nothing left loading
    qtbot.waitUntil(lambda: bool(closed), timeout=ms(GUI_WORKER_S))


def test_a_start_with_a_description_ends_on_the_live_tree(tmp_path: Path, resnet18: Any) -> None:
    # the whole start in a process of its own: the described tree first, the live one at the end
    path = _describe_resnet18(resnet18, tmp_path / "cache")
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", WORKBENCH_STARTUP_TRACE="1",
               WORKBENCH_CACHE_DIR=str(tmp_path / "cache"), XDG_CONFIG_HOME=str(tmp_path / "config"))
    proc = subprocess.run(python_argv("-m", "workbench", "--screenshot", str(tmp_path / "w.png")), cwd=tmp_path,
                          env=env, capture_output=True, text=True, check=False, timeout=SUBPROCESS_S)
    assert proc.returncode == 0, proc.stderr
    events = [line.split()[1] for line in proc.stderr.splitlines() if line.startswith("startup: ")]
    assert events[:2] == ["first-paint", "cached-tree"] and events[-1] == "tree"
    assert "model: resnet18, 11,689,512 parameters" in proc.stdout
    assert tree_cache.read_tree("torchvision", "resnet18", folder=tmp_path / "cache") is not None
    assert path.is_file()


def test_a_load_that_fails_behind_a_described_tree_shows_the_window_then_the_error(
    qtbot: Any, cache_dir: Path, resnet18: Any, dialogs: Any, monkeypatch: Any
) -> None:
    from workbench.core.models.zoo import ModelSourceError
    from workbench.gui import controller

    def broken(request: Any) -> Any:
        raise ModelSourceError("the weights file is damaged; delete it and download again")

    monkeypatch.setattr(controller, "load_model", broken)
    _describe_resnet18(resnet18, cache_dir)
    shell = StartupWindow("resnet18", preview=_described_tree("resnet18"))
    shell.show()
    window = _open_window(shell, path=None, model=None)
    c = window.controller
    seen: list[bool] = []
    from workbench.gui import dialogs as real_dialogs

    monkeypatch.setattr(real_dialogs, "error", lambda *args, **kwargs: seen.append(window.isVisible()))
    try:
        qtbot.waitUntil(lambda: bool(seen), timeout=ms(GUI_WORKER_S))
        assert seen == [True] and c.tree is None  # the window, never the start-up one left waiting
    finally:
        qtbot.waitUntil(lambda: not c.busy and not c.checking, timeout=ms(GUI_WORKER_S))
        window.close()
