"""FreezePlanCallback in a standard transformers Trainer: exactly the plan trains, with its LR
scales and weight-decay rules; stages come in at their step; verify runs; resume restores."""

from __future__ import annotations

import logging
import math
from typing import Any

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from transformers import Trainer, TrainerCallback

from tests.integrations.hf_tiny import TokenData, args, tiny_bert, tiny_gpt2
from workbench.core.plan.rules import FreezePlan, PlanError
from workbench.integrations.transformers import STATE_KEY, FreezePlanCallback, PlanViolation

BERT_PLAN = {
    "format": "freeze-plan", "version": 1,
    "rules": [
        {"select": "*", "frozen": True},
        {"select": "classifier", "frozen": False},
        {"select": "bert.encoder.layer.1", "frozen": False, "lr_scale": 0.1, "eval": True},
        {"select": "bert.pooler", "frozen": False, "weight_decay": 0.3},
    ],
    "stages": [{"at_step": 3, "rules": [{"select": "bert.encoder.layer.0", "frozen": False, "lr_scale": 0.5}]}],
}


class Probe(TrainerCallback):  # type: ignore[misc]
    """Records, per step, which of layer 1's dropouts trained and the optimizer's group count."""

    def __init__(self) -> None:
        self.dropout_training: list[bool] = []
        self.groups: list[int] = []
        self.layer0_grad: list[bool] = []

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None, **kw: Any) -> None:
        drop = model.bert.encoder.layer[1].attention.self.dropout
        self.dropout_training.append(drop.training)
        self.groups.append(len(optimizer.param_groups))

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
        self.layer0_grad.append(model.bert.encoder.layer[0].output.dense.weight.grad is not None)


def _snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_bert_classifier_trains_exactly_the_plan(tmp_path, caplog):
    model = tiny_bert()
    model.train()
    before = _snapshot(model)
    cb = FreezePlanCallback(BERT_PLAN)
    probe = Probe()
    trainer = Trainer(model=model, args=args(str(tmp_path)), train_dataset=TokenData(), callbacks=[cb, probe])
    # the plan is in force as soon as the Trainer exists
    assert not model.bert.embeddings.word_embeddings.weight.requires_grad
    assert model.classifier.weight.requires_grad
    with caplog.at_level(logging.INFO, logger="transformers.trainer"):
        trainer.train()

    after = dict(model.named_parameters())
    frozen = [n for n in before if n.startswith(("bert.embeddings", "bert.encoder.layer.0"))]
    for n in frozen:
        if n.startswith("bert.embeddings"):
            assert torch.equal(before[n], after[n]), n  # bit-identical
    for n in ("classifier.weight", "bert.encoder.layer.1.output.dense.weight", "bert.pooler.dense.weight"):
        assert not torch.equal(before[n], after[n]), n
    # layer 0 unfroze at step 3: trained, its gradient exists from the 4th step on
    assert not torch.equal(before["bert.encoder.layer.0.output.dense.weight"], after["bert.encoder.layer.0.output.dense.weight"])
    assert probe.layer0_grad == [False, False, False, True, True, True]
    assert probe.groups[2] < probe.groups[3]

    groups = trainer.optimizer.param_groups
    by_name = {n: g for g in groups for n in g["param_names"]}
    assert set(by_name) == {n for n, p in model.named_parameters() if p.requires_grad}
    assert by_name["classifier.weight"]["lr_scale"] == 1.0
    assert by_name["bert.encoder.layer.1.output.dense.weight"]["lr_scale"] == 0.1
    assert by_name["bert.encoder.layer.0.output.dense.weight"]["lr_scale"] == 0.5
    # weight decay: the Trainer's convention (bias, LayerNorm 0), the plan's rule where it sets one
    assert by_name["classifier.weight"]["weight_decay"] == 0.01
    assert by_name["classifier.bias"]["weight_decay"] == 0.0
    assert by_name["bert.encoder.layer.1.output.LayerNorm.weight"]["weight_decay"] == 0.0
    assert by_name["bert.pooler.dense.weight"]["weight_decay"] == 0.3
    assert by_name["bert.pooler.dense.bias"]["weight_decay"] == 0.3
    # the scheduler drives every group, the late ones too: lr / initial_lr is the same everywhere
    sched = trainer.lr_scheduler
    assert len(sched.base_lrs) == len(groups) == len(sched.lr_lambdas)
    ratios = {round(g["lr"] / g["initial_lr"], 9) for g in groups if g["params"]}
    assert len(ratios) == 1
    for g in groups:
        assert math.isclose(g["initial_lr"], 1e-2 * g["lr_scale"])
    # dropout of the eval-locked layer stayed in eval across the Trainer's model.train()
    assert probe.dropout_training and not any(probe.dropout_training)
    assert model.bert.encoder.layer[0].attention.self.dropout.training
    # logged through the Trainer, verified at the end
    logs = {k: v for e in trainer.state.log_history for k, v in e.items() if k.startswith("freeze/")}
    assert logs["freeze/verify_ok"] == 1.0 and logs["freeze/verify_errors"] == 0.0
    assert logs["freeze/stage"] == 1.0 and logs["freeze/plan_change"] == 1.0
    first = next(e for e in trainer.state.log_history if "freeze/trainable_params" in e)
    last = [e for e in trainer.state.log_history if "freeze/trainable_params" in e][-1]
    assert first["freeze/trainable_params"] < last["freeze/trainable_params"]
    assert cb.verify_report is not None and cb.verify_report.ok
    text = caplog.text
    assert "unfroze bert.encoder.layer.0" in text and "verify OK" in text


