"""The Diagnostics tab: freezing pitfalls of the plan, of the model with the plan, and of training.

Three sources, one table (severity icon, module, problem, fix; the selected finding's
*why* below):

- **plan** — the plan linter's findings, updated on every edit (the same as the cost panel's);
- **model** — *Check Model With Plan* runs :func:`workbench.core.checks.doctor.check` on the loaded
  model with the plan applied, on a worker thread (the controller removes the plan again,
  so the model is left as it was). It includes the linter's findings, plus what only the
  live model shows: tied weights partly frozen, gradient hooks, BatchNorm put in eval by
  hand. Marked stale when the plan changes;
- **training** — *Watch N Steps* trains N steps with the current settings through the
  training thread inside :func:`workbench.core.checks.doctor.watch` (step time or memory growing,
  an autograd graph that leaks across steps, frozen tensors that change, trainable ones that
  get no gradient) and lists its findings.

Clicking a row selects its module in the tree.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSpinBox,
    QStyle,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from workbench.core.checks.findings import SEVERITIES, Finding
from workbench.gui.controller import Controller
from workbench.gui.plan.cost_panel import DEFER_FINDINGS_ABOVE
from workbench.gui.theme import muted_color, palette_changed

__all__ = ["DiagnosticsPanel", "SOURCES"]

#: Where a finding comes from: ``{source: description}``.
SOURCES = {
    "plan": "the plan linter (the plan alone)",
    "model": "the freeze doctor's check of the loaded model with the plan applied",
    "training": "the freeze doctor watching real training steps",
}
_COLUMNS = ("Severity", "Module", "Problem", "Fix")
_ROW_ROLE = int(Qt.ItemDataRole.UserRole) + 2


class DiagnosticsPanel(QWidget):
    """Findings of the plan linter and the freeze doctor.

    Args:
        controller: runs the model check; its plan state gives the lint findings.
        select_path: called with a module path when a finding is clicked.
        parent: Qt parent.

    Attributes:
        rows: the findings shown, as ``(source, Finding)``.
        status: one line on what is shown.
    """

    def __init__(self, controller: Controller, select_path: Callable[[str], None], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._c = controller
        self._select = select_path
        self._check: list[Finding] | None = None
        self._check_stale = False
        self._refresh_when_shown = False
        self._watch: list[Finding] | None = None
        self._watch_summary: dict[str, Any] = {}
        self._start_watch: Callable[[int], bool] | None = None
        self.rows: list[tuple[str, Finding]] = []

        self.run_button = QPushButton("Check Model With Plan", self)
        self.run_button.setToolTip(
            "Apply the plan to the loaded model, look for freezing pitfalls (freeze doctor), then undo the plan"
        )
        self.run_button.clicked.connect(self.run)
        self.watch_steps = QSpinBox(self)
        self.watch_steps.setRange(4, 10_000)
        self.watch_steps.setValue(12)
        self.watch_steps.setSuffix(" steps")
        self.watch_steps.setToolTip("How many training steps the doctor watches")
        self.watch_button = QPushButton("Watch Training", self)
        self.watch_button.setToolTip(
            "Train a copy of the model for the given steps with the training settings below, while the freeze "
            "doctor watches step time, memory, the autograd graph, gradients and frozen tensors"
        )
        self.watch_button.clicked.connect(self.watch)
        self.watch_button.setEnabled(False)
        self.status = QLabel(self)
        self.status.setWordWrap(True)
        self.table = QTableWidget(0, len(_COLUMNS), self)
        self.table.setHorizontalHeaderLabels(list(_COLUMNS))
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.setWordWrap(True)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Interactive)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(3, QHeaderView.ResizeMode.Stretch)
        self.table.setColumnWidth(1, 120)
        self.table.cellClicked.connect(self._clicked)
        self.table.itemSelectionChanged.connect(self._show_details)
        self.details = QLabel(self)
        self.details.setWordWrap(True)
        self.details.setTextFormat(Qt.TextFormat.RichText)
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details.setMinimumHeight(self.details.fontMetrics().height() * 4)
        self.details.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        # a box of the base colour, from the palette (a theme switched later recolours it)
        self.details.setFrameShape(QFrame.Shape.StyledPanel)
        self.details.setAutoFillBackground(True)
        self.details.setBackgroundRole(QPalette.ColorRole.Base)
        self.details.setForegroundRole(QPalette.ColorRole.Text)
        self.details.setMargin(4)

        top = QHBoxLayout()
        top.addWidget(self.run_button)
        top.addSpacing(12)
        top.addWidget(self.watch_button)
        top.addWidget(self.watch_steps)
        top.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addLayout(top)
        layout.addWidget(self.status)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.details)
        controller.planChanged.connect(self._plan_changed)
        controller.modelChanged.connect(self._model_changed)
        controller.checkFinished.connect(self._done)
        self.refresh()

    # ------------------------------------------------------------ sources
    def enable_watch(self, start: Callable[[int], bool]) -> None:
        """Turn on *Watch Training*.

        Args:
            start: starts a training run of N steps under the doctor's watch; returns
                whether it started (the result comes back through :meth:`show_watch`).
        """
        self._start_watch = start
        self.watch_button.setEnabled(True)

    def run(self) -> bool:
        """Start the model check.

        Returns:
            False when it could not start (no model, a load or a check running).
        """
        if not self._c.start_check():
            return False
        self.run_button.setEnabled(False)
        self.status.setText("Checking the model with the plan…")
        return True

    def watch(self) -> bool:
        """Start a doctor-watch training run of the chosen number of steps.

        Returns:
            False when it could not start.
        """
        if self._start_watch is None or not self._start_watch(self.watch_steps.value()):
            return False
        self.watch_button.setEnabled(False)
        self.status.setText(f"Watching {self.watch_steps.value()} training steps…")
        return True

    def show_watch(self, findings: list[dict[str, Any]] | None, summary: dict[str, Any] | None = None) -> None:
        """Show the findings of a doctor-watch run.

        Args:
            findings: ``Finding.to_dict()`` records; None when the run gave none (it failed).
            summary: the watch summary (step times, memory, graph sizes).
        """
        if self._start_watch is not None:
            self.watch_button.setEnabled(True)
        if findings is None:
            self.status.setText("The watched run ended without a result.")
            return
        self._watch = [Finding(**{k: v for k, v in f.items() if k in Finding.__dataclass_fields__}) for f in findings]
        self._watch_summary = dict(summary or {})
        self.refresh()

    def watch_ended(self) -> None:
        """A watch run ended without findings (it failed or was stopped early)."""
        if self._start_watch is not None:
            self.watch_button.setEnabled(True)

    def _done(self, findings: list[Finding] | None, error: str) -> None:
        self.run_button.setEnabled(True)
        if findings is None:
            self.status.setText(f"The check failed: {error}")
            return
        self._check = list(findings)
        self._check_stale = False
        self.refresh()

    def _plan_changed(self, *_: Any) -> None:
        if self._check is not None:
            self._check_stale = True
        state = self._c.state
        if self.isVisible() or state is None or len(state.tree) <= DEFER_FINDINGS_ABOVE:
            self.refresh()
        else:
            self._refresh_when_shown = True  # a large tree's lint waits until the tab is shown

    def showEvent(self, event: Any) -> None:
        super().showEvent(event)
        if self._refresh_when_shown:
            self._refresh_when_shown = False
            self.refresh()

    def _model_changed(self) -> None:
        self._check = None
        self._watch = None
        self.refresh()

    # ------------------------------------------------------------ the table
    def refresh(self) -> None:
        """Rebuild the table from the current sources."""
        rows: list[tuple[str, Finding]] = []
        if self._check is not None and not self._check_stale:
            rows += [("model", f) for f in self._check]
        else:
            state = self._c.state
            rows += [("plan", f) for f in (state.findings if state is not None else [])]
        if self._watch is not None:
            # the watch includes the static check of the plan: list what it adds only
            shown = {(f.code, f.path, f.message) for _s, f in rows}
            rows += [("training", f) for f in self._watch if (f.code, f.path, f.message) not in shown]
        order = {s: i for i, s in enumerate(SEVERITIES)}
        rows.sort(key=lambda sf: order.get(sf[1].severity, len(order)))
        self.rows = rows
        self._fill()
        parts = []
        if self._check is None:
            parts.append("plan: linted on every edit")
        elif self._check_stale:
            parts.append("Plan changed since the model check; check again (showing the plan's own findings)")
        else:
            parts.append("model checked with the plan")
        if self._watch is not None:
            ms = self._watch_summary.get("step_ms_median")
            parts.append(
                f"training watched for {self._watch_summary.get('steps', '?')} steps"
                + (f" (median {ms:.1f} ms/step)" if isinstance(ms, (int, float)) else "")
            )
        n = len(rows)
        head = f"{n} finding{'s' if n != 1 else ''}" if n else "No pitfalls found"
        self.status.setText(f"{head} · " + "; ".join(parts) + ".")

    def _fill(self) -> None:
        style = self.style()
        icons = {
            "error": style.standardIcon(QStyle.StandardPixmap.SP_MessageBoxCritical),
            "warning": style.standardIcon(QStyle.StandardPixmap.SP_MessageBoxWarning),
            "info": style.standardIcon(QStyle.StandardPixmap.SP_MessageBoxInformation),
        }
        self.table.clearContents()
        self.table.setRowCount(len(self.rows))
        for row, (source, f) in enumerate(self.rows):
            sev = QTableWidgetItem(icons.get(f.severity, icons["info"]), f.severity)
            sev.setData(_ROW_ROLE, row)
            sev.setToolTip(f"{f.severity} · {f.code} · found by {SOURCES.get(source, source)}")
            module = QTableWidgetItem(f.path or "(model)")
            module.setToolTip((f.path or "(whole model)") + ("\nclick to select it in the tree" if self._known(f.path) else ""))
            problem = QTableWidgetItem(f.message)
            problem.setToolTip(f"{f.message}\nWhy: {f.why}" if f.why else f.message)
            fix = QTableWidgetItem(f.fix)
            fix.setToolTip(f.fix)
            for col, item in enumerate((sev, module, problem, fix)):
                item.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable)
                self.table.setItem(row, col, item)
        self.table.resizeRowsToContents()
        self.details.setText(self._hint())

    def _hint(self) -> str:
        """What the details box says when no finding is selected, in the palette's secondary colour."""
        text = ("No pitfalls: the plan freezes what it says, and the checks that ran found nothing to fix."
                if not self.rows else "Select a finding to see why it matters.")
        return f"<span style='color:{muted_color(self.palette())}'>{text}</span>"

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if palette_changed(event):
            if self.table.selectedIndexes():  # the details' secondary text, in the new colours
                self._show_details()
            else:
                self.details.setText(self._hint())

    def _known(self, path: str) -> bool:
        return bool(path) and self._c.tree is not None and path in self._c.tree.nodes

    def finding_texts(self) -> list[str]:
        """One line per row (``module: problem``), for tests and copying."""
        return [f"{f.path or '(model)'}: {f.message}" for _s, f in self.rows]

    def _clicked(self, row: int, _col: int) -> None:
        if 0 <= row < len(self.rows):
            path = self.rows[row][1].path
            if self._known(path):
                self._select(path)

    def _show_details(self) -> None:
        rows = sorted({i.row() for i in self.table.selectedIndexes()})
        if not rows or rows[0] >= len(self.rows):
            return
        source, f = self.rows[rows[0]]
        esc = lambda t: (t or "").replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        self.details.setText(
            f"<b>{esc(f.path or '(model)')}</b>: {esc(f.message)}<br><b>Why:</b> {esc(f.why) or '–'}"
            f"<br><b>Fix:</b> {esc(f.fix) or '–'}<br><span style='color:{muted_color(self.palette())}'>"
            f"{esc(f.code)} · found by "
            f"{esc(SOURCES.get(source, source))}</span>"
        )
