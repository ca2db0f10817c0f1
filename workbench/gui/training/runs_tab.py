"""The Runs tab: every training run, compared side by side; selected runs overlay the plots.

The table lists the runs of :class:`~workbench.gui.training.run_controller.RunController` (the one in
progress and those kept on disk) with median step time, peak memory, trainable parameters,
final loss, the validation loss and accuracy (the last, and the best where it differs; a
dash for runs that did not validate), the setup (optimizer, LR, schedule, validation,
batch, classes, plan) and the user's tags and notes.
Selecting runs overlays their curves in the plots (each run has a colour, shown as a
swatch); with two or more selected, a line compares them with the oldest selected run,
plan segment by plan segment (:meth:`RunRecord.segments`), and their validation results:
the cost of a plan next to its quality.

The tab is a view over :mod:`workbench.core.runs`: the numbers (:meth:`RunRecord.summarize`),
their words (:mod:`workbench.core.runs.text`) and the comparison line
(:func:`workbench.core.runs.compare.compare_runs`) are the ones ``workbench runs`` prints.

A run is renamed in place (double-click or F2 on its name); the tags and notes of the
selected run are edited below the table. Both are kept in the run's ``run.json``.

The candidates of the app's plan sweeps (Suggest… ▸ *Train each*, kept in ``<runs>/../sweeps``)
are listed too, each with its sweep in the *Sweep* column (``<sweep> · <candidate>``, shown
when a listed run has one); the list takes in a sweep's runs as each candidate finishes and
when the sweep ends. A sweep's run is renamed and annotated like any other, but not deleted
on its own: its sweep's study holds the candidate's result, so *Delete* keeps it and says so
in one line that names the sweep (delete the sweep's folder to remove the sweep with its runs).

Runs are stored in :func:`default_runs_dir` (``$WORKBENCH_RUNS_DIR`` when set), so they come
back when the app starts again. Runs written into the store or the app's sweeps while the app is
open (``workbench train --save``, ``workbench sweep``) are listed within a moment
(:class:`~workbench.gui.training.runs_watch.RunsWatcher`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from PySide6.QtCore import QStandardPaths, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QIcon, QPalette, QPixmap
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from workbench.core.runs.compare import compare_runs
from workbench.core.runs.compare import compare_text as core_compare_text
from workbench.core.runs.record import RunRecord, RunStoreError, RunSummary, Validation
from workbench.core.runs.store import RUNS_DIR_ENV
from workbench.core.runs.sweeps import refusal
from workbench.core.runs.text import (
    NO_VALUE,
    cache_text,
    loss_text,
    plan_text,
    setup_text,
    step_time_text,
    trainable_text,
    val_acc_text,
    val_loss_text,
)
from workbench.core.training.metrics import fmt_memory
from workbench.gui import dialogs
from workbench.gui.training.plots import run_color
from workbench.gui.training.run_controller import RunController
from workbench.gui.training.runs_watch import RunsWatcher

__all__ = [
    "COLUMNS",
    "RUNS_DIR_ENV",
    "RunsPanel",
    "cache_text",
    "compare_text",
    "default_runs_dir",
    "export_run_csv",
    "setup_text",
]

#: Table columns.
COLUMNS = (
    "Run", "Status", "Steps", "Step time", "Peak memory", "Trainable", "Final loss", "Val loss", "Val acc", "Setup",
    "Sweep", "Tags · notes",
)
_NOTES_COLUMN = COLUMNS.index("Tags · notes")
_SWEEP_COLUMN = COLUMNS.index("Sweep")
#: The Run column's width range (pixels): as wide as its longest name within these.
NAME_WIDTH_MIN, NAME_WIDTH_MAX = 112, 360
#: Milliseconds after the last keystroke in the notes before they are saved.
_NOTES_SAVE_DELAY_MS = 600
_RECORD_ROLE = int(Qt.ItemDataRole.UserRole) + 1


def default_runs_dir() -> Path:
    """Where runs are kept: ``$WORKBENCH_RUNS_DIR``, else the per-user data folder + ``runs``.

    Returns:
        The folder (``~/.local/share/FreezeWorkbench/Freeze Workbench/runs`` on Linux).
    """
    env = os.environ.get(RUNS_DIR_ENV)
    if env:
        return Path(env).expanduser()
    base = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.AppDataLocation)
    return Path(base or Path.home() / ".freeze-workbench") / "runs"


def compare_text(base: RunRecord, others: list[RunRecord]) -> tuple[str, str]:
    """The comparison line of runs against a base run (:func:`workbench.core.runs.compare.compare_text`).

    Args:
        base: the run the others are compared with.
        others: the runs to compare.

    Returns:
        ``(html, tooltip)``: one line per run with the ratios in bold, and each run's
        segments spelled out.
    """
    c = core_compare_text(base, others)
    return c.text(as_html=True), "\n".join(c.segments)


def _peak_item(r: RunRecord, s: RunSummary) -> _Item:
    """The Runs table's peak memory cell: the run's one peak number, its measure in the tooltip."""
    item = _Item(fmt_memory(s.peak_memory), s.peak_memory)
    tip = s.memory_source or "peak memory"
    if s.peak_rss is not None:
        tip += f"\npeak RSS {fmt_memory(s.peak_rss)} (process resident set, absolute)"
    item.setToolTip(tip)
    return item


def _cache_tip(frozen_cache: Any, note: Any) -> str:
    """The tooltip line of a run's frozen-prefix cache (cut, rows, memory and disk, hits)."""
    from workbench.core.training.frozen_cache import cache_line

    if isinstance(frozen_cache, dict) and frozen_cache.get("cut"):
        return f"\nfrozen-prefix cache: {cache_line(frozen_cache)}"
    if isinstance(note, str) and note:
        return f"\n{note}"
    return ""


