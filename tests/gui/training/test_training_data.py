"""Qt-free pieces of the training UI: ring buffer, metric batching, run store; the Qt refcount fix."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from workbench.core.runs.record import RunRecord, RunStoreError
from workbench.core.runs.store import RunStore
from workbench.core.training.metrics import load_metrics
from workbench.gui.training.series import SeriesBuffer
from workbench.gui.training.session import MetricsBatcher


def record(step: int, **kw: float) -> dict:
    base = {
        "step": step, "epoch": 0, "loss": 2.0 - 0.01 * step, "step_time_s": 0.01 + 0.001 * step, "data_time_s": 0.001,
        "samples_per_s": 100.0, "wall_time": 0.1 * step, "mem_allocated": 2_000_000, "mem_peak": 3_000_000,
        "mem_reserved": None, "trainable_params": 1000, "frozen_params": 0, "grad_bytes": 4000,
        "optimizer_state_bytes": 8000, "lr": [1e-3], "plan_version": 0, "events": [], "device": "cpu",
        "batch_size": 4, "nonfinite_skipped": 0, "window": 1,
    }
    base.update(kw)
    return base


def test_ring_buffer_wraps_and_stays_contiguous() -> None:
    buf = SeriesBuffer(capacity=5, ema=0.5)
    buf.append([record(i) for i in range(3)])
    assert buf.column("step").tolist() == [0, 1, 2]
    buf.append([record(i) for i in range(3, 12)])
    steps = buf.column("step")
    assert steps.tolist() == [7, 8, 9, 10, 11] and len(buf) == 5 and buf.total == 12
    assert steps.base is not None and not steps.flags.writeable  # a view, not a copy
    assert buf.column("step_ms").tolist() == pytest.approx([10 + i for i in range(7, 12)])
    assert buf.column("mem_alloc").tolist() == [2.0] * 5  # MB
    assert np.isnan(buf.column("mem_reserved")).all() and not buf.has_values("mem_reserved")
    assert buf.nearest("step", 9.4)["step"] == 9 and buf.nearest("wall", 100.0)["step"] == 11
    assert buf.median("step_ms") == pytest.approx(19.0)


def test_ema_ignores_nan_and_can_be_recomputed() -> None:
    buf = SeriesBuffer(capacity=10, ema=0.5)
    buf.append([record(0, step_time_s=0.01), record(1, step_time_s=0.03, loss=math.nan), record(2, step_time_s=0.01)])
    assert buf.column("step_ms_ema").tolist() == pytest.approx([10.0, 20.0, 15.0])
    assert buf.column("loss_ema")[1] == pytest.approx(buf.column("loss_ema")[0])  # NaN loss keeps the EMA
    buf.set_ema(0.0)
    assert buf.column("step_ms_ema").tolist() == pytest.approx([10.0, 30.0, 10.0])
    with pytest.raises(ValueError):
        buf.set_ema(1.0)


def test_batcher_releases_at_most_once_per_interval() -> None:
    now = [0.0]
    b = MetricsBatcher(interval=0.05, clock=lambda: now[0])
    released = []
    for i in range(1000):  # 1000 steps of 1 ms
        now[0] = i * 0.001
        out = b.add({"step": i})
        if out is not None:
            released.append(out)
    rest = b.flush()
    released.append(rest)
    assert sum(len(x) for x in released) == 1000
    assert len(released) <= 1.0 / 0.05 + 2  # about 20 per second, whatever the step rate
    assert b.add({"step": 1000}, force=True) == [{"step": 1000}]  # a pause flushes at once
    assert b.flush() is None


def test_run_store_round_trip(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs")
    rec = store.new_record("#1 tiny", config={"batch_size": 4}, plan={"rules": []}, model={"label": "tiny"})
    rec.metrics = [record(i) for i in range(5)]
    rec.metrics[2]["loss"] = math.nan
    rec.status, rec.summary = "completed", {"median_step_time_s": 0.012, "peak_memory_bytes": 3_000_000,
                                            "trainable_params": 1000, "final_loss": math.inf}
    rec.verify = {"ok": True, "checked": {}, "violations": [], "module_status": {}}
    store.save(rec)
    data = json.loads((rec.folder / "run.json").read_text())
    assert data["format"] == "workbench-run" and data["summary"]["final_loss"] is None  # strict JSON
    assert len(load_metrics(rec.folder / "metrics.csv")) == 5
    (loaded,), problems = store.list()
    assert problems == [] and loaded.name == "#1 tiny" and not loaded.metrics_loaded
    assert loaded.median_step_ms() == pytest.approx(12.0) and loaded.peak_memory() == 3_000_000
    assert loaded.final_loss() is None  # not in the summary, metrics not loaded yet
    assert math.isnan(store.load_metrics(loaded)[2]["loss"]) and loaded.steps() == 5
    assert loaded.final_loss() == pytest.approx(2.0 - 0.04)  # from the metrics when the summary has none
    out = store.export_csv(loaded, tmp_path / "out.csv")
    assert [m.step for m in load_metrics(out)] == list(range(5))


def test_run_store_lists_interrupted_and_skips_broken_runs(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    running = store.new_record("#1 left running")
    store.save(running, metrics=False)
    bad = tmp_path / "broken"
    bad.mkdir()
    (bad / "run.json").write_text("{not json")
    newer = tmp_path / "newer"
    newer.mkdir()
    (newer / "run.json").write_text(json.dumps({"format": "workbench-run", "version": 99, "id": "x", "name": "x"}))
    records, problems = store.list()
    assert [r.status for r in records] == ["interrupted"] and "ended" in records[0].message
    assert len(problems) == 2 and any("newer" in p for p in problems)
    with pytest.raises(RunStoreError):
        RunRecord.from_dict({"format": "other"})
    store.delete(records[0])
    assert not running.folder.exists()


def test_qt_refcount_protection_keeps_none_alive() -> None:
    pytest.importorskip("PySide6")
    from PySide6.QtCore import QObject

    from workbench.gui.qt_compat import protect_none_refcount

    protect_none_refcount()
    before = sys.getrefcount(None)
    obj = QObject()
    for _ in range(20_000):  # more void calls than None has references without the fix
        obj.setObjectName("x")
    assert sys.getrefcount(None) > 1_000_000 or sys.getrefcount(None) >= before - 1
