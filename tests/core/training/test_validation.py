"""Validation (workbench.core.training.validation and the engine): held-out splits, metrics, modes."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import Subset, TensorDataset

from workbench.core.plan.rules import FreezePlan
from workbench.core.training.config import ConfigError, TrainConfig
from workbench.core.training.engine import Trainer, TrainError
from workbench.core.training.metrics import StepMetrics
from workbench.core.training.validation import ValidationError, evaluate, holdout_split


class Net(nn.Module):
    def __init__(self, classes: int = 3) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.block = nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4))
        self.fc = nn.Linear(4, classes)
        self.modes: list[tuple[bool, bool, bool]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.modes.append((self.training, self.bn.training, self.block[1].training))
        x = torch.relu(self.bn(self.conv(x)))
        return self.fc(torch.relu(self.block(x)).mean((2, 3)))


def _data(n: int = 40) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 3, 6, 6, generator=g), torch.randint(0, 3, (n,), generator=g))


def _indices(ds: object) -> list[int]:
    assert isinstance(ds, Subset)
    return list(ds.indices)


def test_holdout_split_is_disjoint_seeded_and_bounded():
    ds = _data(40)
    train, val = holdout_split(ds, 0.25, seed=3)
    assert len(val) == 10 and len(train) == 30
    assert set(_indices(train)).isdisjoint(_indices(val)) and set(_indices(train)) | set(_indices(val)) == set(range(40))
    assert _indices(holdout_split(ds, 0.25, seed=3)[1]) == _indices(val)  # same seed, same split
    assert _indices(holdout_split(ds, 0.25, seed=4)[1]) != _indices(val)
    assert len(holdout_split(_data(2), 0.01)[1]) == 1 and len(holdout_split(_data(2), 0.99)[0]) == 1
    with pytest.raises(ValidationError, match="too few"):
        holdout_split(_data(1), 0.5)


def test_evaluate_restores_train_mode_and_keeps_the_bn_eval_lock():
    model = Net()
    applied = FreezePlan.from_dict({"format": "freeze-plan", "version": 1, "rules": [{"select": "bn", "bn_eval": True}]}).apply(model)
    model.train()
    loader = torch.utils.data.DataLoader(_data(10), batch_size=4)
    v = evaluate(model, loader, nn.CrossEntropyLoss(), torch.device("cpu"))
    assert v.samples == 10 and math.isfinite(v.loss) and v.acc is not None and 0 <= v.acc <= 1
    assert model.modes and all(m == (False, False, False) for m in model.modes)  # all in eval while validating
    assert (model.training, model.bn.training, model.block[1].training) == (True, False, True)
    assert applied is not None


def _run(**kw: object) -> tuple[Trainer, list[StepMetrics]]:
    seen: list[StepMetrics] = []
    torch.manual_seed(0)
    cfg = TrainConfig(steps=kw.pop("steps", 6), batch_size=4, lr=1e-2, **kw)  # type: ignore[arg-type]
    t = Trainer(cfg, model=Net(), dataset=_data(), on_metrics=seen.append,
                plan={"format": "freeze-plan", "version": 1, "rules": [{"select": "bn", "bn_eval": True}]})
    result = t.run()
    assert result.status == "completed", result.message
    return t, seen


def test_val_every_reports_val_metrics_and_holds_out_a_disjoint_split():
    t, seen = _run(val_every=2, log_every=3)
    # reported: every validation step and the log windows; val metrics only where measured
    got = {m.step: (m.val_loss, m.val_acc) for m in seen}
    measured = sorted(s for s, (loss, _) in got.items() if loss is not None)
    assert measured == [1, 3, 5]
    assert all(acc is not None and 0 <= acc <= 1 for s, (_, acc) in got.items() if s in measured)
    assert all(loss is None and acc is None for s, (loss, acc) in got.items() if s not in measured)
    assert t.val_loader is not None
    train_idx, val_idx = _indices(t.dataset), _indices(t.val_loader.dataset)
    assert len(val_idx) == 4 and len(train_idx) == 36 and set(train_idx).isdisjoint(val_idx)
    s = t.result.summary
    assert s["val_loss"] == seen[-1].val_loss and s["val_acc"] == seen[-1].val_acc and s["val_step"] == 5
    assert s["val_samples"] == 4 and s["val_time_s"] > 0
    losses = {m.step: m.val_loss for m in seen if m.val_loss is not None}
    accs = [m.val_acc for m in seen if m.val_acc is not None]
    assert s["best_val_loss"] == min(losses.values()) and losses[s["best_val_step"]] == s["best_val_loss"]
    assert s["best_val_acc"] == max(accs)
    # after validating, training went on in train mode with the BN eval lock in force
    modes = t.model.modes
    assert (True, False, True) in modes and (False, False, False) in modes
    assert modes[-1] == (False, False, False)  # the last forward was the final validation
    assert all(m in ((True, False, True), (False, False, False)) for m in modes)
    assert t.result.verify.ok
    assert 0 <= s["metrics_overhead_fraction"] < 1  # validation time is not metrics overhead


def test_no_validation_by_default_and_val_spec_validates_at_the_end():
    t, seen = _run()
    assert t.val_loader is None and len(t.dataset) == 40 and all(m.val_loss is None for m in seen)
    assert t.result.summary["val_step"] is None and t.result.summary["best_val_loss"] is None
    seen2: list[StepMetrics] = []
    t2 = Trainer(TrainConfig(steps=3, batch_size=4, data="synthetic:16", image_size=6, val="synthetic:8"),
                 model=Net(), on_metrics=seen2.append)
    t2.run()
    assert len(t2.dataset) == 16 and len(t2.val_loader.dataset) == 8  # the training data is not split
    assert [m.val_loss is not None for m in seen2] == [False, False, True]
    assert t2.val_loader.dataset.index_offset != t2.dataset.index_offset  # other samples of the same classes
    assert t2.val_loader.dataset.num_classes == t2.dataset.num_classes == 3


def test_synthetic_held_out_split_is_disjoint_from_training():
    t = Trainer(TrainConfig(steps=2, batch_size=4, data="synthetic:50", image_size=6, val_every=1, val_fraction=0.2),
                model=Net())
    t.setup()
    train_idx, val_idx = _indices(t.dataset), _indices(t.val_loader.dataset)
    assert len(val_idx) == 10 and len(train_idx) == 40 and set(train_idx).isdisjoint(val_idx)
    assert t.dataset.dataset is t.val_loader.dataset.dataset  # one source, two disjoint index sets
    seen_train = {i for batch_idx in t.loader.batch_sampler for i in batch_idx}  # positions in the subset
    assert {train_idx[i] for i in seen_train}.isdisjoint(val_idx)


def test_imagefolder_held_out_split_is_disjoint_from_training(tmp_path: Path):
    from PIL import Image

    for c, color in (("cat", (200, 10, 10)), ("dog", (10, 10, 200))):
        (tmp_path / c).mkdir()
        for i in range(6):
            Image.new("RGB", (10, 10), color).save(tmp_path / c / f"{i}.png")
    seen: list[StepMetrics] = []
    t = Trainer(TrainConfig(data=f"imagefolder:{tmp_path}", image_size=6, batch_size=4, steps=2, val_every=1,
                            val_fraction=0.25), model=Net(classes=2), on_metrics=seen.append)
    assert t.run().status == "completed"
    train, val = t.dataset, t.val_loader.dataset
    files = lambda ds: {ds.dataset.samples[i][0] for i in ds.indices}
    assert len(files(val)) == 3 and len(files(train)) == 9 and files(train).isdisjoint(files(val))
    assert all(m.val_loss is not None and m.val_acc is not None for m in seen)


def test_bad_validation_input():
    with pytest.raises(ConfigError, match="config field 'val_fraction'"):
        TrainConfig(val_fraction=1.0).validate()
    with pytest.raises(ConfigError, match="config field 'val_every'"):
        TrainConfig(val_every=0).validate()
    with pytest.raises(ConfigError, match="config field 'val'"):
        TrainConfig(val="  ").validate()
    with pytest.raises(TrainError, match="unknown dataset spec"):
        Trainer(TrainConfig(steps=1, batch_size=4, val="nope:1"), model=Net(), dataset=_data()).setup()
    with pytest.raises(TrainError, match="too few"):
        Trainer(TrainConfig(steps=1, batch_size=1, val_every=1), model=Net(), dataset=_data(1)).setup()
