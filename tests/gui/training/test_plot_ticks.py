"""Auto-freeze deciding every step of a long run: the plots draw at most MAX_TICK_LINES faint ticks,
neighbours merged (each line's tooltip counts its evaluations); every evaluation is still a marker the
readout finds, and clearing the plots takes every line off."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyqtgraph as pg
from PySide6.QtWidgets import QApplication

from workbench.gui.training.plot_markers import EVALUATION_HEAD, MAX_TICK_LINES

STEPS = 1000


def _evaluation(step: int) -> str:
    return f"{EVALUATION_HEAD}{step}: no block flattened (smallest change 34 %, threshold 10 %)"


def _lines_on(plot: pg.PlotItem) -> list[pg.InfiniteLine]:
    """The marker lines on a plot (under the curves; the pointer's line is above them)."""
    return [item for item in plot.items if isinstance(item, pg.InfiniteLine) and item.zValue() < 0]


def test_an_evaluation_every_step_draws_a_bounded_number_of_ticks(shown_plots: Any, tmp_path: Path) -> None:
    for width, height in ((1280, 720), (1920, 1080)):
        panel = shown_plots(width, height)
        for step in range(1, STEPS + 1):
            panel.add_event({"step": step, "wall_time": step / 10}, _evaluation(step))
        panel.add_event({"step": 500, "wall_time": 50.0}, "stage 0 'auto-freeze conv1': froze conv1")
        layer = panel._markers
        drawn = [m for m in panel.markers if m.kind == "tick" and m.lines]
        assert MAX_TICK_LINES // 2 < layer.tick_lines() == len(drawn) <= MAX_TICK_LINES
        for plot in panel.plots.values():  # the merged lines are off the plots, not only hidden
            assert len(_lines_on(plot)) == len(drawn) + 1  # and the stage's
        assert len([m for m in panel.markers if m.kind == "tick"]) == STEPS  # each evaluation is kept
        assert panel._marker_near(537.0).full == _evaluation(537)
        per_line = STEPS // len(drawn) + (STEPS % len(drawn) > 0)
        first, last = drawn[0], drawn[-1]
        assert first.step == 1 and last.step > STEPS - per_line  # the whole run is covered
        assert first.lines[0].toolTip().startswith(f"{per_line} auto-freeze evaluations, steps 1–{per_line} ")
        assert _evaluation(per_line) in first.lines[0].toolTip()  # the last of them, in full
        assert panel.marker_label_texts() == ["stage 0: froze conv1"]  # the ticks take no label
        next(iter(panel.plots.values())).setXRange(0, STEPS, padding=0)  # the plots are x-linked
        QApplication.processEvents()  # the views take the new range
        panel.grab().save(str(tmp_path / f"ticks_{width}x{height}.png"))
        layer.clear()
        assert not panel.markers and layer.tick_lines() == 0
        assert all(not _lines_on(plot) for plot in panel.plots.values())


def test_a_few_evaluations_keep_a_line_each(shown_plots: Any) -> None:
    panel = shown_plots()
    for step in (10, 20, 30):
        panel.add_event({"step": step, "wall_time": step / 10}, _evaluation(step))
    ticks = [m for m in panel.markers if m.kind == "tick"]
    assert [len(m.lines) for m in ticks] == [len(panel.plots)] * 3
    assert [m.lines[0].toolTip() for m in ticks] == [_evaluation(s) for s in (10, 20, 30)]
    panel._markers.remove(ticks[1])  # one taken off: the others drawn again, each its own line
    assert [m.lines[0].toolTip() for m in panel.markers] == [_evaluation(10), _evaluation(30)]
