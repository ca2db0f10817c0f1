"""Diagnostics tab: the freeze doctor's findings for the loaded model with the plan applied.

Present only when :mod:`workbench.core.doctor` is installed. The panel asks the controller to
run the check (:meth:`~workbench.gui.controller.Controller.start_check`, on a worker thread;
the model is left as it was) and lists the findings; it never touches the model itself. The
result is marked stale as soon as the plan changes.
"""

from __future__ import annotations

from typing import Any, Callable

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

from workbench.core.findings import Finding
from workbench.gui.controller import Controller
from workbench.gui.plan_state import finding_line

__all__ = ["DiagnosticsPanel"]


class DiagnosticsPanel(QWidget):
    """A "Check" button and the doctor's findings (double-click selects the module).

    Args:
        controller: runs the check.
        select_path: called with a module path when a finding is double-clicked.
        parent: Qt parent.
    """

    def __init__(self, controller: Controller, select_path: Callable[[str], None], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._c = controller
        self._select = select_path
        self.run_button = QPushButton("Check Model With Plan", self)
        self.run_button.setToolTip(
            "Apply the plan to the loaded model, look for freezing pitfalls (freeze doctor), then undo the plan"
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
        controller.checkFinished.connect(self._done)

    def run(self) -> bool:
        """Start a check.

        Returns:
            False when it could not start (no model, a load or a check running).
        """
        if not self._c.start_check():
            return False
        self.run_button.setEnabled(False)
        self.status.setText("Checking…")
        return True

    def _done(self, findings: list[Finding] | None, error: str) -> None:
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
        self.status.setText(f"{n} finding{'s' if n != 1 else ''} for the plan as checked." if n else "No pitfalls found.")

    def _stale(self, *_: Any) -> None:
        if self.findings.count() and not self.status.text().startswith("Plan changed"):
            self.status.setText("Plan changed since this check; check again.")

    def _activate(self, item: QListWidgetItem) -> None:
        path = item.data(Qt.ItemDataRole.UserRole)
        if path and self._c.tree is not None and path in self._c.tree.nodes:
            self._select(path)
