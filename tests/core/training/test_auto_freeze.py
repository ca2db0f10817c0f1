"""Auto-freeze: front blocks whose gradient norm flattened freeze as plan stages; the stages rerun the run."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
import torchvision
from torch import nn

from workbench.core.plan.rules import FreezePlan
from workbench.core.training.auto_freeze import (
    AUTO_EVERY_FLOOR,
    AUTO_EVERY_SHARE,
    PLAN_FILE,
    AutoFreezer,
    auto_interval,
    front_paths,
)
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


def test_the_default_interval_is_a_share_of_the_run_with_a_floor() -> None:
    assert [auto_interval(n) for n in (1, 100, 200, 300, 1000, 10_000)] == [10, 10, 10, 15, 50, 500]
    assert auto_interval(None) == auto_interval(0) == 50  # the length is not known: the old fixed interval


def _settling_run(steps: int, every: int | None = None) -> tuple[AutoFreezer, list[int]]:
    """Four blocks whose gradient norms fall by 22 % every 5 % of a ``steps``-step run (``3 e^(-5 t)``,
    t the share of the run done) until they settle at 10 %, 20 % and 50 % of the run (the fourth
    never does), measured as the engine measures them; a decision freezes its blocks as the engine
    would. Returns the freezer and the step each block froze at (-1: never)."""
    model = nn.Sequential(*(nn.Linear(2, 2) for _ in range(4)))
    blocks = ["0", "1", "2", "3"]
    settle = [0.1, 0.2, 0.5, math.inf]
    auto = AutoFreezer(model, blocks, every=every, threshold=0.1, max_fraction=1.0, total_steps=steps)
    plan = FreezePlan()
    frozen_at = [-1] * 4
    for step in range(steps):
        if step % auto.measure_every == 0:
            norms = {b: 3 * math.exp(-5 * min(step / steps, s)) for b, s in zip(blocks, settle)}
            auto.observe(_stats(step, norms))
        new = auto.decide(step, plan)
        if new is not None:
            plan = new
            for b in auto.decisions[-1].blocks:
                model.get_submodule(b).requires_grad_(False)
                frozen_at[blocks.index(b)] = step + 1
    return auto, frozen_at


@pytest.mark.parametrize("steps", [100, 300, 1000])
def test_the_default_freezes_at_the_same_point_of_runs_of_any_length(steps: int) -> None:
    auto, frozen_at = _settling_run(steps)
    assert auto.every == auto_interval(steps)
    share = [at / steps if at >= 0 else None for at in frozen_at]
    # each block freezes within two intervals of settling (the two windows compared), in order; the
    # fourth, still moving, never
    assert share[0] is not None and share[1] is not None and share[0] < share[1] <= 0.4, frozen_at
    assert share[2] is not None and 0.5 < share[2] <= 0.7, frozen_at
    assert share[3] is None, frozen_at
    if steps * AUTO_EVERY_SHARE >= AUTO_EVERY_FLOOR:  # above the floor the decisions fall at the same shares
        assert share == [0.2, 0.3, 0.6, None], frozen_at


def test_a_fixed_interval_decides_too_late_for_a_short_run() -> None:
    """What the default replaces: every 50 steps, a 100-step run compares two windows once."""
    _, fixed = _settling_run(100, every=50)
    _, default = _settling_run(100)
    assert fixed[0] == -1 and 0 < default[0] <= 40, (fixed, default)


def test_the_first_evaluation_says_how_the_interval_was_chosen() -> None:
    auto, _ = _settling_run(300)
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    first = AutoFreezer(model, ["0", "1"], every=None, threshold=0.1, max_fraction=1.0, total_steps=300)
    first.observe(_stats(0, {"0": 1.0, "1": 1.0}))
    first.decide(14, FreezePlan())
    assert first.take_events() == ["auto-freeze, step 15: first window measured (2 blocks, every 15 steps: 5 % of "
                                   "300, at least 10); the next evaluation compares with it"]
    unknown = AutoFreezer(model, ["0", "1"], every=None, threshold=0.1, max_fraction=1.0)
    unknown.observe(_stats(0, {"0": 1.0, "1": 1.0}))
    unknown.decide(49, FreezePlan())
    assert unknown.take_events() == ["auto-freeze, step 50: first window measured (2 blocks, every 50 steps: the "
                                     "run's length is not known); the next evaluation compares with it"]
    assert auto.summary()["every"] == 15


@pytest.mark.parametrize("field, value", [
    ("auto_freeze", "yes"), ("auto_freeze_every", 0), ("auto_freeze_threshold", 0.0),
    ("auto_freeze_threshold", math.nan), ("auto_freeze_max", 1.5), ("auto_freeze_max", 0),
])
def test_config_rejects_bad_auto_freeze_settings(field: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=field):
        TrainConfig(**{field: value}).validate()


def _run(tmp_path: Path, name: str, **kw: Any) -> tuple[Trainer, list[float], list[Any]]:
    torch.manual_seed(0)
    cfg = TrainConfig(model="resnet18", num_classes=10, data="synthetic:32", image_size=16, batch_size=8, steps=24,
                      optimizer="sgd", device="cpu", seed=0, save_dir=str(tmp_path / name), **kw)
    t = Trainer(cfg)
    seen = list(t.steps())
    assert t.result is not None and t.result.ok, t.result and t.result.message
    return t, [m.loss for m in seen], seen


def test_decisions_are_plan_changes_and_their_plan_reruns_the_run(tmp_path: Path) -> None:
    t, losses, seen = _run(tmp_path, "auto", auto_freeze=True, auto_freeze_every=8, auto_freeze_threshold=100.0,
                           auto_freeze_max=0.5)
    assert t.result is not None and isinstance(t.model, torchvision.models.ResNet)
    summary = t.result.summary["auto_freeze"]
    assert summary["decisions"] and summary["decisions"][0]["at_step"] == 16
    assert set(summary["compute_shares"]) == set(block_paths(t.model))  # counted on the first forward
    assert 0.3 < summary["decisions"][0]["saves"] < 0.9  # the stem and four of the eight blocks
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
    assert t2.result is not None and t2.result.summary["auto_freeze"] is None
    assert len(again) == len(losses)
    for a, b in zip(losses, again):
        assert math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6), (losses, again)


def test_nothing_is_decided_at_the_runs_last_step() -> None:
    """A freeze decided at the last step would apply to no step: that evaluation is skipped, and the step before
    says so."""
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    auto = AutoFreezer(model, ["0", "1"], every=3, threshold=0.1, max_fraction=1.0, total_steps=6)
    plan = FreezePlan()
    lines = []
    for step in range(6):
        auto.observe(_stats(step, {"0": 1.0, "1": 1.0}))  # flat from the start: the second window would freeze both
        assert auto.decide(step, plan) is None, step
        lines += auto.take_events()
    assert auto.decisions == [] and auto.summary()["frozen_blocks"] == 0
    assert lines == ["auto-freeze, step 3: first window measured (2 blocks); the next evaluation compares with it",
                     "auto-freeze, step 5: the evaluation due at step 6 is skipped: it is the run's last step, where a "
                     "freeze would train no step"]
    longer = AutoFreezer(model, ["0", "1"], every=3, threshold=0.1, max_fraction=1.0, total_steps=7)
    for step in range(6):
        longer.observe(_stats(step, {"0": 1.0, "1": 1.0}))
        new = longer.decide(step, plan)
    assert new is not None and [d.at_step for d in longer.decisions] == [6]  # step 6 of 7 freezes for the last one


def test_a_run_whose_last_step_is_an_evaluation_reports_no_freeze(tmp_path: Path) -> None:
    torch.manual_seed(0)
    cfg = TrainConfig(data="synthetic:8", input_shape=(4,), num_classes=2, batch_size=2, steps=4, device="cpu",
                      seed=0, optimizer="sgd", auto_freeze=True, auto_freeze_every=2, auto_freeze_threshold=1e9,
                      save_dir=str(tmp_path / "run"))
    t = Trainer(cfg, model=nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 2)))
    seen = list(t.steps())
    assert t.result is not None and t.result.ok, t.result and t.result.message
    assert t.result.summary["auto_freeze"]["decisions"] == [] and seen[-1].trainable_params == seen[0].trainable_params
    assert FreezePlan.load(tmp_path / "run" / PLAN_FILE).stages == []
    events = [e for m in seen for e in m.events if e.startswith("auto-freeze")]
    assert events[-1] == ("auto-freeze, step 3: the evaluation due at step 4 is skipped: it is the run's last step, "
                          "where a freeze would train no step")
