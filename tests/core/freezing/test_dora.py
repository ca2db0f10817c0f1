"""DoRA through the variant seam: "reparam": {"rank": r, "dora": true}, exact and fused."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import workbench as wb
from workbench.core.freezing.reparam.dora import DoRA
from workbench.core.plan.problems import PlanError
from workbench.core.plan.reparam_spec import ReparamSpec

MODES = ("exact", "fused")


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 16), nn.ReLU(), nn.Linear(16, 4))


def _plan(mode: str) -> dict:
    return {"rules": [{"select": "*", "frozen": True},
                      {"select": "*", "frozen": False, "reparam": {"rank": 2, "alpha": 4, "dora": True, "mode": mode}}]}


def _x() -> torch.Tensor:
    return torch.randn(5, 3, 6, 6, generator=torch.Generator().manual_seed(1))


def _train(model: nn.Module, applied, steps: int = 5) -> None:
    opt = torch.optim.SGD(applied.param_groups(lr=0.05))
    for _ in range(steps):
        opt.zero_grad()
        model(_x()).pow(2).mean().backward()
        opt.step()


def test_spec_round_trip_and_text():
    spec = ReparamSpec.parse({"rank": 4, "dora": True})
    assert spec.low_rank.dora and spec.to_json()["dora"] is True and spec.short() == "r=4 DoRA"
    assert "dora" not in ReparamSpec.parse({"rank": 4}).to_json()  # plain LoRA files unchanged
    assert ReparamSpec.parse(spec.to_json()) == spec
    with pytest.raises(ValueError, match="reparam.dora needs reparam.rank"):
        ReparamSpec.parse({"dora": True})
    with pytest.raises(ValueError, match="reparam.dora must be true"):
        ReparamSpec.parse({"rank": 4, "dora": "yes"})


@pytest.mark.parametrize("mode", MODES)
def test_starts_at_the_model_trains_u_v_m_and_verifies(mode):
    base = _model()
    model = _model()
    applied = wb.apply_plan(model, _plan(mode))
    torch.testing.assert_close(model(_x()), base(_x()), atol=1e-6, rtol=1e-6)
    names = {n.rpartition(".")[2] for n, _ in applied.named_trainable()}
    assert names == {"U", "V", "M"}
    # 3 layers: U, V and one magnitude per output channel
    assert applied.counts().trainable == (2 * (8 + 27) + 8) + (2 * (16 + 288) + 16) + (2 * (4 + 16) + 4)
    _train(model, applied)
    assert not torch.allclose(model(_x()), base(_x()), atol=1e-4)
    report = applied.verify()
    assert report.ok and not report.warnings


def test_exact_and_fused_agree_after_training():
    outs = {}
    for mode in MODES:
        model = _model()
        _train(model, wb.apply_plan(model, _plan(mode)))
        outs[mode] = model(_x())
    torch.testing.assert_close(outs["fused"], outs["exact"], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mode", MODES)
def test_merge_keeps_the_function_and_remove_restores_the_weights(mode):
    model = _model()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    applied = wb.apply_plan(model, _plan(mode))
    _train(model, applied)
    trained = model(_x()).detach()
    applied.merge()
    torch.testing.assert_close(model(_x()), trained, atol=1e-5, rtol=1e-5)
    assert [n for n, _ in model.named_parameters()] == list(before)
    applied.remove()
    model2 = _model()
    ids = {n: id(p) for n, p in model2.named_parameters()}
    applied2 = wb.apply_plan(model2, _plan(mode))
    _train(model2, applied2)
    applied2.remove(merge=False)
    for n, p in model2.named_parameters():
        assert torch.equal(p, before[n]) and id(p) == ids[n]


def test_unmerge_inverts_merge():
    model = _model()
    applied = wb.apply_plan(model, _plan("fused"))
    _train(model, applied)
    h = applied.installed("reparam")["3"]
    d = h.delta_module("weight")
    a = h.a("weight").detach().clone()
    w = DoRA().merge(a, d)
    torch.testing.assert_close(DoRA().unmerge(w, d), a, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mode", MODES)
def test_deltas_round_trip_and_reset(mode, tmp_path):
    model = _model()
    applied = wb.apply_plan(model, _plan(mode))
    _train(model, applied)
    f = tmp_path / "d.safetensors"
    applied.export_deltas(f)
    b = applied.reparam_stats()
    assert all(s["b_norm"] > 0 for s in b.values())
    applied.reset_b([""])  # the whole model: every A+B in the subtree
    assert all(s["b_norm"] < 1e-6 for s in applied.reparam_stats().values())
    applied.load_deltas(f)  # B back as closely as rank r and the magnitude allow
    for k, s in applied.reparam_stats().items():
        assert s["b_norm"] == pytest.approx(b[k]["b_norm"], rel=0.2)


def test_embedding_is_refused_with_the_field():
    model = nn.Sequential(nn.Embedding(10, 8), nn.Linear(8, 2))
    with pytest.raises(PlanError, match="dora does not support a Embedding"):
        wb.apply_plan(model, {"rules": [{"select": "0", "reparam": {"rank": 2, "dora": True}}]})
