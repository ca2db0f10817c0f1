"""The Suggest… dialog: budget from the device, chart and table for resnet18, Apply is one undo
step, Save writes a valid plan, Measure fills rows as candidates finish (on squeezenet1_1: a real peak, Cancel,
noise marks)."""

from __future__ import annotations

import dataclasses
import json
import threading
from typing import Any

import psutil
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMenu, QTableWidgetItem

from tests.timeouts import GUI_RUN_S, GUI_WORKER_S, ms
from workbench.core.advisor.advice import Measured
from workbench.core.advisor.sizes import parse_size
from workbench.core.plan import FreezePlan
from workbench.core.training.metrics import fmt_memory
from workbench.gui.advisor.budget import device_budget, format_budget
from workbench.gui.advisor.dialog import AUTO_FREEZE, COLUMNS, NOISE_MARK, SKIPPED, SuggestDialog
from workbench.gui.main_window import MainWindow
from workbench.gui.model_loading import LoadRequest


def _cell(d: SuggestDialog, row: int, col: int) -> QTableWidgetItem:
    """The table's item at (row, col); a missing item fails the test here."""
    item = d.table.item(row, col)
    assert item is not None, (row, col)
    return item


def _header(d: SuggestDialog, col: int) -> str:
    """The table's header text of column ``col``."""
    item = d.table.horizontalHeaderItem(col)
    assert item is not None, col
    return item.text()


def _ready(qtbot: Any, window: MainWindow, budget: str | None = None) -> SuggestDialog:
    d = window.suggest_dialog()
    qtbot.addWidget(d)
    qtbot.waitUntil(lambda: not d.busy, timeout=ms(GUI_WORKER_S))
    if budget is not None:
        d.budget.setText(budget)
        assert d.suggest()
        qtbot.waitUntil(lambda: not d.busy, timeout=ms(GUI_WORKER_S))
    return d


def _load_small(qtbot: Any, window: MainWindow) -> MainWindow:
    """``window`` with squeezenet1_1 loaded (1.2M parameters, random init) for the Measure tests: its advice and
    its 5 front rows cost a fraction of resnet18's 14, measured for real or not."""
    with qtbot.waitSignal(window.controller.loadFinished, timeout=ms(GUI_WORKER_S)) as blocker:
        assert window.controller.load(LoadRequest("squeezenet1_1"))
    assert blocker.args[0], "squeezenet1_1 did not load"
    return window


def test_budget_is_prefilled_from_the_device(qtbot: Any, window: MainWindow) -> None:
    d = _ready(qtbot, window)
    budget = parse_size(d.budget.text())
    available = psutil.virtual_memory().available  # the window's device is the CPU
    assert abs(budget - available) <= 0.25 * available
    assert d.batch.value() == 4 and d.input_size.value() == 32  # the training controls
    assert parse_size(format_budget(24 * 10**9)) == 24 * 10**9
    assert device_budget("cpu") > 0


def test_chart_and_table_show_the_front_with_the_chosen_plan_selected(qtbot: Any, window: MainWindow) -> None:
    d = _ready(qtbot, window, "60MB")
    advice = d.advice
    assert advice is not None and advice.chosen is not None
    assert advice.auto_freeze is not None  # the front, then auto-freeze (the sweep's candidate too)
    assert d.table.rowCount() == len(advice.front) + 1 and len(advice.front) > 2
    assert [_header(d, i) for i in range(len(COLUMNS))] == list(COLUMNS)
    names = [_cell(d, r, 0).text() for r in range(d.table.rowCount())]
    assert names == [*(advice.assessed[i].candidate.name for i in advice.front), advice.auto_freeze.name]
    assert d.selected_index() == advice.chosen
    chosen = advice.assessed[advice.chosen]
    assert chosen.fits and not all(a.fits for a in advice.assessed)
    everything, front, star = d.chart.points
    assert len(everything.getData()[0]) == len(advice.assessed)
    assert len(front.getData()[0]) == len(advice.front) and len(star.getData()[0]) == 1
    assert d.chart.budget_line.value() == pytest.approx(60.0)  # MB
    assert not d.chart.budget_clipped
    assert "Chosen:" in d.status.text()


