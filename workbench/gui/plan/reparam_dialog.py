"""The A+B settings dialog: full rank or low rank (rank, alpha, dropout, init, variant) and the mode.

Each LoRA-family variant (a row of :data:`workbench.core.plan.lora_variants.VARIANTS`, such as
DoRA) gets a checkbox from its row; at most one is checked.

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

from workbench.core.plan.lora_variants import DEFAULT, VARIANTS
from workbench.core.plan.reparam_spec import INITS, MODES, ReparamError, ReparamSpec
from workbench.gui import dialogs
from workbench.gui.controller import Controller

__all__ = ["ReparamDialog", "edit_reparam"]


class ReparamDialog(QDialog):
    """Rank (0 = full rank), alpha, dropout, init, variant and mode of A+B.

    ``variants`` holds the checkbox of each variant by name; ``dialog.<name>`` is the same box
    (``dialog.dora``).

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
        self.variants: dict[str, QCheckBox] = {}
        for name, row in VARIANTS.items():
            box = QCheckBox(row.summary, self)
            box.setToolTip(row.tooltip)
            box.toggled.connect(lambda on, name=name: self._only(name) if on else None)
            self.variants[name] = box
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
        for name, box in self.variants.items():
            form.addRow(VARIANTS[name].label, box)
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

    def __getattr__(self, name: str) -> QCheckBox:
        """The checkbox of variant ``name`` (``dialog.dora``).

        Raises:
            AttributeError: no such attribute or variant.
        """
        boxes = self.__dict__.get("variants") or {}
        if name in boxes:
            box: QCheckBox = boxes[name]
            return box
        raise AttributeError(name)

    def _only(self, name: str) -> None:
        """Uncheck every variant but ``name`` (a rule has one variant)."""
        for other, box in self.variants.items():
            if other != name:
                box.setChecked(False)

    def _load(self, spec: ReparamSpec | None) -> None:
        low = spec.low_rank if spec is not None else None
        self.rank.setValue(low.rank if low else 0)
        self.alpha.setValue(low.alpha if low else 16.0)
        self.dropout.setValue(low.dropout if low else 0.0)
        self.init.setCurrentText(low.init if low else "kaiming")
        variant = low.variant if low else DEFAULT
        for name, box in self.variants.items():
            box.setChecked(name == variant)
        self.mode.setCurrentText(spec.mode if spec is not None else "exact")

    def _sync(self) -> None:
        low = self.rank.value() > 0
        for w in (self.alpha, self.init, *self.variants.values()):
            w.setEnabled(low)
        self.dropout.setEnabled(low and self.mode.currentText() == "fused")

    def values(self) -> dict[str, Any]:
        """The spec's JSON form from the fields (low-rank keys only with a rank)."""
        spec: dict[str, Any] = {"kind": "a_plus_b", "mode": self.mode.currentText()}
        if self.rank.value() > 0:
            spec.update(rank=self.rank.value(), alpha=self.alpha.value(), init=self.init.currentText())
            spec.update({name: True for name, box in self.variants.items() if box.isChecked()})
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
