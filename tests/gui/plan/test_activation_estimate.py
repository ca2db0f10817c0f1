"""The cost panel's step memory (activations included), output shapes in tooltips, and the Start check."""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtCore import Qt

from tests.timeouts import GUI_EVENT_S, GUI_WORKER_S, ms
from workbench.core.advisor import activations
from workbench.core.advisor.activations import DeviceMemory
from workbench.gui.main_window import MainWindow
from workbench.gui.plan import activation_estimate


def _estimated(qtbot: Any, w: MainWindow) -> str:
    qtbot.waitUntil(lambda: w.controller.model is not None, timeout=ms(GUI_WORKER_S))
    est = w.activations
    est.request()
    label = w.cost_panel.activation_label
    qtbot.waitUntil(
        lambda: not est._timer.isActive() and not est.busy and "activations <b>" in label.text(),
        timeout=ms(GUI_WORKER_S),
    )
    return label.text()


def _small_device(monkeypatch: pytest.MonkeyPatch, total: int, available: int) -> None:
    monkeypatch.setattr(  # the estimator imports it when it estimates (the window imports no torch)
        activations, "device_memory", lambda device: DeviceMemory("cpu", total, available, "available RAM")
    )


def test_the_panel_includes_activations_for_the_batch_and_the_plan(window: MainWindow, qtbot: Any) -> None:
    w = window
    text = _estimated(qtbot, w)
    assert "Step at batch 4 · 32 px" in text and "✓" in text
    full = w.activations.estimate().prediction
    assert full is not None and full.activations > 0
    w.controller.set_value([""], "frozen", True)
    w.controller.set_value(["fc"], "frozen", False)
    _estimated(qtbot, w)
    head = w.activations.estimate().prediction
    assert head is not None and head.activations < full.activations / 20  # a frozen prefix keeps none
    tip = w.tree_model.index_of("layer1").data(Qt.ItemDataRole.ToolTipRole)
    assert "Output 4×64×8×8" in tip and "keeps nothing for backward" in tip
    assert "keeps" in w.tree_model.index_of("fc").data(Qt.ItemDataRole.ToolTipRole)
    w.training.panel.set_values(batch_size=8)
    _estimated(qtbot, w)
    assert "Step at batch 8 · 32 px" in w.cost_panel.activation_label.text()