def test_the_auto_freeze_row_is_predicted_for_the_panels_maximum(qtbot: Any, window: MainWindow) -> None:
    panel = window.training.panel
    panel.set_options(dataclasses.replace(panel.options, auto_freeze_max=0.5))
    d = _ready(qtbot, window)
    af = d.advice.auto_freeze if d.advice is not None else None
    assert af is not None, d.status.text()
    # the share Train each's run takes from the panel (0.75 by default): resnet18's 8 blocks, 4 of them
    assert af.max_fraction == 0.5 == panel.config().auto_freeze_max and (af.max_frozen, af.blocks) == (4, 8)
    assert "up to 4 of 8 blocks" in _cell(d, d.table_indices().index(AUTO_FREEZE), 0).text()


def test_a_budget_far_beyond_the_candidates_is_marked_at_the_edge(qtbot: Any, window: MainWindow) -> None:
    d = _ready(qtbot, window, "80GB")
    advice = d.advice
    assert advice is not None
    top = max(a.memory.peak for a in advice.assessed) / 1e6  # MB: the candidates set the axis
    lo, hi = d.chart.getPlotItem().vb.viewRange()[0]
    assert hi == pytest.approx(top * 1.15) and d.chart.budget_clipped
    assert d.chart.budget_line.value() == pytest.approx(hi)
    assert "80" in d.chart.budget_line.label.format and "→" in d.chart.budget_line.label.format


def test_apply_is_one_undoable_edit(qtbot: Any, window: MainWindow) -> None:
    c = window.controller
    before = c.plan.to_dict()
    d = _ready(qtbot, window, "60MB")
    a = d.selected()
    assert a is not None
    assert d.apply_selected()
    assert c.plan.to_dict()["rules"] == a.candidate.plan.to_dict()["rules"]
    assert c.undo_stack.count() == 1 and "Apply suggested plan" in c.undo_stack.undoText()
    c.undo_stack.undo()
    assert c.plan.to_dict() == before
    c.undo_stack.redo()
    assert c.plan.to_dict()["rules"] == a.candidate.plan.to_dict()["rules"]


def test_save_writes_a_valid_plan(qtbot: Any, window: MainWindow, tmp_path: Any, dialogs: Any) -> None:
    d = _ready(qtbot, window, "60MB")
    path = tmp_path / "suggested.json"
    dialogs.script("save_file", str(path))
    d.save_button.click()
    data = json.loads(path.read_text())
    plan = FreezePlan.from_dict(data)
    model, selected = window.controller.model, d.selected()
    assert model is not None and selected is not None
    plan.validate(model, strict=True)
    assert data["model"]["name"] == "resnet18"
    assert data["rules"] == selected.candidate.plan.to_dict()["rules"]
    assert "Saved" in d.status.text()


def test_a_budget_below_the_weights_says_what_could_work(qtbot: Any, window: MainWindow) -> None:
    d = _ready(qtbot, window, "10MB")
    assert d.advice is None and d.table.rowCount() == 0
    assert "smallest plan needs" in d.status.text()
    assert not d.apply_button.isEnabled()


def test_measure_fills_rows_one_by_one_with_a_real_peak(qtbot: Any, window: MainWindow) -> None:
    """On squeezenet1_1 (1.2M parameters: its 5 front rows measure in a tenth of resnet18's 14, each a real build
    and real steps)."""
    d = _ready(qtbot, _load_small(qtbot, window), "16MB")
    advice = d.advice
    assert advice is not None
    filled: list[int] = []
    d._progress.measured.connect(lambda *_: filled.append(d.measured_rows()))
    assert d.measure()
    assert not d.progress.isHidden() and not d.cancel_button.isHidden() and d.measured_rows() == 0
    qtbot.waitUntil(lambda: d.measured_rows() >= 1, timeout=ms(GUI_RUN_S))
    qtbot.waitUntil(lambda: not d.busy, timeout=ms(GUI_RUN_S))
    assert filled == list(range(1, len(advice.front) + 1))  # a row per finished candidate, in turn
    assert all(a.measured is not None for a in advice.front_assessed)
    for row, a in enumerate(advice.front_assessed):
        m = a.measured
        assert m is not None and m.memory_source == "peak tensor bytes"
        assert _cell(d, row, COLUMNS.index("measured peak")).text() == fmt_memory(m.peak_bytes)
        assert m.peak_bytes != a.memory.peak  # a reading of the process, not the prediction
        assert float(_cell(d, row, COLUMNS.index("measured × full")).text().split()[0]) > 0
    assert d.progress.isHidden() and d.cancel_button.isHidden()
    assert d.progress.maximum() > 0 and d.progress.value() == d.progress.maximum()


