"""Plots a person can read when runs are compared: the learning-rate plot has y tick labels,
a compared run draws its learning rate too (and the plot keeps its ticks when only compared
runs have one), and the trainable axis's unit, ``(M)``, counts the compared runs' models."""

from __future__ import annotations

from typing import Any

import numpy as np
from PySide6.QtGui import QImage, QPainter

from tests.timeouts import GUI_EVENT_S, ms
from workbench.core.runs.record import RunRecord
from workbench.gui.training.plots import PlotsPanel


def _records(n: int, lr: float | None, trainable: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        m: dict[str, Any] = {"step": i, "wall_time": 0.1 * (i + 1), "step_time_s": 0.05, "loss": 1.0 - 0.01 * i,
                             "trainable_params": trainable, "mem_allocated": 1e8, "mem_peak": 1e8}
        if lr is not None:
            m.update(lr=[lr * (1 - i / (2 * n)), 0.1 * lr], lr_scales=[1.0, 0.1])
        out.append(m)
    return out


def _tick_labels(panel: PlotsPanel, key: str) -> list[str]:
    """The y tick labels the plot's left axis draws now."""
    axis = panel.plots[key].getAxis("left")
    image = QImage(200, 200, QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    try:
        specs = axis.generateDrawSpecs(painter)
    finally:
        painter.end()
    return [text for _rect, _flags, text in (specs[2] if specs else [])]


def test_the_learning_rate_plot_has_y_tick_labels(qtbot: Any, shown_plots: Any) -> None:
    panel = shown_plots(1100, 700)
    panel.show_record(RunRecord(id="a", name="#1 a", status="completed"), _records(40, 1e-3, 1000))
    qtbot.wait(20)
    labels = _tick_labels(panel, "lr")
    assert len(labels) >= 2 and all(labels) and len(set(labels)) == len(labels), labels
    assert all(len(t) <= 6 for t in labels)  # three significant digits fit the axis's width
    values = [float(t) for t in labels]
    lo, hi = panel.y_range("lr")
    assert all(lo <= v <= hi for v in values)
    # a constant lr: a narrow range whose labels still differ (9.9e-4, 1e-3, 1.01e-3)
    constant = [dict(m, lr=[1e-3], lr_scales=[1.0]) for m in _records(40, 1e-3, 1000)]
    panel.show_record(RunRecord(id="c", name="#2 c", status="completed"), constant)
    qtbot.wait(20)
    labels = _tick_labels(panel, "lr")
    assert len(labels) >= 2 and len(set(labels)) == len(labels), labels


def test_a_compared_run_draws_its_learning_rate_and_the_plot_keeps_its_ticks(qtbot: Any, shown_plots: Any) -> None:
    panel = shown_plots(1100, 700)
    panel.show_record(RunRecord(id="b", name="#2 b", status="completed"), _records(30, None, 1000))
    assert panel.lr_curves == {}  # the shown run has no learning rate
    earlier = RunRecord(id="a", name="#1 a", status="completed")
    panel.set_overlays([(earlier, 0, _records(30, 2e-3, 1000))])
    ov = panel.overlays["a"]
    assert sorted(ov.lr_curves) == [0.1, 1.0]
    x, y = ov.lr_curves[1.0].getData()
    assert len(x) == 30 and np.isclose(y[0], 2e-3)
    assert ov.lr_curves[1.0].opts["pen"].color() == ov.color  # dashed, in the run's colour
    lo, hi = panel.y_range("lr")
    assert lo <= 2e-4 and hi >= 2e-3  # the range is the compared run's
    qtbot.wait(20)
    labels = _tick_labels(panel, "lr")
    assert len(labels) >= 2 and all(labels), labels
    # named in the read-out and removed with the overlay
    panel.set_overlays([])
    assert not any(item in panel.plots["lr"].listDataItems() for item in ov.lr_curves.values())


def test_the_trainable_axis_counts_the_compared_runs_in_millions(qtbot: Any, shown_plots: Any) -> None:
    panel = shown_plots(1100, 700)
    small = RunRecord(id="s", name="#2 small", status="completed")  # no model size recorded
    panel.show_record(small, _records(20, 1e-3, 5000))
    assert panel.title_text("trainable") == "Trainable parameters"
    big = RunRecord(id="b", name="#1 big", status="completed", summary={"total_params": 11_000_000})
    panel.set_overlays([(big, 0, _records(20, 1e-3, 2_500_000))])
    assert panel.title_text("trainable") == "Trainable parameters (M)"
    _x, y = panel.overlays["b"].curves["trainable"].getData()
    assert np.allclose(y, 2.5)
    _x, y = panel.curves["trainable"].getData()
    assert np.allclose(y, 0.005)  # the shown run in the same unit
    # an overlay without a recorded size: its own counts choose the unit
    panel.set_overlays([])
    assert panel.title_text("trainable") == "Trainable parameters"
    unsized = RunRecord(id="u", name="#3 unsized", status="completed")
    panel.set_overlays([(unsized, 1, _records(20, 1e-3, 3_000_000))])
    assert panel.title_text("trainable") == "Trainable parameters (M)"
    _x, y = panel.overlays["u"].curves["trainable"].getData()
    assert np.allclose(y, 3.0)


def test_a_plot_shown_after_the_run_ended_fits_its_y_range(qtbot: Any, shown_plots: Any) -> None:
    panel = shown_plots(500, 700)  # narrow: the default set leaves the learning rate out
    assert "lr" not in panel.shown_keys
    constant = [dict(m, lr=[1e-3], lr_scales=[1.0]) for m in _records(40, 1e-3, 1000)]
    panel.show_record(RunRecord(id="c", name="#1 c", status="completed"), constant)
    qtbot.wait(20)
    panel.resize(1600, 900)  # wide enough for every plot: nothing is drawn again after the run
    qtbot.waitUntil(lambda: "lr" in panel.shown_keys, timeout=ms(GUI_EVENT_S))
    lo, hi = panel.y_range("lr")
    assert lo < 1e-3 < hi and hi - lo < 1e-3  # around the learning rate, not pyqtgraph's 0..1
