"""Low-rank A+B (rank, alpha, dropout, init): exact and fused modes, merge, deltas, bad input,
and the plan-level ``"unselected": "keep"``."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers.pytorch_utils import Conv1D

from workbench.core.checks.doctor import check
from workbench.core.checks.lint import lint_plan
from workbench.core.freezing.reparam.low_rank import LowRankDelta
from workbench.core.models.tree import ModelTree
from workbench.core.plan.problems import PlanError
from workbench.core.plan.reparam_spec import ReparamSpec
from workbench.core.plan.rules import FreezePlan, Rule


class AllKinds(nn.Module):
    """One layer of every kind low-rank A+B supports, plus a LayerNorm it skips."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(20, 8)
        self.lin = nn.Linear(8, 12)
        self.hf = Conv1D(6, 12)
        self.norm = nn.LayerNorm(6)
        self.c1 = nn.Conv1d(1, 4, 3, padding=1)
        self.c2 = nn.Conv2d(4, 5, 3, padding=1, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.hf(self.lin(self.emb(x))))  # B, L, 6
        h = self.c1(h.reshape(-1, 1, 6))  # B*L, 4, 6
        return self.c2(h.reshape(-1, 4, 6, 1).expand(-1, 4, 6, 4)).sum(dim=(1, 2, 3))


def _plan(mode: str, **extra: object) -> FreezePlan:
    spec = {"rank": 2, "alpha": 4, "mode": mode, **extra}
    return FreezePlan.from_dict(
        {
            "rules": [
                {"select": "*", "frozen": True},
                {"select": "*", "frozen": False, "reparam": spec},
                {"select": "norm", "frozen": True},
            ]
        }
    )


def _model() -> tuple[AllKinds, torch.Tensor]:
    torch.manual_seed(0)
    return AllKinds(), torch.randint(0, 20, (2, 3))


def _train(model: nn.Module, applied, x: torch.Tensor, steps: int = 3) -> None:
    opt = torch.optim.AdamW(applied.param_groups(lr=0.05))
    for _ in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()


def test_rank_absent_keeps_the_json_and_rank_round_trips():
    assert ReparamSpec.parse({}).to_json() == {"kind": "a_plus_b", "a": "current", "b_init": "zeros", "mode": "exact", "params": None}
    spec = ReparamSpec.parse({"rank": 8, "alpha": 16, "mode": "fused", "dropout": 0.1, "init": "gaussian"})
    assert spec.rank == 8 and spec.low_rank.scale == 2.0 and spec.short() == "r=8"
    assert ReparamSpec.parse(spec.to_json()) == spec
    assert ReparamSpec.parse({}).short() == "full"
    assert ReparamSpec.parse({"rank": 4}).low_rank.alpha == 4  # alpha defaults to rank: scale 1


@pytest.mark.parametrize("mode", ["exact", "fused"])
def test_starts_at_the_base_model_and_trains_only_u_and_v(mode):
    model, x = _model()
    ref = model(x)
    applied = _plan(mode).apply(model)
    assert torch.equal(model(x), ref)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    # the LayerNorm has no low-rank form: its plain parameters follow "frozen" (true here)
    assert len(names) == 10 and all(n.endswith((".U", ".V")) for n in names)
    # U (out x r) and V (r x in) for each layer
    want = 2 * (8 + 20) + 2 * (12 + 8) + 2 * (12 + 6) + 2 * (4 + 3) + 2 * (5 + 36)
    assert applied.counts().trainable == want
    _train(model, applied, x)
    assert not torch.allclose(model(x), ref)
    assert applied.verify().ok  # A and the biases bit-identical


def test_fused_mode_never_builds_b(monkeypatch):
    model, x = _model()
    applied = _plan("fused").apply(model)
    _train(model, applied, x, steps=1)

    def refuse(self):
        raise AssertionError("fused mode built the full-size B")

    monkeypatch.setattr(LowRankDelta, "delta", refuse)
    model(x).sum().backward()


@pytest.mark.parametrize("mode", ["exact", "fused"])
def test_merge_equals_the_trained_forward_and_remove_restores(mode):
    model, x = _model()
    ref = model(x)
    weight = model.lin.weight
    applied = _plan(mode).apply(model)
    _train(model, applied, x)
    trained = model(x).detach()
    applied.merge()
    assert torch.allclose(model(x), trained, atol=1e-5)
    assert model.lin.weight is weight and [n for n, _ in model.lin.named_parameters()] == ["weight", "bias"]
    applied.remove()
    model2, _ = _model()
    applied2 = _plan(mode).apply(model2)
    _train(model2, applied2, x)
    applied2.remove(merge=False)
    assert torch.equal(model2(x), ref)


def test_exact_and_fused_agree_and_deltas_round_trip(tmp_path):
    model, x = _model()
    applied = _plan("fused").apply(model)
    _train(model, applied, x)
    out = model(x).detach()
    applied.export_deltas(tmp_path / "b.safetensors")
    other, _ = _model()
    applied2 = _plan("exact").apply(other)
    applied2.load_deltas(tmp_path / "b.safetensors")  # dense B back to rank 2 through an SVD
    assert torch.allclose(other(x), out, atol=1e-4)
    applied2.reset_b()
    base, _ = _model()
    assert torch.allclose(other(x), base(x))
    deltas = [m for m in other.modules() if isinstance(m, LowRankDelta)]
    assert len(deltas) == 5 and all(bool(d.U.any()) != bool(d.V.any()) for d in deltas)  # one side restarted


