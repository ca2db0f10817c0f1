"""One memory number per question: a run's peak memory reads the same in every place.

The plots' read-out, the cost panel's "measured" line, the Runs table, the compare line and
the run's saved summary all show ``peak_memory_bytes`` as core's ``fmt_memory`` writes it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.timeouts import GUI_RUN_S, ms
from workbench.core.training.metrics import MEMORY_SOURCES, fmt_memory
from workbench.gui.main_window import MainWindow


def _run(qtbot: Any, w: MainWindow, steps: int) -> Any:
    t = w.training
    t.panel.set_values(steps=steps)
    with qtbot.waitSignal(t.runs.runEnded, timeout=ms(GUI_RUN_S)) as blocker:
        assert t.panel.start()
    return blocker.args[0]


def test_peak_memory_is_one_number_in_five_places(window: MainWindow, qtbot: Any, runs_dir: Path) -> None:
    t = window.training
    first = _run(qtbot, window, 3)
    run = _run(qtbot, window, 4)
    peak = run.summary["peak_memory_bytes"]
    assert isinstance(peak, int) and peak > 0, {k: v for k, v in run.summary.items() if "mem" in k or "peak" in k}
    # growth over the run's start: the first run's freed memory is handed back before the
    # second starts, so the second grows as the first did instead of reusing it unseen (~0 MB)
    assert peak > first.summary["peak_memory_bytes"] / 3
    assert run.summary["memory_source"] == MEMORY_SOURCES["cpu"]
    text = fmt_memory(peak)
    # the metrics' last peak is the summary's peak: one measure, sampled at reported steps
    assert max(m["mem_peak"] for m in run.metrics) == peak
    # 1. the plots' read-out (the run just ended is the one shown)
    assert f"peak tensors {text}" in t.plots.readout_text()
    # 2. the cost panel's measured line
    label = window.cost_panel.activation_label.text()
    assert f"measured {text} (peak tensor bytes" in label
    # 3. the Runs table (newest first)
    assert t.runs_panel.table.item(0, 4).text() == text
    # 4. the compare line
    t.runs_panel.select([first, run])
    assert f"({text} vs {fmt_memory(first.summary['peak_memory_bytes'])})" in t.runs_panel.compare.text()
    # 5. the saved summary
    saved = json.loads((runs_dir / run.id / "run.json").read_text())["summary"]
    assert saved["peak_memory_bytes"] == peak
    # the absolute RSS is a second quantity with its own name, never shown as "peak memory"
    rss = saved["peak_rss_bytes"]
    assert isinstance(rss, int) and rss > peak
    assert f"peak RSS {fmt_memory(rss)}" in label and f"peak {fmt_memory(rss)}" not in t.plots.readout_text()
