"""The exported script is the run: the workbench's engine and the script, same seed, on the CPU,
give the same loss at every step and the same trained tensors.

Each cell of the matrix trains a tiny model for 20 steps with :class:`Trainer`, exports the same
run with :func:`export_script` and runs the script's ``main`` in this process with the
workbench hidden (``tests.fixtures.exported``): one interpreter for the whole matrix. The cells
cover the optimizers and schedules, stages, eval locks, full-rank and low-rank A+B (LoRA, DoRA,
exact and fused), sub-tensor freezing, Hugging Face text models on generated tokens and on real
text (a JSONL file, a dataset folder), and a dataset folder of images.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.fixtures.exported import run_exported_script
from workbench.core.export import export_script
from workbench.core.models.spec import ModelSpec
from workbench.core.plan.rules import FreezePlan
from workbench.core.training.config import TrainConfig
from workbench.core.training.engine import Trainer

STEPS = 20
#: Per-step losses agree to this relative tolerance; trained tensors to float tolerance.
LOSS_RTOL = 1e-5
TENSOR_RTOL, TENSOR_ATOL = 1e-5, 1e-6

NET = '''
from torch import nn


class Net(nn.Module):
    """Stem, two repeated blocks (for lr_decay), BatchNorm, Dropout and a two-layer head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU())
        self.blocks = nn.Sequential(*[nn.Sequential(nn.Conv2d(6, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU())
                                      for _ in range(2)])
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.3))
        self.fc1 = nn.Linear(6, 8)
        self.act = nn.ReLU()
        self.head = nn.Linear(8, 10)

    def forward(self, x):
        return self.head(self.act(self.fc1(self.pool(self.blocks(self.stem(x))))))


def make():
    return Net()