def test_dropout_acts_in_fused_training_only():
    torch.manual_seed(0)
    lin = nn.Linear(16, 16)
    x = torch.randn(4, 16)
    FreezePlan([Rule("*", reparam={"rank": 4, "mode": "fused", "dropout": 0.5})]).apply(lin)
    with torch.no_grad():
        lin.wb_lowrank["weight"].U.fill_(1.0)
    lin.eval()
    assert torch.equal(lin(x), lin(x))
    lin.train()
    assert not torch.equal(lin(x), lin(x))


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"rank": 0}, "reparam.rank"),
        ({"rank": -2}, "reparam.rank"),
        ({"rank": 2.5}, "reparam.rank"),
        ({"rank": 2, "alpha": "big"}, "reparam.alpha"),
        ({"rank": 2, "init": "xavier"}, "reparam.init"),
        ({"rank": 2, "dropout": 0.1}, "reparam.dropout"),  # exact mode cannot drop the input
        ({"alpha": 2}, "reparam.alpha"),  # needs rank
        ({"rank": 2, "b_init": {"random": {}}}, "reparam.b_init"),
    ],
)
def test_bad_low_rank_input_names_the_rule_and_field(spec, field):
    with pytest.raises(PlanError) as e:
        FreezePlan.from_dict({"rules": [{"select": "*", "frozen": True}, {"select": "lin", "reparam": spec}]})
    msg = str(e.value)
    assert "rule 1" in msg and "'reparam'" in msg and field in msg and "\n" not in msg.strip()


def test_rank_above_the_layer_size_names_the_rule_and_leaves_the_model():
    model, x = _model()
    ref = model(x)
    plan = FreezePlan.from_dict({"rules": [{"select": "*", "frozen": True}, {"select": "c1", "reparam": {"rank": 4}}]})
    with pytest.raises(PlanError) as e:
        plan.apply(model)
    msg = str(e.value)
    assert "rule 1" in msg and "reparam.rank 4" in msg and "min(4, 3)" in msg and "c1" in msg
    assert torch.equal(model(x), ref) and all(p.requires_grad for p in model.parameters())


def test_lint_flags_a_rank_rule_that_reaches_no_layer_and_doctor_a_base_that_trains():
    model, _ = _model()
    plan = FreezePlan.from_dict({"rules": [{"select": "norm", "reparam": {"rank": 2}}]})
    codes = [f.code for f in lint_plan(plan, ModelTree.from_model(model))]
    assert "lowrank-target-unmatched" in codes
    applied = _plan("fused").apply(model)
    assert "lowrank-base-trains" not in [f.code for f in check(model, plan=applied.plan)]
    model.lin.weight.requires_grad_(True)  # a script unfreezes the base
    found = [f for f in check(model) if f.code == "lowrank-base-trains"]
    assert [f.path for f in found] == ["lin"]


def test_unselected_keep_leaves_what_no_rule_selects():
    model, _ = _model()
    model.emb.weight.requires_grad_(False)  # a script froze the embedding
    plan = FreezePlan.from_dict({"unselected": "keep", "rules": [{"select": "norm", "frozen": False}, {"select": "c1", "frozen": True}]})
    assert FreezePlan.from_json(plan.to_json()).unselected == "keep"
    applied = plan.apply(model)
    grad = {n: p.requires_grad for n, p in model.named_parameters()}
    assert not grad["emb.weight"] and grad["lin.weight"] and grad["norm.weight"] and not grad["c1.weight"]
    assert applied.effective["emb"].kept and not applied.effective["norm"].kept
    # the default trains what no rule selects, as before, and writes no key
    default = FreezePlan.from_dict({"rules": [{"select": "c1", "frozen": True}]})
    assert "unselected" not in default.to_dict()
    applied.remove()  # one plan in force per model
    default.apply(model)
    assert model.emb.weight.requires_grad


@pytest.mark.parametrize("value", ["freeze", True, None])
def test_unselected_bad_value(value):
    with pytest.raises(PlanError, match="'unselected' must be"):
        FreezePlan.from_dict({"unselected": value, "rules": []})


def test_plain_script_export_writes_low_rank_as_plain_pytorch(tmp_path):
    from workbench.core.export import export_script
    from workbench.core.models.spec import ModelSpec

    plan = FreezePlan.from_dict({"rules": [{"select": "fc", "reparam": {"rank": 4}}]})
    export_script(plan, ModelSpec(source="torchvision", name="resnet18", num_classes=10), tmp_path / "s.py")
    text = (tmp_path / "s.py").read_text()
    assert "import peft" not in text and "from peft" not in text and "low-rank A+B" in text


def test_update_to_a_rank_the_layer_refuses_names_the_new_rule():
    model, _ = _model()
    applied = _plan("fused").apply(model)
    bad = FreezePlan.from_dict({"rules": [{"select": "*", "frozen": True}, {"select": "c1", "frozen": False, "reparam": {"rank": 9}}]})
    with pytest.raises(PlanError, match="rule 1.*reparam.rank 9"):
        applied.update(bad)


@pytest.mark.parametrize("mode", ["exact", "fused"])
def test_the_tree_of_an_adapted_model_is_the_plain_tree(mode):
    model, _ = _model()
    before = ModelTree.from_model(model)
    _plan(mode).apply(model)
    after = ModelTree.from_model(model)
    assert after.fingerprint == before.fingerprint and list(after.nodes) == list(before.nodes)
    assert after.owner_of("lin.wb_lowrank.weight.U" if mode == "fused" else "lin.parametrizations.weight.0.U") == "lin"