def _val_cells(v: Validation | None) -> tuple[tuple[str, float | None, str], tuple[str, float | None, str]]:
    """The loss and accuracy cells of a run's validation: ``(text, sort key, tooltip)`` each;
    a dash without validation (or without accuracy: not a classifier)."""
    if v is None:
        none = (NO_VALUE, None, "The run did not validate (Options… → Validate during training)")
        return none, none
    loss_tip = f"last: {v.loss:.4f} after step {v.step}\nbest: {v.best_loss:.4f} after step {v.best_step}"
    if v.acc is None:
        acc: tuple[str, float | None, str] = (NO_VALUE, None, "No accuracy: the outputs are not class logits")
    else:
        best = v.best_acc if v.best_acc is not None else v.acc
        acc = (val_acc_text(v), v.acc, f"last: {100 * v.acc:.1f} % after step {v.step}\nbest: {100 * best:.1f} %")
    return (val_loss_text(v), v.loss, loss_tip), acc


def _sweep_item(r: RunRecord) -> _Item:
    """The Sweep cell: ``<sweep> · <candidate>`` for a sweep's run, its folder in the tooltip; empty otherwise."""
    if r.sweep is None:
        return _Item("")
    item = _Item(r.sweep.text)
    item.setToolTip(f"Candidate {r.sweep.candidate} of the sweep {r.sweep.sweep}\nfolder: {r.sweep.folder}\n"
                    "Kept with its sweep: delete the sweep's folder to remove it")
    return item


def _swatch(color: QColor) -> QIcon:
    pm = QPixmap(12, 12)
    pm.fill(color)
    return QIcon(pm)


class _Item(QTableWidgetItem):
    """A cell that sorts by a number when it has one."""

    def __init__(self, text: str, key: float | str | None = None) -> None:
        super().__init__(text)
        self._key = key
        self.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable)

    def __lt__(self, other: QTableWidgetItem) -> bool:
        a, b = self._key, getattr(other, "_key", None)
        if isinstance(a, (int, float)) and isinstance(b, (int, float)):
            return a < b
        return str(a if a is not None else self.text()) < str(b if b is not None else other.text())


