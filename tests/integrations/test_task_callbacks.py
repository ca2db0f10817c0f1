"""The Trainer callback's loss= and metric= (the workbench's settings as the Trainer's compute_loss_func and
compute_metrics), and the same settings inside a LightningModule, where Lightning takes them."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

pytest.importorskip("transformers")

from transformers import Trainer

from tests.integrations.hf_tiny import TokenData, args, tiny_bert
from workbench.core.plan.rules import PlanError
from workbench.core.training.losses import make_loss
from workbench.core.training.task_metrics import make_metric
from workbench.integrations.task import TrainerLoss, TrainerMetric
from workbench.integrations.transformers import FreezePlanCallback

PLAN = {"format": "freeze-plan", "version": 1, "rules": [{"select": "*", "frozen": True},
                                                         {"select": "classifier", "frozen": False}]}


def test_the_trainer_trains_with_the_callbacks_loss_and_reports_its_metric(tmp_path: Path) -> None:
    code = tmp_path / "task.py"
    code.write_text(textwrap.dedent("""
        import torch

        CALLS = []

        def half_ce(out, target):
            CALLS.append(tuple(out.shape))
            return 0.5 * torch.nn.functional.cross_entropy(out, target)

        def first_class_rate(out, target):
            return float((out.argmax(1) == 0).float().mean())
    """))
    cb = FreezePlanCallback(PLAN, loss=f"py:{code}:half_ce", metric=f"py:{code}:first_class_rate")
    trainer = Trainer(model=tiny_bert(), args=args(str(tmp_path / "out"), max_steps=2), train_dataset=TokenData(16),
                      eval_dataset=TokenData(8, seed=1), callbacks=[cb])
    assert trainer.compute_loss_func is cb.loss and trainer.compute_metrics is cb.metric
    trainer.train()
    import sys

    calls = next(m for name, m in sys.modules.items() if getattr(m, "__file__", None) == str(code)).CALLS
    assert calls and calls[0] == (4, 2)  # the logits of each batch, not the model's own loss
    result = trainer.evaluate()
    assert 0.0 <= result["eval_first_class_rate"] <= 1.0 and "eval_loss" in result


def test_builtin_settings_match_the_workbench_engine() -> None:
    logits, labels = torch.tensor([[2.0, 0.0, -1.0], [0.0, 3.0, 1.0]]), torch.tensor([0, 2])
    out = {"logits": logits}  # a ModelOutput is a mapping
    assert torch.equal(TrainerLoss("bce")(out, labels), make_loss("bce")(logits, labels))
    metric = make_metric("accuracy")
    metric.update(logits, labels, 2)

    class Prediction:
        predictions, label_ids = (logits.numpy(), logits.numpy()), labels.numpy()

    assert TrainerMetric("acc")(Prediction()) == {"accuracy": metric.value()} == {"accuracy": 0.5}
    assert TrainerMetric("top5")(Prediction()) == {"top5": 1.0}  # 3 classes: the label is always in the top 5

    class Regression:
        predictions, label_ids = torch.zeros(2, 3).numpy(), torch.zeros(2, 3).numpy()

    assert TrainerMetric("accuracy")(Regression()) == {}  # accuracy of float targets does not apply: nothing logged


def test_a_trainer_with_its_own_loss_and_a_callback_loss_is_refused(tmp_path: Path) -> None:
    def own(outputs: Any, labels: Any, num_items_in_batch: Any = None) -> torch.Tensor:
        return outputs["logits"].sum()

    with pytest.raises(PlanError, match="own compute_loss_func and FreezePlanCallback has loss="):
        Trainer(model=tiny_bert(), args=args(str(tmp_path)), train_dataset=TokenData(8), compute_loss_func=own,
                callbacks=[FreezePlanCallback(PLAN, loss="mse")])
    with pytest.raises(Exception, match="is not one of"):
        FreezePlanCallback(PLAN, loss="hinge")


def test_lightning_takes_the_settings_in_the_module(tmp_path: Path) -> None:
    lightning = pytest.importorskip("lightning")
    from workbench.integrations.lightning import FreezePlanCallback as LightningCallback

    class Tagger(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.body, self.head = nn.Linear(6, 6), nn.Linear(6, 4)
            self.loss_fn, self.metric = make_loss("bce"), make_metric("accuracy")

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(torch.relu(self.body(x)))

        def training_step(self, batch: Any, _i: int) -> torch.Tensor:
            x, y = batch
            return self.loss_fn(self(x), y)

        def on_validation_epoch_start(self) -> None:
            self.metric.reset()

        def validation_step(self, batch: Any, _i: int) -> None:
            x, y = batch
            self.metric.update(self(x), y, len(y))

        def on_validation_epoch_end(self) -> None:
            self.log("val_accuracy", self.metric.value() or 0.0)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD([p for p in self.parameters() if p.requires_grad], lr=0.1)

    data = torch.utils.data.TensorDataset(torch.randn(16, 6), torch.arange(16) % 4)
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    plan = {"format": "freeze-plan", "version": 1, "rules": [{"select": "body", "frozen": True}]}
    model = Tagger()
    before = model.body.weight.detach().clone()
    trainer = lightning.Trainer(max_epochs=1, limit_train_batches=3, limit_val_batches=2, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
                        callbacks=[LightningCallback(plan)])
    trainer.fit(model, loader, loader)
    assert torch.equal(model.body.weight, before) and 0.0 <= float(trainer.callback_metrics["val_accuracy"]) <= 1.0
