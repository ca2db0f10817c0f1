"""The CLI's peak memory line, summary.json and the metrics file give one number; absolute RSS
has its own name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from workbench.cli import main
from workbench.core.training.metrics import MEMORY_SOURCES, fmt_memory, load_metrics


def test_cli_summary_and_metrics_agree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save = tmp_path / "run"
    rc = main(["train", "--model", "resnet18", "--num-classes", "4", "--image-size", "32", "--batch-size", "2",
               "--data", "synthetic:8", "--device", "cpu", "--no-progress", "--steps", "3", "--save", str(save)])
    assert rc == 0
    out = capsys.readouterr().out
    summary = json.loads((save / "summary.json").read_text())["summary"]
    peak, rss, growth = summary["peak_memory_bytes"], summary["peak_rss_bytes"], summary["peak_rss_growth_bytes"]
    assert summary["memory_source"] == MEMORY_SOURCES["cpu"] == "peak tensor bytes"
    rows = load_metrics(save / "metrics.jsonl")
    assert max(m.mem_peak or 0 for m in rows) == peak
    assert f"peak memory  {fmt_memory(peak)} (peak tensor bytes)" in out
    assert f"RSS growth   {fmt_memory(growth)} (process, since the run's setup)" in out
    assert f"peak RSS     {fmt_memory(rss)} (process resident set, absolute)" in out
    # the tensors a step holds, below what the process grew by and far below its absolute RSS
    assert all(m.mem_rss and m.mem_rss > (m.mem_peak or 0) for m in rows) and max(m.mem_allocated or 0 for m in rows) == growth
    assert 0 < peak < rss


def test_a_compiled_forward_is_not_watched_and_says_its_peak_is_rss_growth() -> None:
    from workbench.core.training.memory_probe import MemoryProbe
    from workbench.core.training.metrics import RSS_GROWTH_SOURCE

    probe = MemoryProbe("cpu")
    with probe.step():
        torch.ones(1000)
    assert probe.source == RSS_GROWTH_SOURCE and probe.peak is None  # nothing sampled yet
    probe.sample()
    assert probe.peak == probe.peak_rss_growth


def test_the_tensor_peak_counts_a_watched_step_from_the_live_tensors() -> None:
    from workbench.core.training.memory_probe import MemoryProbe
    from workbench.core.training.metrics import TENSOR_STEPS

    weights = torch.zeros(1000)  # 4,000 bytes alive between steps
    probe = MemoryProbe("cpu", live=lambda: [weights])
    with probe.step():
        t = torch.ones(2000)  # 8,000 bytes made by the step
        del t
    assert probe.peak == 12_000
    for _ in range(TENSOR_STEPS):  # the window closes: later steps are not watched
        with probe.step():
            torch.ones(100_000)
    assert probe.peak == 4_000 + 400_000  # the two steps watched after the first
    probe.replan()
    with probe.step():
        torch.ones(200_000)
    assert probe.peak == 4_000 + 800_000


def test_fmt_memory_is_one_format() -> None:
    assert fmt_memory(1_234_567_890) == "1,235 MB" and fmt_memory(None) == "–" and fmt_memory(0) == "0 MB"


def test_fmt_memory_small_peak_is_not_zero() -> None:
    # a measured peak under half a megabyte is not "0 MB" (nothing measured): it is under one
    assert fmt_memory(1) == fmt_memory(400_000) == fmt_memory(500_000) == "<1 MB"  # 0.5 rounds to even
    assert fmt_memory(500_001) == "1 MB" and fmt_memory(0) == "0 MB" and fmt_memory(float("nan")) == "–"
