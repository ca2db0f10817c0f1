"""Text models train offline: synthetic token data that fits the model, and dict batches
through workbench.core.training.batches.forward_loss."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from tests.core.models.hf_fixtures import tiny_bert, tiny_gpt2
from tests.preload import python_argv
from tests.timeouts import SUBPROCESS_LONG_S
from workbench.core.errors import WorkbenchError
from workbench.core.training.batches import forward_loss, move_batch, task_loss
from workbench.core.training.data import (
    DataError,
    SyntheticImageDataset,
    SyntheticTextDataset,
    synthetic_for_model,
    text_task_of,
)


def test_synthetic_adapts_to_the_model():
    bert, gpt2 = tiny_bert(num_labels=3), tiny_gpt2()
    assert text_task_of(bert) == "classification" and text_task_of(gpt2) == "causal_lm"
    assert text_task_of(nn.Linear(2, 2)) is None
    assert isinstance(synthetic_for_model(nn.Linear(2, 2), 4, image_size=8), SyntheticImageDataset)
    ds = synthetic_for_model(bert, 16, seq_len=500)
    assert isinstance(ds, SyntheticTextDataset) and ds.num_classes == 3
    assert ds.seq_len == 64  # max_position_embeddings of the tiny config
    for i in range(len(ds)):
        s = ds[i]
        assert int(s["input_ids"].min()) >= 0 and int(s["input_ids"].max()) < 99
        assert 0 <= int(s["labels"]) < 3


def test_classification_signal_is_in_the_tokens():
    ds = SyntheticTextDataset(64, vocab_size=50, seq_len=40, num_classes=4, signal=1.0)
    for i in range(len(ds)):
        s = ds[i]
        assert bool((s["input_ids"] % 4 == s["labels"]).all())


def test_causal_signal_follows_the_rule():
    s = SyntheticTextDataset(1, vocab_size=97, seq_len=20, task="causal_lm", signal=1.0)[0]
    ids = s["input_ids"]
    assert torch.equal(ids[1:], (ids[:-1] * 31 + 7) % 97) and torch.equal(s["labels"], ids)


def test_base_model_without_head_is_refused():
    from transformers import BertConfig, BertModel

    from tests.core.models.hf_fixtures import TINY_BERT

    with pytest.raises(DataError, match="without a task head"):
        synthetic_for_model(BertModel(BertConfig(**TINY_BERT)))


@pytest.mark.parametrize("bad", [{"task": "nope"}, {"vocab_size": 0}, {"vocab_size": 2, "num_classes": 3}])
def test_bad_text_dataset_arguments(bad):
    with pytest.raises(DataError):
        SyntheticTextDataset(4, **bad)


@pytest.mark.parametrize("make", [tiny_bert, tiny_gpt2])
def test_tiny_text_models_train_on_synthetic_dict_batches(make):
    torch.manual_seed(0)
    model = make()
    ds = synthetic_for_model(model, 64, seq_len=16)
    loader = DataLoader(ds, batch_size=16, shuffle=True)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    task = text_task_of(model)
    losses = []
    for _ in range(4):
        for batch in loader:
            loss, _ = forward_loss(model, move_batch(batch, "cpu"), task=task)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses)))
    assert sum(losses[-4:]) < sum(losses[:4])  # the signal is learnable


def test_logits_go_through_the_task_loss_when_the_model_computes_none():
    model = tiny_gpt2().eval()  # no dropout: two forwards agree
    batch = SyntheticTextDataset(2, vocab_size=99, seq_len=8, task="causal_lm")[0]
    batch = {k: v.unsqueeze(0) for k, v in batch.items()}
    labels = batch.pop("labels")
    inputs = {**batch, "label": labels}  # a key the model does not take: scored by the task loss

    def fwd(input_ids, attention_mask, label):
        return model(input_ids=input_ids, attention_mask=attention_mask)

    loss, out = forward_loss(fwd, inputs, task="causal_lm")
    ref = model(**batch, labels=labels).loss
    assert torch.allclose(loss, ref, atol=1e-5)
    assert torch.allclose(task_loss(out, labels, "causal_lm"), ref, atol=1e-5)


def test_image_batches_and_bad_batches():
    model = nn.Linear(4, 3)
    x, y = torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1])
    loss, _ = forward_loss(model, (x, y))
    assert torch.allclose(loss, nn.functional.cross_entropy(model(x), y))
    custom, _ = forward_loss(model, [x, y], loss_fn=lambda out, t: out.sum() * 0 + 7.0)
    assert custom.item() == 7.0
    with pytest.raises(WorkbenchError, match="expected a batch"):
        forward_loss(model, x)
    with pytest.raises(WorkbenchError, match="no 'labels'"):
        forward_loss(lambda **kw: torch.zeros(1, 3), {"input_ids": x})
    with pytest.raises(WorkbenchError, match="unknown task"):
        task_loss(torch.zeros(2, 3), torch.zeros(2, dtype=torch.long), "regression")


@pytest.mark.parametrize("make", [tiny_bert, tiny_gpt2], ids=["bert", "gpt2"])
def test_workbench_train_runs_a_hugging_face_folder_offline(make, tmp_path):
    """`workbench train --model hf:DIR`: synthetic tokens, dict batches, HF loss, validation, verify."""
    import json
    import os
    import subprocess

    from tests.core.models.hf_fixtures import save_folder

    folder = save_folder(make(), tmp_path / "model")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    r = subprocess.run(
        python_argv("-m", "workbench", "train", "--model", f"hf:{folder}", "--steps", "3", "--batch-size", "4",
                    "--val-every", "3", "--json", "--no-progress"),
        capture_output=True, text=True, env=env, timeout=SUBPROCESS_LONG_S,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads(r.stdout)
    assert data["status"] == "completed" and data["steps"] == 3, data
    summary = data["summary"]
    assert isinstance(summary["val_loss"], float) and summary["val_loss"] == summary["val_loss"]  # measured, finite
    assert data["verify"]["ok"], data["verify"]
