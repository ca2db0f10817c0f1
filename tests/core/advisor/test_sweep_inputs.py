"""A sweep builds its model and data once per process: every candidate trains a copy, sees the same
batches, and trains as a run that built them itself would."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("optuna")

from workbench.core.advisor.sweep import Sweep, SweepSettings, cross_learning_rates, opened
from workbench.core.plan import FreezePlan, Rule
from workbench.core.training.config import TrainConfig
from workbench.core.training.engine import Trainer

#: each candidate's collection walks what the module made, as in `workbench sweep` and the app (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("long_lived_frozen")

TASK = '''
import threading

import torch
from torch import nn
from torch.utils.data import Dataset

BUILDS = {builds!r}
FETCHES = {fetches!r}


def _note(path, line):
    with open(path, "a") as f:
        f.write(line + "\\n")


class Rows(Dataset):
    def __init__(self, n, seed, logged):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 8, generator=g)
        self.y = (self.x[:, 0] > 0).long()
        self.logged = logged

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        if self.logged:
            _note(FETCHES, str(int(i)))
        return self.x[i], self.y[i]


def build():
    _note(BUILDS, "model")
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 2))


def data():
    _note(BUILDS, "data")
    return Rows(64, 1, True), Rows(32, 2, False)


class Locked(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 2)
        self.lock = threading.Lock()  # cannot be deep-copied

    def forward(self, x):
        return self.fc(x)


def locked():
    _note(BUILDS, "model")
    return Locked()


def retain():
    _note(BUILDS, "retain")
    return Rows(32, 3, False)
'''

HEAD = FreezePlan([Rule("*", frozen=True), Rule("3", frozen=False)])
FULL = FreezePlan([Rule("*", frozen=False)])


def _task(tmp_path: Path) -> tuple[Path, Path, Path]:
    builds, fetches = tmp_path / "builds.log", tmp_path / "fetches.log"
    code = tmp_path / "task.py"
    code.write_text(TASK.format(builds=str(builds), fetches=str(fetches)))
    return code, builds, fetches


def _config(code: Path) -> TrainConfig:
    return TrainConfig(model=f"py:{code}:build", data=f"py:{code}:data", batch_size=16, device="cpu", seed=3,
                       torch_threads=1)


def test_the_model_and_data_are_built_once_and_every_candidate_sees_the_same_batches(tmp_path: Path) -> None:
    code, builds, fetches = _task(tmp_path)
    cands = cross_learning_rates([("head", HEAD, {}), ("full", FULL, {})], [0.1])
    sweep = Sweep(tmp_path / "sw", cands, _config(code), SweepSettings(steps=4, eval_every=4, prune=False),
                  retain=f"py:{code}:retain")

    def on_event(kind: str, data: dict) -> None:
        if kind == "started":
            with open(fetches, "a") as f:
                f.write(f"start {data['id']}\n")

    with opened(sweep):
        sweep.work(on_event=on_event)
        rows = sweep.report().rows
    assert [r.status for r in rows] == ["completed"] * 2
    assert all(r.retention is not None for r in rows)
    assert builds.read_text().split() == ["model", "data", "retain"]  # once each, for two candidates
    runs: dict[str, list[str]] = {}
    for line in fetches.read_text().splitlines():
        if line.startswith("start "):
            current = runs.setdefault(line.split()[1], [])
        else:
            current.append(line)
    assert sorted(runs) == [c.id for c in cands]
    first = runs[cands[0].id]
    batches = first[-4 * 16:]  # four steps of 16 rows (the run reads one sample before, for its shape)
    assert len(set(batches)) == 64 and batches != sorted(batches, key=int)  # an epoch, shuffled
    assert all(seen == first for seen in runs.values())


def test_a_candidate_trains_as_a_run_that_builds_its_model_itself(tmp_path: Path) -> None:
    """The model has dropout: a candidate that drew other random numbers than a run of its own would
    end with another loss. The copy starts from the random state the build left."""
    code, _, _ = _task(tmp_path)
    cfg = _config(code)
    cands = cross_learning_rates([("full", FULL, {})], [0.1])
    sweep = Sweep(tmp_path / "sw", cands, cfg, SweepSettings(steps=5, eval_every=5, prune=False, objective="loss"))
    with opened(sweep):
        sweep.work()
        (row,) = sweep.report().rows
    seen: list[tuple[float, float | None]] = []
    alone = Trainer(cfg.replace(plan=FULL.to_dict(), lr=0.1, steps=5, val_every=5),
                    on_metrics=lambda m: seen.append((m.loss, m.val_loss)))
    assert alone.run().status == "completed"
    assert row.status == "completed" and row.val_loss is not None
    records = [json.loads(line) for line in (Path(row.run_dir) / "metrics.jsonl").read_text().splitlines()]
    assert [r["loss"] for r in records if "loss" in r] == [loss for loss, _ in seen]
    assert row.val_loss == seen[-1][1]


def test_a_model_that_cannot_be_copied_is_built_for_each_candidate(tmp_path: Path) -> None:
    code, builds, _ = _task(tmp_path)
    cfg = _config(code).replace(model=f"py:{code}:locked")
    cands = cross_learning_rates([("full", FULL, {})], [0.05, 0.1])
    sweep = Sweep(tmp_path / "sw", cands, cfg, SweepSettings(steps=1, eval_every=1, prune=False))
    with opened(sweep):
        sweep.work()
        assert [r.status for r in sweep.report().rows] == ["completed"] * 2
    assert not sweep.inputs.build_once
    assert builds.read_text().split() == ["model", "data", "model", "data"]


def test_the_advisor_and_the_candidates_share_one_build(tmp_path: Path) -> None:
    from workbench.core.advisor.sweep_candidates import advised_plans
    from workbench.core.advisor.sweep_trial import SweepInputs

    code, builds, _ = _task(tmp_path)
    cfg = _config(code)
    inputs = SweepInputs(cfg)
    _advice, plans = advised_plans(cfg, 1 << 30, inputs=inputs)
    cands = cross_learning_rates(plans[:1] + plans[-1:], [0.05])
    sweep = Sweep(tmp_path / "sw", cands, cfg, SweepSettings(steps=1, eval_every=1, prune=False), inputs=inputs)
    with opened(sweep):
        sweep.work()
        assert [r.status for r in sweep.report().rows] == ["completed"] * 2
    assert builds.read_text().split() == ["model", "data"]
