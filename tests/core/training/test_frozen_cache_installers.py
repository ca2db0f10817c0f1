"""The frozen-prefix cache keeps training what every technique trains, wherever it installs it.

The cut must come before the first module whose forward involves a trainable tensor: fused
A+B keeps U and V in a child that never runs (a forward hook on the layer uses them), so a cut
placed by "the first called module that owns a trainable parameter" skipped every adapted
layer, and on cached steps the adapters silently stopped training. Each case runs the same
plan with and without the cache and asserts the same loss at every step.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn
from torchvision.models.resnet import BasicBlock, ResNet

from tests.core.models.hf_fixtures import tiny_bert
from tests.fixtures.crepe import crepe_example
from workbench.core.freezing.apply import INSTALLERS, apply_plan
from workbench.core.plan.rules import FreezePlan
from workbench.core.training.config import TrainConfig
from workbench.core.training.engine import Trainer
from workbench.core.training.frozen_cache import FrozenPrefixCache, IndexQueue

LORA = {"rank": 4, "alpha": 8}
TECHNIQUES: dict[str, dict[str, Any]] = {
    "full-exact": {"reparam": {"kind": "a_plus_b"}},
    "full-fused": {"reparam": {"kind": "a_plus_b", "mode": "fused"}},
    "lora-exact": {"reparam": LORA},
    "lora-fused": {"reparam": {**LORA, "mode": "fused"}},
    "dora-exact": {"reparam": {**LORA, "dora": True}},
    "dora-fused": {"reparam": {**LORA, "dora": True, "mode": "fused"}},
}


def _tiny_resnet() -> nn.Module:
    return ResNet(BasicBlock, [1, 1, 1, 1], num_classes=10)


def _cnn_plan(technique: str) -> dict[str, Any]:
    rules: list[dict[str, Any]] = [{"select": "*", "frozen": True}]
    if technique == "partial":
        rules.append({"select": "layer4.0.conv2", "frozen": False,
                      "partial": {"param": "weight", "dim": 0, "trainable": [[0, 64]]}})
    elif technique == "bitfit":
        rules.append({"select": "param:layer4.*.bn*.bias", "frozen": False})
    else:
        rules.append({"select": "layer4.*.conv*", "frozen": False, **TECHNIQUES[technique]})
    rules.append({"select": "fc", "frozen": False})
    return {"format": "freeze-plan", "version": 1, "rules": rules}


def _bert_plan(technique: str) -> dict[str, Any]:
    rules: list[dict[str, Any]] = [{"select": "*", "frozen": True, "eval": True}]
    layer = "bert.encoder.layer.1"
    if technique == "partial":
        rules.append({"select": f"{layer}.intermediate.dense", "frozen": False,
                      "partial": {"param": "weight", "dim": 0, "trainable": [[0, 16]]}})
    elif technique == "bitfit":
        rules.append({"select": f"param:{layer}.*.bias", "frozen": False})
    else:
        rules.append({"select": f"{layer}.attention.self.query", "frozen": False, **TECHNIQUES[technique]})
        rules.append({"select": f"{layer}.output.dense", "frozen": False, **TECHNIQUES[technique]})
    rules.append({"select": "classifier", "frozen": False})
    return {"format": "freeze-plan", "version": 1, "rules": rules}


def _run(model_fn: Any, plan: dict[str, Any], mode: str, **kw: Any) -> tuple[Trainer, list[float]]:
    torch.manual_seed(0)
    model = model_fn()
    config: dict[str, Any] = {"data": "synthetic:16", "batch_size": 4, "steps": 8, "device": "cpu", "seed": 0}
    config.update(kw)
    t = Trainer(TrainConfig(plan=plan, cache_frozen=mode, **config), model=model)
    losses = [m.loss for m in t.steps()]
    assert t.result is not None and t.result.ok, t.result and t.result.message
    return t, losses


def _assert_same(a: list[float], b: list[float]) -> None:
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b)):
        assert math.isclose(x, y, rel_tol=1e-5, abs_tol=1e-6), f"step {i}: {a} != {b}"


ALL = [*TECHNIQUES, "partial", "bitfit"]


@pytest.mark.parametrize("technique", ALL)
def test_cnn_cached_losses_equal_uncached_for_every_installer(technique: str) -> None:
    plan = _cnn_plan(technique)
    _, off = _run(_tiny_resnet, plan, "off", image_size=16)
    t, on = _run(_tiny_resnet, plan, "on", image_size=16)
    _assert_same(off, on)
    stats = t.result.summary["frozen_cache"]
    assert stats["hits"] == 4, stats  # the cache served: the second epoch ran on kept rows
    assert stats["cut"].startswith("layer4"), stats  # before the first trainable layer, not at the head


@pytest.mark.parametrize("technique", ALL)
def test_transformer_cached_losses_equal_uncached_for_every_installer(technique: str) -> None:
    plan = _bert_plan(technique)
    _, off = _run(tiny_bert, plan, "off")
    t, on = _run(tiny_bert, plan, "on")
    _assert_same(off, on)
    stats = t.result.summary["frozen_cache"]
    assert stats["hits"] == 4 and stats["cut"] == "bert.encoder.layer.1", stats


def test_every_installer_declares_where_its_trainable_tensors_act() -> None:
    for installer in INSTALLERS:
        model = _tiny_resnet()
        handle = installer.install(model, "layer4.0.conv1", _spec_for(installer.key))
        assert callable(getattr(handle, "acts_in", None)), f"installer {installer.key!r} declares nothing"
        sites = handle.acts_in()
        assert all(isinstance(s, str) for s in sites)
        if handle.trainable():
            assert sites == ["layer4.0.conv1"], (installer.key, sites)
        handle.remove()


def _spec_for(key: str) -> Any:
    from workbench.core.plan import partial_spec, reparam_spec

    if key == "reparam":
        return reparam_spec.parse_spec({**LORA, "mode": "fused"})
    if key == "partial":
        return partial_spec.parse_spec({"param": "weight", "dim": 0, "trainable": [[0, 8]]})
    return True


class _Undeclared:
    """An installed technique whose handle forgot to say where its tensors act."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.path, self.spec = inner.path, inner.spec

    def trainable(self) -> list[tuple[str, nn.Parameter]]:
        return self._inner.trainable()

    def fixed(self) -> list[tuple[str, torch.Tensor]]:
        return self._inner.fixed()

    def remove(self, merge: bool = True) -> None:
        self._inner.remove(merge)


