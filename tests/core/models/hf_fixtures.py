"""Tiny Hugging Face model folders built from configs (no downloads)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:  # transformers is imported when a model is built, not when the tests are collected
    from transformers import BertForSequenceClassification, GPT2LMHeadModel, PreTrainedModel


class BertSizes(TypedDict):
    """The sizes of a tiny BERT, as ``BertConfig`` takes them."""

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int


class Gpt2Sizes(TypedDict):
    """The sizes of a tiny GPT-2, as ``GPT2Config`` takes them."""

    vocab_size: int
    n_embd: int
    n_layer: int
    n_head: int
    n_positions: int


TINY_BERT: BertSizes = {"vocab_size": 99, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                        "intermediate_size": 37, "max_position_embeddings": 64}
TINY_GPT2: Gpt2Sizes = {"vocab_size": 99, "n_embd": 32, "n_layer": 2, "n_head": 2, "n_positions": 64}


def tiny_bert(num_labels: int = 3) -> BertForSequenceClassification:
    """A tiny BertForSequenceClassification with random weights."""
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(**TINY_BERT, architectures=["BertForSequenceClassification"])
    config.num_labels = num_labels  # the same config as BertConfig(num_labels=...), which its typed signature lacks
    return BertForSequenceClassification(config)


def tiny_gpt2() -> GPT2LMHeadModel:
    """A tiny GPT2LMHeadModel with random weights."""
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(**TINY_GPT2, architectures=["GPT2LMHeadModel"]))


def save_folder(model: PreTrainedModel, folder: Path, *, weights: str = "safetensors") -> Path:
    """Save a transformers model: ``weights`` is ``"safetensors"``, ``"bin"`` or ``"none"``
    (config.json only)."""
    folder.mkdir(parents=True, exist_ok=True)
    if weights == "none":
        model.config.save_pretrained(folder)
    elif weights == "bin":
        import torch

        model.config.save_pretrained(folder)
        torch.save(model.state_dict(), folder / "pytorch_model.bin")
    else:
        model.save_pretrained(folder)
    return folder
