"""The CLI's peak memory line, summary.json and the metrics file give one number; absolute RSS
has its own name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.cli import main
from workbench.core.training.metrics import MEMORY_SOURCES, fmt_memory, load_metrics


def test_cli_summary_and_metrics_agree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save = tmp_path / "run"
    rc = main(["train", "--model", "resnet18", "--num-classes", "4", "--image-size", "32", "--batch-size", "2",
               "--data", "synthetic:8", "--device", "cpu", "--no-progress", "--steps", "3", "--save", str(save)])
    assert rc == 0
    out = capsys.readouterr().out
    summary = json.loads((save / "summary.json").read_text())["summary"]
    peak, rss = summary["peak_memory_bytes"], summary["peak_rss_bytes"]
    assert summary["memory_source"] == MEMORY_SOURCES["cpu"] == "peak RSS growth"
    assert max(m.mem_peak or 0 for m in load_metrics(save / "metrics.jsonl")) == peak
    assert f"peak memory  {fmt_memory(peak)} (peak RSS growth)" in out
    assert f"peak RSS     {fmt_memory(rss)} (process resident set, absolute)" in out
    assert all(m.mem_rss and m.mem_rss > (m.mem_peak or 0) for m in load_metrics(save / "metrics.jsonl"))


def test_fmt_memory_is_one_format() -> None:
    assert fmt_memory(1_234_567_890) == "1,235 MB" and fmt_memory(None) == "–" and fmt_memory(0) == "0 MB"