def _cache_on(plan: dict[str, Any], patch: Any) -> FrozenPrefixCache:
    torch.manual_seed(0)
    model = _tiny_resnet()
    applied = apply_plan(model, FreezePlan.from_dict(plan))
    patch(applied)
    model.train()
    cache = FrozenPrefixCache(model, model, IndexQueue(), 4, torch.device("cpu"), 1 << 20, None,
                              sites=applied.acting_sites)
    cache.queue.push([0, 1, 2, 3])
    cache(torch.randn(4, 3, 16, 16))
    return cache


def test_a_technique_that_declares_nothing_keeps_the_cache_off_with_one_line() -> None:
    def undeclare(applied: Any) -> None:
        for key in list(applied._installed):
            applied._installed[key] = _Undeclared(applied._installed[key])

    cache = _cache_on(_cnn_plan("lora-fused"), undeclare)
    assert cache.refused is not None and "does not say which modules use it" in cache.refused
    assert "\n" not in cache.refused and cache.stats.cut is None


def test_a_wrong_declaration_is_caught_by_the_graph_before_any_cached_step() -> None:
    def misdeclare(applied: Any) -> None:  # says its tensors act in the head: a lie
        for handle in applied._installed.values():
            handle.acts_in = lambda: ["fc"]

    cache = _cache_on(_cnn_plan("lora-fused"), misdeclare)
    assert cache.refused is not None and "no clean cut at 'fc'" in cache.refused
    assert "would stop training on cached steps" in cache.refused and "layer4." in cache.refused



def test_crepe_with_lora_on_its_convolutions_fused_trains_the_same_cached() -> None:
    crepe = crepe_example()
    plan = {"format": "freeze-plan", "version": 1, "rules": [
        {"select": "*", "frozen": True},
        {"select": "conv5", "frozen": False, "reparam": {**LORA, "mode": "fused"}},
        {"select": "conv6", "frozen": False, "reparam": {**LORA, "mode": "fused"}},
        {"select": "classifier", "frozen": False},
    ]}

    def run(mode: str) -> tuple[Trainer, list[float]]:
        torch.manual_seed(0)
        cfg = TrainConfig(plan=plan, cache_frozen=mode, loss="bce", batch_size=4, steps=8, device="cpu", seed=0)
        t = Trainer(cfg, model=crepe.build("tiny"), dataset=crepe.shifted_dataset(16, seed=10))
        losses = [m.loss for m in t.steps()]
        assert t.result is not None and t.result.ok, t.result and t.result.message
        return t, losses

    _, off = run("off")
    t, on = run("on")
    _assert_same(off, on)
    stats = t.result.summary["frozen_cache"]
    assert stats["cut"] == "conv5" and stats["hits"] == 4, stats
