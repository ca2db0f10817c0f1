"""Text models are first-class in the training controls: synthetic tokens and a JSONL file in
the Data list, tokens in place of pixels, the model folder's tokenizer named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from workbench.gui.main_window import MainWindow
from workbench.gui.model_loading import default_request


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


def _kinds(window: MainWindow) -> list[str]:
    box = window.training.panel.data_box
    return [box.itemData(i) for i in range(box.count())]


def test_text_data_is_selectable_for_a_text_model(window: MainWindow, qtbot: Any, bert_dir: Path,
                                                  tmp_path: Path) -> None:
    panel = window.training.panel
    assert "imagefolder" in _kinds(window) and "text" not in _kinds(window) and panel.image_size.isVisible()
    with qtbot.waitSignal(window.controller.loadFinished, timeout=120_000):
        assert window.open_model_folder(str(bert_dir))
    qtbot.waitUntil(lambda: panel.text_model, timeout=10_000)
    assert _kinds(window) == ["synthetic", "text"]
    assert panel.data_box.itemText(0) == "Synthetic tokens" and panel.data_box.itemText(1) == "Text (JSONL)"
    assert not panel.image_size.isVisible() and not panel.channels_last.isVisible()
    assert panel.seq_label.isVisible() and panel.seq_label.text() == "32 tokens"
    assert str(bert_dir) in panel.seq_label.toolTip()  # the tokenizer it would use
    data = tmp_path / "train.jsonl"
    data.write_text('{"text": "a b", "label": 1}\n', encoding="utf-8")
    panel.set_values(data=f"text:{data}")
    assert panel.data_box.currentData() == "text" and panel.data_path.isVisible()
    assert panel.seq_label.text() == "64 tokens"  # a file's 128 tokens, cut to the model's 64 positions
    config = panel.config()
    assert config.data == f"text:{data}" and config.image_size is None
    # back to an image model: the image controls return
    with qtbot.waitSignal(window.controller.loadFinished, timeout=120_000):
        assert window.controller.load(default_request())
    qtbot.waitUntil(lambda: not panel.text_model, timeout=10_000)
    assert "imagefolder" in _kinds(window) and panel.image_size.isVisible() and not panel.seq_label.isVisible()