'''

STAGED = {
    "lr_decay": 0.5,
    "rules": [{"select": "stem", "frozen": True}, {"select": "head", "lr_scale": 2.0}],
    "stages": [{"at_step": 6, "label": "stem", "rules": [{"select": "stem", "frozen": False, "lr_scale": 0.1}]},
               {"at_step": 13, "rules": [{"select": "blocks.0", "frozen": True}]}],
}
EVAL_LOCKS = {"rules": [{"select": "stem", "frozen": True}, {"select": "blocks.0.1", "bn_eval": True},
                        {"select": "pool.2", "eval": True}]}
A_PLUS_B = {"rules": [{"select": "*", "frozen": True},
                      {"select": "fc1", "frozen": False, "reparam": {"kind": "a_plus_b"}},
                      {"select": "head", "frozen": False,
                       "reparam": {"kind": "a_plus_b", "b_init": {"random": {"seed": 2, "dist": "normal", "scale": 0.01}}}}]}
#: LoRA (exact, kaiming and gaussian V) on a Linear and a Conv2d; a stage freezes one of them (U and V stop).
LORA = {"rules": [{"select": "*", "frozen": True},
                  {"select": "fc1", "frozen": False, "reparam": {"rank": 2, "alpha": 4}},
                  {"select": "blocks.1.0", "frozen": False, "reparam": {"rank": 3, "alpha": 3, "init": "gaussian"}},
                  {"select": "head", "frozen": False}],
        "stages": [{"at_step": 12, "rules": [{"select": "blocks.1.0", "frozen": True}]}]}
#: DoRA in fused mode with dropout on the low-rank path (a Linear) and exact on a Conv2d.
DORA = {"rules": [{"select": "*", "frozen": True},
                  {"select": "fc1", "frozen": False,
                   "reparam": {"rank": 2, "alpha": 4, "dora": True, "mode": "fused", "dropout": 0.1}},
                  {"select": "stem.0", "frozen": False, "reparam": {"rank": 2, "alpha": 2, "dora": True}}]}
#: Sub-tensor freezing: input columns in two ranges, output rows, a convolution's input channels.
PARTIAL = {"rules": [{"select": "fc1", "partial": {"param": "weight", "dim": 1, "trainable": [[0, 2], [4, 5]]}},
                     {"select": "head", "partial": {"param": "weight", "dim": 0, "trainable": [[3, 7]]}},
                     {"select": "blocks.0.0", "partial": {"param": "weight", "dim": 1, "trainable": [[1, 3]]}}]}

#: name -> (plan, TrainConfig fields); every cell trains the image net on synthetic data.
IMAGE_CELLS: dict[str, tuple[dict[str, Any] | None, dict[str, Any]]] = {
    "sgd": (None, {"optimizer": "sgd", "lr": 0.05}),
    "sgd_momentum_cosine_warmup": (None, {"optimizer": "sgd_momentum", "lr": 0.05, "momentum": 0.8,
                                          "scheduler": "cosine", "warmup_steps": 5, "weight_decay": 1e-3}),
    "adam_onecycle": (None, {"optimizer": "adam", "lr": 3e-3, "scheduler": "onecycle"}),
    "adamw_stages_lr_decay_no_decay": (STAGED, {"optimizer": "adamw", "lr": 2e-3, "weight_decay": 0.05,
                                                "no_decay": "auto", "scheduler": "linear", "warmup_steps": 2}),
    "bn_eval_dropout_eval": (EVAL_LOCKS, {"optimizer": "adamw", "lr": 1e-3}),
    "full_rank_a_plus_b": (A_PLUS_B, {"optimizer": "adamw", "lr": 1e-2, "weight_decay": 0.01}),
    "epochs_and_validation": (None, {"optimizer": "sgd_momentum", "lr": 0.02, "epochs": 2, "steps": None,
                                     "val_every": 7, "val_fraction": 0.25}),
    "bce_loss": (None, {"optimizer": "adam", "lr": 1e-3, "loss": "bce"}),
    "lora_stages": (LORA, {"optimizer": "adamw", "lr": 1e-2, "weight_decay": 0.05, "no_decay": "auto"}),
    "dora_fused_dropout": (DORA, {"optimizer": "adamw", "lr": 1e-2, "weight_decay": 0.05, "no_decay": "auto"}),
    "partial_sgd_momentum_decay": (PARTIAL, {"optimizer": "sgd_momentum", "lr": 0.05, "weight_decay": 0.01}),
}


@pytest.fixture(scope="module")
def net_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("net") / "net.py"
    path.write_text(NET)
    return path


def _compare(tmp_path: Path, plan: FreezePlan, spec: ModelSpec, cfg: TrainConfig) -> None:
    """Train with the engine, export, train with the script; the same losses and trained tensors."""
    want: list[float] = []
    trainer = Trainer(cfg, on_metrics=lambda m: want.append(m.loss))
    result = trainer.run()
    assert result.status == "completed", result.message
    assert trainer.model is not None
    trained = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    script = export_script(plan, spec, tmp_path / "run.py", config=cfg)
    text = script.read_text()
    if not plan.stages and "the run gives it the data's classes" not in text:  # the docstring's count is the run's
        total = sum(p.numel() for p in trainer.model.parameters())
        count = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
        assert f"trainable: {count:,} of {total:,} parameters" in text
    ns = run_exported_script(script)
    saved = tmp_path / "trained.pt"
    got = ns["main"](["--save-trainable", str(saved)])
    assert len(got) == len(want) == trainer.total_steps
    for step, (a, b) in enumerate(zip(want, got)):
        assert b == pytest.approx(a, rel=LOSS_RTOL), f"step {step}: workbench {a}, script {b}"
    mine = torch.load(saved)
    assert sorted(mine) == sorted(trained)
    for name, tensor in trained.items():
        torch.testing.assert_close(mine[name], tensor, rtol=TENSOR_RTOL, atol=TENSOR_ATOL, msg=name)


@pytest.mark.parametrize("cell", list(IMAGE_CELLS))
def test_image_run_and_its_script_agree_step_for_step(cell: str, net_file: Path, tmp_path: Path):
    plan_data, fields = IMAGE_CELLS[cell]
    name = f"{net_file}:make"
    plan = FreezePlan.from_dict(plan_data) if plan_data is not None else FreezePlan()
    cfg = TrainConfig(model={"source": "py", "name": name}, plan=plan.to_dict(), data="synthetic:96", image_size=8,
                      batch_size=4, **{"steps": STEPS, **fields}, device="cpu", seed=3, log_every=1)
    _compare(tmp_path, plan, ModelSpec(source="py", name=name), cfg)


@pytest.mark.parametrize("classes", ["spec", "data"])
def test_a_torchvision_model_with_a_new_head_starts_from_the_runs_weights(classes: str, tmp_path: Path):
    """The engine builds the architecture, then a head of the run's classes: the script too (same draws).

    The classes come from the model spec, or from the data (the 1000-class head replaced by one of 10,
    with LoRA on it: the docstring counts the run's parameters, not the pretrained head's)."""
    rules: list[dict[str, Any]] = [{"select": "layer1", "frozen": True}]
    spec: dict[str, Any] = {"source": "torchvision", "name": "resnet18"}
    if classes == "spec":
        spec["num_classes"] = 10
    else:
        rules.append({"select": "fc", "reparam": {"rank": 2, "alpha": 4}})
    plan = FreezePlan.from_dict({"rules": rules})
    cfg = TrainConfig(model=spec, plan=plan.to_dict(), data="synthetic:32", image_size=16, batch_size=4, steps=4,
                      device="cpu", log_every=1)
    _compare(tmp_path, plan, ModelSpec(**spec), cfg)


_BERT_LOW_RANK = [
    {"select": "*", "frozen": True},
    {"select": "bert.encoder.layer.*.attention.self.query", "frozen": False, "reparam": {"rank": 2, "alpha": 4}},
    {"select": "bert.embeddings.position_embeddings", "frozen": False, "reparam": {"rank": 2, "alpha": 2}},
    {"select": "bert.embeddings.word_embeddings", "frozen": False,  # rows, the padding row among them
     "partial": {"param": "weight", "dim": 0, "trainable": [[0, 40], [60, 70]]}},
    {"select": "classifier", "frozen": False},
]
_GPT2_LOW_RANK = [
    {"select": "*", "frozen": True},
    {"select": "transformer.h.*.attn.c_attn", "frozen": False, "reparam": {"rank": 2, "alpha": 4, "dora": True}},
    {"select": "transformer.h.1.mlp.c_fc", "frozen": False,
     "reparam": {"rank": 2, "alpha": 4, "mode": "fused", "dropout": 0.1}},
    {"select": "transformer.ln_f", "frozen": False},
]
#: name -> (model, rules): plain plans, and low-rank A+B and sub-tensor freezing on transformers' layers
#: (LoRA on Linear and Embedding, sub-tensor rows of an embedding, DoRA on GPT-2's Conv1D, fused LoRA).
TEXT_CELLS: dict[str, tuple[str, list[dict[str, Any]]]] = {
    "text_classifier": ("bert", [{"select": "bert.embeddings", "frozen": True},
                                 {"select": "bert.encoder.layer.1", "lr_scale": 0.5}]),
    "causal_lm": ("gpt2", [{"select": "transformer.h.0", "frozen": True}, {"select": "transformer.h.1", "lr_scale": 0.5}]),
    "text_classifier_lora_partial": ("bert", _BERT_LOW_RANK),
    "causal_lm_dora_lora": ("gpt2", _GPT2_LOW_RANK),
}


@pytest.mark.parametrize("cell", list(TEXT_CELLS))
def test_text_run_and_its_script_agree_step_for_step(cell: str, tmp_path: Path):
    pytest.importorskip("transformers")
    from tests.core.models.hf_fixtures import save_folder, tiny_bert, tiny_gpt2

    kind, rules = TEXT_CELLS[cell]
    torch.manual_seed(0)
    folder = save_folder(tiny_bert(num_labels=3) if kind == "bert" else tiny_gpt2(), tmp_path / kind)
    plan = FreezePlan.from_dict({"rules": rules})
    cfg = TrainConfig(model={"source": "hf", "name": str(folder)}, plan=plan.to_dict(), data="synthetic:64", seq_len=8,
                      batch_size=4, steps=STEPS, optimizer="adamw", lr=1e-3, weight_decay=0.01, scheduler="cosine",
                      warmup_steps=3, device="cpu", seed=1, log_every=1, no_decay="auto")
    _compare(tmp_path, plan, ModelSpec(source="hf", name=str(folder)), cfg)


#: name -> (model, data, val): real text, tokenized with the model folder's tokenizer (string labels: the head
#: is fitted to their 2 classes), a dataset folder with splits or a held-out share, LoRA on the text classifier.
TEXT_DATA_CELLS: dict[str, tuple[str, str, str | None]] = {
    "jsonl_classifier_string_labels": ("bert", "jsonl", None),
    "jsonl_causal_lm": ("gpt2", "jsonl", None),
    "hf_dataset_splits_classifier": ("bert", "hf_splits", "hf_splits"),
    "hf_dataset_held_out_causal_lm": ("gpt2", "hf", None),
}


@pytest.mark.parametrize("cell", list(TEXT_DATA_CELLS))
def test_real_text_data_gives_the_same_batches(cell: str, tmp_path: Path):
    pytest.importorskip("transformers")
    kind, data, val = TEXT_DATA_CELLS[cell]
    if data.startswith("hf"):
        pytest.importorskip("datasets")
    from transformers import BertTokenizerFast

    from tests.core.models.hf_fixtures import save_folder, tiny_bert, tiny_gpt2
    from tests.integrations.hf_data import TEXTS, WORDS, text_dataset

    torch.manual_seed(0)
    folder = save_folder(tiny_bert(num_labels=3) if kind == "bert" else tiny_gpt2(), tmp_path / kind)
    (tmp_path / "vocab.txt").write_text("\n".join(WORDS) + "\n")
    BertTokenizerFast(vocab_file=str(tmp_path / "vocab.txt")).save_pretrained(folder)
    if data == "jsonl":
        rows = [{"text": t, "label": "pos" if "good" in t or "great" in t else "neg"} for t in TEXTS * 4]
        spec = tmp_path / "d.jsonl"
        spec.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
        data_spec = f"text:{spec}"
    else:
        data_spec = f"hf-dataset:{text_dataset(tmp_path / 'ds', splits=data == 'hf_splits', text='review', label='stars')}"
    plan = FreezePlan.from_dict({"rules": [{"select": "bert.embeddings" if kind == "bert" else "transformer.h.0", "frozen": True}]
                                + ([{"select": "bert.encoder.layer.1.attention.self.value",
                                     "reparam": {"rank": 2, "alpha": 4}}] if kind == "bert" else [])})
    cfg = TrainConfig(model={"source": "hf", "name": str(folder)}, plan=plan.to_dict(), data=data_spec, seq_len=8,
                      val=data_spec if val else None, val_every=5, text_column="review" if data != "jsonl" else None,
                      label_column="stars" if data != "jsonl" else None, batch_size=2, steps=STEPS,
                      optimizer="adamw", lr=1e-3, device="cpu", seed=2, log_every=1)
    _compare(tmp_path, plan, ModelSpec(source="hf", name=str(folder)), cfg)


def test_an_image_dataset_folder_gives_the_same_batches(net_file: Path, tmp_path: Path):
    """hf-dataset: of an image model: its image column decoded to RGB with the run's transforms, the head fitted
    to the ClassLabel's classes, a seeded share held out for validation."""
    pytest.importorskip("datasets")
    from tests.integrations.hf_data import image_dataset

    data = f"hf-dataset:{image_dataset(tmp_path / 'images', n=24)}"
    name = f"{net_file}:make"
    plan = FreezePlan.from_dict({"rules": PARTIAL["rules"][:1]})  # the head gets the data's 2 classes
    cfg = TrainConfig(model={"source": "py", "name": name}, plan=plan.to_dict(), data=data, image_size=8, batch_size=4,
                      steps=STEPS, val_every=4, optimizer="adam", lr=3e-3, device="cpu", seed=5, log_every=1)
    _compare(tmp_path, plan, ModelSpec(source="py", name=name), cfg)


def test_a_dataset_folder_of_arrays_gives_the_same_batches(net_file: Path, tmp_path: Path):
    """hf-dataset: with input_column: a column of arrays given to the model as float tensors, integer labels."""
    datasets = pytest.importorskip("datasets")
    g = torch.Generator().manual_seed(0)
    rows = {"pixels": torch.randn(24, 3, 8, 8, generator=g).tolist(), "y": [i % 4 for i in range(24)]}
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "arrays"))
    name = f"{net_file}:make"
    plan = FreezePlan.from_dict(LORA)
    cfg = TrainConfig(model={"source": "py", "name": name}, plan=plan.to_dict(), data=f"hf-dataset:{tmp_path / 'arrays'}",
                      input_column="pixels", label_column="y", batch_size=4, steps=STEPS, optimizer="adamw", lr=1e-2,
                      device="cpu", seed=4, log_every=1)
    _compare(tmp_path, plan, ModelSpec(source="py", name=name), cfg)
