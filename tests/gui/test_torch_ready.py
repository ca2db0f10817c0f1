"""What the window asks torch for, before and after torch is there (start-up builds it first)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from workbench.gui import settings as app_settings
from workbench.gui import torch_ready
from workbench.gui.main_window import MainWindow
from workbench.gui.torch_ready import Devices


@pytest.fixture()
def deferred(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Start-up's state: the probe waits for torch; afterwards the real devices, probed again."""
    torch_ready.defer()
    yield monkeypatch
    monkeypatch.undo()  # torch's own answers again, before they are remembered
    torch_ready.announce()


@pytest.fixture()
def new_window() -> Any:
    """Builds windows; closes them and puts the training settings back as they were (a closing
    window saves its settings, which the session's other windows would read)."""
    s = app_settings.settings()
    before = {k: s.value(k) for k in s.allKeys() if k.startswith("training/")}
    made: list[MainWindow] = []

    def make() -> MainWindow:
        made.append(MainWindow(load_default=False))
        return made[-1]

    yield make
    for window in made:
        window.close()
        window.deleteLater()
    for k in s.allKeys():
        if k.startswith("training/"):
            s.remove(k)
    for k, v in before.items():
        s.setValue(k, v)


def _two_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: f"GPU {i}")


def test_devices_say_what_auto_picks() -> None:
    assert Devices().auto == "cpu" and Devices().label() == "cpu" and not Devices().accelerator
    assert Devices(mps=True).auto == "mps" and Devices(mps=True).accelerator
    gpus = Devices(cuda=("NVIDIA H200", "NVIDIA H200"), mps=False)
    assert gpus.auto == "cuda:0" and gpus.label() == "cuda:0 · NVIDIA H200"


def test_choices_wait_for_torch_then_list_every_device(deferred: pytest.MonkeyPatch) -> None:
    assert not torch_ready.is_ready() and torch_ready.known_devices() is None
    assert torch_ready.device_choices() == [("auto", "auto"), ("cpu", "cpu")]
    _two_gpus(deferred)
    torch_ready.announce()
    assert torch_ready.is_ready()
    assert torch_ready.device_choices() == [("auto (cuda:0)", "auto"), ("cpu", "cpu"), ("cuda:0 · GPU 0", "cuda:0"),
                                            ("cuda:1 · GPU 1", "cuda:1")]


def test_a_window_built_before_torch_fills_in_its_devices_and_models(
    deferred: pytest.MonkeyPatch, new_window: Any
) -> None:
    s = app_settings.settings()
    s.setValue("training/device", "cuda:1")  # saved on a machine with two GPUs
    s.remove("training/image_size")  # never chosen: the machine's default
    window = new_window()
    panel, bar = window.training.panel, window.source_bar
    assert window.device_label.text() == "device: …"
    assert [panel.device_box.itemData(i) for i in range(panel.device_box.count())] == ["auto", "cpu"]
    assert panel.device_box.currentData() == "auto" and panel.image_size.value() == 64
    assert bar.current_name() == "resnet18" and bar.model_names() == []  # torchvision's list waits too
    setups: list[bool] = []
    panel.stepSetupChanged.connect(lambda: setups.append(True))
    _two_gpus(deferred)
    torch_ready.announce()
    assert window.device_label.text() == "device: cuda:0 · GPU 0"
    assert panel.device_box.currentData() == "cuda:1"  # the saved device, now that it is listed
    assert panel.image_size.value() == 0  # with a GPU: the model's own input size
    assert setups  # the cost panel's step estimate follows
    assert "resnet50" in bar.model_names() and bar.current_name() == "resnet18"
    assert bar.weights_box.count() >= 1 and bar.weights_box.itemData(0) is None  # random init, then weights

def test_a_device_chosen_before_torch_is_kept(deferred: pytest.MonkeyPatch, new_window: Any) -> None:
    s = app_settings.settings()
    s.setValue("training/device", "cuda:1")
    s.setValue("training/image_size", 96)  # chosen: kept
    panel = new_window().training.panel
    panel.device_box.setCurrentIndex(panel.device_box.findData("cpu"))  # the user picks the CPU meanwhile
    _two_gpus(deferred)
    torch_ready.announce()
    assert panel.device_box.currentData() == "cpu" and panel.image_size.value() == 96


def test_an_input_side_chosen_before_torch_is_kept(deferred: pytest.MonkeyPatch, new_window: Any) -> None:
    app_settings.settings().remove("training/image_size")
    panel = new_window().training.panel
    panel.image_size.setValue(128)  # typed while torch loads
    _two_gpus(deferred)
    torch_ready.announce()
    assert panel.image_size.value() == 128
