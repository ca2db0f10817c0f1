"""Tiny datasets saved with ``save_to_disk`` and a tiny model folder with a tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "movie", "great", "awful", "the", "was"]
TEXTS = ["good movie", "awful", "the movie was great", "bad bad movie", "great", "the movie was awful",
         "good good", "bad", "was great", "awful movie"]


def text_dataset(folder: Path, *, splits: bool = False, text: str = "text", label: str = "label",
                 string_labels: bool = False) -> Path:
    """A text classification dataset (10 rows; with ``splits``: train 8 / validation 2)."""
    import datasets

    labels: list[Any] = [("pos" if "good" in t or "great" in t else "neg") for t in TEXTS]
    if not string_labels:
        labels = [1 if v == "pos" else 0 for v in labels]
    ds = datasets.Dataset.from_dict({text: TEXTS, label: labels})
    if splits:
        datasets.DatasetDict({"train": ds.select(range(8)), "validation": ds.select(range(8, 10))}).save_to_disk(str(folder))
    else:
        ds.save_to_disk(str(folder))
    return folder


def image_dataset(folder: Path, n: int = 6) -> Path:
    """An image classification dataset of ``n`` small RGB images (a datasets.Image column)."""
    import datasets
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 255, (12, 10, 3), dtype=np.uint8)) for _ in range(n)]
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=["cat", "dog"])})
    datasets.Dataset.from_dict({"image": images, "label": [i % 2 for i in range(n)]}, features=features).save_to_disk(str(folder))
    return folder


def bert_folder(tmp_path: Path, num_labels: int = 2) -> Path:
    """A tiny BERT classifier's folder (config and weights) with a WordPiece tokenizer."""
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    cfg = BertConfig(vocab_size=len(WORDS), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=16, num_labels=num_labels)
    folder = tmp_path / "bert"
    BertForSequenceClassification(cfg).save_pretrained(folder)
    (tmp_path / "vocab.txt").write_text("\n".join(WORDS) + "\n")
    BertTokenizerFast(vocab_file=str(tmp_path / "vocab.txt")).save_pretrained(folder)
    return folder