def _fake_measure(monkeypatch: Any, results: dict[int, Measured], *, hold: threading.Event | None = None) -> list[int]:
    """Replace the core measurement: hand out ``results`` in order; wait on ``hold`` after the first."""
    calls: list[int] = []

    def fake(advice: Any, config: Any, steps: int, *, seq_len: Any = None, progress: Any = None,
             on_result: Any = None, stop: Any = None, reference: bool = True) -> int:
        done = 0
        for k, (i, m) in enumerate(results.items()):
            if stop():
                break
            advice.assessed[i].measured = m
            on_result(i, m)
            progress(k + 1, len(results))
            calls.append(i)
            done += 1
            if hold is not None and k == 0:
                assert hold.wait(GUI_RUN_S)
        return done

    monkeypatch.setattr("workbench.core.advisor.measure.measure_front", fake)
    return calls


def test_cancel_stops_after_the_current_candidate(qtbot: Any, window: MainWindow, monkeypatch: Any) -> None:
    d = _ready(qtbot, _load_small(qtbot, window), "16MB")
    advice = d.advice
    assert advice is not None and len(advice.front) > 2
    hold = threading.Event()
    results = {i: Measured(10**8 + i, 0.5, 5.0, "peak RSS growth", (0.5, 0.5), 3) for i in advice.front}
    calls = _fake_measure(monkeypatch, results, hold=hold)
    assert d.measure()
    qtbot.waitUntil(lambda: d.measured_rows() == 1, timeout=ms(GUI_RUN_S))
    d.cancel_button.click()
    assert not d.cancel_button.isEnabled()
    hold.set()
    qtbot.waitUntil(lambda: not d.busy, timeout=ms(GUI_RUN_S))
    assert len(calls) == 1 and d.measured_rows() == 1
    assert f"Cancelled: 1 of {len(advice.front)}" in d.status.text()
    assert d.cancel_button.isHidden() and d.measure_button.isEnabled()


def test_a_new_budget_alone_is_chosen_again_at_once_and_keeps_the_measured_rows(qtbot: Any, window: MainWindow,
                                                                                 monkeypatch: Any) -> None:
    import workbench.gui.advisor.dialog as dialog_module

    real, budgets = dialog_module.advise, []
    monkeypatch.setattr(dialog_module, "advise", lambda model, budget, *a, **k: budgets.append(budget) or
                        real(model, budget, *a, **k))
    d = _ready(qtbot, _load_small(qtbot, window))  # the device's budget: full fine-tuning fits
    roomy = d.advice
    assert roomy is not None and roomy.chosen is not None and len(budgets) == 1
    results = {i: Measured(roomy.assessed[i].memory.peak + 1_000_000, 1.0, 5.0, "peak RSS growth", (1.0, 1.0), 3)
               for i in roomy.front}
    _fake_measure(monkeypatch, results)
    assert d.measure()
    qtbot.waitUntil(lambda: not d.busy, timeout=ms(GUI_RUN_S))
    d.budget.setText("16MB")
    assert d.suggest() and not d.busy  # no profiling: chosen at once
    tight = d.advice
    assert tight is not None and len(budgets) == 1 and tight.budget_bytes == parse_size("16MB")
    assert tight.chosen is not None and tight.chosen != roomy.chosen and "Chosen again" in d.status.text()
    assert d.selected() is tight.assessed[tight.chosen]
    for row, i in enumerate(tight.front):  # the measurements stay; what fits follows the new budget
        assert _cell(d, row, COLUMNS.index("measured peak")).text() == fmt_memory(results[i].peak_bytes)
        assert _cell(d, row, COLUMNS.index("fits")).text() == ("yes" if tight.assessed[i].memory.peak <= tight.budget_bytes
                                                               else "no")
    for bad in ("nan", "-1GB", "1e30GB", "\x00"):  # refused in one line; the advice shown stays
        d.budget.setText(bad)
        assert not d.suggest() and d.advice is tight and "not understood" in d.status.text()
    d.budget.setText("99999999999999999999999TB")  # absurd but a size: everything fits, still no profiling
    assert d.suggest() and not d.busy and len(budgets) == 1
    assert d.advice is not None and all(a.fits for a in d.advice.assessed) and d.advice.chosen == roomy.chosen
    d.batch.setValue(d.batch.value() * 2)  # another input: profiled again, measured rows gone
    assert d.suggest() and d.busy
    qtbot.waitUntil(lambda: not d.busy, timeout=ms(GUI_WORKER_S))
    assert len(budgets) == 2 and d.advice is not None and d.measured_rows() == 0


