"""Validation and learning rates in the app: series, plots, the Runs tab and the end-of-run summary.

The window test trains resnet18 on the CPU at 32 px, batch 4, for 6 steps (validating every 2
on a held-out split) and then 3 steps without validation.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.timeouts import GUI_EVENT_S, GUI_RUN_S, ms
from workbench.core.runs.record import RunRecord
from workbench.core.runs.text import validation_text
from workbench.core.training.tensorboard import tensorboard_available
from workbench.gui.main_window import MainWindow
from workbench.gui.training.plot_ranges import grid_columns
from workbench.gui.training.plot_specs import PLOTS
from workbench.gui.training.runs_tab import COLUMNS, RunsPanel, compare_text
from workbench.gui.training.series import SeriesBuffer, lr_group_name


def _m(step: int, lr: list[float], scales: list[float], val: float | None = None, acc: float | None = None) -> dict[str, Any]:
    return {"step": step, "loss": 1.0, "lr": lr, "lr_scales": scales, "val_loss": val, "val_acc": acc}


# ---------------------------------------------------------------- series (no Qt)
def test_series_keep_sparse_validation_and_one_lr_column_per_group_scale() -> None:
    buf = SeriesBuffer(capacity=4)
    buf.append([_m(0, [1e-3], [1.0]), _m(1, [9e-4], [1.0], val=0.7, acc=0.5)])
    buf.append([_m(2, [8e-4, 8e-5, 8e-5], [1.0, 0.1, 0.1]), _m(3, [7e-4, 7e-5], [1.0, 0.1], val=0.6, acc=0.75)])
    assert np.isnan(buf.column("val_loss")[[0, 2]]).all() and buf.column("val_loss")[[1, 3]].tolist() == [0.7, 0.6]
    assert buf.column("val_acc")[[1, 3]].tolist() == [50.0, 75.0]  # plot units: percent
    assert buf.lr_scales() == [1.0, 0.1]
    assert buf.lr_column(1.0).tolist() == [1e-3, 9e-4, 8e-4, 7e-4]
    low = buf.lr_column(0.1)
    assert np.isnan(low[:2]).all() and low[2:].tolist() == [8e-5, 7e-5]  # a group added mid-run
    assert buf.latest("val_loss", "step", 2.0) == (1.0, 0.7) and buf.latest("val_loss", "step") == (3.0, 0.6)
    assert buf.latest("val_loss", "step", 0.0) is None
    assert buf.lr_near("step", 1.2) == {1.0: 9e-4} and buf.last_lr() == {1.0: 7e-4, 0.1: 7e-5}
    # the ring keeps the newest rows of the lr columns too
    buf.append([_m(4, [6e-4], [1.0]), _m(5, [5e-4], [1.0]), _m(6, [4e-4], [1.0])])
    assert buf.lr_column(1.0).tolist() == [7e-4, 6e-4, 5e-4, 4e-4] and buf.lr_scales() == [1.0, 0.1]
    buf.append([_m(7, [3e-4], [1.0])])
    assert buf.lr_scales() == [1.0]  # the 0.1 group left the kept rows
    with pytest.raises(KeyError):
        buf.lr_column(0.5)
    buf.clear()
    assert buf.lr_scales() == [] and buf.latest("val_loss", "step") is None


def test_lr_group_names_say_which_modules() -> None:
    plan = {"rules": [{"select": "layer4", "lr_scale": 0.1}, {"select": ["layer2", "layer3"], "lr_scale": 0.3}]}
    assert lr_group_name(1.0, plan) == "base ×1"
    assert lr_group_name(0.1, plan) == "×0.1 layer4"
    assert lr_group_name(0.3, plan) == "×0.3 layer2, layer3"
    assert lr_group_name(0.0317, None) == "×0.0317"
    long = lr_group_name(0.5, {"rules": [{"select": "encoder.layer.*.attention.output", "lr_scale": 0.5}]})
    assert len(long) == 28 and long.endswith("…")


def test_validation_results_from_the_summary_or_the_metrics() -> None:
    r = RunRecord(id="a", name="#1", summary={"val_loss": 0.6, "val_step": 9, "val_acc": 0.7,
                                              "best_val_loss": 0.5, "best_val_step": 5, "best_val_acc": 0.8})
    v = r.validation()
    assert v is not None and (v.loss, v.step, v.best_loss, v.best_step, v.acc, v.best_acc) == (0.6, 9, 0.5, 5, 0.7, 0.8)
    assert validation_text(v) == "val loss 0.6000 (best 0.5000 after step 5) · acc 70.0 % (best 80.0 %)"
    assert validation_text(v, best=False) == "val loss 0.6000 · acc 70.0 %"
    live = RunRecord(id="b", name="#2", metrics=[_m(0, [1e-3], [1.0]), _m(1, [1e-3], [1.0], 0.9, None),
                                                 _m(3, [1e-3], [1.0], 0.8, None)])
    v2 = live.validation()
    assert v2 is not None and (v2.loss, v2.step, v2.best_loss, v2.best_step, v2.acc) == (0.8, 3, 0.8, 3, None)
    assert RunRecord(id="c", name="#3").validation() is None and validation_text(None) == ""


# ---------------------------------------------------------------- a real run in the window
def test_a_run_with_validation_and_lr_groups_reaches_the_plots_runs_tab_and_summary(
    window: MainWindow, qtbot: Any, runs_dir: Path
) -> None:
    t, c = window.training, window.controller
    c.set_value(["layer4"], "lr_scale", 0.1)
    t.panel.set_values(steps=6, val_every=2, scheduler="cosine", warmup_steps=2, no_decay="auto")
    if tensorboard_available():  # the Options dialog's TensorBoard box: event files in the run's folder
        t.panel.set_options(dataclasses.replace(t.panel.options, tensorboard=True))
    shown: list[str] = []
    t.statusMessage.connect(lambda text, _ms: shown.append(text))
    with qtbot.waitSignal(t.runs.runEnded, timeout=ms(GUI_RUN_S)) as blocker:
        assert t.panel.start()
    val_run: RunRecord = blocker.args[0]
    assert val_run.status == "completed", val_run.message
    assert val_run.config["scheduler"] == "cosine" and val_run.config["no_decay"] == "auto"
    assert val_run.config["val_every"] == 2 and val_run.config["val"] is None
    if tensorboard_available():
        assert val_run.folder is not None and val_run.config["tensorboard_dir"] == str(val_run.folder / "tensorboard")
        assert list((val_run.folder / "tensorboard").glob("events.out.tfevents.*"))

    plots = t.plots
    window.right_panel.setCurrentWidget(plots)
    plots.redraw()
    x, y = plots.curves["val_loss"].getData()
    assert x.tolist() == [1.0, 3.0, 5.0] and np.isfinite(y).all()  # the steps that validated
    x, y = plots.curves["val_acc"].getData()
    assert x.tolist() == [1.0, 3.0, 5.0] and ((y >= 0) & (y <= 100)).all()
    assert plots.curves["val_loss"].opts["symbol"] == "o" and plots.curves["val_loss"].isVisible()
    assert sorted(plots.lr_curves) == [0.1, 1.0]
    for scale, curve in plots.lr_curves.items():
        lx, ly = curve.getData()
        assert len(lx) == 6 and math.isclose(ly[-1] / plots.lr_curves[1.0].getData()[1][-1], scale)
    lr_legend = plots.legends["lr"].names()
    assert lr_legend == ["base ×1", "×0.1 layer4"]
    assert plots.legends["loss"].names() == ["training (EMA)", "validation"]
    text = plots.readout_text()
    assert "val loss" in text and "acc" in text and "2 groups ×0.1–1" in text
    v = val_run.validation()
    assert v is not None and v.step == 5 and v.best_loss <= v.loss
    assert "val loss" in plots.title_val.full_text() and "val loss" in shown[-1]

    # a run without validation: dashes in the Runs tab, compared with the first
    t.panel.set_values(steps=3)
    t.panel.set_options(type(t.panel.options)())
    with qtbot.waitSignal(t.runs.runEnded, timeout=ms(GUI_RUN_S)) as blocker:
        assert t.panel.start()
    plain: RunRecord = blocker.args[0]
    assert plain.validation() is None and not plots.curves["val_loss"].isVisible()
    assert "not measured" in plots.title_text("accuracy")
    table = t.runs_panel.table
    loss_col, acc_col = COLUMNS.index("Val loss"), COLUMNS.index("Val acc")
    assert table.item(0, 0).text() == plain.name and table.item(0, loss_col).text() == "–" == table.item(0, acc_col).text()
    assert table.item(1, loss_col).text().startswith(f"{v.loss:.4f}")
    assert v.acc is not None and table.item(1, acc_col).text().startswith(f"{100 * v.acc:.1f} %")
    assert "cosine" in table.item(1, COLUMNS.index("Setup")).text() and "val/2" in table.item(1, COLUMNS.index("Setup")).text()
    t.runs_panel.select([val_run, plain])
    assert f"validation: not in {plain.name}" in t.runs_panel.compare.text()
    # the validated run overlaid: its validation curves are drawn with the run's colour
    assert {"val_loss", "val_acc"} <= set(plots.overlays[val_run.id].curves)
    assert plots.title_text("accuracy") == "Validation accuracy (%)"


def test_runs_tab_compares_validation_between_runs(qtbot: Any) -> None:
    def run(i: int, loss: float, acc: float | None) -> RunRecord:
        return RunRecord(id=str(i), name=f"#{i}", status="completed",
                         summary={"val_loss": loss, "val_step": 9, "val_acc": acc, "best_val_loss": loss, "best_val_step": 9})

    html, _tip = compare_text(run(1, 0.5, 0.8), [run(2, 0.4, 0.85), run(3, 0.45, None)])
    lines = html.split("<br>")
    assert "val loss <b>0.4000</b> vs 0.5000" in lines[0] and "(+5.0 pts)" in lines[0]
    assert "val loss <b>0.4500</b>" in lines[1] and "val acc" not in lines[1]


def test_plot_grid_has_every_plot_once_and_goes_to_three_columns_when_wide(qtbot: Any, shown_plots: Any) -> None:
    grid_order = [s.key for s in PLOTS]
    assert len(set(grid_order)) == len(grid_order) == len(PLOTS)
    panel = shown_plots(1200, 400)
    qtbot.waitUntil(lambda: panel.columns == 3, timeout=ms(GUI_EVENT_S))
    assert grid_columns(590, 7, 3) == 3 and grid_columns(560, 7, 3) == 2  # 20 px of hysteresis
    assert grid_columns(300, 7) == 1 and grid_columns(1000, 1) == 2  # never more columns than cells
    grid = panel.graphics.ci.layout
    places = {}
    for i in range(grid.count()):
        item = grid.itemAt(i)
        for key, p in panel.plots.items():
            if item is p:
                places[key] = i
    assert set(places) == set(panel.plots)
    panel.resize(1200, 250)  # a neighbour grew: the canvas is lower, the grid stays
    qtbot.waitUntil(lambda: panel.graphics.height() < 250, timeout=ms(GUI_EVENT_S))
    assert panel.columns == 3
    # the plots the user hides leave the grid; the choice is announced (the window keeps it)
    with qtbot.waitSignal(panel.viewChanged, timeout=ms(GUI_EVENT_S)):
        panel.show_actions["throughput"].trigger()
    shown = [grid.itemAt(i) for i in range(grid.count())]
    assert panel.plots["throughput"] not in shown and not panel.plots["throughput"].isVisible()
    assert panel.shown_keys == [k for k in grid_order if k != "throughput"]
    panel.set_shown_plots(grid_order)
    assert panel.plots["throughput"] in [grid.itemAt(i) for i in range(grid.count())]


def test_runs_panel_columns_exist(qtbot: Any, window: MainWindow) -> None:
    panel: RunsPanel = window.training.runs_panel
    headers = [panel.table.horizontalHeaderItem(i).text() for i in range(panel.table.columnCount())]
    assert headers == list(COLUMNS) and headers.index("Val loss") == headers.index("Final loss") + 1
