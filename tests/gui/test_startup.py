"""Start-up: the window, then the full window, before torch; the model behind them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from tests.preload import python_argv
from tests.timeouts import GUI_EVENT_S, GUI_WORKER_S, SUBPROCESS_S, ms
from workbench.core.models import tree_cache
from workbench.core.models.tree import ModelTree
from workbench.core.plan.rules import FreezePlan
from workbench.gui import torch_ready
from workbench.gui.app import _described_tree, _load_startup_model, _open_window
from workbench.gui.plan.tree_columns import column_index
from workbench.gui.startup import HeavyImports, StartupWindow, loading_text

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _torch_ready_after() -> Any:
    """A test that opens the full window without loading its model leaves the devices deferred:
    announce them, as the app does once torch is imported, so the next test starts ready."""
    yield
    if not torch_ready.is_ready():
        torch_ready.announce()


def _start(shell: StartupWindow, *, path: str | None = None, model: str | None = None) -> Any:
    """What the app does: the full window in the start-up window's place, then, torch being
    imported, the model's load."""
    window = _open_window(shell, path=path, model=model)
    _load_startup_model(window, path=path, model=model)
    return window


def test_the_first_window_needs_neither_torch_nor_pyqtgraph() -> None:
    code = (
        "import sys; import workbench.cli, workbench.commands.gui, workbench.gui.app, workbench.gui.startup; "
        # the described tree: the plan engine, the controller and the window's tree view
        "import workbench.core.plan, workbench.core.plan.fast.counts, workbench.gui.plan.tree_preview; "
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
    assert shell.described is None and shell.tree.model().rowCount() == 0
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
        assert window.isVisible() and not shell.isVisible()  # the full window at once, before torch
        assert c.waiting and not c.busy and c.tree is None
        assert window.tree_loading.isVisible() and window.tree_loading.text() == "Loading PyTorch and resnet18…"
        assert window.busy_label.text() == "Loading PyTorch and resnet18…" and not window.source_bar.load_button.isEnabled()
        assert not window.act_open.isEnabled() and not window.act_new.isEnabled()  # Load and Open wait
        assert not window.act_suggest.isEnabled() and window.act_suggest.statusTip() == "The model is still loading"
        assert not window.act_export.isEnabled()  # what needs the model waits for it
        assert window.device_label.text() == "device: …"  # the devices wait for torch
        assert [window.training.panel.device_box.itemData(i) for i in range(2)] == ["auto", "cpu"]
        assert window.source_bar.current_name() == "resnet18" and window.source_bar.model_names() == []
        window.training.panel.act_start.trigger()  # Start before the model is there: one line
        assert window.statusBar().currentMessage() == "The model is still loading; start once it is there."
        _load_startup_model(window, path=None, model=None)  # torch is imported: the devices, the models, the load
        assert c.busy and not c.waiting and window.tree_loading.text().startswith("Loading resnet18")
        assert window.device_label.text() != "device: …" and "resnet50" in window.source_bar.model_names()
        assert window.training.panel.device_box.itemText(0).startswith("auto (")
        assert window.tree_model.rowCount() == 0
        qtbot.waitUntil(lambda: c.tree is not None, timeout=ms(GUI_WORKER_S))
        assert not window.tree_loading.isVisible() and window.tree_model.rowCount() > 0
        assert window.act_suggest.isEnabled() and window.act_export.isEnabled()
    finally:
        qtbot.waitUntil(lambda: not c.busy and not c.checking, timeout=ms(GUI_WORKER_S))
        window.close()


def test_a_missing_model_folder_says_so_and_opens_the_default(qtbot: Any, dialogs: Any, tmp_path: Any) -> None:
    shell = StartupWindow("hf")
    shell.show()
    missing = tmp_path / "no" / "such" / "folder"
    window = _start(shell, model=f"hf:{missing}")
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


def test_the_full_window_is_shown_before_torch_is_imported(tmp_path: Path) -> None:
    code = _ORDER_PROBE.replace('event == "first-paint"', 'event == "window"').replace(
        "        print(json.dumps(seen), flush=True)",
        "        from PySide6.QtWidgets import QApplication\n"
        "        window = next(w for w in QApplication.topLevelWidgets() if w.objectName() == 'MainWindow')\n"
        "        seen.extend([window.isVisible(), window.controller.waiting, 'torch' in sys.modules])\n"
        "        print(json.dumps(seen), flush=True)",
    )
    # a first start: the tree the app ships, in both windows
    assert _run_probe(code, tmp_path) == ["first-paint", "cached-tree", "import workbench.gui.main_window",
                                          "import pyqtgraph", "window-modules", "window", True, True, False]


def test_imports_start_when_the_first_window_is_never_painted(tmp_path: Path) -> None:
    # a start-up window that never shows (as when it opens minimized): the window opens and the
    # imports start all the same
    code = _ORDER_PROBE.replace('event == "first-paint"', 'event == "imports-done"').replace(
        "startup.trace = trace",
        "startup.trace = trace\n"
        "startup.StartupWindow.show = lambda self: None\n" + _LIGHT_IMPORTS,
    )
    assert _run_probe(code, tmp_path) == ["import workbench.gui.main_window", "import pyqtgraph", "window-modules",
                                          "window", "imported-json", "imports-done"]


def _to_the_end(setup: str) -> str:
    """The order probe with light imports, run to the end of ``app.main`` after ``setup`` (code
    run before it); it prints what it saw and the exit code."""
    return _ORDER_PROBE.replace('event == "first-paint"', "False").replace(
        "startup.trace = trace",
        "startup.trace = trace\n" + _LIGHT_IMPORTS + "\n" + setup
        + "code = app.main([])\n"
        "print(json.dumps(seen + ['exit %d' % code]), flush=True)\n"
        "os._exit(0)",
    )


def test_closing_the_window_while_torch_imports_ends_the_app_without_loading(tmp_path: Path) -> None:
    seen = _run_probe(_to_the_end(
        "from PySide6.QtWidgets import QApplication\n"
        "def close_window(event, _trace=trace):\n"
        "    _trace(event)\n"
        "    if event == 'window':\n"
        "        next(w for w in QApplication.topLevelWidgets() if w.objectName() == 'MainWindow').close()\n"
        "startup.trace = close_window\n"
    ), tmp_path)
    assert seen[-4:] == ["window", "imported-json", "imports-done", "exit 0"]  # no load, no "tree"


def test_a_window_that_cannot_be_built_is_one_dialog_and_exit_code_2(tmp_path: Path) -> None:
    # a main-window module that fails to import (or a window that raises while it is built) ends
    # start-up with the error dialog and exit code 2, instead of leaving the start-up window waiting
    seen = _run_probe(_to_the_end(
        "def broken(shell, **kwargs):\n"
        "    raise ImportError('cannot import name SweepTag')\n"
        "app._open_window = broken\n"
        "from workbench.gui import dialogs\n"
        "dialogs.error = lambda parent, title, message, details='': seen.append(title + ': ' + message)\n"
    ), tmp_path)
    assert seen[-2:] == ["Cannot start Freeze Workbench: the main window could not be built: ImportError: "
                         "cannot import name SweepTag", "exit 2"]


def _describe_resnet18(model: Any, folder: Path) -> Path:
    path = tree_cache.write_tree("torchvision", "resnet18", None, ModelTree.from_model(model), folder=folder)
    assert path is not None
    return path


# Ends at the first paint of a described tree, with what the start-up window shows by then.
_PREVIEW_PROBE = _ORDER_PROBE.replace('event == "first-paint"', 'event == "cached-tree"').replace(
    "        print(json.dumps(seen), flush=True)",
    "        from PySide6.QtWidgets import QApplication\n"
    "        shell = next(w for w in QApplication.topLevelWidgets() if w.objectName() == 'StartupWindow')\n"
    "        model = shell.tree.model(); root = model.index(0, 0)\n"
    "        seen.extend([model.rowCount(root), shell.tree.isExpanded(root), shell.notice.text(), 'torch' in sys.modules])\n"
    "        print(json.dumps(seen), flush=True)",
)


def test_a_described_tree_is_painted_before_torch_is_imported(tmp_path: Path, resnet18: Any) -> None:
    _describe_resnet18(resnet18, tmp_path / "described")
    seen = _run_probe(_PREVIEW_PROBE, tmp_path, WORKBENCH_CACHE_DIR=str(tmp_path / "described"))
    assert seen == ["first-paint", "cached-tree", 10, True,
                    "Loading PyTorch… resnet18's tree is from the last start: edit the plan now; costs and Start "
                    "come once the model has loaded.", False]


def _toggle(described: Any, path: str, key: str, on: bool) -> None:
    """Click a checkbox of the described tree (what the view's delegate does)."""
    index = described.tree_model.index_of(path, column_index(key))
    assert index.flags() & Qt.ItemFlag.ItemIsUserCheckable
    state = Qt.CheckState.Checked if on else Qt.CheckState.Unchecked
    assert described.tree_model.setData(index, state, Qt.ItemDataRole.CheckStateRole)


def test_the_described_tree_edits_the_plan_and_the_live_tree_takes_the_edits(
    qtbot: Any, cache_dir: Path, resnet18: Any
) -> None:
    path = _describe_resnet18(resnet18, cache_dir)
    shell = StartupWindow("resnet18", preview=_described_tree("resnet18"))  # deleted when the window replaces it
    shell.show()
    described = shell.described
    assert described is not None and not shell.loading_label.isVisible() and shell.notice.isVisible()
    assert described.controller.model is None and described.controller.tree is not None
    _toggle(described, "layer1", "frozen", True)  # the same edits and undo steps as on a loaded model
    layer2 = described.proxy.mapFromSource(described.tree_model.index_of("layer2"))
    shell.tree.setCurrentIndex(layer2)
    qtbot.keyClick(shell.tree, Qt.Key.Key_Space)  # Space toggles the selected rows, as in the full window
    _toggle(described, "fc", "reparam", True)
    frozen = column_index("frozen")
    assert described.tree_model.index_of("layer1.0.conv1", frozen).data(Qt.ItemDataRole.CheckStateRole) == \
        Qt.CheckState.Checked  # the subtree follows, as in the live tree
    assert described.tree_model.index_of("", frozen).data(Qt.ItemDataRole.CheckStateRole) == \
        Qt.CheckState.PartiallyChecked
    described.controller.undo_stack.undo()  # A+B on fc undone: not carried over
    texts = [described.controller.undo_stack.text(i) for i in range(2)]
    layer1 = described.proxy.mapFromSource(described.tree_model.index_of("layer1"))
    shell.tree.setCurrentIndex(layer1)
    shell.tree.expand(layer1)
    path.unlink()
    window = _open_window(shell, path=None, model=None)
    c = window.controller
    gone: list[bool] = []
    try:
        # the full window at once, before torch: the described tree with the edits as undo steps
        assert window.isVisible() and c.waiting and c.loaded is None and c.tree is not None
        assert [r.select for r in c.plan.rules] == ["layer1", "layer2"] and c.dirty
        assert [c.undo_stack.text(i) for i in range(c.undo_stack.count())] == texts and texts[0].startswith("Freeze layer1")
        current = window.proxy.mapToSource(window.view.currentIndex())
        assert window.tree_model.path(current) == "layer1"  # the picked row and the opened one carry over
        assert window.view.isExpanded(window.proxy.mapFromSource(window.tree_model.index_of("layer1")))
        assert window.cost_panel.isVisible() and "of 11.7M parameters" in window.cost_panel.params_label.text()  # costs
        c.set_value(["layer3"], "frozen", True)  # edits in the full window, before the model is there
        shell.destroyed.connect(lambda: gone.append(True))
        qtbot.waitUntil(lambda: bool(gone), timeout=ms(GUI_EVENT_S))  # closed and deleted
        _load_startup_model(window, path=None, model=None)
        qtbot.waitUntil(lambda: c.loaded is not None, timeout=ms(GUI_WORKER_S))
        assert c.tree is not None and window.tree_model.rowCount() > 0 and c.model is not None
        assert [r.select for r in c.plan.rules] == ["layer1", "layer2", "layer3"]
        assert c.undo_stack.count() == 3 and c.dirty  # one undo step per edit, on the loaded model
        assert c.plan.model["name"] == "resnet18"
        c.undo_stack.undo()
        c.undo_stack.undo()
        assert [r.select for r in c.plan.rules] == ["layer1"]
        current = window.proxy.mapToSource(window.view.currentIndex())
        assert window.tree_model.path(current) == "layer1"  # and again on the live tree
        assert window.view.isExpanded(window.proxy.mapFromSource(window.tree_model.index_of("layer1")))
        qtbot.waitUntil(path.is_file, timeout=ms(GUI_EVENT_S))  # described again for the next start
        assert len(tree_cache.read_tree_checked("torchvision", "resnet18", folder=cache_dir).tree) == len(c.tree.nodes)
    finally:
        qtbot.waitUntil(lambda: not c.busy and not c.checking, timeout=ms(GUI_WORKER_S))
        window.close()


def test_closing_the_start_up_window_asks_before_its_plan_edits_are_lost(
    qtbot: Any, cache_dir: Path, dialogs: Any, tmp_path: Path
) -> None:
    shell = StartupWindow("resnet18", preview=_described_tree("resnet18"))
    qtbot.addWidget(shell)
    shell.show()
    described = shell.described
    assert described is not None
    assert shell.close() and not dialogs.kinds("ask")  # nothing edited: closes without a question
    shell.show()
    _toggle(described, "layer1", "frozen", True)
    dialogs.script("ask", "Cancel")
    assert not shell.close() and shell.isVisible()  # Cancel: nothing lost
    assert dialogs.kinds("ask")[-1][2] == ("The plan has 1 unsaved edit(s), made while resnet18 loaded. "
                                           "Save them first?")
    dialogs.script("ask", "Save")
    dialogs.script("save_file", str(tmp_path / "early"))
    assert shell.close()  # saved: the plan file holds the edit, for resnet18
    saved = FreezePlan.load(tmp_path / "early.json")
    assert [r.select for r in saved.rules] == ["layer1"] and saved.model["name"] == "resnet18"
    assert saved.model["fingerprint"] == described.controller.tree.fingerprint
    described.controller.set_value(["layer2"], "frozen", True)
    shell.show()
    dialogs.script("ask", "Discard")
    assert shell.close()


def test_an_edit_the_described_tree_refuses_is_one_dialog(qtbot: Any, cache_dir: Path, dialogs: Any) -> None:
    shell = StartupWindow("resnet18", preview=_described_tree("resnet18"))
    qtbot.addWidget(shell)
    described = shell.described
    assert described is not None
    assert not described.controller.set_value(["fc"], "no_such_key", True)
    errors = dialogs.kinds("error")
    assert len(errors) == 1 and errors[0][1] == "Cannot change the plan" and "no_such_key" in errors[0][2]
    assert not described.controller.plan.rules


def test_edits_on_a_tree_that_is_not_the_loaded_one_are_refused_in_one_line(qtbot: Any) -> None:
    from torch import nn

    from workbench.gui.controller import Controller

    described, loaded = Controller(), Controller()
    described.show_described(ModelTree.from_model(nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))), {"name": "a"})
    described.set_value(["1"], "frozen", True)
    edits = described.done_edits()
    assert [text for text, _ in edits] == [described.undo_stack.text(0)]
    loaded.show_described(ModelTree.from_model(nn.Sequential(nn.Linear(2, 2))), {"name": "b"})  # no module "1"
    refused = loaded.take_edits(edits, described.tree)
    assert refused.startswith("the 1 plan edit(s) made before the model loaded were not kept")
    assert not loaded.plan.rules and loaded.undo_stack.count() == 0
    assert loaded.take_edits([], described.tree) == ""


