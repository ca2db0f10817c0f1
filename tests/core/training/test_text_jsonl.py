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
    assert ds[0]["input_ids"].shape == (8,) and max(int(ds[i]["input_ids"].max()) for i in range(len(ds))) < len(WORDS)
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


# ------------------------------------------------------------------ text:PATH.jsonl in make_dataset and train
def _tokenizer_into(folder: Path, tmp_path: Path) -> Path:
    from transformers import BertTokenizerFast

    (tmp_path / "vocab.txt").write_text("\n".join(WORDS) + "\n")
    BertTokenizerFast(vocab_file=str(tmp_path / "vocab.txt")).save_pretrained(folder)
    return folder


ROWS = [{"text": "good movie", "label": "pos"}, {"text": "awful", "label": "neg"},
        {"text": "the movie was great", "label": "pos"}, {"text": "bad bad movie", "label": "neg"}]


def test_make_dataset_opens_text_with_the_model_folders_tokenizer(tmp_path):
    from workbench.core.models.spec import ModelSpec
    from workbench.core.training.data_sources import make_dataset

    folder = _tokenizer_into(save_folder(tiny_bert(num_labels=2), tmp_path / "bert", weights="none"), tmp_path)
    model = ModelSpec(source="hf", name=str(folder)).build(allow_download=False)
    data = _jsonl(tmp_path / "d.jsonl", ROWS)
    ds = make_dataset(f"text:{data}", image_size=224, num_classes=10, model=model)
    assert ds.classes == ["neg", "pos"] and len(ds) == 4
    assert ds[0]["input_ids"].shape == (64,)  # the tiny model's 64 positions cap the default 128
    assert len(make_dataset(f"text:{data}", image_size=224, num_classes=10, model=model, length=2)) == 2
    with pytest.raises(DataError, match="text data: train a Hugging Face text model"):
        make_dataset(f"text:{data}", image_size=224, num_classes=10, model=torch.nn.Linear(2, 2))
    with pytest.raises(DataError, match="needs a file"):
        make_dataset("text:", image_size=224, num_classes=10, model=model)


@pytest.mark.parametrize("kind", ["bert", "gpt2"])
def test_train_cli_on_a_text_file_offline(kind, tmp_path, capsys, monkeypatch):
    from workbench.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = tiny_bert(num_labels=2) if kind == "bert" else tiny_gpt2()
    folder = _tokenizer_into(save_folder(model, tmp_path / kind, weights="none"), tmp_path)
    data = _jsonl(tmp_path / "d.jsonl", ROWS if kind == "bert" else [{"text": r["text"]} for r in ROWS])
    code = main(["train", "--model", f"hf:{folder}", "--data", f"text:{data}", "--steps", "3", "--batch-size", "2",
                 "--no-progress"])
    captured = capsys.readouterr()
    out = captured.out
    assert code == 0, captured.err
    assert "completed 3 steps" in out
    device_row = next(line for line in out.splitlines() if line.startswith("device"))
    assert device_row.endswith("batch 2, 64 tokens (the model's limit: its position embeddings)") and " px" not in device_row


def test_train_cli_text_file_without_tokenizer_is_one_line(tmp_path, capsys):
    from workbench.cli import main

    folder = save_folder(tiny_bert(num_labels=2), tmp_path / "bert", weights="none")
    data = _jsonl(tmp_path / "d.jsonl", ROWS)
    assert main(["train", "--model", f"hf:{folder}", "--data", f"text:{data}", "--steps", "3", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no tokenizer" in err
    assert main(["train", "--model", "resnet18", "--data", f"text:{data}", "--steps", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "text data" in err


def test_a_new_head_keeps_the_transformers_num_labels_in_step():
    from workbench.core.models.zoo import replace_head

    model = tiny_bert(num_labels=2)
    assert replace_head(model, 5) == ["classifier"]
    assert model.num_labels == 5 and model.config.num_labels == 5
    out = model(input_ids=torch.randint(0, 99, (3, 6)), labels=torch.tensor([0, 4, 2]))
    assert out.logits.shape == (3, 5) and torch.isfinite(out.loss)


def test_streamed_samples_load_in_worker_processes(bert_folder, tmp_path):
    """Each DataLoader worker opens its own handle on the file (the dataset pickles without one)."""
    data = _jsonl(tmp_path / "d.jsonl", [{"text": "good movie" if i % 2 else "awful", "label": i % 2} for i in range(8)])
    ds = open_text_dataset(f"text:{data}", bert_folder, seq_len=8)
    ds[0]  # the parent's handle is open now
    batches = list(DataLoader(ds, batch_size=4, num_workers=2))
    assert torch.equal(torch.cat([b["labels"] for b in batches]), ds.labels)
    assert torch.equal(batches[0]["input_ids"][1], ds[1]["input_ids"])
