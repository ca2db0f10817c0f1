"""A stage that freezes everything is a PlanError with one message, whichever loop runs it:
``workbench train`` refuses it with that line, the Lightning and Trainer callbacks raise it
before the model is touched, and ``param_groups`` of a plan with nothing trainable raises it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from tests.hostile.makers import Tiny
from workbench.cli import main
from workbench.core.plan.readiness import NOTHING_TRAINABLE
from workbench.core.plan.rules import FreezePlan, PlanError

REFUSED = f"stage 0 refused: {NOTHING_TRAINABLE}"


def _plan(head: str) -> dict:
    return {"rules": [{"select": "*", "frozen": True}, {"select": head, "frozen": False}],
            "stages": [{"at_step": 2, "rules": [{"select": "*", "frozen": True}]}]}


def test_param_groups_of_nothing_trainable_is_a_plan_error() -> None:
    import workbench as wb

    applied = wb.apply_plan(Tiny(), {"rules": [{"select": "*", "frozen": True}]}, strict=False)
    with pytest.raises(PlanError, match=NOTHING_TRAINABLE):
        applied.param_groups(lr=1e-3)


def test_cli_refuses_the_stage_with_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = tmp_path / "plan.json"
    FreezePlan.from_dict(_plan("fc")).save(plan)
    rc = main(["train", "--model", "resnet18", "--num-classes", "2", "--image-size", "32", "--batch-size", "2",
               "--data", "synthetic:8", "--device", "cpu", "--no-progress", "--steps", "3", "--plan", str(plan)])
    err = capsys.readouterr().err
    assert rc == 0 and f"step 2: {REFUSED}" in err and "Traceback" not in err, err


def test_lightning_callback_raises_the_same_plan_error(tmp_path: Path) -> None:
    lightning = pytest.importorskip("lightning")
    from workbench.integrations.lightning import FreezePlanCallback

    cb = FreezePlanCallback(_plan("fc"))

    class Lit(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = Tiny()

        def training_step(self, batch, batch_idx):
            x, y = batch
            return nn.functional.cross_entropy(self.model(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(cb.param_groups(lr=1e-2), lr=1e-2)

    data = torch.utils.data.TensorDataset(torch.randn(8, 3, 8, 8), torch.randint(0, 3, (8,)))
    lit = Lit()
    trainer = lightning.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        enable_checkpointing=False, default_root_dir=str(tmp_path), max_steps=4, callbacks=[cb])
    with pytest.raises(PlanError) as info:
        trainer.fit(lit, torch.utils.data.DataLoader(data, batch_size=2))
    assert str(info.value) == REFUSED
    assert lit.model.fc.weight.requires_grad  # refused before the model was touched


def test_trainer_callback_raises_the_same_plan_error(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from transformers import Trainer

    from tests.integrations.hf_tiny import TokenData, args, tiny_bert
    from workbench.integrations.transformers import FreezePlanCallback

    model = tiny_bert()
    trainer = Trainer(model=model, args=args(str(tmp_path), max_steps=4), train_dataset=TokenData(n=8),
                      callbacks=[FreezePlanCallback(_plan("classifier"))])
    with pytest.raises(PlanError) as info:
        trainer.train()
    assert str(info.value) == REFUSED
    assert model.classifier.weight.requires_grad
