"""Tiny transformers models built from configs and synthetic token data (nothing downloaded)."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import Dataset


class TokenData(Dataset):  # type: ignore[type-arg]
    """Random token sequences: a class label (``lm=False``) or the tokens as LM labels."""

    def __init__(self, n: int = 32, seq: int = 8, vocab: int = 64, lm: bool = False, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(1, vocab, (n, seq), generator=g)
        self.labels = self.ids.clone() if lm else (self.ids[:, 0] % 2)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"input_ids": self.ids[i], "attention_mask": torch.ones_like(self.ids[i]), "labels": self.labels[i]}


def tiny_bert(seed: int = 0) -> Any:
    """A 2-layer BERT sequence classifier (2 labels)."""
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    cfg = BertConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=16, num_labels=2,
    )
    return BertForSequenceClassification(cfg)


def tiny_gpt2(seed: int = 0) -> Any:
    """A 2-layer GPT-2 LM (tied lm_head / wte)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    return GPT2LMHeadModel(GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=2, n_positions=16))


def args(out: str, **kw: Any) -> Any:
    """TrainingArguments for a short CPU run with nothing reported and nothing saved by default."""
    from transformers import TrainingArguments

    base: dict[str, Any] = {
        "output_dir": out, "max_steps": 6, "per_device_train_batch_size": 4, "learning_rate": 1e-2, "weight_decay": 0.01,
        "logging_steps": 1, "save_strategy": "no", "report_to": [], "use_cpu": True, "disable_tqdm": True, "seed": 0,
        "dataloader_num_workers": 0, "lr_scheduler_type": "linear",
    }
    base.update(kw)
    return TrainingArguments(**base)
