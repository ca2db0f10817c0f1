"""FreezePlanCallback over a PEFT model (``unselected: keep``) and over the workbench's own
low-rank A+B, in a standard transformers Trainer."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from transformers import Trainer

from tests.integrations.hf_tiny import TokenData, args, tiny_bert
from workbench.integrations.transformers import FreezePlanCallback


def test_peft_model_keeps_its_freezing_and_takes_the_plan(tmp_path):
    peft = pytest.importorskip("peft")
    model = peft.get_peft_model(tiny_bert(), peft.LoraConfig(r=4, lora_alpha=8, target_modules=["query", "value"]))
    trainable_before = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable_before and all("lora_" in n for n in trainable_before)
    base_q = model.base_model.model.bert.encoder.layer[0].attention.self.query.base_layer.weight.detach().clone()
    plan = {
        "unselected": "keep",
        "rules": [{"select": "base_model.model.classifier", "frozen": False, "lr_scale": 2.0}],
    }
    cb = FreezePlanCallback(plan)
    trainer = Trainer(model=model, args=args(str(tmp_path), max_steps=3), train_dataset=TokenData(), callbacks=[cb])
    trainer.train()
    in_opt = {n: g["lr_scale"] for g in trainer.optimizer.param_groups for n in g["param_names"]}
    assert set(in_opt) == trainable_before | {"base_model.model.classifier.weight", "base_model.model.classifier.bias"}
    assert in_opt["base_model.model.classifier.weight"] == 2.0
    assert {in_opt[n] for n in trainable_before} == {1.0}
    assert torch.equal(model.base_model.model.bert.encoder.layer[0].attention.self.query.base_layer.weight, base_q)
    assert cb.verify_report.ok


def test_workbench_low_rank_a_plus_b(tmp_path):
    model = tiny_bert()
    q = model.bert.encoder.layer[1].attention.self.query
    w0 = q.weight.detach().clone()
    plan = {
        "rules": [
            {"select": "*", "frozen": True},
            {"select": "bert.encoder.layer.1.attention.self.query", "frozen": False, "reparam": {"rank": 4, "alpha": 8}},
            {"select": "classifier", "frozen": False},
        ]
    }
    cb = FreezePlanCallback(plan)
    trainer = Trainer(model=model, args=args(str(tmp_path), max_steps=3), train_dataset=TokenData(), callbacks=[cb])
    trainer.train()
    names = {n for g in trainer.optimizer.param_groups for n in g["param_names"]}
    assert names and all(n.startswith(("classifier.", "bert.encoder.layer.1.attention.self.query.")) for n in names)
    assert any(n.startswith("bert.encoder.layer.1.attention.self.query.") for n in names)
    assert not torch.equal(q.weight, w0)  # W = A + B moved through B
    assert cb.verify_report.ok  # A fixed, everything frozen bit-identical
