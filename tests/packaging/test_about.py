"""The About dialog: versions, the PyTorch build, the device found, copy to clipboard."""

from __future__ import annotations

import platform
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torchvision
from PySide6 import __version__ as pyside_version
from PySide6.QtCore import qVersion

import workbench
from workbench.gui import about, dialogs


@pytest.fixture(autouse=True)
def _private_settings(tmp_path: Any) -> Iterator[None]:
    from PySide6.QtCore import QSettings

    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(tmp_path))
    yield


def test_rows_name_every_version_and_the_device(qapp):
    rows = dict(about.environment_rows())
    assert rows["Freeze Workbench"] == workbench.__version__
    assert rows["Python"].startswith(platform.python_version())
    assert rows["PyTorch"].startswith(torch.__version__ + " (")
    assert rows["torchvision"] == torchvision.__version__
    assert rows["Qt"] == qVersion() and rows["PySide6"] == pyside_version
    import pyqtgraph

    assert rows["pyqtgraph"] == pyqtgraph.__version__
    device = rows["Device"]
    if torch.cuda.is_available():
        assert device.startswith("cuda:0 · " + torch.cuda.get_device_name(0))
    else:
        assert device.startswith(("cpu (", "mps"))


def test_cpu_build_is_named(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert about.torch_build() == "CPU build"
    assert about.device_description() == "cpu (CPU build of PyTorch)"


def test_cuda_build_without_gpu_says_so(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert about.torch_build() == "CUDA 12.4"
    assert about.device_description() == "cpu (CUDA 12.4 build, no CUDA device visible)"


def test_gpu_is_described_with_memory_and_count(monkeypatch):
    props = SimpleNamespace(name="NVIDIA H200", total_memory=143 * 2**30, major=9, minor=0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert about.device_description() == "cuda:0 · NVIDIA H200 · 143.0 GiB · compute 9.0 (+1 more GPU)"


def test_dialog_shows_rows_and_copies_them(qtbot):
    dlg = about.AboutDialog()
    qtbot.addWidget(dlg)
    assert dlg.windowTitle() == "About Freeze Workbench"
    for label, value in dlg.rows:
        assert dlg.value_labels[label].text() == value
    from PySide6.QtWidgets import QApplication

    QApplication.clipboard().setText("")
    dlg.copy_button.click()
    text = QApplication.clipboard().text()
    assert text == about.about_text(dlg.rows)
    assert f"PyTorch: {torch.__version__}" in text and "\nDevice: " in text
    assert dlg.copied_label.text() == "Copied to the clipboard."


def test_main_window_about_opens_the_dialog(qtbot, monkeypatch):
    from workbench.gui.main_window import MainWindow

    shown: list[Any] = []
    monkeypatch.setattr(dialogs, "run_dialog", lambda d: shown.append((type(d).__name__, d.text())) or False)
    monkeypatch.setattr(dialogs, "info", lambda parent, title, text: shown.append(("info", text)))  # the old box
    window = MainWindow(load_default=False)
    qtbot.addWidget(window)
    window.act_about.trigger()
    assert len(shown) == 1 and shown[0][0] == "AboutDialog"
    assert f"Freeze Workbench: {workbench.__version__}" in shown[0][1]
    window.close()
