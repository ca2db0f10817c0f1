"""The A+B settings dialog: full rank or low rank (rank, alpha, dropout, init, DoRA) and the mode.

The dialog edits a ``reparam`` spec (:class:`~workbench.core.plan.reparam_spec.ReparamSpec`);
:func:`edit_reparam` applies it to the selected modules as one undoable edit.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QLabel,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from workbench.core.plan.reparam_spec import INITS, MODES, ReparamError, ReparamSpec
from workbench.gui import dialogs
from workbench.gui.controller import Controller

__all__ = ["ReparamDialog", "edit_reparam"]


class ReparamDialog(QDialog):
    """Rank (0 = full rank), alpha, dropout, init and mode of A+B.

    Args:
        parent: the window.
        paths: the modules the settings go to (for the title).
        current: the spec in force on the first module, to start from.
    """

    def __init__(self, parent: QWidget | None, paths: list[str], current: ReparamSpec | None) -> None:
        super().__init__(parent)
        self.setWindowTitle("A+B settings")
        where = ", ".join(p or "(root)" for p in paths[:3]) + (" …" if len(paths) > 3 else "")
        self.rank = QSpinBox(self)
        self.rank.setRange(0, 65536)
        self.rank.setSpecialValueText("full")
        self.rank.setToolTip("Rank r of B = (alpha / r) U V; full: B has the weight's shape")
        self.alpha = QDoubleSpinBox(self)
        self.alpha.setRange(0.001, 1e6)
        self.alpha.setDecimals(3)
        self.alpha.setToolTip("Scale numerator: B = (alpha / r) U V (alpha = 2 r is common)")
        self.dropout = QDoubleSpinBox(self)
        self.dropout.setRange(0.0, 0.95)
        self.dropout.setSingleStep(0.05)
        self.dropout.setToolTip("Dropout on the input of U V while training (fused mode only)")
        self.init = QComboBox(self)
        self.init.addItems(list(INITS))
        self.dora = QCheckBox("magnitude per output channel", self)
        self.dora.setToolTip("DoRA (PEFT's use_dora): W = m (A + B) / ||A + B||, m trained; Linear and Conv layers")
        self.mode = QComboBox(self)
        self.mode.addItems(list(MODES))
        self.mode.setToolTip("exact: the weight is A + B (parametrize); fused: the layer adds (alpha / r) U (V x)")
        self.error = QLabel(self)
        self.error.setWordWrap(True)
        form = QFormLayout()
        form.addRow("Rank", self.rank)
        form.addRow("Alpha", self.alpha)
        form.addRow("Dropout", self.dropout)
        form.addRow("Init", self.init)
        form.addRow("DoRA", self.dora)
        form.addRow("Mode", self.mode)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel, self)
        buttons.accepted.connect(self._accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel(f"A+B on {where}", self))
        layout.addLayout(form)
        layout.addWidget(self.error)
        layout.addWidget(buttons)
        self._load(current)
        self.rank.valueChanged.connect(self._sync)
        self.mode.currentTextChanged.connect(self._sync)
        self._sync()

    def _load(self, spec: ReparamSpec | None) -> None:
        low = spec.low_rank if spec is not None else None
        self.rank.setValue(low.rank if low else 0)
        self.alpha.setValue(low.alpha if low else 16.0)
        self.dropout.setValue(low.dropout if low else 0.0)
        self.init.setCurrentText(low.init if low else "kaiming")
        self.dora.setChecked(bool(low and low.dora))
        self.mode.setCurrentText(spec.mode if spec is not None else "exact")

    def _sync(self) -> None:
        low = self.rank.value() > 0
        for w in (self.alpha, self.init, self.dora):
            w.setEnabled(low)
        self.dropout.setEnabled(low and self.mode.currentText() == "fused")

    def values(self) -> dict[str, Any]:
        """The spec's JSON form from the fields (low-rank keys only with a rank)."""
        spec: dict[str, Any] = {"kind": "a_plus_b", "mode": self.mode.currentText()}
        if self.rank.value() > 0:
            spec.update(rank=self.rank.value(), alpha=self.alpha.value(), init=self.init.currentText())
            if self.dora.isChecked():
                spec["dora"] = True
            if self.mode.currentText() == "fused":
                spec["dropout"] = self.dropout.value()
        return spec

    def spec(self) -> ReparamSpec | None:
        """The parsed spec, or None (with the reason shown) when the fields are invalid."""
        try:
            return ReparamSpec.parse(self.values())
        except ReparamError as e:
            self.error.setText(str(e))
            return None

    def _accept(self) -> None:
        if self.spec() is not None:
            self.accept()


def edit_reparam(parent: QWidget | None, controller: Controller, paths: list[str]) -> bool:
    """Ask for A+B settings and put them on ``paths`` as one undoable edit.

    Args:
        parent: the window.
        controller: owner of the plan.
        paths: the selected module paths.

    Returns:
        True when the plan changed.
    """
    state = controller.state
    if state is None or not paths:
        return False
    dlg = ReparamDialog(parent, paths, state.effective[paths[0]].reparam if paths[0] in state.effective else None)
    try:
        if not dialogs.run_dialog(dlg):
            return False
        spec = dlg.spec()
    finally:
        dlg.deleteLater()
    if spec is None:
        return False
    controller.set_value(paths, "reparam", spec.to_json())
    return True
