"""PEFT interop: same trainable counts as PEFT, adapters round trip both ways, plans over PEFT models."""

from __future__ import annotations

import copy
import json

import pytest
import torch

peft = pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")

from workbench.cli import main
from workbench.core.checks.doctor import check
from workbench.core.plan.problems import PlanError
from workbench.core.plan.reparam_spec import ReparamSpec
from workbench.core.plan.rules import FreezePlan

TARGETS = ["query", "value", "word_embeddings"]


@pytest.fixture(scope="module")
def base() -> torch.nn.Module:
    cfg = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37)
    torch.manual_seed(0)
    return transformers.BertModel(cfg).eval()


@pytest.fixture(scope="module")
def x() -> torch.Tensor:
    return torch.randint(0, 100, (2, 7), generator=torch.Generator().manual_seed(1))


def _config(**kw) -> peft.LoraConfig:
    return peft.LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS, modules_to_save=["pooler.dense"], **kw)


def _out(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model(x).last_hidden_state


def _steps(model: torch.nn.Module, params, x: torch.Tensor, n: int = 3) -> None:
    opt = torch.optim.AdamW(params, lr=1e-2)
    model.train()
    for _ in range(n):
        opt.zero_grad()
        _out(model, x).pow(2).mean().backward()
        opt.step()
    model.eval()


def test_trainable_counts_equal_peft(base):
    model = copy.deepcopy(base)
    applied = FreezePlan.from_peft(_config(), model=model).apply(model)
    pm = peft.get_peft_model(copy.deepcopy(base), _config())
    assert applied.counts().trainable == sum(p.numel() for p in pm.parameters() if p.requires_grad)
    # without the model: plain names become globs, dotted ones paths; same count
    plan = FreezePlan.from_peft(_config())
    assert [r.select for r in plan.rules[1:]] == ["*.query", "*.value", "*.word_embeddings", "pooler.dense"]
    model2 = copy.deepcopy(base)
    assert plan.apply(model2).counts().trainable == applied.counts().trainable


@pytest.mark.parametrize("mode", ["fused", "exact"])
def test_workbench_adapter_loads_in_peft_with_the_same_outputs(base, x, tmp_path, mode):
    model = copy.deepcopy(base)
    plan = FreezePlan.from_peft(_config(), model=model)
    for r in plan.rules:
        if r.reparam is not None:
            r.reparam = ReparamSpec.parse({**r.reparam.to_json(), "mode": mode})
    applied = plan.apply(model)
    assert torch.equal(_out(model, x), _out(base, x))  # outputs at init equal the base model's
    _steps(model, applied.param_groups(lr=1e-2), x)
    applied.to_peft(tmp_path)
    config = json.loads((tmp_path / "adapter_config.json").read_text())
    assert config["r"] == 4 and config["lora_alpha"] == 8 and config["modules_to_save"] == ["pooler.dense"]
    pm = peft.PeftModel.from_pretrained(copy.deepcopy(base), tmp_path).eval()
    assert torch.allclose(_out(pm, x), _out(model, x), atol=1e-5)


def test_peft_adapter_becomes_a_plan_with_the_same_outputs(base, x, tmp_path):
    pm = peft.get_peft_model(copy.deepcopy(base), _config(lora_dropout=0.1))
    _steps(pm, [p for p in pm.parameters() if p.requires_grad], x)
    pm.save_pretrained(tmp_path)
    model = copy.deepcopy(base)
    plan = FreezePlan.from_peft(tmp_path, model=model)
    assert plan.rules[1].reparam["dropout"] == 0.1 and plan.rules[1].reparam["mode"] == "fused"
    applied = plan.apply(model)
    applied.load_peft(tmp_path)
    model.eval()
    assert torch.allclose(_out(model, x), _out(pm, x), atol=1e-5)


def test_unselected_keep_over_a_peft_model(base):
    pm = peft.get_peft_model(copy.deepcopy(base), _config())
    lora_before = {n for n, p in pm.named_parameters() if p.requires_grad}
    peft_count = sum(p.numel() for p in pm.parameters() if p.requires_grad)
    plan = FreezePlan.from_dict({"unselected": "keep", "rules": [{"select": "type:LayerNorm", "frozen": False}]})
    applied = plan.apply(pm)
    now = {n for n, p in pm.named_parameters() if p.requires_grad}
    norms = {n for n in now if "LayerNorm" in n}
    assert now == lora_before | norms and norms
    assert applied.counts().trainable == peft_count + sum(p.numel() for n, p in pm.named_parameters() if n in norms)
    # the default ("train") makes every parameter no rule selects trainable again
    applied.remove()  # one plan in force per model
    FreezePlan.from_dict({"rules": [{"select": "type:LayerNorm", "frozen": False}]}).apply(pm)
    assert all(p.requires_grad for p in pm.parameters())


def test_doctor_flags_a_peft_base_that_trains_and_a_merged_adapter_with_dropout(base, x):
    pm = peft.get_peft_model(copy.deepcopy(base), peft.LoraConfig(r=4, target_modules=["query"], lora_dropout=0.1))
    layer = pm.base_model.model.encoder.layer[0].attention.self.query
    layer.base_layer.weight.requires_grad_(True)
    found = [f.path for f in check(pm) if f.code == "lowrank-base-trains"]
    assert len(found) == 1 and found[0].endswith("encoder.layer.0.attention.self.query")
    layer.base_layer.weight.requires_grad_(False)
    pm.merge_adapter()
    found = [f for f in check(pm) if f.code == "lowrank-dropout-merged"]
    # both merged adapters, reported as one finding of the kind (static findings are grouped)
    assert len(found) == 1 and "and 1 more like it" in found[0].message


@pytest.mark.parametrize(
    ("source", "field"),
    [
        ({"peft_type": "IA3", "target_modules": ["query"]}, "peft_type"),
        ({"peft_type": "LORA", "r": 4, "target_modules": ["query"], "bias": "all"}, "bias"),
        ({"peft_type": "LORA", "r": 4, "target_modules": ["query"], "use_dora": "yes"}, "use_dora"),
        ({"peft_type": "LORA", "r": 4, "target_modules": ".*query"}, "target_modules"),
        ({"peft_type": "LORA", "r": "four", "target_modules": ["query"]}, "r"),
    ],
)
def test_bad_peft_configs_name_the_field(source, field):
    with pytest.raises(PlanError) as e:
        FreezePlan.from_peft(source)
    assert f"field '{field}'" in str(e.value)


def test_another_peft_kind_and_a_bad_rank_from_a_real_config(base):
    with pytest.raises(PlanError, match="peft_type"):
        FreezePlan.from_peft(peft.IA3Config(target_modules=["query"]))
    model = copy.deepcopy(base)
    with pytest.raises(PlanError) as e:
        FreezePlan.from_peft(peft.LoraConfig(r=64, target_modules=["query"]), model=model).apply(model)
    assert "rule 1" in str(e.value) and "reparam.rank 64" in str(e.value)


def test_regex_targets_resolve_with_the_model(base):
    model = copy.deepcopy(base)
    plan = FreezePlan.from_peft(peft.LoraConfig(r=2, target_modules=r".*\.self\.(query|key)"), model=model)
    assert [r.select for r in plan.rules[1:]] == [
        f"encoder.layer.{i}.attention.self.{k}" for i in range(2) for k in ("query", "key")
    ]


def test_cli_export_peft(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"rules": [{"select": "*", "frozen": True}, {"select": "fc", "frozen": False, "reparam": {"rank": 4, "alpha": 8}}]}))
    out = tmp_path / "adapter"
    assert main(["export", "--model", "resnet18", "--num-classes", "10", "--plan", str(plan), "--peft", str(out)]) == 0
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["target_modules"] == ["fc"] and config["r"] == 4 and (out / "adapter_model.safetensors").is_file()
    full = tmp_path / "full.json"
    full.write_text(json.dumps({"rules": [{"select": "fc", "reparam": True}]}))
    assert main(["export", "--model", "resnet18", "--num-classes", "10", "--plan", str(full), "--peft", str(out)]) == 2
    assert "full-rank A+B" in capsys.readouterr().err