def test_measured_columns_read_the_measurement_not_the_prediction(qtbot: Any, window: MainWindow,
                                                                   monkeypatch: Any) -> None:
    d = _ready(qtbot, _load_small(qtbot, window), "16MB")
    advice = d.advice
    assert advice is not None
    results = {i: Measured(3 * advice.assessed[i].memory.peak + 7_000_000, 1.0, 5.0, "peak RSS growth", (1.0, 1.0), 3)
               for i in advice.front}
    _fake_measure(monkeypatch, results)
    assert d.measure()
    qtbot.waitUntil(lambda: not d.busy, timeout=ms(GUI_RUN_S))
    for row, i in enumerate(advice.front):
        predicted = _cell(d, row, COLUMNS.index("predicted peak")).text()
        measured = _cell(d, row, COLUMNS.index("measured peak")).text()
        assert predicted == fmt_memory(advice.assessed[i].memory.peak)
        assert measured == fmt_memory(results[i].peak_bytes) != predicted
        assert "peak RSS growth" in _cell(d, row, COLUMNS.index("measured peak")).toolTip()


def test_noisy_step_ratios_are_marked(qtbot: Any, window: MainWindow, monkeypatch: Any) -> None:
    d = _ready(qtbot, _load_small(qtbot, window), "16MB")
    advice = d.advice
    assert advice is not None and len(advice.front) > 2
    noisy, *quiet = advice.front
    results = {noisy: Measured(10**8, 0.80, 5.0, "peak RSS growth", (0.47, 3.12), 3)}
    for k, i in enumerate(quiet):  # tight steps, rows 0.5 apart
        results[i] = Measured(10**8, 1.5 + 0.5 * k, 5.0, "peak RSS growth", (1.49 + 0.5 * k, 1.51 + 0.5 * k), 3)
    _fake_measure(monkeypatch, results)
    assert d.measure()
    qtbot.waitUntil(lambda: not d.busy, timeout=ms(GUI_RUN_S))
    col = COLUMNS.index("measured × full")
    marked = _cell(d, advice.front.index(noisy), col)
    assert marked.text() == "0.80" + NOISE_MARK
    assert "0.47–3.12" in marked.toolTip() and "not settled" in marked.toolTip()
    for i in quiet:
        item = _cell(d, advice.front.index(i), col)
        assert NOISE_MARK not in item.text() and "not settled" not in item.toolTip()


def test_edit_menu_opens_the_dialog(qtbot: Any, window: MainWindow, dialogs: Any) -> None:
    seen: dict[str, Any] = {}

    def fill(d: SuggestDialog) -> bool:
        qtbot.waitUntil(lambda: not d.busy, timeout=ms(GUI_WORKER_S))
        seen["rows"] = d.table.rowCount()
        return True

    edit = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Edit")
    assert isinstance(edit, QMenu) and window.act_suggest in edit.actions()
    dialogs.script("dialog", fill)
    window.act_suggest.trigger()
    assert dialogs.kinds("dialog") == [("dialog", "Suggest a plan", "SuggestDialog")]
    assert seen["rows"] > 0


def test_closing_while_computing_leaves_no_thread(qtbot: Any, window: MainWindow) -> None:
    d = window.suggest_dialog()
    qtbot.addWidget(d)
    assert d.busy
    d.reject()  # waits for the worker; the leak fixture checks no thread is left
    assert not d.busy


# ---------------------------------------------------------------- nothing can eat the machine
def test_measure_is_off_for_a_structure_only_model(qtbot: Any, window: MainWindow) -> None:
    window.source_bar.meta_box.setChecked(True)
    window.source_bar.set_current({"name": "resnet18"})
    with qtbot.waitSignal(window.controller.loadFinished, timeout=ms(GUI_WORKER_S)):
        window.source_bar.load_button.click()
    assert window.controller.loaded is not None and window.controller.loaded.meta
    d = _ready(qtbot, window, "80GB")
    assert d.advice is not None and d.table.rowCount() > 0  # the advice itself works on meta
    assert not d.measure_button.isEnabled()
    assert "structure only" in d.measure_button.toolTip() and "Structure only" in d.measure_button.toolTip()
    assert not d.measure() and "structure only" in d.status.text()


def _memory(available: int) -> Any:
    from workbench.core.advisor.activations import DeviceMemory

    return lambda device: DeviceMemory("cpu", 2 * available, available, "available RAM")


