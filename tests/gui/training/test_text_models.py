"""Text models are first-class in the training controls: synthetic tokens and a JSONL file in
the Data list, an editable sequence length in place of pixels (capped at the model's positions,
said in one line), the model folder's tokenizer named, and the cost panel's activation estimate
for a token batch of that length."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.timeouts import GUI_EVENT_S, GUI_WORKER_S, ms
from workbench.gui.main_window import MainWindow
from workbench.gui.model_loading import default_request


def _kinds(window: MainWindow) -> list[str]:
    box = window.training.panel.data_box
    return [box.itemData(i) for i in range(box.count())]


def test_text_data_is_selectable_for_a_text_model(window: MainWindow, qtbot: Any, bert_dir: Path,
                                                  tmp_path: Path) -> None:
    panel = window.training.panel
    assert "imagefolder" in _kinds(window) and "text" not in _kinds(window) and panel.image_size.isVisible()
    with qtbot.waitSignal(window.controller.loadFinished, timeout=ms(GUI_WORKER_S)):
        assert window.documents.open_model_folder(str(bert_dir))
    qtbot.waitUntil(lambda: panel.text_model, timeout=ms(GUI_EVENT_S))
    assert _kinds(window) == ["synthetic", "text"]
    assert panel.data_box.itemText(0) == "Synthetic tokens" and panel.data_box.itemText(1) == "Text (JSONL)"
    assert not panel.image_size.isVisible() and not panel.channels_last.isVisible()
    assert panel.seq_label.isVisible() and panel.seq_label.text() == "= 32"
    assert str(bert_dir) in panel.seq_label.toolTip()  # the tokenizer it would use
    data = tmp_path / "train.jsonl"
    data.write_text('{"text": "a b", "label": 1}\n', encoding="utf-8")
    panel.set_values(data=f"text:{data}")
    assert panel.data_box.currentData() == "text" and panel.data_path.isVisible()
    assert panel.seq_label.text() == "= 64"  # a file's 128 tokens, cut to the model's 64 positions
    config = panel.config()
    assert config.data == f"text:{data}" and config.image_size is None
    # back to an image model: the image controls return
    with qtbot.waitSignal(window.controller.loadFinished, timeout=ms(GUI_WORKER_S)):
        assert window.controller.load(default_request())
    qtbot.waitUntil(lambda: not panel.text_model, timeout=ms(GUI_EVENT_S))
    assert "imagefolder" in _kinds(window) and panel.image_size.isVisible() and not panel.seq_label.isVisible()


def test_sequence_length_is_editable_and_drives_the_activation_estimate(window: MainWindow, qtbot: Any,
                                                                       bert_dir: Path) -> None:
    panel = window.training.panel
    assert not panel.seq_len.isVisible()  # an image model: no tokens
    with qtbot.waitSignal(window.controller.loadFinished, timeout=ms(GUI_WORKER_S)):
        assert window.documents.open_model_folder(str(bert_dir))
    qtbot.waitUntil(lambda: panel.text_model, timeout=ms(GUI_EVENT_S))
    assert panel.seq_len.isVisible() and panel.seq_len.value() == 0 and panel.seq_len.text() == "default"
    assert panel.config().seq_len is None
    label = window.cost_panel.activation_label
    qtbot.waitUntil(lambda: "Step at batch" in label.text(), timeout=ms(GUI_WORKER_S))
    assert "· 32 tokens:" in label.text()  # synthetic tokens' default length
    panel.set_values(seq_len=48)
    assert panel.config().seq_len == 48 and panel.seq_label.text() == ""
    qtbot.waitUntil(lambda: "· 48 tokens:" in label.text(), timeout=ms(GUI_WORKER_S))
    short = window.activations.estimate(compute=True).prediction
    panel.set_values(seq_len=500)  # past the model's 64 positions: the run and the estimate use 64
    assert panel.config().seq_len == 500 and panel.seq_label.text() == "→ 64 (model's max)"
    assert "64 positions" in panel.seq_len.toolTip()
    qtbot.waitUntil(lambda: "· 64 tokens:" in label.text(), timeout=ms(GUI_WORKER_S))
    long = window.activations.estimate(compute=True).prediction
    assert short is not None and long is not None and short.seq_len == 48 and long.seq_len == 64
    assert long.activations > short.activations > 0
    assert "activations not estimated" not in label.text()
