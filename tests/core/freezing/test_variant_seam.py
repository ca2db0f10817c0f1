"""A new low-rank variant is its class plus one row of the variant table, and nothing else.

A throwaway "scaled" variant (twice the low-rank path: ``W = A + 2 s U V``) is registered with
monkeypatch only; the plan parses its flag, it installs, trains, verifies and merges in exact and
fused mode, and the PEFT writer refuses it by its row (it has no PEFT switch).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor, nn

import workbench as wb
from tests.fixtures.scaled_variant import ROW, Scaled
from workbench.core.freezing.reparam.variants import VARIANTS
from workbench.core.plan import lora_variants
from workbench.core.plan.reparam_spec import ReparamSpec

MODES = ("exact", "fused")


@pytest.fixture(autouse=True)
def scaled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(lora_variants.VARIANTS, "scaled", ROW)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 16), nn.ReLU(), nn.Linear(16, 4))


def _plan(mode: str, **variant: Any) -> dict[str, Any]:
    spec = {"rank": 2, "alpha": 4, "mode": mode, **variant}
    return {"rules": [{"select": "*", "frozen": True}, {"select": "*", "frozen": False, "reparam": spec}]}


def _x() -> Tensor:
    return torch.randn(5, 3, 6, 6, generator=torch.Generator().manual_seed(1))


def _train(model: nn.Module, applied: Any, steps: int = 5) -> None:
    opt = torch.optim.SGD(applied.param_groups(lr=0.05))
    for _ in range(steps):
        opt.zero_grad()
        model(_x()).pow(2).mean().backward()
        opt.step()


def test_the_plan_parses_the_flag_from_the_row() -> None:
    spec = ReparamSpec.parse({"rank": 2, "scaled": True})
    assert spec.low_rank is not None and spec.low_rank.variant == "scaled" and spec.low_rank.scaled
    assert not spec.low_rank.dora and spec.short() == "r=2 Scaled" and "Scaled" in spec.describe()
    assert spec.to_json()["scaled"] is True and ReparamSpec.parse(spec.to_json()) == spec
    assert spec.low_rank.added_elements(6, 4) == 2 * (6 + 4)  # no tensors of its own
    with pytest.raises(ValueError, match="reparam.scaled needs reparam.rank"):
        ReparamSpec.parse({"scaled": True})
    with pytest.raises(ValueError, match=r"reparam.scaled must be true \(Scaled: twice the low-rank path\)"):
        ReparamSpec.parse({"rank": 2, "scaled": 1})
    with pytest.raises(ValueError, match="are both true"):
        ReparamSpec.parse({"rank": 2, "scaled": True, "dora": True})
    assert isinstance(VARIANTS["scaled"], Scaled) and VARIANTS["scaled"] is VARIANTS["scaled"]


def test_without_its_row_the_flag_is_an_unknown_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(lora_variants.VARIANTS, "scaled")
    with pytest.raises(ValueError, match="unknown key 'scaled'"):
        ReparamSpec.parse({"rank": 2, "scaled": True})


@pytest.mark.parametrize("mode", MODES)
def test_installs_trains_verifies_and_is_twice_the_lora_path(mode: str) -> None:
    base = _model()
    model = _model()
    applied = wb.apply_plan(model, _plan(mode, scaled=True))
    torch.testing.assert_close(model(_x()), base(_x()), atol=1e-6, rtol=1e-6)
    assert {n.rpartition(".")[2] for n, _ in applied.named_trainable()} == {"U", "V"}
    _train(model, applied)
    assert not torch.allclose(model(_x()), base(_x()), atol=1e-4)
    assert applied.verify().ok
    # the same U and V as plain LoRA with twice alpha give the same outputs
    lora = _model()
    twice = wb.apply_plan(lora, {"rules": [{"select": "*", "frozen": True},
                                           {"select": "*", "frozen": False, "reparam": {"rank": 2, "alpha": 8, "mode": mode}}]})
    for path, h in applied.installed("reparam").items():
        if h.names:
            twice.installed("reparam")[path].set_uv("weight", h.u("weight").detach(), h.v("weight").detach())
    torch.testing.assert_close(lora(_x()), model(_x()), atol=1e-5, rtol=1e-5)


def test_exact_and_fused_agree_after_training_and_merge_keeps_the_outputs() -> None:
    outs = {}
    for mode in MODES:
        model = _model()
        applied = wb.apply_plan(model, _plan(mode, scaled=True))
        _train(model, applied)
        outs[mode] = model(_x()).detach()
        applied.merge()
        torch.testing.assert_close(model(_x()), outs[mode], atol=1e-5, rtol=1e-5)
        assert [n for n, _ in model.named_parameters()] == [n for n, _ in _model().named_parameters()]
    torch.testing.assert_close(outs["fused"], outs["exact"], atol=1e-5, rtol=1e-5)


def test_remove_restores_the_weights_and_unmerge_inverts_merge() -> None:
    model = _model()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    applied = wb.apply_plan(model, _plan("fused", scaled=True))
    _train(model, applied)
    h = applied.installed("reparam")["3"]
    d = h.delta_module("weight")
    a = h.a("weight").detach().clone()
    torch.testing.assert_close(Scaled().unmerge(Scaled().merge(a, d), d), a, atol=1e-6, rtol=1e-6)
    applied.remove(merge=False)
    for n, p in model.named_parameters():
        assert torch.equal(p, before[n])


def test_a_variant_without_a_peft_switch_is_refused_by_to_peft(tmp_path: Any) -> None:
    model = _model()
    applied = wb.apply_plan(model, _plan("fused", scaled=True))
    with pytest.raises(ValueError, match=r"Scaled \('scaled'\) has no PEFT form"):
        applied.to_peft(tmp_path)
