"""Diagnostics tab: run the freeze doctor on the loaded model with the plan applied.

Present only when :mod:`workbench.core.doctor` is installed. The check applies the plan to
the model on a worker thread, puts the model in train mode (as a training loop would),
asks :func:`workbench.core.doctor.check` for findings, and removes the plan again, so the
model is left as it was. The result is marked stale as soon as the plan changes.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QStyle,
    QVBoxLayout,
    QWidget,
)
from torch import nn

from workbench.core.findings import Finding
from workbench.core.plan import FreezePlan
from workbench.gui.controller import Controller
from workbench.gui.plan_state import finding_line
from workbench.gui.worker import BackgroundTask

__all__ = ["DiagnosticsPanel", "diagnose"]


def diagnose(model: nn.Module, plan: FreezePlan) -> list[Finding]:
    """The doctor's findings for ``model`` with ``plan`` applied (the model is restored after).

    Args:
        model: the model (its flags and modes are put back afterwards).
        plan: the plan.

    Returns:
        Findings, errors first.

    Raises:
        PlanError: the plan does not fit the model.
    """
    from workbench.core import doctor
    from workbench.core.apply import apply_plan

    applied = apply_plan(model, plan)
    try:
        model.train()
        return doctor.check(model, None, plan)
    finally:
        applied.remove(merge=False)


class DiagnosticsPanel(QWidget):
    """A "Check" button and the doctor's findings (double-click selects the module).

    Args:
        controller: source of the model and the plan.
        select_path: called with a module path when a finding is double-clicked.
        parent: Qt parent.
    """

    def __init__(self, controller: Controller, select_path: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._c = controller
        self._select = select_path
        self._task: BackgroundTask | None = None
        self.run_button = QPushButton("Check Model With Plan", self)
        self.run_button.setToolTip(
            "Apply the plan to the loaded model, look for freezing pitfalls (doctor), then undo the plan"
        )
        self.run_button.clicked.connect(self.run)
        self.status = QLabel("Not checked yet.", self)
        self.status.setWordWrap(True)
        self.findings = QListWidget(self)
        self.findings.setWordWrap(True)
        self.findings.itemDoubleClicked.connect(self._activate)
        top = QHBoxLayout()
        top.addWidget(self.run_button)
        top.addWidget(self.status, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addLayout(top)
        layout.addWidget(self.findings, 1)
        controller.planChanged.connect(self._stale)
        controller.modelChanged.connect(self._stale)

    @property
    def running(self) -> bool:
        """Whether a check is running."""
        return self._task is not None

    def run(self) -> bool:
        """Start a check on a worker thread.

        Returns:
            False when no model is loaded or a check is already running.
        """
        model, plan = self._c.model, self._c.plan
        if model is None or self._task is not None:
            return False
        self.run_button.setEnabled(False)
        self.status.setText("Checking…")
        task = BackgroundTask(lambda: diagnose(model, plan), self)
        task.done.connect(self._done)
        self._task = task
        task.start()
        return True

    def wait(self) -> None:
        """Block until a running check has ended (the window is closing)."""
        if self._task is not None:
            self._task.wait()

    def _done(self, findings: list[Finding] | None, error: str, details: str) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.deleteLater()
        self.run_button.setEnabled(True)
        self.findings.clear()
        if findings is None:
            self.status.setText(f"The check failed: {error}")
            return
        style = self.style()
        icons = {
            "error": style.standardIcon(QStyle.StandardPixmap.SP_MessageBoxCritical),
            "warning": style.standardIcon(QStyle.StandardPixmap.SP_MessageBoxWarning),
            "info": style.standardIcon(QStyle.StandardPixmap.SP_MessageBoxInformation),
        }
        for f in findings:
            item = QListWidgetItem(icons.get(f.severity, icons["info"]), finding_line(f))
            item.setToolTip(f"{f.message}\nWhy: {f.why}\nFix: {f.fix}")
            item.setData(Qt.ItemDataRole.UserRole, f.path)
            self.findings.addItem(item)
        n = len(findings)
        self.status.setText(
            f"{n} finding{'s' if n != 1 else ''} for the plan as checked." if n else "No pitfalls found."
        )

    def _stale(self, *_: Any) -> None:
        if self.findings.count() and not self.status.text().startswith("Plan changed"):
            self.status.setText("Plan changed since this check; check again.")

    def _activate(self, item: QListWidgetItem) -> None:
        path = item.data(Qt.ItemDataRole.UserRole)
        if path and self._c.tree is not None and path in self._c.tree.nodes:
            self._select(path)
