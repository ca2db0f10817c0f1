"""A plot is a row: one :class:`PlotSpec` in ``plot_specs.PLOTS`` plus its series column in
``series.COLUMNS`` is all a new plot takes. A throwaway plot added that way is drawn, in View ▸
Plots and its log-scale list, read out, overlaid for a compared run, and in the PNG and the
CSV the plots panel exports."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PySide6.QtGui import QImage

from tests.timeouts import GUI_EVENT_S, ms
from workbench.core.runs.store import RunStore
from workbench.gui.training import plot_specs, series
from workbench.gui.training.plot_specs import PLOTS, CurveSpec, PlotSpec, fmt_value, spec_of
from workbench.gui.training.plots import PlotsPanel

#: The throwaway column: the share of a step spent waiting for data, in percent.
DATA_SHARE = series.Column("data_pct", lambda m, _metric: 100.0 * m["data_time_s"] / m["step_time_s"]
                           if m.get("data_time_s") is not None and m.get("step_time_s") else float("nan"))
#: The throwaway plot's row.
DATA_PLOT = PlotSpec(
    "data_share", "Data loading (% of step)", "Data loading (%)",
    (CurveSpec("data_pct", (200, 120, 0), 2, overlay=True),),
    robust=True,
    readout=lambda r: f"data {fmt_value(r.row['data_pct'], '.1f')} %",
    overlay_readout=lambda row, _b, _m, _x: f"data {fmt_value(row['data_pct'], '.0f')} %",
)


def _records(n: int, data_s: float) -> list[dict[str, Any]]:
    return [{"step": i, "epoch": 0, "wall_time": 0.1 * (i + 1), "step_time_s": 0.1, "data_time_s": data_s,
             "loss": 1.0, "samples_per_s": 40.0, "trainable_params": 1000, "frozen_params": 0, "mem_allocated": 10**8,
             "mem_peak": 10**8, "mem_reserved": None, "grad_bytes": 0, "optimizer_state_bytes": 0} for i in range(n)]


@pytest.fixture
def with_data_plot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(series, "COLUMNS", (*series.COLUMNS, DATA_SHARE))
    monkeypatch.setattr(plot_specs, "PLOTS", (*plot_specs.PLOTS, DATA_PLOT))


def test_every_row_is_a_plot_and_every_curve_a_series_column() -> None:
    columns = {c.name for c in series.COLUMNS}
    assert len({s.key for s in PLOTS}) == len(PLOTS)
    for spec in PLOTS:
        assert set(spec.columns) <= columns, spec.key
        assert spec.readout is not None, spec.key  # every plot has its line in the read-out
    assert spec_of(PLOTS, "loss").robust and not spec_of(PLOTS, "trainable").robust
    with pytest.raises(KeyError, match="no plot 'nope'"):
        spec_of(PLOTS, "nope")


@pytest.mark.usefixtures("with_data_plot")
def test_a_plot_added_by_one_row_is_drawn_read_out_overlaid_and_exported(qtbot: Any, shown_plots: Any,
                                                                        tmp_path: Path) -> None:
    panel: PlotsPanel = shown_plots(1400, 900)
    assert panel.specs[-1] is DATA_PLOT
    qtbot.waitUntil(lambda: "data_share" in panel.shown_keys, timeout=ms(GUI_EVENT_S))  # wide: every plot
    assert "data_share" in panel.show_actions and "data_share" in panel.log_actions
    store = RunStore(tmp_path / "runs")
    shown = store.new_record("#2 shown", status="completed", metrics=_records(40, 0.025))
    store.save(shown)
    panel.show_record(shown, shown.metrics)
    # drawn: the column in its plot, in the grid
    plot = panel.plots["data_share"]
    assert plot.isVisible() and plot.vb.height() > 50 and panel.title_text("data_share") == "Data loading (% of step)"
    _x, y = panel.curves["data_pct"].getData()
    assert len(y) == 40 and np.allclose(y, 25.0)
    lo, hi = panel.y_range("data_share")
    assert lo <= 25.0 <= hi
    # read out
    assert "data 25.0 %" in panel.readout_text(10.0)
    # overlaid: a compared run draws it dashed in its colour, and has its part of the read-out line
    earlier = store.new_record("#1 earlier", status="completed", metrics=_records(40, 0.05))
    panel.set_overlays([(earlier, 0, earlier.metrics)])
    _x, y = panel.overlays[earlier.id].curves["data_pct"].getData()
    assert np.allclose(y, 50.0)
    assert "#1 earlier @ 10:" in panel.readout_text(10.0) and "data 50 %" in panel.readout_text(10.0)
    # exported: the PNG holds the plot, the CSV the figures it is drawn from
    png = panel.save_png(str(tmp_path / "plots.png"))
    assert png is not None and not QImage(png).isNull()
    assert QImage(png).width() == panel.graphics.width()
    out = store.export_csv(shown, tmp_path / "shown.csv")
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 40
    assert DATA_SHARE.read({k: float(v) for k, v in rows[10].items() if k in ("data_time_s", "step_time_s")},
                           "accuracy") == pytest.approx(25.0)
    # hidden and shown again by its row's key, like every plot
    panel.set_plot_shown("data_share", False)
    assert "data_share" not in panel.shown_keys and not plot.isVisible()
