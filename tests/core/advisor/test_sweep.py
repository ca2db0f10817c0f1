"""A sweep in one process on a tiny model: run folders, the table, pruning with its reason, resuming."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

pytest.importorskip("optuna")

from workbench.core.advisor.sweep import Sweep, SweepError, SweepSettings, cross_learning_rates, opened
from workbench.core.plan import FreezePlan, Rule
from workbench.core.training.config import TrainConfig

#: each candidate's collection walks what the module made, as in `workbench sweep` and the app (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("long_lived_frozen")


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.fc = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.body(x))


def _net() -> nn.Module:
    torch.manual_seed(0)
    return Net()


def _data() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(160, 8, generator=g)
    return TensorDataset(x, (x[:, 0] > 0).long())  # learnable in a few steps


def _candidates() -> list:
    """Least trained first, as the advisor lists them: two head-only plans that barely learn, then full."""
    full = FreezePlan([Rule("*", frozen=False)])
    head = FreezePlan([Rule("*", frozen=True), Rule("fc", frozen=False)])
    return cross_learning_rates([("head only", head, {})], [1e-7, 2e-7]) + [
        c.__class__("c02", c.name, c.plan, c.lr) for c in cross_learning_rates([("full", full, {})], [0.05])]


def _sweep(folder: Path, **settings: object) -> Sweep:
    cfg = TrainConfig(batch_size=16, device="cpu", seed=0)
    s = SweepSettings(**{"steps": 6, "eval_every": 2, "objective": "loss", **settings})  # type: ignore[arg-type]
    return Sweep(folder, _candidates(), cfg, s, model_factory=_net, dataset=_data(), retain=_data())


def test_each_candidate_is_a_run_folder_and_weak_ones_are_pruned_with_a_reason(tmp_path: Path) -> None:
    sweep = _sweep(tmp_path / "sw")
    events: list[str] = []
    with opened(sweep) as queued:
        assert queued == ["c02", "c01", "c00"]  # the last first: the most trained sets the bar
        sweep.work(on_event=lambda kind, data: events.append(f"{kind}:{data['id']}") if kind != "step" else None)
        report = sweep.report()
    rows = {r.id: r for r in report.rows}
    assert rows["c02"].status == "completed" and rows["c02"].steps == 6
    assert rows["c01"].status == rows["c00"].status == "pruned"
    assert rows["c01"].steps == 2 and "stopped at step 2 (rung 0)" in rows["c01"].reason
    assert "not among the best 1" in rows["c01"].reason
    assert events.count("finished:c02") == 1 and events[0] == "started:c02"
    full = rows["c02"]
    assert full.trainable == 8 * 16 + 16 + 16 * 2 + 2 and rows["c01"].trainable == 16 * 2 + 2
    assert full.time_s is not None and full.time_s > 0 and full.peak_bytes is not None
    assert full.retention is not None and full.on_time_front and full.on_memory_front
    assert report.recommended == 2 and report.recommendation.startswith("recommended: full")
    assert [s for s, _ in full.curve] == [2, 4, 6]
    run = Path(full.run_dir)
    assert run.parent == tmp_path / "sw" / "runs"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == 6
    assert (run / "metrics.jsonl").is_file() and (run / "plan.json").is_file()
    # the same sweep again: nothing left to train, the same report
    again = _sweep(tmp_path / "sw")
    with opened(again) as queued:
        assert queued == []
        assert again.work() == 0
        assert [r.status for r in again.report().rows] == ["pruned", "pruned", "completed"]


def test_without_pruning_every_candidate_trains_to_the_end(tmp_path: Path) -> None:
    sweep = _sweep(tmp_path / "sw", prune=False, steps=2, eval_every=1)
    with opened(sweep):
        sweep.work()
        assert [r.status for r in sweep.report().rows] == ["completed"] * 3


def test_a_study_of_other_candidates_is_refused_and_kept(tmp_path: Path) -> None:
    sweep = _sweep(tmp_path / "sw", prune=False, steps=1, eval_every=1)
    with opened(sweep):
        sweep.work()
    other = Sweep(tmp_path / "sw", _candidates()[:2], TrainConfig(device="cpu"),
                  SweepSettings(steps=1, eval_every=1), model_factory=_net, dataset=_data())
    with pytest.raises(SweepError, match="is another sweep .its candidates differ"), opened(other):
        pass
    with opened(_sweep(tmp_path / "sw", prune=False, steps=1, eval_every=1)) as queued:
        assert queued == []


def test_no_candidate_and_no_budget_are_refused() -> None:
    with pytest.raises(SweepError, match="no candidate"):
        cross_learning_rates([], [1e-3])
    with pytest.raises(SweepError, match="no candidate"):
        Sweep("unused", [], TrainConfig(), SweepSettings())
    with pytest.raises(SweepError, match="--steps must be a positive integer"):
        SweepSettings(steps=0).validate()
    with pytest.raises(SweepError, match="--seconds must be a positive"):
        SweepSettings(steps=None, seconds=0.0).validate()


def test_a_queued_trial_is_taken_under_the_write_lock(tmp_path: Path) -> None:
    """Two workers must not both read a trial as WAITING and both train it: SQLite ignores
    ``SELECT ... FOR UPDATE``, so the study's transactions begin IMMEDIATE. While one worker's
    transaction has only read, another connection cannot start writing."""
    import sqlite3

    from sqlalchemy import text

    from workbench.core.advisor.sweep_study import open_study, storage_url

    url = storage_url(tmp_path)
    study = open_study(url, "s", maximize=True, identity={"k": 1}, reduction_factor=3, min_resource=1,
                       prune=False, heartbeat=False)
    engine = study._storage._backend.engine  # type: ignore[attr-defined]  # the cached storage's RDB storage
    other = sqlite3.connect(tmp_path / "study.db", timeout=0, isolation_level=None)
    try:
        with engine.connect() as conn, conn.begin():
            conn.execute(text("SELECT count(*) FROM trials")).scalar()
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")
        other.execute("BEGIN IMMEDIATE")  # free again once the transaction ended
        other.execute("ROLLBACK")
    finally:
        other.close()


def test_a_candidate_that_runs_out_of_time_measures_where_it_ended_and_leaves_no_loader_workers() -> None:
    """The seconds budget ends between validations: the candidate is validated once more where it stopped,
    with the run's validation loader, whose persistent workers that pass starts again and then ends."""
    import multiprocessing

    from workbench.core.advisor.sweep_trial import train_candidate

    before = {p.pid for p in multiprocessing.active_children()}
    cfg = TrainConfig(batch_size=16, device="cpu", seed=0, num_workers=1, val_fraction=0.25, plan=FreezePlan().to_dict())
    outcome = train_candidate(cfg, eval_every=10_000, steps=None, seconds=1e-9, model_factory=_net, dataset=_data(),
                              loss_fn=nn.CrossEntropyLoss())
    assert outcome.status == "completed", outcome.message
    assert outcome.metric is not None and outcome.curve and outcome.curve[-1][0] == outcome.steps
    assert {p.pid for p in multiprocessing.active_children()} - before == set()
