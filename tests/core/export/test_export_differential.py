"""The exported script is the run: the workbench's engine and the script, same seed, on the CPU,
give the same loss at every step and the same trained tensors.

Each cell of the matrix trains a tiny model for 20 steps with :class:`Trainer`, exports the same
run with :func:`export_script` and runs the script's ``main`` in this process with the
workbench hidden (``tests.fixtures.exported``): one interpreter for the whole matrix.
"""

from __future__ import annotations

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


def test_a_torchvision_model_with_a_new_head_starts_from_the_runs_weights(tmp_path: Path):
    """The engine builds the architecture, then a head of the run's classes: the script too (same draws)."""
    plan = FreezePlan.from_dict({"rules": [{"select": "layer1", "frozen": True}]})
    spec = {"source": "torchvision", "name": "resnet18", "num_classes": 10}
    cfg = TrainConfig(model=spec, plan=plan.to_dict(), data="synthetic:32", image_size=16, batch_size=4, steps=4,
                      device="cpu", log_every=1)
    _compare(tmp_path, plan, ModelSpec(**spec), cfg)


@pytest.mark.parametrize("kind", ["text_classifier", "causal_lm"])
def test_text_run_and_its_script_agree_step_for_step(kind: str, tmp_path: Path):
    pytest.importorskip("transformers")
    from tests.core.models.hf_fixtures import save_folder, tiny_bert, tiny_gpt2

    torch.manual_seed(0)
    folder = save_folder(tiny_bert(num_labels=3) if kind == "text_classifier" else tiny_gpt2(), tmp_path / kind)
    top, block = ("bert", "bert.encoder.layer.1") if kind == "text_classifier" else ("transformer", "transformer.h.1")
    first = f"{top}.embeddings" if kind == "text_classifier" else f"{top}.h.0"
    plan = FreezePlan.from_dict({"rules": [{"select": first, "frozen": True}, {"select": block, "lr_scale": 0.5}]})
    cfg = TrainConfig(model={"source": "hf", "name": str(folder)}, plan=plan.to_dict(), data="synthetic:64", seq_len=8,
                      batch_size=4, steps=STEPS, optimizer="adamw", lr=1e-3, weight_decay=0.01, scheduler="cosine",
                      warmup_steps=3, device="cpu", seed=1, log_every=1)
    _compare(tmp_path, plan, ModelSpec(source="hf", name=str(folder)), cfg)
