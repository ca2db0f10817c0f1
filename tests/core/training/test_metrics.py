"""Tests of workbench.core.training.metrics: StepMetrics records, metrics files, memory probes, counters."""

from __future__ import annotations

import csv
import json
import math
import mmap
import platform
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from workbench.core.training.memory_probe import (
    LiveTensorBytes,
    MemoryProbe,
    grad_bytes,
    optimizer_state_bytes,
    process_rss,
    release_freed_heap,
)
from workbench.core.training.metrics import MetricsError, MetricsWriter, StepMetrics, load_metrics


def _metrics(step: int = 0, loss: float = 1.5, events: list[str] | None = None) -> StepMetrics:
    return StepMetrics(
        step=step, epoch=0, loss=loss, step_time_s=0.01, data_time_s=0.001, samples_per_s=363.6,
        wall_time=0.5, mem_allocated=1000, mem_peak=2000, mem_reserved=None, trainable_params=10,
        frozen_params=90, grad_bytes=40, optimizer_state_bytes=80, lr=[1e-3, 1e-4], plan_version=1,
        events=events or [], device="cpu", batch_size=4,
    )


def test_to_dict_is_plain_data_and_json_has_no_nan():
    m = _metrics(loss=math.nan, events=["stage 0: unfroze layer3"])
    d = m.to_dict()
    assert d["lr"] == [1e-3, 1e-4] and d["events"] == ["stage 0: unfroze layer3"]
    assert d["lr"] is not m.lr  # a copy: safe to hand to another thread
    assert math.isnan(d["loss"])
    line = m.to_json()
    parsed = json.loads(line)  # strict JSON: NaN would not be valid
    assert parsed["loss"] is None and parsed["mem_reserved"] is None
    assert "NaN" not in line
    back = StepMetrics.from_dict(parsed)
    assert math.isnan(back.loss) and back.events == m.events and back.lr == m.lr


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_writer_round_trip(tmp_path: Path, suffix: str):
    path = tmp_path / f"m{suffix}"
    records = [_metrics(0), _metrics(1, math.nan, ["loss nan: step skipped"]), _metrics(2, 0.25, ["a", "b"])]
    with MetricsWriter(path) as w:
        for r in records:
            w.write(r)
        assert w.temp_path.exists() and not path.exists()  # atomic: appears complete on close
    assert path.exists() and not w.temp_path.exists()
    back = load_metrics(path)
    assert [b.step for b in back] == [0, 1, 2]
    assert math.isnan(back[1].loss) and back[2].loss == 0.25
    assert back[2].events == ["a", "b"] and back[0].lr == [1e-3, 1e-4]
    assert back[0].mem_reserved is None and back[0].mem_allocated == 1000
    if suffix == ".csv":
        rows = list(csv.reader(path.open(newline="")))
        assert rows[0] == StepMetrics.csv_header()
        assert all(len(r) == len(rows[0]) for r in rows)
    else:
        for line in path.read_text().splitlines():
            json.loads(line)


def test_writer_rejects_unknown_suffix(tmp_path: Path):
    with pytest.raises(MetricsError, match=r"\.jsonl.*\.csv"):
        MetricsWriter(tmp_path / "m.txt")


def test_load_metrics_names_the_bad_line(tmp_path: Path):
    path = tmp_path / "m.jsonl"
    path.write_text(_metrics().to_json() + "\n{not json\n")
    with pytest.raises(MetricsError, match="line 2"):
        load_metrics(path)


def test_cpu_probe_reads_rss_growth_and_tracks_peak():
    probe = MemoryProbe("cpu")  # the baseline: the RSS now
    alloc, peak, reserved = probe.sample()
    assert reserved is None and 0 <= alloc < 50_000_000 and peak >= alloc
    assert probe.rss is not None and probe.rss > 10_000_000  # the absolute RSS has its own name
    # 256 MB in a fresh anonymous mapping, every page touched: RSS must grow (a torch tensor
    # could reuse heap memory that earlier tests freed, and RSS would not move)
    big = mmap.mmap(-1, 256 << 20)
    big.write(b"\1" * (256 << 20))
    alloc2, peak2, _ = probe.sample()
    assert alloc2 > alloc + 100_000_000 and peak2 >= alloc2 and probe.peak == peak2
    big.close()
    _, peak3, _ = probe.sample()
    assert peak3 >= peak2  # the peak never goes down
    assert probe.peak_rss is not None and probe.peak_rss - probe.baseline == peak3
    import psutil

    probe.sample()
    assert probe.rss is not None and abs(probe.rss - psutil.Process().memory_info().rss) < 50_000_000


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                    reason="malloc_trim is glibc's")
def test_freed_heap_is_handed_back_so_the_next_run_grows_again():
    release_freed_heap()
    before = process_rss()
    chunks = [torch.ones(16_000) for _ in range(4000)]  # 64 kB each, under malloc's mmap threshold: the heap
    keep = chunks[-1]  # the heap's top stays in use: only malloc_trim returns the pages below it
    del chunks
    freed = process_rss()
    release_freed_heap()
    after = process_rss()
    assert before is not None and freed is not None and after is not None
    assert freed - before > 200_000_000  # freed, but still resident: a new run would reuse it unseen
    assert after - before < 50_000_000
    del keep