def test_the_app_ships_the_start_up_model_s_live_tree(resnet18: Any) -> None:
    from workbench.resources import resource_path

    path = resource_path("trees", "torchvision-resnet18.json")
    live = tree_cache.description("torchvision", "resnet18", None, ModelTree.from_model(resnet18), None)
    assert json.loads(path.read_text(encoding="utf-8")) == live, (
        "torchvision's resnet18 changed: rewrite resources/trees/torchvision-resnet18.json with "
        "json.dumps(tree_cache.description('torchvision', 'resnet18', None, ModelTree.from_model(resnet18()), None))")
    shipped = tree_cache.read_description(path, "torchvision", "resnet18", None)
    assert shipped.shipped and shipped.tree.fingerprint == ModelTree.from_model(resnet18).fingerprint


def test_a_first_start_shows_the_tree_the_app_ships(qtbot: Any, cache_dir: Path) -> None:
    assert not cache_dir.exists()  # nothing described yet
    preview = _described_tree("resnet18")
    assert preview is not None and preview.shipped
    assert _described_tree("resnet50") is None  # only the start-up model's tree is shipped
    shell = StartupWindow("resnet18", preview=preview)
    qtbot.addWidget(shell)
    assert shell.described is not None and shell.notice.text().startswith(
        "Loading PyTorch… resnet18's tree is as the app ships it: edit the plan now")


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
    assert "Unsaved changes" not in proc.stderr  # nothing was edited: closing asks nothing
    assert tree_cache.read_tree("torchvision", "resnet18", folder=tmp_path / "cache") is not None
    assert path.is_file()


