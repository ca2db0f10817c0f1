"""The Runs tab: every training run, compared side by side; selected runs overlay the plots.

The table lists the runs of :class:`~workbench.gui.training.run_controller.RunController` (the one in
progress and those kept on disk) with median step time, peak memory, trainable parameters and
final loss. Selecting runs overlays their curves in the plots (each run has a colour, shown
as a swatch); with two or more selected, a line compares them with the first selected run.

Runs are stored in :func:`default_runs_dir` (``$WORKBENCH_RUNS_DIR`` when set), so they come
back when the app starts again.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from PySide6.QtCore import QStandardPaths, Qt, Signal
from PySide6.QtGui import QColor, QIcon, QPixmap
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from workbench.gui import dialogs
from workbench.core.formatting import fmt_count, fmt_percent
from workbench.gui.training.plots import run_color
from workbench.gui.training.run_controller import RunController
from workbench.gui.training.run_store import RunRecord, RunStoreError

__all__ = ["COLUMNS", "RUNS_DIR_ENV", "RunsPanel", "default_runs_dir", "export_run_csv", "setup_text"]

#: Environment variable that overrides the runs folder (tests point it at a temporary folder).
RUNS_DIR_ENV = "WORKBENCH_RUNS_DIR"
#: Table columns.
COLUMNS = ("Run", "Status", "Steps", "Step time", "Peak memory", "Trainable", "Final loss", "Setup")
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


def setup_text(config: dict[str, Any]) -> str:
    """A run's setup in a few words: ``adamw bs16 64px cpu bf16``.

    Args:
        config: the run's ``TrainConfig`` dict.

    Returns:
        The text.
    """
    parts = [str(config.get("optimizer", "?")), f"bs{config.get('batch_size', '?')}"]
    if config.get("image_size"):
        parts.append(f"{config['image_size']}px")
    parts.append(str(config.get("device", "auto")))
    if config.get("amp") and config.get("amp") != "off":
        parts.append(str(config["amp"]))
    data = str(config.get("data", "synthetic"))
    if not data.startswith("synthetic"):
        parts.append(data.split(":", 1)[0])
    return " ".join(parts)


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
    """The runs table, the comparison line and the run actions.

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
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.setAlternatingRowColors(True)
        self.table.setWordWrap(False)
        self.table.setSortingEnabled(False)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(True)
        self.table.setColumnWidth(0, 112)
        self.table.horizontalHeaderItem(3).setToolTip("Median time of one training step (forward, backward, optimizer)")
        self.table.horizontalHeaderItem(4).setToolTip("CUDA: peak allocated memory; CPU: the largest process RSS seen")
        self.table.itemSelectionChanged.connect(self._selection_changed)
        self.table.itemDoubleClicked.connect(lambda _i: self._export())
        self.compare = QLabel(self)
        self.compare.setWordWrap(True)
        self.compare.setTextFormat(Qt.TextFormat.RichText)
        self.note = QLabel(self)
        self.note.setWordWrap(True)
        self.note.setStyleSheet("color: #666")
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
        layout.addWidget(self.note)
        self.note.setText(f"Runs are kept in {runs.store.folder}")
        if runs.load_problems:
            self.note.setText(self.note.text() + f" · {len(runs.load_problems)} unreadable run(s) skipped")
            self.note.setToolTip("\n".join(runs.load_problems))
        runs.runsChanged.connect(self.refresh)
        runs.runStarted.connect(lambda _r: self.refresh())
        runs.metricsReceived.connect(self._live_update)
        runs.runEnded.connect(self._ended)
        self._updating = False
        self.refresh()

    def showEvent(self, event: Any) -> None:  # noqa: N802 - Qt API
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
            self.select([r for r in records if r.id in selected])
        finally:
            self._updating = False
        self._update_buttons()
        self._update_compare()

    def _row_of(self, record: RunRecord) -> int:
        for row in range(self.table.rowCount()):
            item = self.table.item(row, 0)
            if item is not None and item.data(_RECORD_ROLE) is record:
                return row
        return -1

    def _fill(self, row: int, r: RunRecord) -> None:
        ms = r.median_step_ms()
        peak = r.peak_memory()
        trainable = r.trainable()
        loss = r.final_loss()
        total = r.summary.get("total_params")
        name = _Item(r.name, r.created)
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
        steps_text = f"{r.steps()}" + (f" / {total_steps}" if r.running and total_steps else "")
        cells = [
            name,
            status,
            _Item(steps_text, r.steps()),
            _Item(f"{ms:.1f} ms" if ms is not None else "–", ms),
            _Item(f"{peak / 1e6:,.0f} MB" if peak else "–", peak),
            _Item(
                (fmt_count(trainable) + (f" ({fmt_percent(trainable, total)})" if total else "")) if trainable is not None else "–",
                trainable,
            ),
            _Item(f"{loss:.4f}" if loss is not None else "–", loss),
            _Item(setup_text(r.config)),
        ]
        cells[-1].setToolTip(", ".join(f"{k}={v}" for k, v in r.config.items() if v not in (None, False, "")))
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
            return
        base = sel[0]
        parts = []
        for r in sel[1:]:
            bits = []
            for what, a, b in (
                ("step time", base.median_step_ms(), r.median_step_ms()),
                ("peak memory", base.peak_memory(), r.peak_memory()),
                ("trainable", base.trainable(), r.trainable()),
            ):
                if a and b:
                    bits.append(f"{what} <b>{b / a:.2f}×</b>")
            parts.append(f"{r.name} vs {base.name}: " + (", ".join(bits) if bits else "no numbers yet"))
        self.compare.setText("<br>".join(parts))

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
        if not sel:
            return
        what = sel[0].name if len(sel) == 1 else f"{len(sel)} runs"
        answer = dialogs.ask(self, "Delete runs", f"Delete {what} from the list and from disk?", ("Delete", "Cancel"), "Cancel")
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
