"""The main window end to end: clicks, keys, bulk actions, files, loading, errors, cleanup."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QTimer, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QKeySequence
from PySide6.QtWidgets import QApplication
from torchvision.models import resnet18

from tests.preload import python_argv
from tests.timeouts import GUI_EVENT_S, GUI_WORKER_S, SUBPROCESS_S, ms
from workbench.core.models import zoo
from workbench.core.plan.rules import FreezePlan
from workbench.gui import settings as app_settings
from workbench.gui.main_window import MainWindow
from workbench.gui.model_loading import LoadRequest
from workbench.gui.plan import edits as plan_edits
from workbench.gui.plan.tree_model import Column

CHECK = Qt.ItemDataRole.CheckStateRole


def view_index(w: MainWindow, path: str, col: Column = Column.MODULE) -> Any:
    return w.proxy.mapFromSource(w.tree_model.index_of(path, col))


def frozen_state(w: MainWindow, path: str) -> Any:
    return w.tree_model.data(w.tree_model.index_of(path, Column.FROZEN), CHECK)


def wait_load(qtbot: Any, w: MainWindow, start: Any) -> bool:
    with qtbot.waitSignal(w.controller.loadFinished, timeout=ms(GUI_WORKER_S)) as blocker:
        start()
    return bool(blocker.args[0])


def test_starts_with_default_model(window: MainWindow) -> None:
    c = window.controller
    assert c.loaded is not None and c.loaded.label == "resnet18"
    assert window.tree_model.rowCount(window.tree_model.index(0, 0)) == 10  # conv1 ... fc
    assert "resnet18" in window.model_label.text()
    cached = zoo.weights_cached("resnet18", "IMAGENET1K_V1")
    assert ("IMAGENET1K_V1" in window.model_label.text()) if cached else (
        "random init (weights not cached)" in window.model_label.text()
    )
    assert "11.7M params" in window.params_label.text()
    assert "cpu" in window.device_label.text() or "cuda" in window.device_label.text()
    tabs = [window.right_panel.tabText(i) for i in range(window.right_panel.count())]
    assert tabs[:4] == ["Plan", "Plots", "Runs", "Verify"]
    assert window.right_panel.widget(1) is window.training.plots
    assert window.training.panel.parent() is window.bottom_panel or window.training.panel in window.bottom_panel.findChildren(type(window.training.panel))
    assert not c.dirty


def test_real_mouse_click_on_frozen_checkbox(window: MainWindow, qtbot: Any) -> None:
    c = window.controller
    total = c.counts.total
    idx = view_index(window, "layer1", Column.FROZEN)
    window.view.scrollTo(idx)
    rect = window.view.visualRect(idx)
    assert rect.isValid()
    qtbot.mouseClick(window.view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert [r.to_dict() for r in c.plan.rules] == [{"select": "layer1", "frozen": True}]
    assert frozen_state(window, "layer1") == Qt.CheckState.Checked
    assert frozen_state(window, "") == Qt.CheckState.PartiallyChecked
    assert c.counts.trainable == total - 147_968
    assert "Trainable 11.5M" in window.cost_panel.params_label.text()
    assert c.dirty and window.isWindowModified()
    # a click beside the box (on the row) does not toggle it
    qtbot.mouseClick(window.view.viewport(), Qt.MouseButton.LeftButton, pos=rect.topLeft() + QPointF(2, 2).toPoint())
    assert frozen_state(window, "layer1") == Qt.CheckState.Checked
    window.act_undo.trigger()
    assert c.plan.rules == [] and frozen_state(window, "layer1") == Qt.CheckState.Unchecked
    assert not c.dirty
    window.act_redo.trigger()
    assert frozen_state(window, "layer1") == Qt.CheckState.Checked


def test_space_toggles_selected_rows_and_shortcuts(window: MainWindow, qtbot: Any) -> None:
    c = window.controller
    sm = window.view.selectionModel()
    window.view.setFocus()
    for path in ("layer2", "layer3"):
        sm.select(view_index(window, path), sm.SelectionFlag.Select | sm.SelectionFlag.Rows)
    qtbot.keyClick(window.view, Qt.Key.Key_Space)
    assert frozen_state(window, "layer2") == frozen_state(window, "layer3") == Qt.CheckState.Checked
    qtbot.keyClick(window.view, Qt.Key.Key_Space)
    assert c.plan.rules == []
    assert window.act_undo.shortcut() == QKeySequence(QKeySequence.StandardKey.Undo)
    assert QKeySequence("Ctrl+Shift+Z") in window.act_redo.shortcuts()
    assert window.act_save_as.shortcut() == QKeySequence("Ctrl+Shift+S")
    assert window.plan_actions.act_find.shortcut() == QKeySequence(QKeySequence.StandardKey.Find)
    window.plan_actions.act_find.trigger()
    assert window.focusWidget() is window.filter_edit  # (offscreen windows are never active)


def test_bulk_actions_are_undoable(window: MainWindow) -> None:
    c = window.controller
    window.plan_actions.select_path("layer3")
    window.plan_actions.act_freeze_before.trigger()
    assert frozen_state(window, "layer2") == Qt.CheckState.Checked
    assert frozen_state(window, "conv1") == Qt.CheckState.Checked
    assert frozen_state(window, "layer3") == Qt.CheckState.Unchecked
    assert frozen_state(window, "fc") == Qt.CheckState.Unchecked
    window.plan_actions.select_path("fc")
    window.plan_actions.act_train_only.trigger()
    assert c.counts.trainable == 513_000
    window.plan_actions.act_bn_off.trigger()
    assert "bn-frozen-train-mode" in {f.code for f in c.state.findings}
    assert window.cost_panel.findings.count() >= 1
    window.plan_actions.act_bn_auto.trigger()
    assert "bn-frozen-train-mode" not in {f.code for f in c.state.findings}
    assert c.undo_stack.count() == 4
    for _ in range(4):
        window.act_undo.trigger()
    assert c.plan.rules == []


def test_filter_box_keeps_ancestors_visible(window: MainWindow) -> None:
    window.filter_edit.setText("downsample")
    assert view_index(window, "layer3.0.downsample").isValid()
    assert view_index(window, "layer3").isValid()
    assert not view_index(window, "layer1").isValid()
    assert window.view.isExpanded(view_index(window, "layer3.0"))
    window.plan_actions.select_path("fc")  # selecting a hidden row clears the filter
    assert window.filter_edit.text() == "" and view_index(window, "fc").isValid()


def test_save_and_reopen_gives_the_same_plan(window: MainWindow, dialogs: Any, tmp_path: Path) -> None:
    c = window.controller
    c.set_value(["layer1", "layer2"], "frozen", True)
    c.set_value(["layer4"], "lr_scale", 0.5)
    c.set_value(["layer1.0.bn1"], "bn_eval", False)
    target = tmp_path / "resnet18.plan.json"
    dialogs.script("save_file", str(tmp_path / "resnet18.plan"))  # ".json" is added
    assert window.documents.save()
    assert target.is_file() and not c.dirty and not window.isWindowModified()
    saved = json.loads(target.read_text())
    assert saved["model"]["name"] == "resnet18" and saved["model"]["fingerprint"] == c.tree.fingerprint
    before = c.plan.to_dict()
    window.documents.new_plan()
    assert c.plan.rules == [] and c.path is None
    assert window.documents.open_plan(str(target))
    assert c.plan.to_dict() == before == FreezePlan.load(target).to_dict()
    assert c.path == target and not c.dirty
    assert str(target.resolve()) in app_settings.recent_files()
    assert not dialogs.kinds("error")
    c.set_value(["fc"], "frozen", True)
    assert window.documents.save() and FreezePlan.load(target).rules[-1].select == "fc"  # Save reuses the path


def test_settings_are_private_to_the_tests(window: MainWindow, tmp_path_factory: Any) -> None:
    where = Path(app_settings.settings().fileName())
    assert str(where).startswith(str(tmp_path_factory.getbasetemp()))


def test_bad_plan_shows_error_and_keeps_state(window: MainWindow, dialogs: Any, tmp_path: Path) -> None:
    c = window.controller
    c.set_value(["layer1"], "frozen", True)
    before = c.plan.to_dict()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"rules": [{"select": "layer2", "frozen": "yes"}, {"selct": "fc"}]}))
    dialogs.script("ask", "Discard")
    assert not window.documents.open_plan(str(bad))
    (kind, title, message), = dialogs.kinds("error")
    assert title == "Cannot open plan" and "rule 0" in message and "frozen" in message and "rule 1" in message
    assert c.plan.to_dict() == before
    broken = tmp_path / "broken.json"
    broken.write_text("{ not json")
    assert not window.documents.open_plan(str(broken))
    assert "line 1" in dialogs.kinds("error")[-1][2]
    c.set_value(["layer2"], "frozen", True)  # still usable
    assert frozen_state(window, "layer2") == Qt.CheckState.Checked


def test_plan_naming_missing_modules_keeps_every_rule(window: MainWindow, dialogs: Any, tmp_path: Path) -> None:
    c = window.controller
    path = tmp_path / "other.json"
    path.write_text(json.dumps({
        "format": "freeze-plan", "version": 1,
        "rules": [{"select": "layer1", "frozen": True}, {"select": "layer9", "frozen": True},
                  {"select": "head", "lr_scale": 0.1}],
    }))
    assert window.documents.open_plan(str(path))
    (kind, title, message), = dialogs.kinds("error")
    assert title == "Plan does not fit the model"
    assert "layer9" in message and "head" in message and "Rules that failed: 1, 2" in message
    assert len(c.plan.rules) == 3
    assert frozen_state(window, "layer1") == Qt.CheckState.Checked
    assert "unmatched-selector" in {f.code for f in c.state.findings}
    assert window.plan_actions.act_remove_unmatched.isEnabled()
    window.plan_actions.act_remove_unmatched.trigger()
    assert [r.select for r in c.plan.rules] == ["layer1"]
    window.act_undo.trigger()
    assert len(c.plan.rules) == 3


def test_bad_checkpoint_error_dialog_and_previous_model_stays(
    window: MainWindow, dialogs: Any, qtbot: Any, tmp_path: Path
) -> None:
    c = window.controller
    c.set_value(["layer1"], "frozen", True)
    tree = c.tree
    bad = tmp_path / "weights.pt"
    bad.write_bytes(b"PK\x03\x04 this is not a checkpoint")
    dialogs.script("ask", "Discard")
    assert not wait_load(qtbot, window, lambda: window.documents.open_checkpoint(str(bad)))
    (kind, title, message), = dialogs.kinds("error")
    assert title == "Cannot load model" and "weights.pt" in message
    assert c.tree is tree and c.loaded.label == "resnet18" and len(c.plan.rules) == 1
    assert not c.busy and not window.busy_bar.isVisible() and window.source_bar.load_button.isEnabled()
    c.set_value(["layer2"], "frozen", True)  # still usable
    assert frozen_state(window, "layer2") == Qt.CheckState.Checked


def test_checkpoint_loads_off_the_gui_thread(window: MainWindow, dialogs: Any, qtbot: Any, tmp_path: Path) -> None:
    model = resnet18(num_classes=7)
    path = zoo.save_checkpoint(model, tmp_path / "r7.safetensors", arch="resnet18")
    busy: list[bool] = []
    window.controller.busyChanged.connect(lambda b, _t: busy.append(b))
    assert wait_load(qtbot, window, lambda: window.documents.open_checkpoint(str(path)))
    assert busy == [True, False]
    c = window.controller
    assert c.tree.nodes["fc"].total_params == 512 * 7 + 7
    assert c.plan.model["source"] == "checkpoint" and c.plan.model["checkpoint"] == str(path)
    assert "checkpoint r7.safetensors" in window.model_label.text()
    assert not dialogs.kinds("error")


def test_model_bar_load_keeps_a_plan_that_still_fits(window: MainWindow, qtbot: Any) -> None:
    c = window.controller
    c.set_value(["layer1"], "frozen", True)
    c.undo_stack.setClean()
    window.source_bar.classes.setValue(10)
    window.source_bar.weights_box.setCurrentIndex(0)  # random init
    assert wait_load(qtbot, window, lambda: window.source_bar.load_button.click())
    assert c.tree.nodes["fc"].total_params == 5130
    assert [r.to_dict() for r in c.plan.rules] == [{"select": "layer1", "frozen": True}]
    assert c.plan.model.get("num_classes") == 10 and c.dirty  # the model block changed


def test_uncached_weights_ask_before_download(window: MainWindow, dialogs: Any, qtbot: Any) -> None:
    if zoo.weights_cached("resnet18", "IMAGENET1K_V1"):
        pytest.skip("weights are cached here")
    request = LoadRequest("resnet18", "IMAGENET1K_V1")
    dialogs.script("ask", "Cancel")
    assert not window.documents.load_model_request(request)
    assert dialogs.kinds("ask")[-1][1] == "Weights not cached" and not window.controller.busy
    dialogs.script("ask", "Random Init")
    assert wait_load(qtbot, window, lambda: window.documents.load_model_request(request))
    assert "random init (weights not cached)" in window.model_label.text()


def test_plan_for_another_model_loads_it(window: MainWindow, dialogs: Any, qtbot: Any, tmp_path: Path) -> None:
    path = tmp_path / "small.json"
    path.write_text(json.dumps({"model": {"source": "torchvision", "name": "mobilenet_v3_small", "num_classes": 4},
                                "rules": [{"select": "features", "frozen": True}]}))
    assert wait_load(qtbot, window, lambda: window.documents.open_plan(str(path)))
    c = window.controller
    assert c.loaded.label == "mobilenet_v3_small" and c.path == path
    assert frozen_state(window, "features") == Qt.CheckState.Checked
    assert c.tree.nodes["classifier.3"].total_params == 1024 * 4 + 4
    assert window.source_bar.current_name() == "mobilenet_v3_small"
    assert not dialogs.kinds("error") and not c.dirty


@pytest.mark.filterwarnings("ignore:Function.*QDragEnterEvent:DeprecationWarning")
def test_drag_and_drop_opens_a_plan(window: MainWindow, qtbot: Any, tmp_path: Path) -> None:
    path = tmp_path / "drop.json"
    FreezePlan.from_dict({"rules": [{"select": "fc", "frozen": True}]}).save(path)
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    pos = QPointF(200, 200)
    enter = QDragEnterEvent(pos.toPoint(), Qt.DropAction.CopyAction, mime, Qt.MouseButton.NoButton,
                            Qt.KeyboardModifier.NoModifier)
    window.dragEnterEvent(enter)
    assert enter.isAccepted()
    other = QMimeData()
    other.setUrls([QUrl.fromLocalFile(str(tmp_path / "notes.txt"))])
    refused = QDragEnterEvent(pos.toPoint(), Qt.DropAction.CopyAction, other, Qt.MouseButton.NoButton,
                              Qt.KeyboardModifier.NoModifier)
    window.dragEnterEvent(refused)
    assert not refused.isAccepted()
    drop = QDropEvent(pos, Qt.DropAction.CopyAction, mime, Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier)
    window.dropEvent(drop)
    qtbot.waitUntil(lambda: window.controller.path == path, timeout=ms(GUI_EVENT_S))
    assert frozen_state(window, "fc") == Qt.CheckState.Checked


def test_close_asks_about_unsaved_changes(window: MainWindow, dialogs: Any, qtbot: Any) -> None:
    window.controller.set_value(["fc"], "frozen", True)
    dialogs.script("ask", "Cancel")
    assert not window.close()
    assert window.isVisible() and dialogs.kinds("ask")[-1][1] == "Unsaved changes"
    dialogs.script("ask", "Discard")
    assert window.close()


def test_closing_during_a_load_leaves_no_thread(qtbot: Any) -> None:
    w = MainWindow()
    qtbot.addWidget(w)
    assert w.controller.load(LoadRequest("resnet18"))
    assert w.controller.busy
    assert w.close()  # waits for the worker; the leak fixture checks no thread is left


def test_partial_freezing_dialog(window: MainWindow, dialogs: Any) -> None:
    from workbench.gui.plan.partial_dialog import PartialDialog

    def fill(d: PartialDialog) -> bool:
        d.set_values("weight", 1, "0:200")
        assert d.spec() is not None and "200 of 512" in d.preview.text()
        d.set_values("weight", 1, "0:10, 600:700")
        assert d.spec() is None and d.problem.text()  # beyond 512 input features
        d.set_values("weight", 1, "0:10, 20")
        assert d.spec() == {"param": "weight", "dim": 1, "trainable": [[0, 10], [20, 21]]}
        return True

    window.plan_actions.select_path("fc")
    assert window.plan_actions.act_partial is not None and window.plan_actions.act_partial.isEnabled()
    dialogs.script("dialog", fill)
    window.plan_actions.act_partial.trigger()
    c = window.controller
    assert frozen_state(window, "fc") == Qt.CheckState.PartiallyChecked
    assert c.state.nodes["fc"].trainable == 11 * 1000 + 1000
    window.plan_actions.select_path("layer1")
    assert not window.plan_actions.act_partial.isEnabled()  # a Sequential cannot be partially frozen
    window.plan_actions.select_path("fc")
    dialogs.script("dialog", lambda d: (d._remove(), True)[1])
    window.plan_actions.act_partial.trigger()
    assert all(r.partial is None for r in c.plan.rules)


def test_app_main_runs_and_quits(qtbot: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from workbench.gui import app

    timer = QTimer()

    def close_when_open() -> None:  # the full window replaces the start-up window once torch is in
        windows = [w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow) and w.isVisible()]
        for w in windows:
            w.close()
        if windows:
            timer.stop()

    timer.timeout.connect(close_when_open)
    timer.start(50)
    assert app.main([]) == 0
    assert QApplication.applicationName() == "Freeze Workbench"
    assert not QApplication.windowIcon().isNull()


def test_gui_command_imports_qt_lazily(monkeypatch: pytest.MonkeyPatch) -> None:
    code = (
        "import sys, workbench.cli as c; p = c.build_parser('gui'); "
        "assert 'gui' in c.COMMANDS; assert not any(m.startswith('PySide6') for m in sys.modules), 'Qt imported'"
    )
    subprocess.run(python_argv("-c", code), check=True, timeout=SUBPROCESS_S)
    from workbench.commands import gui
    from workbench.gui import app

    seen: dict[str, Any] = {}
    monkeypatch.setattr(app, "main", lambda **kw: seen.update(kw) or 3)
    parser = __import__("argparse").ArgumentParser()
    gui.add_arguments(parser)
    assert gui.run(parser.parse_args(["plan.json", "--model", "vit_b_16"])) == 3
    assert seen == {"path": "plan.json", "model": "vit_b_16"}


def test_export_plain_script(window: MainWindow, dialogs: Any, tmp_path: Path) -> None:
    assert window.act_export is not None
    c = window.controller
    c.set_value(["layer1", "layer2"], "frozen", True)
    c.set_value(["layer4"], "lr_scale", 0.1)
    window.training.panel.set_values(lr=5e-3, weight_decay=0.01, batch_size=8, image_size=64)
    dialogs.script("save_file", str(tmp_path / "train_resnet18"))
    assert window.documents.export_script()
    script = tmp_path / "train_resnet18.py"
    text = script.read_text()
    compile(text, str(script), "exec")
    assert "layer1" in text and "import workbench" not in text
    assert "LR = 0.005" in text and "BATCH_SIZE = 8" in text and "IMAGE_SIZE = 64" in text  # the training settings
    assert not dialogs.kinds("error")
    # end to end: the script, run without the workbench, applies the same plan
    state_file = tmp_path / "state.json"
    subprocess.run(python_argv(str(script), "--describe", str(state_file)), check=True, timeout=SUBPROCESS_S,
                   capture_output=True, cwd=tmp_path)
    state = json.loads(state_file.read_text())
    assert state["trainable_count"] == c.counts.trainable
    assert state["total_count"] == c.counts.total
    assert {"layer1.0.bn1", "layer2.1.bn2"} <= set(state["bn_eval"])  # frozen BatchNorm stays in eval
    assert sorted(g["lr"] for g in state["groups"]) == pytest.approx([5e-4, 5e-3])
    # sub-tensor freezing is exported as plain PyTorch: the frozen part of fc's weight never trains
    spec = {"param": "weight", "dim": 1, "trainable": [[0, 4]]}
    window.controller.edit("partial", lambda plan, tree: plan_edits.set_partial(plan, tree, "fc", spec))
    dialogs.script("save_file", str(tmp_path / "partial.py"))
    assert window.documents.export_script()
    assert not dialogs.kinds("error")
    assert "weight_trainable" in (tmp_path / "partial.py").read_text()


def test_lr_cell_editor_commits_to_the_plan(window: MainWindow, qtbot: Any) -> None:
    from PySide6.QtWidgets import QLineEdit

    idx = view_index(window, "layer4", Column.LR)
    window.view.setCurrentIndex(idx)
    window.view.edit(idx)
    editors = [w for w in window.view.viewport().findChildren(QLineEdit) if w.isVisible()]
    assert len(editors) == 1
    editors[0].setText("0.25")
    qtbot.keyClick(editors[0], Qt.Key.Key_Return)  # the delegate commits on the next event loop pass
    qtbot.waitUntil(lambda: bool(window.controller.plan.rules), timeout=ms(GUI_EVENT_S))
    assert [r.to_dict() for r in window.controller.plan.rules] == [{"select": "layer4", "lr_scale": 0.25}]
    assert window.tree_model.data(window.tree_model.index_of("layer4.0", Column.LR)) == "0.25"


def test_context_menu_offers_the_bulk_actions(window: MainWindow) -> None:
    window.plan_actions.select_path("layer2")
    rect = window.view.visualRect(view_index(window, "layer2"))
    menu = window.plan_actions.context_menu_for(rect.center())
    assert menu is not None
    try:
        texts = {a.text() for a in menu.actions()}
    finally:
        menu.deleteLater()
    assert {"Freeze", "Unfreeze", "Train Only This", "Freeze Everything Before This", "All BatchNorm Eval On"} <= texts
    assert window.plan_actions.context_menu_for(QPointF(5, window.view.viewport().height() - 2).toPoint()) is None  # below the rows


def test_app_main_with_model_and_plan(qtbot: Any, dialogs: Any, tmp_path: Path) -> None:
    from workbench.gui import app

    plan = tmp_path / "p.json"
    FreezePlan.from_dict({"rules": [{"select": "features", "frozen": True}]}).save(plan)
    seen: dict[str, Any] = {}
    polls = [0]

    def poll() -> None:  # gives up after ~60 s so a broken start-up fails instead of hanging
        polls[0] += 1
        windows = [w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow)]
        c = windows[0].controller if windows else None
        if c is not None and not c.busy and c.path == plan:
            seen.update(label=c.loaded.label, rules=len(c.plan.rules))
            windows[0].close()
        elif polls[0] > 3000 and windows and not windows[0].controller.busy:
            windows[0].close()
        else:
            QTimer.singleShot(20, poll)

    QTimer.singleShot(0, poll)
    assert app.main([], path=str(plan), model="mobilenet_v3_small") == 0
    assert seen == {"label": "mobilenet_v3_small", "rules": 1}
    assert not dialogs.kinds("error")