def test_start_asks_first_when_the_batch_will_not_fit(window: MainWindow, qtbot: Any, dialogs: Any,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    w = window
    _estimated(qtbot, w)
    pred = w.activations.estimate().prediction
    assert pred is not None
    need = pred.peak
    _small_device(monkeypatch, total=100 * need, available=need // 2)  # below the weights: no batch fits
    w.activations.request()
    qtbot.waitUntil(lambda: "does not fit" in w.cost_panel.activation_label.text(), timeout=ms(GUI_EVENT_S))
    runs = len(w.training.runs.records)
    dialogs.script("ask", "Cancel")
    assert not w.training.panel.start()
    (kind, title, text), = dialogs.kinds("ask")
    assert title == "Training may run out of memory" and "more than the" in text
    assert "Even a batch of 1" in text
    assert len(w.training.runs.records) == runs and w.training.runs.state == "idle"


def test_start_refuses_a_plan_whose_weights_alone_do_not_fit(window: MainWindow, qtbot: Any, dialogs: Any,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    w = window
    _estimated(qtbot, w)
    _small_device(monkeypatch, total=1_000_000, available=1_000_000)
    assert not w.training.panel.start()
    (kind, title, text), = dialogs.kinds("error")
    assert title == "Cannot start training" and "alone need" in text
    assert not dialogs.kinds("ask")


def test_a_run_that_fits_starts_without_asking_and_shows_predicted_against_measured(
    window: MainWindow, qtbot: Any, dialogs: Any
) -> None:
    w = window
    _estimated(qtbot, w)
    t = w.training
    t.panel.set_values(steps=3)
    with qtbot.waitSignal(t.runs.runEnded, timeout=ms(GUI_WORKER_S)) as blocker:
        assert t.panel.start()
    record = blocker.args[0]
    assert not dialogs.kinds("ask")
    assert record.summary["predicted_peak_bytes"] > 0 and record.summary["peak_memory_bytes"] > 0
    text = w.cost_panel.activation_label.text()
    assert "Last run: predicted peak" in text and "measured" in text and "peak tensor bytes" in text


def test_a_measured_zero_is_shown_not_dropped(window: MainWindow) -> None:
    panel = window.cost_panel
    panel.show_run_memory({"predicted_peak_bytes": 100_000_000, "peak_memory_bytes": 0,
                           "memory_source": "peak RSS growth", "peak_rss_bytes": 900_000_000})
    text = panel.activation_label.text()
    assert "Last run: predicted peak 100 MB · measured 0 MB (peak RSS growth; 0.00×)" in text
    assert "peak RSS 900 MB (process, absolute)" in text
    panel.show_run_memory({"predicted_peak_bytes": 100_000_000, "memory_source": "peak RSS growth"})
    assert "Last run" not in panel.activation_label.text()  # no measurement: no line


_DICT_TASK = '''
import torch
from torch import nn


class Mixer(nn.Module):
    def __init__(self):
        super().__init__()
        self.audio = nn.Linear(64, 16)
        self.kind = nn.Embedding(5, 16)
        self.head = nn.Linear(16, 3)

    def forward(self, audio, kind):
        return self.head(torch.relu(self.audio(audio) + self.kind(kind)))


class Pairs(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return {"audio": torch.randn(64), "kind": torch.tensor(i % 5)}, i % 3


def build(num_classes=None):
    return Mixer()


def data():
    return Pairs()
'''


def test_the_estimate_takes_the_input_from_one_sample_of_your_data(window: MainWindow, qtbot: Any, dialogs: Any,
                                                                   tmp_path: Any) -> None:
    from workbench.gui.training.code_confirm import confirm_task_code

    task = tmp_path / "mixer.py"
    task.write_text(_DICT_TASK)
    dialogs.script("ask", "Run")  # the model's code
    with qtbot.waitSignal(window.controller.loadFinished, timeout=ms(GUI_WORKER_S)):
        assert window.documents.open_model_code(str(task), "build")
    panel, est, label = window.training.panel, window.activations, window.cost_panel.activation_label
    try:
        panel.set_values(data=f"py:{task}:data", batch_size=4)
        est.request()
        qtbot.waitUntil(lambda: "once Start has shown its code" in label.text(), timeout=ms(GUI_WORKER_S))
        # Options… ▸ Input shape stands in until the code may run (a dict input has none: the note stays)
        dialogs.script("ask", "Run")
        assert confirm_task_code(panel, panel.config())  # as Start asks
        est.request()
        text = _estimated(qtbot, window)
        assert "Step at batch 4 · input audio 4x64, kind 4 int64" in text, text
        pred = est.estimate().prediction
        assert pred is not None and pred.activations > 0
    finally:
        panel.set_values(data="synthetic")
        panel.data_path.clear()
        panel.save_settings()


def test_tokens_and_the_estimate_agree_before_a_jsonl_file_is_chosen(window: MainWindow, qtbot: Any,
                                                                     bert_dir: Any) -> None:
    panel, label = window.training.panel, window.cost_panel.activation_label
    with qtbot.waitSignal(window.controller.loadFinished, timeout=ms(GUI_WORKER_S)):
        assert window.documents.open_model_folder(str(bert_dir))
    qtbot.waitUntil(lambda: panel.text_model, timeout=ms(GUI_EVENT_S))
    try:
        panel.data_box.setCurrentIndex(panel.data_box.findData("text"))  # Text (JSONL), no file yet
        assert not panel.data_path.text() and panel.seq_label.text() == "= 64"  # a file's 128, cut to 64 positions
        window.activations.request()
        qtbot.waitUntil(lambda: "· 64 tokens:" in label.text(), timeout=ms(GUI_WORKER_S))
        panel.set_values(seq_len=48)
        qtbot.waitUntil(lambda: "· 48 tokens:" in label.text(), timeout=ms(GUI_WORKER_S))
    finally:
        panel.set_values(data="synthetic", seq_len=0)
        panel.save_settings()


def test_the_models_own_size_is_the_side_the_run_takes(qtbot: Any) -> None:
    """Image size *model*: the estimate profiles the side run_image_size gives the loaded model and its spec, the
    one the run, Suggest… and ``workbench train`` use: 299 px for a model loaded as torchvision's inception_v3
    (a tiny stand-in, random init: nothing is built with weights or downloaded)."""
    from PySide6.QtWidgets import QWidget
    from torch import nn

    from workbench.core.training.config import TrainConfig
    from workbench.core.training.setup import run_image_size
    from workbench.gui.controller import Controller
    from workbench.gui.model_loading import loaded_from_model
    from workbench.gui.training.session import run_spec

    owner = QWidget()
    qtbot.addWidget(owner)
    c = Controller(owner)
    model = nn.Sequential(nn.Conv2d(3, 2, 3, stride=8), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2, 3))
    c.set_loaded(loaded_from_model(model, "inception_v3", spec={"source": "torchvision", "name": "inception_v3"}))
    est = activation_estimate.ActivationEstimator(c, owner)
    settings = TrainConfig(batch_size=2, device="cpu")  # image_size None: the model's
    est.set_settings_source(lambda: settings)
    try:
        side = run_image_size(None, run_spec(c.spec), model)
        pred = est.estimate(compute=True).prediction
        assert side == 299 and pred is not None and pred.input_text == "299 px"
        settings = TrainConfig(batch_size=2, device="cpu", image_size=16)  # the panel's own size first
        pred = est.estimate(compute=True).prediction
        assert pred is not None and pred.input_text == "16 px"
    finally:
        est.shutdown()