class RunsPanel(QWidget):
    """The runs table, the comparison line, the tags and notes editor and the run actions.

    Signals:
        selectionChanged(records): the selected runs changed (list of :class:`RunRecord`).
        usePlanRequested(record): the user wants the run's plan as the window's plan.
        exportRequested(record): export the run's metrics as CSV.

    Args:
        runs: the window's runs.
        parent: Qt parent.
    """

    selectionChanged = Signal(list)
    usePlanRequested = Signal(object)
    exportRequested = Signal(object)

    def __init__(self, runs: RunController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.runs = runs
        self.table = QTableWidget(0, len(COLUMNS), self)
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.table.setEditTriggers(  # only the name column is editable: rename in place
            QAbstractItemView.EditTrigger.DoubleClicked | QAbstractItemView.EditTrigger.EditKeyPressed
        )
        self.table.verticalHeader().setVisible(False)
        self.table.setAlternatingRowColors(True)
        self.table.setWordWrap(False)
        self.table.setSortingEnabled(False)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(True)
        header.moveSection(header.visualIndex(_SWEEP_COLUMN), 1)  # shown beside the name; COLUMNS keeps its order
        self._name_width_by_user = False
        self._sizing_names = True
        self.table.setColumnWidth(0, NAME_WIDTH_MIN)
        self._sizing_names = False
        header.sectionResized.connect(self._name_column_resized)
        for column, tip in (
            (3, "Median time of one training step (forward, backward, optimizer)"),
            (4, "Peak memory: CUDA peak allocated; CPU peak tensor bytes of a step (weights, gradients, optimizer state, activations)"),
            (COLUMNS.index("Val loss"), "The last validation loss, and the best one where it was lower"),
            (COLUMNS.index("Val acc"), "The last validation accuracy (classifiers), and the best one where it was higher"),
            (0, "The run's name: double-click or F2 to rename it"),
            (_NOTES_COLUMN, "Your tags and notes (edit them below the table)"),
            (_SWEEP_COLUMN, "The plan sweep (Suggest… ▸ Train each, workbench sweep) whose candidate the run is: "
                            "its folder's name · the candidate"),
        ):
            item = self.table.horizontalHeaderItem(column)
            if item is not None:
                item.setToolTip(tip)
        self.table.itemSelectionChanged.connect(self._selection_changed)
        self.table.itemDoubleClicked.connect(lambda i: self._export() if i.column() != 0 else None)
        self.table.itemChanged.connect(self._item_changed)
        self.compare = QLabel(self)
        self.compare.setWordWrap(True)
        self.compare.setTextFormat(Qt.TextFormat.RichText)
        self.tags_edit = QLineEdit(self)
        self.tags_edit.setPlaceholderText("baseline, lr sweep …")
        self.tags_edit.setToolTip("Tags of the selected run, separated by commas (saved when you press Enter or leave the field)")
        self.tags_edit.editingFinished.connect(self.save_notes)
        self.notes_edit = QPlainTextEdit(self)
        self.notes_edit.setPlaceholderText("Notes on the selected run")
        self.notes_edit.setToolTip("Notes on the selected run (saved as you type)")
        self.notes_edit.setTabChangesFocus(True)
        self.notes_edit.setFixedHeight(self.notes_edit.fontMetrics().lineSpacing() * 3 + 12)
        self._notes_timer = QTimer(self)
        self._notes_timer.setSingleShot(True)
        self._notes_timer.setInterval(_NOTES_SAVE_DELAY_MS)
        self._notes_timer.timeout.connect(self.save_notes)
        self.notes_edit.textChanged.connect(self._notes_typed)
        self._notes_record: RunRecord | None = None
        editor = QFormLayout()
        editor.setContentsMargins(0, 0, 0, 0)
        editor.addRow("Tags", self.tags_edit)
        editor.addRow("Notes", self.notes_edit)
        self.note = QLabel(self)
        self.note.setWordWrap(True)
        self.note.setForegroundRole(QPalette.ColorRole.PlaceholderText)  # secondary text, in either theme
        self.use_plan_button = QPushButton("Use Plan", self)
        self.use_plan_button.setToolTip("Make the selected run's starting plan the window's plan (undoable)")
        self.use_plan_button.clicked.connect(self._use_plan)
        self.export_button = QPushButton("Export CSV…", self)
        self.export_button.setToolTip("Write the selected run's metrics (every step) to a CSV file")
        self.export_button.clicked.connect(self._export)
        self.delete_button = QPushButton("Delete", self)
        self.delete_button.setToolTip("Delete the selected runs from the list and from disk")
        self.delete_button.clicked.connect(self._delete)
        buttons = QHBoxLayout()
        buttons.setContentsMargins(0, 0, 0, 0)
        buttons.addWidget(QLabel("Select runs to overlay them in the plots.", self), 1)
        buttons.addWidget(self.use_plan_button)
        buttons.addWidget(self.export_button)
        buttons.addWidget(self.delete_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addLayout(buttons)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.compare)
        layout.addLayout(editor)
        layout.addWidget(self.note)
        self.note.setText(f"Runs are kept in {runs.store.folder}")
        if runs.load_problems:
            self.note.setText(self.note.text() + f" · {len(runs.load_problems)} unreadable run(s) skipped")
            self.note.setToolTip("\n".join(runs.load_problems))
        runs.runsChanged.connect(self.refresh)
        runs.runStarted.connect(lambda _r: self.refresh())
        runs.metricsReceived.connect(self._live_update)
        runs.runEnded.connect(self._ended)
        self.watcher = RunsWatcher(runs, self)  # runs written into the store or the sweeps from outside
        self._updating = False
        self.refresh()
        self._load_notes()

    def showEvent(self, event: Any) -> None:
        super().showEvent(event)
        if self.runs.current is not None:
            self.refresh()

    # ------------------------------------------------------------ table
    def color_index(self, record: RunRecord) -> int:
        """The colour index of a run (its position among all runs)."""
        try:
            return self.runs.records.index(record)
        except ValueError:
            return 0

    def refresh(self) -> None:
        """Rebuild the table from the runs (newest first), keeping the selection."""
        selected = {r.id for r in self.selected()}
        self._updating = True
        try:
            records = list(reversed(self.runs.records))
            self.table.setRowCount(len(records))
            for row, r in enumerate(records):
                self._fill(row, r)
            self.table.setColumnHidden(_SWEEP_COLUMN, not any(r.sweep is not None for r in records))
            self.select([r for r in records if r.id in selected])
        finally:
            self._updating = False
        self._fit_names()
        self._update_buttons()
        self._update_compare()

    def _fit_names(self) -> None:
        """Widen the Run column to its longest name (up to :data:`NAME_WIDTH_MAX` px) unless
        the user sized it: a name is cut only when the table has no room for it."""
        if self._name_width_by_user:
            return
        want = max(NAME_WIDTH_MIN, min(NAME_WIDTH_MAX, self.table.sizeHintForColumn(0) + 8))
        if want != self.table.columnWidth(0):
            self._sizing_names = True
            self.table.setColumnWidth(0, want)
            self._sizing_names = False

    def _name_column_resized(self, column: int, _old: int, _new: int) -> None:
        if column == 0 and not self._sizing_names:
            self._name_width_by_user = True

    def _row_of(self, record: RunRecord) -> int:
        for row in range(self.table.rowCount()):
            item = self.table.item(row, 0)
            if item is not None and item.data(_RECORD_ROLE) is record:
                return row
        return -1

    def _fill(self, row: int, r: RunRecord) -> None:
        s = r.summarize()
        val_items = []
        for text, key, tip in _val_cells(s.validation):
            item = _Item(text, key)
            item.setToolTip(tip)
            val_items.append(item)
        name = _Item(r.name, r.created)
        name.setFlags(name.flags() | Qt.ItemFlag.ItemIsEditable)
        name.setIcon(_swatch(run_color(self.color_index(r))))
        name.setData(_RECORD_ROLE, r)
        name.setToolTip(
            f"{r.name}\n{r.model.get('label', '')} · {r.model.get('note', '')}\n"
            f"started {r.created.replace('T', ' ')[:19]}\nfolder: {r.folder}"
        )
        status = _Item(r.status)
        status.setToolTip(r.message or r.status)
        color = {"completed": "#1a7f37", "failed": "#c62828", "nonfinite": "#c62828", "running": "#1f5fbf"}.get(r.status)
        if color:
            status.setForeground(QColor(color))
        if r.verify is not None:
            ok = bool(r.verify.get("ok"))
            status.setText(f"{r.status} {'✓' if ok else '✗'}")
            status.setToolTip(f"{r.message or r.status}\nverify: {'OK' if ok else 'FAILED'}")
        total_steps = r.summary.get("total_steps")
        steps_text = f"{s.steps}" + (f" / {total_steps}" if r.running and total_steps else "")
        cells = [
            name,
            status,
            _Item(steps_text, s.steps),
            _Item(step_time_text(s), s.step_ms),
            _peak_item(r, s),
            _Item(trainable_text(s), s.trainable),
            _Item(loss_text(s), s.final_loss),
            *val_items,
            _Item(setup_text(r.config, num_classes=r.num_classes(), plan=r.plan, seq_len=r.summary.get("seq_len"),
                             frozen_cache=r.summary.get("frozen_cache"))),
            _sweep_item(r),
            _Item(" ".join(f"[{t}]" for t in r.tags) + (" " if r.tags and r.notes else "") + " ".join(r.notes.split())),
        ]
        cells[COLUMNS.index("Setup")].setToolTip(
            ", ".join(f"{k}={v}" for k, v in r.config.items() if v not in (None, False, ""))
            + f"\nplan: {plan_text(r.plan, most=50)}"
            + _cache_tip(r.summary.get("frozen_cache"), r.summary.get("frozen_cache_note"))
        )
        if r.notes or r.tags:
            cells[-1].setToolTip(("tags: " + ", ".join(r.tags) + "\n" if r.tags else "") + r.notes)
        for col, item in enumerate(cells):
            self.table.setItem(row, col, item)

    def _live_update(self, _batch: list) -> None:
        """Steps of the running run (the other numbers are filled in when it ends; a median
        over a growing run at every batch would cost the training thread GIL time)."""
        r = self.runs.current
        if r is None or not self.isVisible():
            return
        row = self._row_of(r)
        item = self.table.item(row, 2) if row >= 0 else None
        if item is not None:
            total = r.summary.get("total_steps")
            item.setText(f"{r.steps()}" + (f" / {total}" if total else ""))

    def _ended(self, record: RunRecord) -> None:
        self.refresh()

    # ------------------------------------------------------------ selection
    def selected(self) -> list[RunRecord]:
        """The selected runs, in table order."""
        rows = sorted({i.row() for i in self.table.selectedIndexes()})
        out = []
        for row in rows:
            item = self.table.item(row, 0)
            rec = item.data(_RECORD_ROLE) if item is not None else None
            if isinstance(rec, RunRecord):
                out.append(rec)
        return out

    def select(self, records: list[RunRecord]) -> None:
        """Select these runs (the plots overlay them).

        Args:
            records: runs to select; others are deselected.
        """
        sm = self.table.selectionModel()
        self.table.clearSelection()
        for r in records:
            row = self._row_of(r)
            if row >= 0:
                sm.select(self.table.model().index(row, 0), sm.SelectionFlag.Select | sm.SelectionFlag.Rows)

    def _selection_changed(self) -> None:
        if self._updating:
            return
        self._load_notes()
        self._update_buttons()
        self._update_compare()
        self.selectionChanged.emit(self.selected())

    def _update_buttons(self) -> None:
        sel = self.selected()
        one = len(sel) == 1
        self.use_plan_button.setEnabled(one and bool(sel[0].plan))
        self.export_button.setEnabled(one)
        self.delete_button.setEnabled(bool(sel) and all(r is not self.runs.current for r in sel))

    def _update_compare(self) -> None:
        sel = sorted(self.selected(), key=lambda r: (r.created, r.id))
        if len(sel) < 2:
            self.compare.setText("")
            self.compare.setToolTip("")
            return
        for r in sel:  # the segments need the per-step metrics (read once, kept by the record)
            if not r.metrics_loaded:
                self.runs.load_metrics(r)
        c = compare_runs(sel)
        self.compare.setText(c.text(as_html=True) if c else "")
        self.compare.setToolTip("\n".join(c.segments) if c else "")

    # ------------------------------------------------------------ rename, tags, notes
    def _item_changed(self, item: QTableWidgetItem) -> None:
        if self._updating or item.column() != 0:
            return
        rec = item.data(_RECORD_ROLE)
        if not isinstance(rec, RunRecord):
            return
        if not self.runs.rename(rec, item.text()):  # refused or unchanged: show the kept name
            self._updating = True
            try:
                item.setText(rec.name)
            finally:
                self._updating = False
            return
        self.selectionChanged.emit(self.selected())  # legends show the new name

    def rename(self, record: RunRecord) -> None:
        """Open the in-place editor on a run's name.

        Args:
            record: the run.
        """
        row = self._row_of(record)
        if row >= 0:
            self.table.setCurrentCell(row, 0)
            item = self.table.item(row, 0)
            if item is not None:
                self.table.editItem(item)

    def _load_notes(self) -> None:
        """Show the tags and notes of the selected run (the editor is off unless one run is selected)."""
        self.save_notes()
        sel = self.selected()
        rec = sel[0] if len(sel) == 1 else None
        self._notes_record = rec
        for w in (self.tags_edit, self.notes_edit):
            w.blockSignals(True)
        try:
            self.tags_edit.setText(", ".join(rec.tags) if rec else "")
            self.notes_edit.setPlainText(rec.notes if rec else "")
        finally:
            for w in (self.tags_edit, self.notes_edit):
                w.blockSignals(False)
        self.tags_edit.setEnabled(rec is not None)
        self.notes_edit.setEnabled(rec is not None)

    def _notes_typed(self) -> None:
        if self._notes_record is not None:
            self._notes_timer.start()

    def save_notes(self) -> bool:
        """Save the edited tags and notes to the run they belong to (now, not after the delay).

        Returns:
            True when something changed and was saved.
        """
        self._notes_timer.stop()
        rec = self._notes_record
        if rec is None:
            return False
        return self.runs.annotate(rec, notes=self.notes_edit.toPlainText(), tags=self.tags_edit.text())

    def hideEvent(self, event: Any) -> None:
        self.save_notes()
        super().hideEvent(event)

    # ------------------------------------------------------------ actions
    def _use_plan(self) -> None:
        sel = self.selected()
        if len(sel) == 1:
            self.usePlanRequested.emit(sel[0])

    def _export(self) -> None:
        sel = self.selected()
        if len(sel) == 1:
            self.exportRequested.emit(sel[0])

    def _delete(self) -> None:
        sel = [r for r in self.selected() if r is not self.runs.current]
        kept = [r for r in sel if r.sweep is not None]  # a sweep's study holds their results: never deleted alone
        sel = [r for r in sel if r.sweep is None]
        line = ""
        if kept:
            line = refusal(kept[0].sweep, kept[0].name) if len(kept) == 1 else (  # type: ignore[arg-type]
                f"{len(kept)} runs of sweeps are kept: each sweep's study holds its candidates' results; delete a "
                f"sweep's folder (here {kept[0].sweep.folder}) to remove the sweep with its runs")  # type: ignore[union-attr]
            self.note.setText(line)
        if not sel:
            if line:
                dialogs.info(self, "Runs of a sweep are kept", line)
            return
        what = sel[0].name if len(sel) == 1 else f"{len(sel)} runs"
        question = f"Delete {what} from the list and from disk?" + (f"\n\n{line}" if line else "")
        answer = dialogs.ask(self, "Delete runs", question, ("Delete", "Cancel"), "Cancel")
        if answer == "Delete":
            self.runs.delete(sel)


def export_run_csv(parent: QWidget, runs: RunController, record: RunRecord, start_dir: str | Path) -> str | None:
    """Ask for a file and write a run's metrics as CSV.

    Args:
        parent: the dialog's parent.
        runs: the window's runs (their store).
        record: the run.
        start_dir: folder the file dialog starts in.

    Returns:
        The path written, or None when cancelled or it failed (an error dialog is shown).
    """
    stem = record.name.replace("#", "run").replace(" · ", "_").replace(" ", "_")
    path = dialogs.save_file(parent, "Export metrics as CSV", str(Path(start_dir) / f"{stem}.csv"), "CSV files (*.csv)")
    if not path:
        return None
    if not path.lower().endswith(".csv"):
        path += ".csv"
    try:
        runs.store.export_csv(record, path)
    except RunStoreError as e:
        dialogs.error(parent, "Cannot export metrics", str(e))
        return None
    return path