def test_a_load_that_fails_behind_a_described_tree_keeps_the_tree_and_its_edits(
    qtbot: Any, cache_dir: Path, resnet18: Any, dialogs: Any, monkeypatch: Any
) -> None:
    from workbench.core.models.zoo import ModelSourceError
    from workbench.gui import model_loading

    def broken(request: Any) -> Any:
        raise ModelSourceError("the weights file is damaged; delete it and download again")

    monkeypatch.setattr(model_loading, "load_model", broken)
    _describe_resnet18(resnet18, cache_dir)
    shell = StartupWindow("resnet18", preview=_described_tree("resnet18"))
    shell.show()
    assert shell.described is not None
    _toggle(shell.described, "layer1", "frozen", True)  # an edit on a model that will not load
    window = _start(shell)
    c = window.controller
    try:
        qtbot.waitUntil(lambda: bool(dialogs.kinds("error")), timeout=ms(GUI_WORKER_S))
        title, message = dialogs.kinds("error")[0][1:3]
        assert title == "Cannot load model" and "damaged" in message
        assert window.isVisible() and not c.busy and not c.waiting and c.loaded is None
        assert c.tree is not None and [r.select for r in c.plan.rules] == ["layer1"] and c.dirty  # nothing lost
    finally:
        qtbot.waitUntil(lambda: not c.busy and not c.checking, timeout=ms(GUI_WORKER_S))
        window.close()