def test_verify_fails_loudly(tmp_path):
    model = tiny_bert()

    class Tamper(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            with torch.no_grad():
                model.bert.embeddings.word_embeddings.weight[0, 0] += 1.0

    cb = FreezePlanCallback({"rules": [{"select": "*", "frozen": True}, {"select": "classifier", "frozen": False}]})
    trainer = Trainer(model=model, args=args(str(tmp_path), max_steps=2), train_dataset=TokenData(), callbacks=[cb, Tamper()])
    with pytest.raises(PlanViolation, match="word_embeddings"):
        trainer.train()
    assert trainer.state.log_history[-1]["freeze/verify_ok"] == 0.0


def test_gpt2_lm_tied_head_stays_frozen_and_plan_from_file(tmp_path):
    plan = FreezePlan.from_dict({
        "rules": [{"select": "*", "frozen": True}, {"select": "transformer.h.1", "frozen": False},
                  {"select": "transformer.ln_f", "frozen": False}],
        "stages": [{"at_step": 2, "rules": [{"select": "transformer.h.0.mlp", "frozen": False, "lr_scale": 0.25}]}],
    })
    path = tmp_path / "gpt2.plan.json"
    plan.save(path)
    model = tiny_gpt2()
    wte = model.transformer.wte.weight.detach().clone()
    h0_attn = model.transformer.h[0].attn.c_attn.weight.detach().clone()
    h0_mlp = model.transformer.h[0].mlp.c_fc.weight.detach().clone()
    trainer = Trainer(model=model, args=args(str(tmp_path / "out"), max_steps=4), train_dataset=TokenData(lm=True),
                      callbacks=[FreezePlanCallback(path)])
    trainer.train()
    assert torch.equal(model.transformer.wte.weight, wte) and model.lm_head.weight is model.transformer.wte.weight
    assert torch.equal(model.transformer.h[0].attn.c_attn.weight, h0_attn)
    assert not torch.equal(model.transformer.h[0].mlp.c_fc.weight, h0_mlp)
    scales = sorted({g["lr_scale"] for g in trainer.optimizer.param_groups if g["params"]})
    assert scales == [0.25, 1.0]
    assert trainer.state.log_history[-1]["freeze/verify_ok"] == 1.0
    assert [e["freeze/stage"] for e in trainer.state.log_history if "freeze/stage" in e] == [0.0, 1.0]


class ConvNet(torch.nn.Module):
    """conv -> BN -> dropout -> fc, returning the loss as transformers models do."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.drop = torch.nn.Dropout(0.5)
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, pixel_values: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        h = self.drop(torch.relu(self.bn(self.conv(pixel_values))).mean((2, 3)))
        return {"loss": torch.nn.functional.cross_entropy(self.fc(h), labels)}


def test_batchnorm_and_dropout_stay_in_eval_across_model_train(tmp_path):
    torch.manual_seed(0)
    model = ConvNet()
    stats = model.bn.running_mean.clone()
    data = [{"pixel_values": torch.randn(3, 8, 8), "labels": i % 2} for i in range(16)]
    modes: list[tuple[bool, bool]] = []

    class Watch(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            modes.append((model.bn.training, model.drop.training))

    plan = {"rules": [{"select": "*", "frozen": True}, {"select": "fc", "frozen": False},
                      {"select": "drop", "eval": True}]}
    cb = FreezePlanCallback(plan)
    trainer = Trainer(model=model, args=args(str(tmp_path), max_steps=3, weight_decay=0.0), train_dataset=data,
                      callbacks=[cb, Watch()])
    trainer.train()
    assert model.training and modes == [(False, False)] * 3  # model.train() ran; the locks held
    assert torch.equal(model.bn.running_mean, stats)
    assert cb.verify_report.ok and cb.verify_report.checked["bn_stats"] > 0


def test_stage_at_epoch(tmp_path):
    plan = {"rules": [{"select": "*", "frozen": True}, {"select": "classifier", "frozen": False}],
            "stages": [{"at_epoch": 1, "rules": [{"select": "bert.pooler", "frozen": False}]}]}
    model = tiny_bert()
    pooler = model.bert.pooler.dense.weight.detach().clone()
    seen: list[bool] = []

    class Watch(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            seen.append(model.bert.pooler.dense.weight.requires_grad)

    trainer = Trainer(model=model, args=args(str(tmp_path), max_steps=-1, num_train_epochs=2),
                      train_dataset=TokenData(n=8), callbacks=[FreezePlanCallback(plan), Watch()])
    trainer.train()
    assert seen == [False, False, True, True]
    assert not torch.equal(model.bert.pooler.dense.weight, pooler)


def _resume_plan() -> dict[str, Any]:
    return {
        "rules": [{"select": "*", "frozen": True}, {"select": "classifier", "frozen": False, "lr_scale": 2.0}],
        "stages": [{"at_step": 2, "rules": [{"select": "bert.encoder.layer.1", "frozen": False, "lr_scale": 0.5}]}],
    }


def test_resume_restores_stage_and_groups(tmp_path):
    # one run of 6 steps, checkpoints every 3 (after the stage at 2)
    full = tiny_bert()
    t1 = Trainer(model=full, args=args(str(tmp_path / "a"), save_strategy="steps", save_steps=3),
                 train_dataset=TokenData(), callbacks=[FreezePlanCallback(_resume_plan())])
    t1.train()
    ckpt = tmp_path / "a" / "checkpoint-3"
    assert (ckpt / "optimizer.pt").is_file()

    # a fresh model (other init) resumed from step 3
    resumed = tiny_bert(seed=1)
    cb = FreezePlanCallback(_resume_plan())
    t2 = Trainer(model=resumed, args=args(str(tmp_path / "b")), train_dataset=TokenData(), callbacks=[cb])
    assert not resumed.bert.encoder.layer[1].output.dense.weight.requires_grad  # stage not in force yet
    t2.train(resume_from_checkpoint=str(ckpt))
    assert resumed.bert.encoder.layer[1].output.dense.weight.requires_grad
    layout = [(g["lr_scale"], g["param_names"]) for g in t2.optimizer.param_groups]
    assert layout == [(g["lr_scale"], g["param_names"]) for g in t1.optimizer.param_groups]
    assert t2.state.stateful_callbacks[STATE_KEY]["stage"] == [True]
    for (n, a), b in zip(full.named_parameters(), resumed.parameters()):
        assert torch.allclose(a, b, atol=1e-6), n
    assert cb.verify_report.ok


def test_resume_with_another_plan_is_refused(tmp_path):
    t1 = Trainer(model=tiny_bert(), args=args(str(tmp_path / "a"), max_steps=2, save_strategy="steps", save_steps=2),
                 train_dataset=TokenData(), callbacks=[FreezePlanCallback(_resume_plan())])
    t1.train()
    other = _resume_plan()
    other["rules"][1]["lr_scale"] = 3.0
    t2 = Trainer(model=tiny_bert(), args=args(str(tmp_path / "b"), max_steps=4), train_dataset=TokenData(),
                 callbacks=[FreezePlanCallback(other)])
    with pytest.raises(PlanError, match="different freeze plan"):
        t2.train(resume_from_checkpoint=str(tmp_path / "a" / "checkpoint-2"))


def test_own_optimizer_is_refused(tmp_path):
    model = tiny_bert()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    trainer = Trainer(model=model, args=args(str(tmp_path)), train_dataset=TokenData(), optimizers=(opt, None),
                      callbacks=[FreezePlanCallback(BERT_PLAN)])
    with pytest.raises(PlanError, match="own optimizer"):
        trainer.train()


def test_bad_plan_is_one_plan_error(tmp_path):
    with pytest.raises(PlanError, match="no_such_module"):
        Trainer(model=tiny_bert(), args=args(str(tmp_path)), train_dataset=TokenData(),
                callbacks=[FreezePlanCallback({"rules": [{"select": "no_such_module", "frozen": True}]})])