# ============================================================== DoRA (PEFT's use_dora)
DORA_TARGETS = ["query", "value"]


def _dora_config(**kw) -> peft.LoraConfig:
    return peft.LoraConfig(r=4, lora_alpha=8, target_modules=DORA_TARGETS, use_dora=True, **kw)


def test_dora_trainable_counts_equal_peft(base):
    model = copy.deepcopy(base)
    applied = FreezePlan.from_peft(_dora_config(), model=model).apply(model)
    pm = peft.get_peft_model(copy.deepcopy(base), _dora_config())
    assert applied.counts().trainable == sum(p.numel() for p in pm.parameters() if p.requires_grad)


@pytest.mark.parametrize("mode", ["fused", "exact"])
def test_dora_adapter_loads_in_peft_with_the_same_outputs(base, x, tmp_path, mode):
    model = copy.deepcopy(base)
    plan = FreezePlan.from_peft(_dora_config(), model=model)
    for r in plan.rules:
        if r.reparam is not None:
            assert r.reparam.low_rank.dora
            r.reparam = ReparamSpec.parse({**r.reparam.to_json(), "mode": mode})
    applied = plan.apply(model)
    assert torch.allclose(_out(model, x), _out(base, x), atol=1e-6)  # DoRA starts at the base model
    _steps(model, applied.param_groups(lr=1e-2), x)
    assert (_out(model, x) - _out(base, x)).abs().max() > 1e-5  # it trained (the layer norm damps it)
    applied.to_peft(tmp_path)
    config = json.loads((tmp_path / "adapter_config.json").read_text())
    assert config["use_dora"] is True
    pm = peft.PeftModel.from_pretrained(copy.deepcopy(base), tmp_path).eval()
    torch.testing.assert_close(_out(pm, x), _out(model, x), atol=1e-5, rtol=1e-5)


def test_peft_dora_adapter_becomes_a_plan_with_the_same_outputs(base, x, tmp_path):
    pm = peft.get_peft_model(copy.deepcopy(base), _dora_config())
    _steps(pm, [p for p in pm.parameters() if p.requires_grad], x)
    pm.save_pretrained(tmp_path)
    model = copy.deepcopy(base)
    plan = FreezePlan.from_peft(tmp_path, model=model)
    assert plan.rules[1].reparam.low_rank.dora and plan.rules[1].reparam.to_json()["dora"] is True
    applied = plan.apply(model)
    applied.load_peft(tmp_path)
    model.eval()
    torch.testing.assert_close(_out(model, x), _out(pm, x), atol=1e-5, rtol=1e-5)
    # merged into plain weights, the model computes the same
    applied.merge()
    torch.testing.assert_close(_out(model, x), _out(pm, x), atol=1e-5, rtol=1e-5)


def test_dora_and_lora_mixed_have_no_peft_form(base, tmp_path):
    from workbench.core.plan.reparam_spec import ReparamError

    model = copy.deepcopy(base)
    plan = FreezePlan.from_dict({"rules": [
        {"select": "*", "frozen": True},
        {"select": "*.query", "frozen": False, "reparam": {"rank": 4, "mode": "fused", "dora": True}},
        {"select": "*.value", "frozen": False, "reparam": {"rank": 4, "mode": "fused"}},
    ]})
    with pytest.raises(ReparamError, match="one use_dora"):
        plan.apply(model).to_peft(tmp_path)
