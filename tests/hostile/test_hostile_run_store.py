"""The Runs tab reads a run's metrics in bounded memory and never follows a link out of the
run folder (a metrics file linked to /dev/zero or to a huge file, a FIFO, a run folder or
run.json linked elsewhere)."""

from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path

import pytest

from workbench.core.runs import store as run_store
from workbench.core.runs.record import RunRecord, RunStoreError
from workbench.core.runs.store import RunStore
from workbench.core.training.metrics import StepMetrics

pytestmark = pytest.mark.skipif(os.name == "nt", reason="symlinks and FIFOs")


def _record(i: int) -> StepMetrics:
    return StepMetrics(step=i, epoch=0, loss=1.0, step_time_s=0.01, data_time_s=0.0, samples_per_s=1.0,
                       wall_time=0.1 * i, mem_allocated=1000, mem_peak=1000, mem_reserved=None,
                       trainable_params=10, frozen_params=0, grad_bytes=4, optimizer_state_bytes=8)


def _store(tmp_path: Path, steps: int = 3) -> tuple[RunStore, RunRecord]:
    store = RunStore(tmp_path / "runs")
    rec = store.new_record("#1 test")
    rec.metrics = [_record(i).to_dict() for i in range(steps)]
    store.save(rec)
    (again,), problems = store.list()
    assert not problems
    return store, again


def test_metrics_linked_out_of_the_run_folder_are_not_read(tmp_path: Path) -> None:
    store, rec = _store(tmp_path)
    metrics = store.folder / rec.id / "metrics.csv"
    metrics.unlink()
    metrics.symlink_to("/dev/zero")
    with pytest.raises(RunStoreError, match="links outside its run folder"):
        store.load_metrics(rec)


def test_metrics_linked_to_a_big_file_elsewhere_are_not_read(tmp_path: Path) -> None:
    store, rec = _store(tmp_path)
    big = tmp_path / "elsewhere.csv"
    big.write_text("step\n" * 1000)
    metrics = store.folder / rec.id / "metrics.csv"
    metrics.unlink()
    metrics.symlink_to(big)
    with pytest.raises(RunStoreError, match="links outside"):
        store.load_metrics(rec)


def test_a_link_inside_the_run_folder_is_read(tmp_path: Path) -> None:
    store, rec = _store(tmp_path)
    folder = store.folder / rec.id
    (folder / "metrics.csv").rename(folder / "real.csv")
    (folder / "metrics.csv").symlink_to("real.csv")
    assert [m["step"] for m in store.load_metrics(rec)] == [0, 1, 2]


def test_a_fifo_is_one_line_and_does_not_hang(tmp_path: Path) -> None:
    store, rec = _store(tmp_path)
    metrics = store.folder / rec.id / "metrics.csv"
    metrics.unlink()
    os.mkfifo(metrics)
    with pytest.raises(RunStoreError, match="not a regular file"):
        store.load_metrics(rec)


def test_a_huge_line_is_one_line(tmp_path: Path) -> None:
    store, rec = _store(tmp_path)
    metrics = store.folder / rec.id / "metrics.csv"
    with metrics.open("a") as f:
        f.write("9" * (2 << 20) + "\n")  # 2 MB with no record in it
    with pytest.raises(RunStoreError, match="line 5: longer than"):
        store.load_metrics(rec)


def test_non_utf8_is_one_line(tmp_path: Path) -> None:
    store, rec = _store(tmp_path)
    metrics = store.folder / rec.id / "metrics.csv"
    with metrics.open("ab") as f:
        f.write(b"\xff\xfe\x00garbage\n")
    with pytest.raises(RunStoreError, match="not UTF-8"):
        store.load_metrics(rec)


def test_run_folder_or_run_file_linked_out_of_the_store_is_skipped(tmp_path: Path) -> None:
    store, rec = _store(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "run.json").write_text((store.folder / rec.id / "run.json").read_text())
    (store.folder / "linked-run").symlink_to(outside, target_is_directory=True)
    second = store.folder / "second"
    second.mkdir()
    (second / "run.json").symlink_to(outside / "run.json")
    records, problems = store.list()
    assert [r.id for r in records] == [rec.id]
    assert sorted(Path(p.split(":")[0]).name for p in problems) == ["linked-run", "second"]
    assert all("links outside the run store" in p for p in problems)


def test_a_long_metrics_file_is_read_in_bounded_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, rec = _store(tmp_path, steps=20_000)
    size = (store.folder / rec.id / "metrics.csv").stat().st_size
    monkeypatch.setattr(run_store, "MAX_KEPT_METRICS_BYTES", size // 40)
    tracemalloc.start()
    try:
        kept = store.load_metrics(rec)
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert 400 <= len(kept) <= 600 and kept[-1]["step"] == 19_999 and kept[0]["step"] == 0
    # all 20,000 records as dicts take ~40 MB; the thinned read stays far below that
    assert peak < 8e6, f"peak {peak / 1e6:.1f} MB"


def test_the_run_json_reader_is_bounded(tmp_path: Path) -> None:
    store, rec = _store(tmp_path)
    f = store.folder / rec.id / "run.json"
    f.write_text(json.dumps({"x": "a" * 100}) + " " * (17 * 2**20))
    records, problems = store.list()
    assert records == [] and len(problems) == 1 and "more than" in problems[0]
