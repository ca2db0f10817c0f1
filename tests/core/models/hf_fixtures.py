"""Tiny Hugging Face model folders built from configs (no downloads)."""

from __future__ import annotations

from pathlib import Path

from torch import nn

TINY_BERT = {"vocab_size": 99, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
             "intermediate_size": 37, "max_position_embeddings": 64}
TINY_GPT2 = {"vocab_size": 99, "n_embd": 32, "n_layer": 2, "n_head": 2, "n_positions": 64}


def tiny_bert(num_labels: int = 3) -> nn.Module:
    """A tiny BertForSequenceClassification with random weights."""
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(**TINY_BERT, num_labels=num_labels, architectures=["BertForSequenceClassification"])
    return BertForSequenceClassification(config)


def tiny_gpt2() -> nn.Module:
    """A tiny GPT2LMHeadModel with random weights."""
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(**TINY_GPT2, architectures=["GPT2LMHeadModel"]))


def save_folder(model: nn.Module, folder: Path, *, weights: str = "safetensors") -> Path:
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
