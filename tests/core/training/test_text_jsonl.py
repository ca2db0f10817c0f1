"""Local text data: text:PATH.jsonl tokenized with the model folder's tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from tests.core.models.hf_fixtures import save_folder, tiny_bert, tiny_gpt2
from workbench.core.training.batches import forward_loss
from workbench.core.training.data import DataError
from workbench.core.training.text_jsonl import (
    JsonlTextDataset,
    load_tokenizer,
    open_text_dataset,
)

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "movie", "great", "awful", "the", "was"]


@pytest.fixture
def bert_folder(tmp_path: Path) -> Path:
    from transformers import BertTokenizer

    folder = save_folder(tiny_bert(num_labels=2), tmp_path / "bert")
    (tmp_path / "vocab.txt").write_text("\n".join(WORDS) + "\n")
    BertTokenizer(vocab_file=str(tmp_path / "vocab.txt")).save_pretrained(folder)
    return folder


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_classification_jsonl_trains_a_tiny_bert(bert_folder, tmp_path):
    data = _jsonl(tmp_path / "d.jsonl", [{"text": "good movie", "label": "pos"}, {"text": "awful", "label": "neg"},
                                         {"text": "great movie was good", "label": "pos"}])
    ds = open_text_dataset(f"text:{data}", bert_folder, seq_len=8)
    assert ds.classes == ["neg", "pos"] and ds.labels.tolist() == [1, 0, 1]
    assert ds[0]["input_ids"].shape == (8,) and int(ds.input_ids.max()) < len(WORDS)
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(str(bert_folder), local_files_only=True)
    loss, _ = forward_loss(model, next(iter(DataLoader(ds, batch_size=3))))
    loss.backward()
    assert torch.isfinite(loss)


def test_language_modelling_labels_skip_padding(bert_folder, tmp_path):
    data = _jsonl(tmp_path / "d.jsonl", [{"text": "the movie"}])
    ds = JsonlTextDataset(data, load_tokenizer(bert_folder), seq_len=8, task="causal_lm")
    sample = ds[0]
    assert (sample["labels"] == -100).sum() == (sample["attention_mask"] == 0).sum() > 0
    assert ds.num_classes == 0


@pytest.mark.parametrize(
    ("lines", "words"),
    [
        (["{not json"], "not JSON"),
        (['{"label": 1}'], "'text'"),
        (['{"text": "good"}'], "'label'"),
        ([""], "no samples"),
    ],
)
def test_bad_lines_are_named(bert_folder, tmp_path, lines, words):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=words):
        open_text_dataset(f"text:{path}", bert_folder)


def test_missing_tokenizer_file_and_spec(tmp_path):
    folder = save_folder(tiny_gpt2(), tmp_path / "gpt2", weights="none")
    with pytest.raises(DataError, match="no tokenizer"):
        load_tokenizer(folder)
    with pytest.raises(DataError, match="text:PATH.jsonl"):
        open_text_dataset("imagefolder:x", folder)
    with pytest.raises(DataError, match="does not exist"):
        JsonlTextDataset(tmp_path / "nope.jsonl", object())