def test_a_run_reads_its_memory_baseline_after_handing_freed_heap_back(monkeypatch: pytest.MonkeyPatch):
    from workbench.core.training import engine
    from workbench.core.training.config import TrainConfig

    calls: list[str] = []
    monkeypatch.setattr(engine, "release_freed_heap", lambda: calls.append("release"))
    monkeypatch.setattr(engine, "process_rss", lambda: calls.append("baseline") or 1)
    engine.Trainer(TrainConfig(model="resnet18", device="cpu", steps=1)).setup()
    assert calls[:2] == ["release", "baseline"]


def test_optimizer_state_bytes_counts_real_state():
    model = nn.Linear(100, 10)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    assert optimizer_state_bytes(opt) == 0  # Adam state is created lazily
    model(torch.randn(2, 100)).sum().backward()
    opt.step()
    n = sum(p.numel() for p in model.parameters())
    steps = sum(s["step"].numel() * s["step"].element_size() for s in opt.state.values())
    assert optimizer_state_bytes(opt) == 2 * 4 * n + steps
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    sgd.step()
    assert optimizer_state_bytes(sgd) == 0


def test_grad_bytes_counts_each_tensor_once():
    lin = nn.Linear(10, 10)
    assert grad_bytes([lin.weight, lin.weight, lin.bias]) == (100 + 10) * 4


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_validation_and_lr_scales_round_trip(tmp_path: Path, suffix: str):
    path = tmp_path / f"v{suffix}"
    with_val = _metrics(1)
    with_val.val_loss, with_val.val_acc, with_val.lr_scales = 0.75, 0.5, [1.0, 0.1]
    with MetricsWriter(path) as w:
        w.write(_metrics(0))
        w.write(with_val)
    back = load_metrics(path)
    assert back[0].val_loss is None and back[0].val_acc is None and back[0].lr_scales == []
    assert back[1].val_loss == 0.75 and back[1].val_acc == 0.5 and back[1].lr_scales == [1.0, 0.1]


def test_csv_written_before_the_validation_columns_still_loads(tmp_path: Path):
    path = tmp_path / "old.csv"
    old = [n for n in StepMetrics.csv_header() if n not in ("lr_scales", "val_loss", "val_acc")]
    row = dict(zip(StepMetrics.csv_header(), _metrics(4).csv_row(), strict=True))
    with path.open("w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(old)
        wr.writerow([row[n] for n in old])
    back = load_metrics(path)
    assert back[0].step == 4 and back[0].val_loss is None and back[0].lr == [1e-3, 1e-4]
    path.write_text("step,bogus\n1,2\n")
    with pytest.raises(MetricsError, match="unexpected CSV columns"):
        load_metrics(path)


def test_an_exact_a_plus_b_runs_peak_counts_the_buffer_it_writes_w_into(monkeypatch: pytest.MonkeyPatch):
    """Exact-mode full-rank A+B writes ``W = A + B`` into one weight-sized buffer per tensor, made at set-up and kept:
    a tensor the run keeps between steps, so its measured peak (peak tensor bytes) holds it."""
    from workbench.core.freezing.reparam.full import APlusB
    from workbench.core.training import engine
    from workbench.core.training import memory_probe as wmetrics
    from workbench.core.training.config import TrainConfig
    from workbench.core.training.data import synthetic_for_model

    rules = [{"select": "*", "frozen": True}, {"select": "1", "frozen": False},
             {"select": "0", "frozen": False, "reparam": {"kind": "a_plus_b", "a": "current", "b_init": "zeros",
                                                          "mode": "exact"}}]

    def run() -> tuple[int, int]:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.Flatten(), nn.Linear(32 * 8 * 8, 4))
        data = synthetic_for_model(model, 8, image_size=8, num_classes=4)
        cfg = TrainConfig(plan={"rules": rules}, batch_size=2, optimizer="sgd", steps=2, device="cpu",
                          allow_download=False).validate()
        trainer = engine.Trainer(cfg, model=model, dataset=data)
        trainer.setup()
        peak = list(trainer.steps())[-1].mem_peak
        buffers = [m._w for m in model.modules() if isinstance(m, APlusB) and m._w is not None]
        assert peak is not None and len(buffers) == 2  # the convolution's weight and bias
        return peak, sum(b.untyped_storage().nbytes() for b in buffers)

    peak, buffer_bytes = run()
    # the same run counting only the model's own tensors (the count before A+B's buffer was one of them)
    monkeypatch.setattr(engine, "training_tensors", lambda m, o, a: wmetrics.training_tensors(m, o, None))
    without, _ = run()
    assert buffer_bytes == 4 * (32 * 3 * 9 + 32) and peak == without + buffer_bytes


def test_live_tensor_bytes_reads_tensors_inside_tuples_and_lists() -> None:
    """Ops that return several tensors (a tuple, a list) or take a list: each new storage counted
    once, the views a split returns not at all."""
    a = torch.arange(1000, dtype=torch.float32)
    with LiveTensorBytes() as live:
        values, indices = torch.sort(a, descending=True)  # a tuple of two new tensors: 4000 + 8000
        assert live.live == 4000 + 8000
        parts = a.split(100)  # a tuple of views of a: nothing new
        assert live.live == 12000 and len(parts) == 10
        both = torch.cat([values, a])  # a list in: one new tensor of 8000
        assert live.live == 20000
        del values, indices, both
        assert live.live == 0
    assert live.peak == 20000