def test_measure_skips_candidates_predicted_above_the_memory_available(qtbot: Any, window: MainWindow,
                                                                       monkeypatch: Any) -> None:
    d = _ready(qtbot, _load_small(qtbot, window), "80GB")
    advice = d.advice
    assert advice is not None and len(advice.front) > 2
    peaks = sorted(a.memory.peak for a in advice.front_assessed)
    available = peaks[len(peaks) // 2]  # the smallest fit; the largest (full fine-tuning among them) do not
    over = [i for i in advice.front if advice.assessed[i].memory.peak > available]
    assert over and len(over) < len(advice.front)
    monkeypatch.setattr("workbench.gui.advisor.dialog.device_memory", _memory(available))
    seen: list[tuple[list[int], bool]] = []
    results = {i: Measured(10**8, 0.5, 5.0, "peak RSS growth", (0.5, 0.5), 3) for i in advice.front}

    def fake(subset: Any, config: Any, steps: int, **kw: Any) -> int:
        seen.append((list(subset.front), kw["reference"]))
        for i in subset.front:
            subset.assessed[i].measured = results[i]
            kw["on_result"](i, results[i])
        return len(subset.front)

    monkeypatch.setattr("workbench.core.advisor.measure.measure_front", fake)
    assert d.measure()
    qtbot.waitUntil(lambda: not d.busy, timeout=ms(GUI_RUN_S))
    # never handed to the measurement; full fine-tuning does not fit, so it is not the reference either
    assert seen == [([i for i in advice.front if i not in over], False)]
    col = COLUMNS.index("measured peak")
    for i in over:
        item = _cell(d, advice.front.index(i), col)
        assert item.text() == SKIPPED and "above the" in item.toolTip() and "available RAM" in item.toolTip()
        assert advice.assessed[i].measured is None
    assert d.measured_rows() == len(advice.front) - len(over)
    assert f"{len(over)} skipped" in d.status.text()
    first = advice.assessed[seen[0][0][0]].candidate.name
    ratio = _cell(d, advice.front.index(seen[0][0][0]), COLUMNS.index("measured × full"))
    assert f"× {first}" in ratio.toolTip()


def test_nothing_is_measured_when_every_candidate_exceeds_the_memory(qtbot: Any, window: MainWindow,
                                                                   monkeypatch: Any) -> None:
    d = _ready(qtbot, _load_small(qtbot, window), "80GB")
    advice = d.advice
    assert advice is not None
    monkeypatch.setattr("workbench.gui.advisor.dialog.device_memory", _memory(1000))
    calls = _fake_measure(monkeypatch, {})
    assert not d.measure() and not d.busy and calls == []
    assert "Not measured: every candidate" in d.status.text() and "available RAM" in d.status.text()


def test_cancel_during_a_slow_model_build_stops_once_it_is_built(qtbot: Any, window: MainWindow,
                                                                 monkeypatch: Any) -> None:
    """A candidate's build that lasts until Cancel is clicked (a model that takes seconds to build):
    the measurement ends when that build is done, before any of its steps and before the next build."""
    from workbench.core.training.engine import Trainer

    d = _ready(qtbot, _load_small(qtbot, window), "16MB")
    advice = d.advice
    assert advice is not None and len(advice.front) > 1, d.status.text()
    builds: list[int] = []
    building = threading.Event()
    real_setup = Trainer.setup
    cancelled = d._cancel  # the dialog's own flag (the patched build must not keep the dialog alive)

    def slow_setup(self: Trainer) -> None:
        if self._ready:  # steps() asks again: nothing left to build
            return
        builds.append(1)
        if len(builds) == 2:  # the first candidate after the warm-up: built while Cancel is clicked
            building.set()
            assert cancelled.wait(GUI_RUN_S)
        real_setup(self)

    monkeypatch.setattr(Trainer, "setup", slow_setup)
    steps: list[int] = []
    d._progress.changed.connect(lambda done, total: steps.append(done), Qt.ConnectionType.DirectConnection)
    assert d.measure()
    qtbot.waitUntil(building.is_set, timeout=ms(GUI_RUN_S))
    before = len(steps)
    d.cancel_button.click()
    qtbot.waitUntil(lambda: not d.busy, timeout=ms(GUI_RUN_S))
    assert len(builds) == 2  # no candidate built after the cancel
    assert len(steps) == before  # and no step of the one being built
    assert d.measured_rows() == 0 and "Cancelled: 0 of" in d.status.text()
