"""Predicted peak memory against the measured one: resnet18, 64 px, batch 8, on CPU.

The measured peak is the live tensor bytes of real training steps (the training engine's
own loop, counted by :class:`LiveTensorBytes`), not process RSS. The bound is ±15 %.
"""

import pytest
import torch

from workbench.core.advisor.candidates import generate_candidates, trainable_names
from workbench.core.advisor.measure import measure_peak
from workbench.core.advisor.memory import estimate_memory
from workbench.core.advisor.profile import profile_model
from workbench.core.advisor.tracking import LiveTensorBytes, storage_bytes
from workbench.core.training.config import TrainConfig
from workbench.core.training.engine import Trainer

SHAPE = (8, 3, 64, 64)


@pytest.fixture(scope="module")
def setup():
    import torchvision

    model = torchvision.models.resnet18(weights=None)
    prof = profile_model(model, SHAPE)
    cands = {c.name: c for c in generate_candidates(model, prof) if not c.bn_eval}
    return model, prof, cands


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
@pytest.mark.parametrize(
    "name", ["full fine-tuning", "last 1 block (layer4) + head", "last 2 blocks (layer3..layer4) + head", "head only"]
)
def test_predicted_peak_within_15_percent_of_measured(setup, name, optimizer):
    model, prof, cands = setup
    cand = cands[name]
    # num_classes: the head the prediction profiled (resnet18's 1000 classes), kept by the run
    cfg = TrainConfig(model="resnet18", num_classes=1000, plan=cand.plan.to_dict(), data="synthetic", image_size=SHAPE[-1],
                      batch_size=SHAPE[0], optimizer=optimizer, steps=3, device="cpu", allow_download=False).validate()
    trainer = Trainer(cfg)
    trainer.setup()
    gen = trainer.steps()
    measured = measure_peak(trainer, gen, 3, name)
    for _ in gen:
        pass
    predicted = estimate_memory(prof, trainable_names(cand, model), optimizer=optimizer).peak
    assert abs(predicted - measured) <= 0.15 * measured, (name, predicted, measured)


def test_live_tensor_bytes_counts_new_storages_once_and_frees_them():
    a = torch.ones(1000)
    with LiveTensorBytes(baseline=storage_bytes([a])) as live:
        b = a * 2                      # +4000
        b.relu_()                      # in place: nothing new
        v = b.view(10, 100)            # a view: nothing new
        assert live.live == 8000
        del b, v                       # freed
        assert live.live == 4000
        a.add_(1)                      # in place on a tensor from before: nothing new
    assert live.peak == 8000 and live.live == 4000


def test_profile_saved_bytes_match_the_forward_pass(setup):
    model, prof, _ = setup
    x = torch.randn(SHAPE)
    with LiveTensorBytes() as live:
        out = model(x)
        kept = live.live - out.untyped_storage().nbytes()
    assert sum(s.nbytes for s in prof.saved) == pytest.approx(kept, rel=0.01)


def test_attention_is_profiled_as_the_fused_kernel_the_device_runs():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
    shape = (4, 96, 64)
    prof = profile_model(layer, shape)
    x = torch.randn(shape)
    with LiveTensorBytes() as live:
        out = layer(x)
        kept = live.live - out.untyped_storage().nbytes()
    attention_matrix = 4 * 4 * 96 * 96 * 4  # what the math path would keep per softmax
    assert sum(s.nbytes for s in prof.saved) == pytest.approx(kept, rel=0.05)
    assert all(s.nbytes < attention_matrix for s in prof.saved)
    assert torch.nn.functional.scaled_dot_product_attention.__module__ != "workbench.core.advisor.profile"


TEXT_SHAPE = (8, 64)


def _small_bert() -> torch.nn.Module:
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=512, max_position_embeddings=128, num_labels=3)
    return BertForSequenceClassification(config)


@pytest.fixture(scope="module")
def bert_advice():
    pytest.importorskip("transformers")
    from workbench.core.advisor import advise

    return advise(_small_bert(), 10**10, TEXT_SHAPE, optimizer="adamw")


@pytest.mark.parametrize("kind", ["full", "last_k", "low_rank_4", "low_rank_16"])
def test_text_model_and_low_rank_within_15_percent(bert_advice, kind):
    """A BERT-shaped encoder on token batches: full, last k and low-rank A+B (frozen base
    weights, small trainable factors, activations for backward through the adapted layers)."""
    from workbench.core.training.data import synthetic_for_model

    if kind.startswith("low_rank"):
        rank = int(kind.rpartition("_")[2])
        a = next(x for x in bert_advice.assessed if x.candidate.kind == "low_rank" and x.candidate.k == rank)
    else:
        a = next(x for x in bert_advice.assessed if x.candidate.kind == kind)
    model = _small_bert()
    data = synthetic_for_model(model, 4 * TEXT_SHAPE[0], seq_len=TEXT_SHAPE[1])
    cfg = TrainConfig(plan=a.candidate.plan.to_dict(), batch_size=TEXT_SHAPE[0], optimizer="adamw", steps=3,
                      device="cpu", allow_download=False).validate()
    trainer = Trainer(cfg, model=model, dataset=data)
    trainer.setup()
    gen = trainer.steps()
    measured = measure_peak(trainer, gen, 3, a.candidate.name)
    for _ in gen:
        pass
    trains = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert trains == a.trainable_params
    assert abs(a.memory.peak - measured) <= 0.15 * measured, (a.candidate.name, a.memory.peak, measured)
