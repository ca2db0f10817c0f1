"""The Suggest… dialog: the plans that fit the device's memory, on a chart and in a table.

The budget is pre-filled from the training panel's device (CUDA: its total memory; CPU: the
available RAM), the batch and input size from the training controls. The advice
(:func:`workbench.core.advisor.advise`) is computed on a worker thread; the chart shows every
candidate, the Pareto front and the budget line, the table lists the front with the chosen
plan selected. *Apply* puts the selected plan in force as one undoable edit, *Save…* writes it
as a plan file, *Measure* trains each front candidate for a few steps on a worker thread: each
row fills in as its candidate finishes (a progress bar counts the steps, *Cancel* stops at the
next step, or once the model being built is built), the measured peak is the device's reading (:mod:`workbench.core.training.metrics`:
CUDA peak allocated, CPU peak tensor bytes) and a step ratio whose steps spread wider than the
gap to another row is marked ⚠ with the spread in its tooltip.

Nothing *Measure* does can eat the machine: it is off for a model open structure only (it
would build the real model, as *Start* would; the reason is its tooltip), and a candidate whose
predicted peak exceeds the memory the device has available (the pre-flight *Start* uses,
:func:`~workbench.core.advisor.activations.device_memory`) is skipped, its row saying so. When
full fine-tuning, the step ratio's reference, exceeds it, the first candidate measured is the
reference (the status line and the ratios' tooltips name it).

*Train each*, beside *Measure*, measures what the plans buy instead of what they cost: a plan
sweep (:mod:`workbench.gui.advisor.train_each`) trains each row that fits for the same steps
with the training panel's data, loss, metric and seed, stopping weak ones early; the learning
columns (metric, retention with *Retain* data, training time, the run's peak, where and why
it stopped early) fill in as candidates finish, and the *Learning* tab draws the sweep's chart
live. The recommended plan is selected at the end, for *Apply*. *Resume* (:mod:`workbench.gui.advisor.resume`)
offers the last unfinished *Train each* of the same rows and settings, or a sweep folder to
pick: the rows done there fill at once and the rest train. Each finished candidate (and the
sweep's end) is announced by :attr:`SuggestDialog.sweepRunsWritten`, which the window's Runs tab
follows. *Train each* is off, with the reason in its tooltip, for a structure-only model. The table's last row is auto-freeze (full fine-tuning
with ``auto_freeze`` on, the candidate ``workbench sweep`` includes): *Train each* trains it
with the rows, *Measure* leaves it out, and *Apply* on it makes every parameter trainable and
turns auto-freeze on in the training options (a training setting, not a plan: *Undo* reverts
the plan only).
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)
from torch import nn

from workbench.core.advisor.activations import DeviceMemory, device_memory
from workbench.core.advisor.advice import Advice, Assessment, Measured, advise, step_ratio_noise
from workbench.core.advisor.profile import is_text_model
from workbench.core.advisor.sizes import parse_size
from workbench.core.advisor.sweep_report import SweepReport
from workbench.core.errors import WorkbenchError
from workbench.core.formatting import fmt_bytes, fmt_count
from workbench.core.plan import FreezePlan
from workbench.core.runs.sweeps import sweeps_folder
from workbench.core.training.config import TrainConfig
from workbench.core.training.metrics import fmt_memory
from workbench.core.training.setup import run_image_size
from workbench.gui import dialogs
from workbench.gui.advisor.budget import device_budget, format_budget
from workbench.gui.advisor.chart import FrontChart
from workbench.gui.advisor.resume import ResumeButton
from workbench.gui.advisor.sweep_chart import SweepChart
from workbench.gui.advisor.train_each import (
    AUTO_FREEZE,
    DEFAULT_STEPS,
    LEARNING_COLUMNS,
    TrainEach,
    auto_freeze_cells,
    data_input_shape,
    learning_cells,
    optuna_missing,
    shape_from_data,
    sweep_folder,
)
from workbench.gui.background import BackgroundTask
from workbench.gui.controller import Controller
from workbench.gui.training.session import run_spec

__all__ = ["COLUMNS", "LEARNING_COLUMNS", "MEASURE_STEPS", "NOISE_MARK", "SKIPPED", "SuggestDialog"]

#: The cost columns; the last two fill in after *Measure* (the learning columns follow, after *Train each*).
COLUMNS = ("candidate", "predicted peak", "step × full", "trainable", "fits", "measured peak", "measured × full")
#: Timed steps per candidate of *Measure*.
MEASURE_STEPS = 3
#: Appended to a measured step ratio whose spread is wider than the gap to another row.
NOISE_MARK = " ⚠"
#: The measured peak of a candidate *Measure* skipped (predicted above the memory available).
SKIPPED = "skipped"
#: Tokens per sample for text models when the training panel's Tokens is left at its default.
DEFAULT_SEQ_LEN = 128


class _Progress(QObject):
    """Carries a worker's progress to the GUI thread (a queued signal)."""

    changed = Signal(int, int)
    measured = Signal(int, object)


