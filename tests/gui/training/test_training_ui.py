"""TrainingUI builds the training widgets and hands them out; the window places them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtWidgets import QWidget
from torch import nn

from workbench.gui.controller import Controller
from workbench.gui.main_window import MainWindow
from workbench.gui.model_loading import loaded_from_model
from workbench.gui.training.ui import TrainingUI


def test_training_ui_needs_no_main_window(qtbot: Any, runs_dir: Path) -> None:
    owner = QWidget()
    qtbot.addWidget(owner)
    c = Controller(owner)
    c.set_loaded(loaded_from_model(nn.Sequential(nn.Linear(2, 3), nn.ReLU()), "tiny"))
    t = TrainingUI(c, None, owner, runs_dir=runs_dir)
    assert [title for _w, title in t.tabs] == ["Plots", "Runs", "Verify"]
    assert [w for w, _t in t.tabs] == [t.plots, t.runs_panel, t.verify]
    assert t.menu.title() == "&Run" and t.menu.actions() == list(t.actions)
    assert [a.shortcut().toString() for a in t.actions] == ["F5", "F6", "Shift+F5"]
    picked: list[str] = []
    t.moduleActivated.connect(picked.append)
    t.verify.moduleActivated.emit("0")
    t.verify.moduleActivated.emit("no.such.module")  # not in the loaded model: nothing to select
    assert picked == ["0"]
    shown: list[tuple[str, int]] = []
    t.statusMessage.connect(lambda text, ms: shown.append((text, ms)))
    t.plots.exportCsvRequested.emit()
    assert shown == [("No run to export yet.", 5000)]
    t.shutdown()


def test_window_places_the_training_side(window: MainWindow) -> None:
    menus = [a.text().replace("&", "") for a in window.menuBar().actions()]
    assert menus == ["File", "Edit", "View", "Run", "Help"]
    assert window.menuBar().actions()[3].menu() is window.training.menu
    for act in window.training.actions:
        assert act in window.actions()  # the shortcuts work wherever the focus is
    assert window.training.panel in window.bottom_panel.findChildren(QWidget)
    tabs = window.right_panel
    assert [tabs.tabText(i) for i in range(tabs.count())] == ["Plan", "Plots", "Runs", "Verify", "Layers", "Diagnostics"]


def test_verify_result_and_run_start_reach_the_tabs(window: MainWindow) -> None:
    t, tabs = window.training, window.right_panel
    verify = tabs.indexOf(t.verify)
    t.verifyResult.emit(True)
    assert not tabs.tabIcon(verify).isNull()
    t.verifyResult.emit(None)
    assert tabs.tabIcon(verify).isNull()
    tabs.setCurrentWidget(t.runs_panel)
    t.runStarted.emit()
    assert tabs.currentWidget() is t.plots
    tabs.setCurrentWidget(window.diagnostics)
    t.runStarted.emit()  # the diagnostics in use stay in front
    assert tabs.currentWidget() is window.diagnostics
    t.statusMessage.emit("hello", 5000)
    assert window.statusBar().currentMessage() == "hello"
