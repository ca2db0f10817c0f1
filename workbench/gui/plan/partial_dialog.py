"""The partial-freezing dialog: which ranges of a weight train (``workbench.core.freezing.partial``).

The user picks the parameter, the dimension (output or input features/channels, embedding
rows or columns) and the trainable ranges (``0:10, 20:30``, half-open); the dialog checks
them against the tensor's shape with :mod:`workbench.core.freezing.partial` and previews the result.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from workbench.core.plan import partial_spec
from workbench.core.plan.partial_spec import PartialSpec
from workbench.gui import dialogs
from workbench.gui.controller import Controller
from workbench.gui.plan import edits as plan_edits
from workbench.gui.theme import tone

__all__ = ["PartialDialog", "edit_partial", "format_ranges", "parse_ranges"]

_RANGE = re.compile(r"^\s*(\d+)\s*(?:[:\-–]\s*(\d+)\s*)?$")


def parse_ranges(text: str) -> list[list[int]]:
    """Read ``"0:10, 20:30, 40"`` as half-open ranges ``[[0, 10], [20, 30], [40, 41]]``.

    Args:
        text: comma-separated ``start:stop`` (or ``start-stop``) pairs or single indices.

    Returns:
        The ranges, in the order given.

    Raises:
        ValueError: a part is not a range (the message shows the expected form).
    """
    out: list[list[int]] = []
    for part in (p for p in text.replace(";", ",").split(",") if p.strip()):
        m = _RANGE.match(part)
        if m is None:
            raise ValueError(f"{part.strip()!r} is not a range; write start:stop (stop excluded), e.g. 0:10, 20:30")
        start = int(m.group(1))
        stop = int(m.group(2)) if m.group(2) is not None else start + 1
        out.append([start, stop])
    if not out:
        raise ValueError("enter at least one trainable range, e.g. 0:10")
    return out


def format_ranges(ranges: list[list[int]] | list[tuple[int, int]]) -> str:
    """``[[0, 10], [20, 30]]`` → ``"0:10, 20:30"``."""
    return ", ".join(f"{a}:{b}" for a, b in ranges)


class PartialDialog(QDialog):
    """Edit the sub-tensor freezing spec of one module.

    Args:
        parent: the window.
        path: module path.
        type_name: module class name (names the dimensions).
        shapes: ``{parameter short name: shape}`` of the module's own parameters.
        spec: the spec in force, if any.

    Attributes:
        removed: the user chose "Remove Partial Freezing".
    """

    def __init__(
        self,
        parent: QWidget | None,
        path: str,
        type_name: str,
        shapes: Mapping[str, tuple[int, ...]],
        spec: PartialSpec | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Partial freezing — {path or '(root)'}")
        self._type = type_name
        self._shapes = dict(shapes)
        self.removed = False
        self._spec: PartialSpec | None = None

        self.param_box = QComboBox(self)
        for name, shape in self._shapes.items():
            self.param_box.addItem(f"{name}  {list(shape)}", name)
        self.dim_box = QComboBox(self)
        self.ranges_edit = QLineEdit(self)
        self.ranges_edit.setPlaceholderText("e.g. 0:10, 20:30  (start:stop, stop excluded)")
        self.preview = QLabel(self)
        self.preview.setWordWrap(True)
        self.problem = QLabel(self)
        self.problem.setWordWrap(True)
        self.problem.setStyleSheet(f"color: {tone('error', self.palette())[1]}")  # the theme's error text

        intro = QLabel(
            "Only the ranges below train; the rest of the tensor stays frozen and gets no gradient "
            "(the computation is split, so the frozen part really costs nothing). The module itself "
            "is unfrozen.",
            self,
        )
        intro.setWordWrap(True)
        form = QFormLayout()
        form.addRow("Module", QLabel(f"{path or '(root)'} ({type_name})", self))
        form.addRow("Parameter", self.param_box)
        form.addRow("Dimension", self.dim_box)
        form.addRow("Trainable", self.ranges_edit)
        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel, self
        )
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Apply")
        self.remove_button: QPushButton | None = None
        if spec is not None:
            self.remove_button = self.buttons.addButton("Remove Partial Freezing", QDialogButtonBox.ButtonRole.ResetRole)
            self.remove_button.clicked.connect(self._remove)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addLayout(form)
        layout.addWidget(self.preview)
        layout.addWidget(self.problem)
        layout.addWidget(self.buttons)

        self.param_box.currentIndexChanged.connect(self._fill_dims)
        self.dim_box.currentIndexChanged.connect(self._validate)
        self.ranges_edit.textChanged.connect(self._validate)
        if spec is not None:
            self.set_values(spec.param, spec.dim, format_ranges(list(spec.trainable)))
        else:
            i = self.param_box.findData("weight")
            self.param_box.setCurrentIndex(max(i, 0))
            self._fill_dims()
        self.setMinimumWidth(460)

    def set_values(self, param: str, dim: int, ranges: str) -> None:
        """Fill the fields.

        Args:
            param: parameter short name.
            dim: 0 or 1.
            ranges: ranges text (``"0:10, 20:30"``).
        """
        i = self.param_box.findData(param)
        self.param_box.setCurrentIndex(max(i, 0))
        self._fill_dims()
        j = self.dim_box.findData(dim)
        self.dim_box.setCurrentIndex(max(j, 0))
        self.ranges_edit.setText(ranges)
        self._validate()

    def spec(self) -> PartialSpec | None:
        """The spec the fields describe (None when invalid or removed)."""
        return None if self.removed else self._spec

    def _fill_dims(self, *_: Any) -> None:
        shape = self._shapes.get(self.param_box.currentData(), ())
        keep = self.dim_box.currentData()
        self.dim_box.blockSignals(True)
        self.dim_box.clear()
        for d in (0, 1):
            if d < len(shape):
                self.dim_box.addItem(f"{d}: {partial_spec.dim_label(self._type, d)} (size {shape[d]})", d)
        j = self.dim_box.findData(keep)
        self.dim_box.setCurrentIndex(j if j >= 0 else 0)
        self.dim_box.blockSignals(False)
        self._validate()

    def _validate(self, *_: Any) -> None:
        ok_button = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        self._spec = None
        param = self.param_box.currentData()
        shape = self._shapes.get(param)
        try:
            if shape is None or self.dim_box.currentData() is None:
                raise ValueError("this parameter has no dimension that can be split; choose the weight")
            raw = {"param": param, "dim": self.dim_box.currentData(), "trainable": parse_ranges(self.ranges_edit.text())}
            spec = partial_spec.parse_spec(raw)
            partial_spec.trainable_fraction(spec, shape)  # raises when the ranges do not fit the tensor
        except ValueError as e:
            self.problem.setText(str(e))
            self.preview.clear()
            ok_button.setEnabled(False)
            return
        self._spec = spec
        self.problem.clear()
        self.preview.setText(partial_spec.describe(spec, shape, self._type))
        ok_button.setEnabled(True)

    def _remove(self) -> None:
        self.removed = True
        self.accept()


def edit_partial(parent: QWidget | None, controller: Controller, path: str) -> bool:
    """Ask for the partial-freezing spec of a module and apply it as one undoable edit.

    Args:
        parent: the window.
        controller: owner of the plan.
        path: module path.

    Returns:
        True when the plan changed.
    """
    tree, state, loaded = controller.tree, controller.state, controller.loaded
    if tree is None or state is None or path not in tree.nodes:
        return False
    node = tree.nodes[path]
    probe = {"param": "weight", "dim": 0, "trainable": [[0, 1]]}
    problem = partial_spec.check(probe, node)
    if problem:
        dialogs.error(parent, "Partial freezing not possible", f"{path or '(root)'}: {problem}")
        return False
    prefix = f"{path}." if path else ""
    shapes = {
        name[len(prefix):]: shape
        for name, shape in (loaded.param_shapes.items() if loaded is not None else ())
        if name.startswith(prefix) and "." not in name[len(prefix):]
    }
    current = state.effective[path].partial
    dlg = PartialDialog(parent, path, node.type_name, shapes, current)
    try:
        if not dialogs.run_dialog(dlg):
            return False
        removed, spec = dlg.removed, dlg.spec()
    finally:
        dlg.deleteLater()
    if removed:
        return controller.edit(f"Remove partial freezing from {path}",
                               lambda plan, t: plan_edits.set_partial(plan, t, path, None))
    if spec is None:
        return False
    return controller.edit(f"Partial freezing on {path}", lambda plan, t: plan_edits.set_partial(plan, t, path, spec))
