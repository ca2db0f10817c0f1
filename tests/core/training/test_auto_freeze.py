"""Auto-freeze: front blocks whose gradient norm flattened freeze as plan stages; the stages rerun the run."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
import torchvision

from workbench.core.plan.rules import FreezePlan
from workbench.core.training.auto_freeze import PLAN_FILE, AutoFreezer, front_paths
from workbench.core.training.config import ConfigError, TrainConfig
from workbench.core.training.engine import Trainer
from workbench.core.training.fsdp import block_paths
from workbench.core.training.module_stats import ModuleStats


def _stats(step: int, norms: dict[str, float]) -> ModuleStats:
    paths = tuple(norms)
    return ModuleStats(step, paths, tuple(v * v for v in norms.values()), (0.0,) * len(paths), (1.0,) * len(paths))


def test_front_paths_of_resnet_and_vit() -> None:
    r = torchvision.models.resnet18()
    assert front_paths(r, "layer1.0") == ["conv1", "bn1"]
    v = torchvision.models.vit_b_16(image_size=32)
    assert front_paths(v, block_paths(v)[0]) == ["conv_proj", "param:class_token"]


def test_only_a_flattened_front_run_freezes_up_to_the_cap() -> None:
    model = torchvision.models.resnet18()
    blocks = block_paths(model)
    auto = AutoFreezer(model, blocks, every=2, threshold=0.1, max_fraction=0.5)
    plan = FreezePlan()
    first = dict.fromkeys(blocks, 1.0)
    auto.observe(_stats(0, first))
    assert auto.decide(0, plan) is None  # a decision step falls on every 2nd step
    assert auto.decide(1, plan) is None  # no window before: nothing to compare
    second = dict(first, **{"layer2.0": 2.0})  # layer2.0 still moving: the run stops before it
    auto.observe(_stats(2, second))
    new = auto.decide(3, plan)
    assert new is not None and len(new.stages) == 1
    stage = new.stages[0]
    assert stage.at_step == 4 and [r.select for r in stage.rules] == ["conv1", "bn1", "layer1.0", "layer1.1"]
    assert all(r.frozen and r.eval for r in stage.rules)
    # all flat now: the cap (half of 8 blocks) stops at layer2.1
    for sel in ("conv1", "bn1", "layer1"):  # what the stage does to the model, as the engine applies it
        model.get_submodule(sel).requires_grad_(False)
    auto.observe(_stats(4, second))
    auto.observe(_stats(6, second))
    newer = auto.decide(7, new)
    assert newer is not None and [r.select for r in newer.stages[1].rules] == ["layer2.0", "layer2.1"]
    assert auto.summary()["frozen_blocks"] == 4


def test_each_evaluation_says_what_it_found() -> None:
    model = torchvision.models.resnet18()
    blocks = block_paths(model)
    auto = AutoFreezer(model, blocks, every=2, threshold=0.1, max_fraction=0.25)
    plan = FreezePlan()
    auto.observe(_stats(0, dict.fromkeys(blocks, 1.0)))
    assert auto.decide(0, plan) is None and auto.take_events() == []  # not an evaluation step
    auto.decide(1, plan)
    assert auto.take_events() == ["auto-freeze, step 2: first window measured (8 blocks); the next evaluation compares "
                                  "with it"]
    auto.observe(_stats(2, dict.fromkeys(blocks, 1.34)))
    auto.decide(3, plan)
    assert auto.take_events() == ["auto-freeze, step 4: no block flattened (smallest change 34 %, threshold 10 %)"]
    auto.observe(_stats(4, dict(dict.fromkeys(blocks, 1.34), **{"layer1.0": 2.0})))
    auto.decide(5, plan)
    assert auto.take_events() == ["auto-freeze, step 6: layer1.0 has not flattened (change 49 %, threshold 10 %); "
                                  "the blocks after it wait (smallest change 0 %)"]
    auto.observe(_stats(6, dict(dict.fromkeys(blocks, 2.0), **{"layer1.1": 1.3668})))
    assert auto.decide(7, plan) is not None
    assert auto.take_events() == ["auto-freeze, step 8: layer1.0 .. layer1.1 flattened (change 0 %, 2 %, "
                                  "threshold 10 %): frozen from step 9"]
    for sel in ("conv1", "bn1", "layer1"):
        model.get_submodule(sel).requires_grad_(False)
    auto.decide(9, plan)
    assert auto.take_events() == ["auto-freeze, step 10: nothing more to freeze (2 of 8 blocks frozen, the maximum "
                                  "is 25 %)"]


@pytest.mark.parametrize("field, value", [
    ("auto_freeze", "yes"), ("auto_freeze_every", 0), ("auto_freeze_threshold", 0.0),
    ("auto_freeze_threshold", math.nan), ("auto_freeze_max", 1.5), ("auto_freeze_max", 0),
])
def test_config_rejects_bad_auto_freeze_settings(field: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=field):
        TrainConfig(**{field: value}).validate()


def _run(tmp_path: Path, name: str, **kw: Any) -> tuple[Trainer, list[float], list[Any]]:
    torch.manual_seed(0)
    cfg = TrainConfig(model="resnet18", num_classes=10, data="synthetic:64", image_size=32, batch_size=16, steps=24,
                      device="cpu", seed=0, save_dir=str(tmp_path / name), **kw)
    t = Trainer(cfg)
    seen = list(t.steps())
    assert t.result is not None and t.result.ok, t.result and t.result.message
    return t, [m.loss for m in seen], seen


def test_decisions_are_plan_changes_and_their_plan_reruns_the_run(tmp_path: Path) -> None:
    t, losses, seen = _run(tmp_path, "auto", auto_freeze=True, auto_freeze_every=8, auto_freeze_threshold=100.0,
                           auto_freeze_max=0.5)
    summary = t.result.summary["auto_freeze"]
    assert summary["decisions"] and summary["decisions"][0]["at_step"] == 16
    changed = [m for m in seen if any(e.startswith("stage") and "auto-freeze" in e for e in m.events)]
    evaluations = [e for m in seen for e in m.events if e.startswith("auto-freeze, step")]
    assert evaluations[0] == "auto-freeze, step 8: first window measured (8 blocks); the next evaluation compares with it"
    assert evaluations[1].startswith("auto-freeze, step 16: layer1.0 .. layer2.1 flattened (change ")
    assert changed and changed[0].step == 16 and changed[0].plan_version == 1
    assert changed[0].trainable_params < seen[0].trainable_params
    assert not any(p.requires_grad for p in t.model.layer2.parameters())
    assert any(p.requires_grad for p in t.model.layer3.parameters())
    saved = tmp_path / "auto" / PLAN_FILE
    plan = FreezePlan.load(saved)
    assert len(plan.stages) == 1 and json.loads(saved.read_text())["stages"][0]["at_step"] == 16
    assert t.result.summary["frozen_cache"]["cut"] == "layer3"  # the cache picked the frozen prefix up
    # the decisions as a plan, without auto-freeze: the same run
    t2, again, _ = _run(tmp_path, "rerun", plan=str(saved))
    assert t2.result.summary["auto_freeze"] is None
    assert len(again) == len(losses)
    for a, b in zip(losses, again):
        assert math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6), (losses, again)