class SuggestDialog(QDialog):
    """Suggest plans that fit a memory budget.

    Args:
        controller: the window's controller (model, plan, undo history).
        device: the training panel's device value (``auto``, ``cpu``, ``cuda:N``).
        batch_size: the training panel's batch size.
        image_size: the training panel's image side (0: the model's own).
        amp: the training panel's mixed-precision mode.
        seq_len: a text model's tokens per sample from the training panel (0: :data:`DEFAULT_SEQ_LEN`).
        train_config: the training panel's settings for *Train each* (data, loss, metric, seed ...;
            None: *Train each* is off).
        runs_folder: the app's runs folder; sweeps go beside it (``../sweeps/<time>``).
        dataset: training data given to the app in Python, used instead of the config's data.
        set_auto_freeze: turns the training panel's auto-freeze option on or off (Apply on the
            auto-freeze row).
        auto_freeze_max: the training panel's auto-freeze maximum (the share of the blocks a run
            may freeze): the auto-freeze row's prediction is for it, as *Train each*'s run.
        parent: the window.

    Signals:
        sweepRunsWritten(): a candidate of *Train each* finished, or the sweep ended: its run
            folders changed (the window's Runs tab reads them again).

    Attributes:
        advice: the last advice (None before the first one or after a failure).
        budget / batch / input_size: the input fields.
        chart / table: the Pareto chart and the front table.
        sweep_chart: *Train each*'s chart (metric against time and peak memory), on the
            *Learning* tab beside the chart's *Cost* tab.
        steps / retain: *Train each*'s steps per candidate and retain data (a dataset spec).
        trainer: the sweep runner (its ``report`` is the last sweep's).
    """

    sweepRunsWritten = Signal()

    def __init__(self, controller: Controller, *, device: str = "auto", batch_size: int = 32,
                 image_size: int = 0, amp: str = "off", seq_len: int = 0,
                 train_config: Callable[[], TrainConfig] | None = None, runs_folder: Path | None = None,
                 dataset: Any = None, set_auto_freeze: Callable[[bool], None] | None = None,
                 auto_freeze_max: float = 0.75, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Suggest a plan")
        self.setObjectName("SuggestDialog")
        self._c = controller
        self._device = device
        self._amp = amp
        self._task: BackgroundTask | None = None
        self._skipped = 0
        self._reference = "full fine-tuning"
        self._cancel = threading.Event()
        self._progress = _Progress(self)
        self._train_config = train_config
        self._runs_folder = runs_folder
        self._dataset = dataset
        self._set_auto_freeze = set_auto_freeze
        self._auto_freeze_max = auto_freeze_max
        self._swept: dict[str, int] = {}  # candidate id -> index into advice.assessed
        self._running = ""  # the id of the candidate training now
        self.trainer = TrainEach(self)
        self.advice: Advice | None = None
        self._advised_for: tuple[weakref.ref[nn.Module], tuple[Any, ...]] | None = None  # the model and inputs of advice
        model = controller.model
        self._text = model is not None and _is_text(model)

        self.budget = QLineEdit(format_budget(device_budget(device)), self)
        self.budget.setToolTip(f"Memory of the device ({device}): CUDA total memory, or the RAM available to the CPU. "
                               "Sizes like 24GB, 512MiB, 1.5G")
        self.batch = QSpinBox(self)
        self.batch.setRange(1, 65536)
        self.batch.setValue(batch_size)
        self.input_size = QSpinBox(self)
        if self._text:
            self.input_size.setRange(2, 1 << 20)
            self.input_size.setValue(seq_len or DEFAULT_SEQ_LEN)
            self.input_size.setSuffix(" tokens")
        else:
            self.input_size.setRange(8, 4096)
            self.input_size.setSuffix(" px")
            self.input_size.setValue(image_size or self._model_size())
        if self._data_config() is not None:  # py: data or an input shape: one sample says the input
            self.input_size.setEnabled(False)
            self.input_size.setToolTip("The input is one sample of the training panel's data (py: data, or its "
                                       "input shape option), as a run takes it")
        self.suggest_button = QPushButton("Suggest", self)
        self.suggest_button.clicked.connect(self.suggest)
        form = QHBoxLayout()
        for label, widget in (("Budget", self.budget), ("Batch", self.batch),
                              ("Sequence" if self._text else "Image", self.input_size)):
            form.addWidget(QLabel(label, self))
            form.addWidget(widget)
        form.addWidget(self.suggest_button)
        form.addStretch(1)
        self.steps = QSpinBox(self)
        self.steps.setRange(1, 10**7)
        self.steps.setValue(DEFAULT_STEPS)
        self.steps.setToolTip("Train each: optimizer steps per candidate (the same for each, with the same seed "
                              "and data order); it validates every tenth of them, where weak candidates stop early")
        self.retain = QLineEdit(self)
        self.retain.setPlaceholderText("optional: data of the original task (folder:PATH, synthetic …)")
        self.retain.setToolTip("Train each: the metric on this data after training is the retention, the "
                               "measure of what a plan forgets (the same specs as the training data)")
        learn = QHBoxLayout()
        for label, widget in (("Train each: steps", self.steps), ("Retain", self.retain)):
            learn.addWidget(QLabel(label, self))
            learn.addWidget(widget, 1 if widget is self.retain else 0)

        self.chart = FrontChart(self)
        self.sweep_chart = SweepChart(self)
        self.charts = QTabWidget(self)
        self.charts.addTab(self.chart, "Cost (predicted)")
        self.charts.addTab(self.sweep_chart, "Learning (Train each)")
        self.table = QTableWidget(0, len(COLUMNS) + len(LEARNING_COLUMNS), self)
        self.table.setHorizontalHeaderLabels([*COLUMNS, *LEARNING_COLUMNS])
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for col in range(1, self.table.columnCount()):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        for col in range(len(COLUMNS), self.table.columnCount()):  # shown once a sweep has rows
            self.table.setColumnHidden(col, True)
        self.table.itemSelectionChanged.connect(self._selection_changed)

        self.status = QLabel(self)
        self.status.setWordWrap(True)
        self.progress = QProgressBar(self)
        self.progress.setVisible(False)
        keep = self.progress.sizePolicy()
        keep.setRetainSizeWhenHidden(True)  # the buttons keep their size when the bar hides
        self.progress.setSizePolicy(keep)
        self.measure_button = QPushButton("Measure", self)
        self._measure_tip = (f"Train each front candidate {MEASURE_STEPS} steps and show the measured peak and step "
                             "time (a candidate predicted above the memory available is skipped)")
        self.measure_button.setToolTip(self.measure_off_reason() or self._measure_tip)
        self.measure_button.clicked.connect(self.measure)
        self.train_button = QPushButton("Train each", self)
        self._train_tip = ("Learning, beside Measure's cost: train each candidate that fits for the same steps "
                           "and seed on the training panel's data, loss and metric; weak ones stop early. Rows "
                           "fill in with the metric, retention, time and peak as candidates finish")
        self.train_button.setToolTip(self.train_off_reason() or self._train_tip)
        self.train_button.clicked.connect(self.train_each)
        self.resume_button = ResumeButton(self, self)
        self._resuming, self._done_before = False, 0
        self.cancel_button = QPushButton("Cancel", self)
        self.cancel_button.setToolTip("Stop measuring at the next training step (or once the model being built is "
                                      "built); the rows measured so far stay")
        self.cancel_button.setVisible(False)
        self.cancel_button.clicked.connect(self.cancel_measure)
        self.save_button = QPushButton("Save…", self)
        self.save_button.clicked.connect(self._save_clicked)
        self.apply_button = QPushButton("Apply", self)
        self.apply_button.setToolTip("Put the selected plan in force (Edit → Undo reverts it)")
        self.apply_button.clicked.connect(self.apply_selected)
        close = QPushButton("Close", self)
        close.clicked.connect(self.reject)
        buttons = QHBoxLayout()
        buttons.addWidget(self.progress, 1)
        for b in (self.measure_button, self.train_button, self.resume_button, self.cancel_button, self.save_button,
                  self.apply_button, close):
            buttons.addWidget(b)

        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addLayout(learn)
        layout.addWidget(self.charts, 3)
        layout.addWidget(self.table, 2)
        layout.addWidget(self.status)
        layout.addLayout(buttons)
        self.resize(860, 680)
        self._progress.changed.connect(self._on_progress)
        self._progress.measured.connect(self._on_measured)
        self.trainer.changed.connect(self._on_sweep_event)
        self._update_buttons()

    # ------------------------------------------------------------------ inputs
    def _model_size(self) -> int:
        """The side a run of the loaded model takes when the panel leaves it to the model (run_image_size's)."""
        model = self._c.model
        return run_image_size(None, run_spec(self._c.spec), model if model is not None else nn.Module())

    def input_shape(self) -> tuple[int, ...]:
        """The batch shape the advice is for: ``(batch, seq_len)`` or ``(batch, 3, size, size)``."""
        if self._text:
            return (self.batch.value(), self.input_size.value())
        return (self.batch.value(), 3, self.input_size.value(), self.input_size.value())

    @property
    def busy(self) -> bool:
        """A computation or measurement is running."""
        return self._task is not None

    # ------------------------------------------------------------------ advice
    def suggest(self) -> bool:
        """Compute the advice for the fields on a worker thread.

        Returns:
            True when the computation started (False: bad input, no model, or busy).
        """
        model = self._c.model
        if self.busy:
            return False
        if model is None:
            self.status.setText("Load a model first.")
            return False
        try:
            budget = parse_size(self.budget.text())
        except WorkbenchError as e:
            self.status.setText(str(e))
            return False
        shape, optimizer, amp = self.input_shape(), self._c.optimizer, self._amp
        auto_freeze_max = self._auto_freeze_max  # the panel's, which Train each's run takes too
        device_type = self._device_type()
        lock = self._c.model_lock
        data = self._data_config()
        inputs = (shape, optimizer, amp, device_type, auto_freeze_max, data)
        if self._rechoose(model, inputs, budget):
            return True
        if data is not None:
            from workbench.gui.training.code_confirm import confirm_task_code

            if not confirm_task_code(self, data):  # the shape of one sample: its py: data runs
                self.status.setText("Not suggested: the training data's code was not confirmed.")
                return False

        def work() -> Advice:
            batch_shape = data_input_shape(data, shape[0]) if data is not None else shape
            with lock:  # a training run or a check may be reading the model
                return advise(model, budget, batch_shape, optimizer=optimizer, amp=amp, device_type=device_type,
                              auto_freeze_max=auto_freeze_max)

        self.status.setText("Profiling the model on the meta device …")
        self._advised_for = (weakref.ref(model), inputs)
        self._start(work, self._advice_done)
        return True

    def _rechoose(self, model: nn.Module, inputs: tuple[Any, ...], budget: int) -> bool:
        """Only the budget changed since the advice shown: choose again from its predictions, at once.

        Profiling again would give the same candidates and predictions (seconds for a large model)
        and drop the measured rows; :meth:`Advice.for_budget` keeps them.
        """
        if self.advice is None or self._advised_for is None or self._advised_for != (weakref.ref(model), inputs):
            return False
        try:
            advice = self.advice.for_budget(budget)
        except WorkbenchError as e:
            self._advice_done(None, str(e), "")
            return True
        self._advice_done(advice, "", "")
        self.status.setText(f"{self.status.text()} Chosen again from the predictions already made (nothing "
                            "but the budget changed).")
        return True

    def _data_config(self) -> TrainConfig | None:
        """The training settings when the advice's input is read from them (``py:`` data, an input shape)."""
        if self._text or self._train_config is None:
            return None
        try:
            cfg = self._train_config()
        except WorkbenchError:
            return None
        return cfg if shape_from_data(cfg) else None

    def _device_type(self) -> str:
        import torch

        if self._device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        return self._device.split(":")[0]

    def _start(self, fn: Callable[[], Any], done: Callable[[Any, str, str], None]) -> None:
        task = BackgroundTask(fn, self)
        task.done.connect(done)
        self._task = task
        self._update_buttons()
        task.start()

    def _finish(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.deleteLater()
        self.progress.setVisible(False)
        self.cancel_button.setVisible(False)
        self._update_buttons()

    def _advice_done(self, advice: Advice | None, error: str, details: str) -> None:
        self._finish()
        if advice is None:
            self.advice, self._advised_for = None, None
            self._fill()
            self.status.setText(error or "The advice failed.")
            return
        self.advice = advice
        self._fill()
        if advice.chosen is None:
            self.status.setText(f"No candidate fits in {fmt_bytes(advice.budget_bytes)}; the smallest needs about "
                                f"{fmt_bytes(advice.smallest_peak)}: raise the budget or lower the batch.")
        else:
            a = advice.assessed[advice.chosen]
            self.status.setText(f"Chosen: {a.candidate.name}, the most trainable parameters within "
                                f"{fmt_bytes(advice.budget_bytes)} ({len(advice.front)} of {len(advice.assessed)} "
                                "candidates on the front).")

    # ------------------------------------------------------------------ table
    def _fill(self) -> None:
        advice = self.advice
        rows = self.table_indices()
        self.table.blockSignals(True)
        self.table.setRowCount(len(rows))
        for row, i in enumerate(rows):
            assert advice is not None
            af = advice.auto_freeze if i == AUTO_FREEZE else None
            texts, tips = auto_freeze_cells(af) if af is not None else (_cells(advice.assessed[i]), [""] * len(COLUMNS))
            for col, text in enumerate(texts):
                item = QTableWidgetItem(text)
                item.setToolTip(tips[col])
                if col:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if not (af.fits if af is not None else advice.assessed[i].fits):
                    item.setForeground(self.palette().color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text))
                if i == advice.chosen:
                    font = item.font()
                    font.setBold(True)
                    item.setFont(font)
                self.table.setItem(row, col, item)
            self._set_learning(row, i)
        self.table.blockSignals(False)
        self._mark_noise()
        if advice is not None and advice.chosen is not None:
            self.table.selectRow(rows.index(advice.chosen))
        else:
            self.table.clearSelection()
        self.chart.show_advice(advice, self.selected_index())
        self._update_buttons()

    def _mark_noise(self) -> None:
        """Mark the measured step ratios whose spread is wider than the gap to another row."""
        advice = self.advice
        if advice is None:
            return
        col = COLUMNS.index("measured × full")
        rows = [(advice.assessed[i].candidate.name, advice.assessed[i].measured) for i in advice.front]
        for row, note in enumerate(step_ratio_noise(rows)):
            m, item = rows[row][1], self.table.item(row, col)
            if m is None or item is None:
                continue
            item.setText(f"{m.step_ratio:.2f}{NOISE_MARK if note else ''}")
            lo, hi = m.step_ratio_range or (m.step_ratio, m.step_ratio)
            item.setToolTip(note or f"Median of {m.steps} timed steps ({lo:.2f}–{hi:.2f}× {self._reference}); "
                            f"{m.step_ms:.1f} ms per step")

    def _on_measured(self, index: int, measured: Measured) -> None:
        """One candidate measured (on the GUI thread): fill its row, re-check the noise marks."""
        advice = self.advice
        if advice is None or index not in advice.front:
            return
        advice.assessed[index].measured = measured
        row = advice.front.index(index)
        cells = _cells(advice.assessed[index])
        for col in (COLUMNS.index("measured peak"), COLUMNS.index("measured × full")):
            item = self.table.item(row, col)
            if item is not None:
                item.setText(cells[col])
        peak = self.table.item(row, COLUMNS.index("measured peak"))
        if peak is not None:
            peak.setToolTip(f"{measured.memory_source} of {advice.assessed[index].candidate.name}: "
                            f"{fmt_memory(measured.peak_bytes)} measured, {fmt_memory(advice.assessed[index].memory.peak)} "
                            "predicted")
        self._mark_noise()
        self.status.setText(f"Measured {self.measured_rows()} of {len(advice.front) - self._skipped} candidates …")

    def measured_rows(self) -> int:
        """Rows of the table whose measured columns are filled."""
        col = COLUMNS.index("measured peak")
        return sum(1 for r in range(self.table.rowCount()) if (it := self.table.item(r, col)) is not None
                   and it.text() not in ("", SKIPPED))

    def table_indices(self) -> list[int]:
        """What the table's rows show: indices into ``advice.assessed`` (the front), then
        :data:`~workbench.gui.advisor.train_each.AUTO_FREEZE` when the advice has auto-freeze."""
        advice = self.advice
        if advice is None:
            return []
        return [*advice.front, AUTO_FREEZE] if advice.auto_freeze is not None else list(advice.front)

    def auto_freeze_selected(self) -> bool:
        """Whether the selected row is auto-freeze."""
        rows = self.table.selectionModel().selectedRows()
        indices = self.table_indices()
        return bool(rows) and rows[0].row() < len(indices) and indices[rows[0].row()] == AUTO_FREEZE

    def selected_index(self) -> int | None:
        """Index into ``advice.assessed`` of the selected row (None: nothing selected, or auto-freeze)."""
        if self.advice is None:
            return None
        rows = self.table.selectionModel().selectedRows()
        if not rows or rows[0].row() >= len(self.advice.front):
            return None
        return self.advice.front[rows[0].row()]

    def selected(self) -> Assessment | None:
        """The selected candidate."""
        i = self.selected_index()
        return self.advice.assessed[i] if self.advice is not None and i is not None else None

    def _selection_changed(self) -> None:
        self.chart.show_advice(self.advice, self.selected_index())
        self._update_buttons()

    def _update_buttons(self) -> None:
        have = self.selected() is not None and not self.busy
        self.apply_button.setEnabled((have or (self.auto_freeze_selected() and not self.busy)) and self._c.tree is not None)
        self.save_button.setEnabled(have)
        self.measure_button.setEnabled(self.advice is not None and not self.busy and not self.measure_off_reason())
        self.train_button.setEnabled(self.advice is not None and not self.busy and not self.train_off_reason())
        self.resume_button.setEnabled(self.train_button.isEnabled())
        self.steps.setEnabled(not self.busy)
        self.retain.setEnabled(not self.busy)
        self.budget.setEnabled(not self.busy)
        self.suggest_button.setEnabled(not self.busy)

    # ------------------------------------------------------------------ actions
    def apply_selected(self) -> bool:
        """Put the selected candidate's rules in force as one undoable edit.

        Returns:
            True when the plan changed.
        """
        if self.auto_freeze_selected():
            return self._apply_auto_freeze()
        a = self.selected()
        if a is None:
            return False
        rules = a.candidate.plan.copy().rules

        def replace(plan: FreezePlan, _tree: Any) -> None:
            plan.rules = rules
            plan.stages = []

        changed = self._c.edit(f"Apply suggested plan: {a.candidate.name}", replace)
        self.status.setText(f"Applied: {a.candidate.name} (Edit → Undo reverts it)." if changed
                            else "The plan in force is already this one.")
        return changed

    def _apply_auto_freeze(self) -> bool:
        """Make every parameter trainable (one undoable edit) and turn auto-freeze on in the training options."""
        advice = self.advice
        assert advice is not None and advice.auto_freeze is not None
        from workbench.core.advisor.sweep_candidates import auto_freeze_choice

        name, plan, _ = auto_freeze_choice(advice.auto_freeze)

        def replace(p: FreezePlan, _tree: Any) -> None:
            p.rules = plan.rules
            p.stages = []

        changed = self._c.edit(f"Apply suggested plan: {name}", replace)
        if self._set_auto_freeze is None:
            self.status.setText(f"Applied the plan of {name} (every parameter trainable); auto-freeze is a training "
                                "setting: turn it on in the training panel's Options….")
            return changed
        self._set_auto_freeze(True)
        self.status.setText(f"Applied: {name}: every parameter trainable (Edit → Undo reverts it) and auto-freeze on "
                            "in the training options.")
        return True

    def save_selected(self, path: str) -> None:
        """Write the selected candidate as a plan file (with the loaded model's block).

        Args:
            path: the file.

        Raises:
            WorkbenchError: nothing is selected, or the file cannot be written.
        """
        a = self.selected()
        if a is None:
            raise WorkbenchError("select a candidate to save")
        plan = a.candidate.plan.copy()
        plan.model = dict(self._c.spec)
        plan.description = f"suggested: {a.candidate.name}"
        plan.save(path)

    def _save_clicked(self) -> None:
        a = self.selected()
        if a is None:
            return
        path = dialogs.save_file(self, "Save suggested plan", "suggested-plan.json", "Freeze plans (*.json)")
        if not path:
            return
        try:
            self.save_selected(path)
        except (WorkbenchError, OSError) as e:
            dialogs.error(self, "Cannot save the plan", str(e))
            return
        self.status.setText(f"Saved {a.candidate.name} to {path}.")

    def measure(self) -> bool:
        """Train each front candidate a few steps on a worker thread; the table gains measured columns.

        Returns:
            True when the measurement started.
        """
        advice, model = self.advice, self._c.model
        if advice is None or model is None or self.busy:
            return False
        off = self.measure_off_reason()
        if off:
            self.status.setText(off)
            return False
        memory = device_memory(self._device)
        full = next((a for a in advice.assessed if a.candidate.kind == "full" and not a.candidate.bn_eval), None)
        reference = full is None or full.memory.peak <= memory.available
        runnable = [i for i in advice.front if advice.assessed[i].memory.peak <= memory.available]
        skipped = [i for i in advice.front if i not in runnable]
        if not runnable:
            self.status.setText(f"Not measured: every candidate is predicted above the {fmt_bytes(memory.available)} "
                                f"of {memory.what} on {memory.device}.")
            return False
        from workbench.core.advisor.measure import measure_front
        from workbench.core.models.zoo import current_num_classes
        from workbench.core.training.config import TrainConfig

        shape = advice.input_shape
        assert isinstance(shape, tuple)  # the dialog advises for images or tokens (its own fields)
        text = len(shape) == 2
        sample = tuple(shape[1:]) if self._data_config() is not None else None  # CREPE's frames, not an image
        config = TrainConfig(model=dict(self._c.spec), num_classes=current_num_classes(model), data="synthetic",
                             image_size=None if text or sample else shape[-1], batch_size=shape[0], input_shape=sample,
                             optimizer=str(advice.settings.get("optimizer", "adamw")),
                             amp=str(advice.settings.get("amp", "off")), device=self._device, allow_download=False)
        progress, result, cancel = self._progress.changed.emit, self._progress.measured.emit, self._cancel
        cancel.clear()
        for a in advice.front_assessed:  # a new measurement: the rows fill in again as candidates finish
            a.measured = None
        self._fill()
        self._mark_skipped(skipped, memory)
        self._skipped = len(skipped)
        subset = dataclasses.replace(advice, front=runnable)  # the same assessments: results land in the rows

        def work() -> int:
            return measure_front(subset, config, MEASURE_STEPS, seq_len=shape[1] if text and not sample else None,
                                 progress=progress, on_result=result, stop=cancel.is_set, reference=reference)

        self.progress.setRange(0, 0)
        self.progress.setVisible(True)
        self.cancel_button.setVisible(True)
        self.cancel_button.setEnabled(True)
        left_out = (f"; {len(skipped)} skipped, predicted above the {fmt_bytes(memory.available)} of "
                    f"{memory.what}" if skipped else "")
        self._reference = "full fine-tuning" if reference else advice.assessed[runnable[0]].candidate.name
        first = ("full fine-tuning first, the reference" if reference else
                 f"full fine-tuning does not fit: step ratios × {self._reference}")
        self.status.setText(f"Measuring {len(runnable)} candidates ({first}){left_out} …")
        self._start(work, self._measure_done)
        return True

    def measure_off_reason(self) -> str:
        """Why *Measure* is off for the loaded model ("" when it is not).

        Returns:
            The reason (a structure-only model: measuring builds it for real), or "".
        """
        loaded = self._c.loaded
        if loaded is not None and loaded.meta:
            return (f"{loaded.label} is open structure only (on the meta device): measuring builds and trains every "
                    "candidate for real. Open it again without 'Structure only' to measure.")
        return ""

    def _mark_skipped(self, skipped: list[int], memory: DeviceMemory) -> None:
        """Say in each skipped row's measured peak why it was not measured."""
        advice = self.advice
        if advice is None:
            return
        col = COLUMNS.index("measured peak")
        for i in skipped:
            item = self.table.item(advice.front.index(i), col)
            if item is not None:
                item.setText(SKIPPED)
                item.setToolTip(f"Not measured: predicted at {fmt_memory(advice.assessed[i].memory.peak)}, above the "
                                f"{fmt_bytes(memory.available)} of {memory.what} on {memory.device}")

    def cancel_measure(self) -> None:
        """Stop a measurement at the next training step; the rows measured so far stay."""
        if self.busy:
            self._cancel.set()
            self.trainer.cancel.set()
            self.cancel_button.setEnabled(False)
            self.status.setText("Cancelling at the next step (a model being built is built first) …")

    def _on_progress(self, done: int, total: int) -> None:
        self.progress.setRange(0, total)
        self.progress.setValue(done)

    def _measure_done(self, count: int | None, error: str, details: str) -> None:
        cancelled = self._cancel.is_set()
        self._finish()
        total = (len(self.advice.front) if self.advice is not None else 0) - self._skipped
        if count is None:
            self.status.setText(f"Measuring failed after {self.measured_rows()} of {total} candidates: {error}")
            return
        if cancelled and count < total:
            self.status.setText(f"Cancelled: {count} of {total} candidates measured.")
            return
        source = next((a.measured.memory_source for a in (self.advice.front_assessed if self.advice else []) if a.measured is not None), "")
        skipped = f" {self._skipped} skipped: predicted above the memory available." if self._skipped else ""
        self.status.setText(f"Measured: {source} and median step time of {MEASURE_STEPS} real steps per candidate "
                            f"(⚠: steps spread wider than the gap to another row).{skipped}")

    # ------------------------------------------------------------------ learning (Train each)
    def train_off_reason(self) -> str:
        """Why *Train each* is off for the loaded model ("" when it is not).

        Returns:
            The reason (a structure-only model, no training settings, Optuna missing), or "".
        """
        loaded = self._c.loaded
        if loaded is not None and loaded.meta:
            return (f"{loaded.label} is open structure only (on the meta device): training each candidate builds "
                    "and trains it for real. Open it again without 'Structure only' to train each.")
        if self._train_config is None:
            return "Training each candidate needs the window's training settings (data, loss, metric)."
        return optuna_missing()

    def _learning_config(self, advice: Advice) -> TrainConfig:
        """The training panel's settings with the advice's batch and input size and the dialog's steps."""
        assert self._train_config is not None
        cfg = self._train_config()
        shape = advice.input_shape if isinstance(advice.input_shape, tuple) else self.input_shape()
        text = len(shape) == 2
        image = len(shape) == 4 and not shape_from_data(cfg)
        return cfg.replace(model=dict(self._c.spec), batch_size=shape[0],
                           image_size=shape[-1] if image else cfg.image_size,
                           seq_len=shape[1] if text and self._text else cfg.seq_len,
                           steps=self.steps.value(), epochs=None, log_every=1, save_dir=None, metrics_path=None,
                           tensorboard_dir=None, allow_download=False, auto_freeze=False)

    def _sweep_rows(self) -> tuple[list[int], str]:
        """The table's rows *Train each* trains (they fit the budget and the memory available), or why none."""
        advice = self.advice
        assert advice is not None
        memory = device_memory(self._device)
        rows = [i for i in self.table_indices() if (advice.auto_freeze.fits and advice.auto_freeze.peak_bytes <= memory.available
                if i == AUTO_FREEZE and advice.auto_freeze is not None
                else advice.assessed[i].fits and advice.assessed[i].memory.peak <= memory.available)]
        why = "" if rows else (f"Nothing to train: no candidate fits in {fmt_bytes(advice.budget_bytes)} and the "
                               f"{fmt_bytes(memory.available)} of {memory.what} on {memory.device}.")
        return rows, why

    def _sweep_candidates(self, rows: list[int]) -> tuple[TrainConfig, list[Any]]:
        """The sweep's settings and its candidates, one per row (raises WorkbenchError on bad settings)."""
        from workbench.core.advisor.sweep import cross_learning_rates
        from workbench.core.advisor.sweep_candidates import auto_freeze_choice

        advice = self.advice
        assert advice is not None
        cfg = self._learning_config(advice)
        return cfg, cross_learning_rates([auto_freeze_choice(advice.auto_freeze)
                                          if i == AUTO_FREEZE and advice.auto_freeze is not None
                                          else (advice.assessed[i].candidate.name, advice.assessed[i].candidate.plan, {})
                                          for i in rows], [cfg.lr])

    def _runs_dir(self) -> Path:
        from workbench.gui.training.runs_tab import default_runs_dir

        return self._runs_folder or default_runs_dir()

    def sweeps_dir(self) -> Path:
        """The app's folder of sweeps, beside its runs folder (``<runs>/../sweeps``)."""
        return sweeps_folder(self._runs_dir())

    def say(self, text: str) -> None:
        """Show one line in the status."""
        self.status.setText(text)

    def sweep_identity(self) -> dict[str, Any] | str:
        """The sweep *Train each* would run now (:meth:`TrainEach.identity`), or why there is none (one line)."""
        if self.advice is None or self.train_off_reason():
            return self.train_off_reason() or "Suggest first"
        rows, nothing = self._sweep_rows()
        if not rows:
            return nothing
        try:
            cfg, candidates = self._sweep_candidates(rows)
            return self.trainer.identity(candidates, cfg, steps=self.steps.value(),
                                         retain=self.retain.text().strip() or None)
        except WorkbenchError as e:
            return str(e)

    def train_each(self, folder: Path | None = None) -> bool:
        """Train each candidate that fits for the same steps on a worker thread (a plan sweep).

        The candidates are the table's rows that fit the budget and whose predicted peak is within
        the memory the device has available. Each row's learning columns fill in as its candidate
        finishes; the *Learning* chart is redrawn each time.

        Args:
            folder: a sweep folder to resume (its done rows fill at once, the rest train); None: a new one.

        Returns:
            True when the sweep started (False: nothing to train, bad settings, or busy; the
            status line says why).
        """
        advice, model = self.advice, self._c.model
        if advice is None or model is None or self.busy:
            return False
        off = self.train_off_reason()
        if off:
            self.status.setText(off)
            return False
        rows, nothing = self._sweep_rows()
        if not rows:
            self.status.setText(nothing)
            return False
        from workbench.gui.training.code_confirm import confirm_task_code

        try:
            cfg, candidates = self._sweep_candidates(rows)
            folder = folder or sweep_folder(self._runs_dir())
            work = self.trainer.work(candidates, cfg, steps=self.steps.value(), folder=folder, model=model,
                                     model_lock=self._c.model_lock, retain=self.retain.text().strip() or None,
                                     dataset=self._dataset)
        except WorkbenchError as e:
            self.status.setText(str(e))
            return False
        retain = self.retain.text().strip()
        confirmed = confirm_task_code(self, cfg) and (  # py: data, loss, metric, retain data: shown first
            not retain.startswith("py:") or confirm_task_code(self, cfg.replace(data=retain, val=None)))
        if not confirmed:
            self.status.setText("Not trained: the training settings' code was not confirmed.")
            return False
        self._swept = {c.id: i for c, i in zip(candidates, rows, strict=True)}
        self._running = ""
        self._resuming, self._done_before = folder.exists(), 0
        self.sweep_chart.set_report(None)
        self._show_learning(retain=bool(self.retain.text().strip()))
        self._fill()
        self.charts.setCurrentWidget(self.sweep_chart)
        self.progress.setRange(0, len(rows) * self.steps.value())
        self.progress.setValue(0)
        self.progress.setVisible(True)
        self.cancel_button.setVisible(True)
        self.cancel_button.setEnabled(True)
        left_out = len([i for i in self.table_indices() if i not in rows])
        skipped = f"; {left_out} left out: above the budget or the memory available" if left_out else ""
        verb = "Resuming" if self._resuming else "Training"
        self.status.setText(f"{verb} {len(rows)} candidates for {self.steps.value()} steps each in {folder}"
                            f"{skipped} …")
        self._start(work, self._train_done)
        return True

    def _show_learning(self, *, retain: bool) -> None:
        """Show the learning columns (retention only when the sweep has retain data)."""
        for k, name in enumerate(LEARNING_COLUMNS):
            self.table.setColumnHidden(len(COLUMNS) + k, name == "retention" and not retain)

    def _set_learning(self, row: int, index: int) -> None:
        """Fill a table row's learning columns from the last sweep's report (empty when it has no row)."""
        report = self.trainer.report
        cid = next((c for c, i in self._swept.items() if i == index), None)
        found = next((r for r in report.rows if r.id == cid), None) if report is not None and cid else None
        if found is not None and found.status == "waiting" and cid == self._running:  # started since the report
            found = dataclasses.replace(found, status="running")
        texts, tips = learning_cells(found)
        for k, (text, tip) in enumerate(zip(texts, tips, strict=True)):
            item = self.table.item(row, len(COLUMNS) + k)
            if item is None:
                item = QTableWidgetItem()
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(row, len(COLUMNS) + k, item)
            item.setText(text)
            item.setToolTip(tip)

    def trained_rows(self) -> int:
        """Rows whose candidate finished in the last sweep (trained to the end, stopped early, or failed)."""
        report = self.trainer.report
        if report is None:
            return 0
        return sum(1 for r in report.rows if r.status in ("completed", "pruned", "failed"))

    def _on_sweep_event(self, kind: str, data: dict[str, Any]) -> None:
        """A sweep event on the GUI thread: progress, a row marked training, or a row filled."""
        if kind == "finished":
            self.sweepRunsWritten.emit()
        if kind == "resumed":  # the rows done in the folder fill at once
            self._done_before = sum(1 for r in data["report"].rows if r.status in ("completed", "pruned", "failed"))
            data = {**data, "id": next(iter(self._swept), None)}
        advice = self.advice
        if advice is None or data.get("id") not in self._swept:
            return
        index = self._swept[data["id"]]
        indices = self.table_indices()
        row = indices.index(index) if index in indices else None
        if kind == "step":
            steps = self.steps.value()
            self.progress.setValue(min(self.progress.maximum(), self.trained_rows() * steps + int(data["step"])))
        elif kind == "started" and row is not None:
            self._running = data["id"]
            item = self.table.item(row, len(COLUMNS) + LEARNING_COLUMNS.index("stopped early"))
            if item is not None:
                item.setText("training …")
        elif kind in ("finished", "resumed"):
            report = data.get("report")
            if report is not None:
                self.trainer.report = report
                header = self.table.horizontalHeaderItem(len(COLUMNS))
                if header is not None:
                    header.setText(report.objective)
                self.sweep_chart.set_report(report)
                for r, i in enumerate(indices):
                    self._set_learning(r, i)
            self.progress.setValue(self.trained_rows() * self.steps.value())
            self.status.setText(f"Trained {self.trained_rows()} of {len(self._swept)} candidates …")

    def _train_done(self, report: SweepReport | None, error: str, details: str) -> None:
        cancelled = self.trainer.cancel.is_set()
        self._running = ""
        self._finish()
        self.sweepRunsWritten.emit()
        total = len(self._swept)
        if report is None:
            resume = self._resuming and not details and self.trained_rows() == 0  # another sweep's folder, a bad study
            self.status.setText(f"Not resumed: {error}" if resume else
                                f"Train each failed after {self.trained_rows()} of {total} candidates: {error}")
            return
        self.trainer.report = report
        self.sweep_chart.set_report(report)
        advice = self.advice
        if advice is not None:
            for r, i in enumerate(self.table_indices()):
                self._set_learning(r, i)
        if cancelled and self.trained_rows() < total:
            self.status.setText(f"Cancelled: {self.trained_rows()} of {total} candidates trained; the rows trained "
                                f"so far stay (runs in {self.trainer.folder}); Resume trains the rest.")
            return
        rec = report.rows[report.recommended] if report.recommended is not None else None
        if rec is not None and advice is not None and rec.id in self._swept:
            self.table.selectRow(self.table_indices().index(self._swept[rec.id]))
        pruned = sum(1 for r in report.rows if r.status == "pruned")
        apply = " (selected: Apply puts it in force)" if rec is not None else ""
        before = f"; {self._done_before} of them before this resume" if self._done_before else ""
        self.status.setText(f"Trained {total} candidates ({pruned} stopped early{before}), runs in {self.trainer.folder}. "
                            f"{report.recommendation[:1].upper()}{report.recommendation[1:]}{apply}")

    # ------------------------------------------------------------------ closing
    def done(self, result: int) -> None:
        """Close, after any worker thread has ended (its result is dropped)."""
        task = self._task
        if task is not None:
            self._cancel.set()  # a measurement or a sweep ends at its next step
            self.trainer.cancel.set()
            task.done.disconnect()
            task.wait()
            self._finish()
        super().done(result)


def _is_text(model: Any) -> bool:
    try:
        return is_text_model(model)
    except WorkbenchError:
        return False


def _cells(a: Assessment) -> list[str]:
    """A row's texts: the predicted columns from ``a.memory``, the measured ones from ``a.measured`` only."""
    m = a.measured
    return [a.candidate.name, fmt_memory(a.memory.peak), f"{a.step_ratio:.2f}", fmt_count(a.trainable_params),
            "yes" if a.fits else "no", fmt_memory(m.peak_bytes) if m is not None else "",
            f"{m.step_ratio:.2f}" if m is not None else ""]
