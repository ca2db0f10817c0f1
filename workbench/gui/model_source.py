"""The model source bar: a searchable list of torchvision models, their weights, a new head.

Weights already in the local torch hub cache are marked; the bar only describes what to
load (a :class:`~workbench.gui.model_loading.LoadRequest`); the window decides whether a
download may happen (it asks) and the controller loads off the GUI thread.
"""

from __future__ import annotations

from typing import Any, Mapping

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QIcon, QStandardItem, QStandardItemModel
from PySide6.QtWidgets import QComboBox, QCompleter, QHBoxLayout, QLabel, QPushButton, QSpinBox, QWidget

from workbench.core.models import zoo
from workbench.core.formatting import fmt_count
from workbench.gui.icons import dot_icon
from workbench.gui.model_loading import DEFAULT_MODEL, LoadRequest

__all__ = ["ModelSourceBar", "cached_icon"]

_NAME_ROLE = int(Qt.ItemDataRole.UserRole) + 10


def cached_icon(cached: bool) -> QIcon:
    """A small dot: filled green when weights are in the local cache, hollow otherwise.

    Args:
        cached: whether the weights are cached.

    Returns:
        The icon.
    """
    color = QColor(46, 160, 67) if cached else QColor(150, 150, 150)
    return dot_icon(color, margin=2, filled=cached)


class ModelSourceBar(QWidget):
    """Model ▾ · Weights ▾ · Classes · Load.

    Signals:
        loadRequested(LoadRequest): the user pressed Load.

    Args:
        parent: Qt parent.
    """

    loadRequested = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._infos = {m.name: m for m in zoo.list_models()}
        layout = QHBoxLayout(self)
        layout.setContentsMargins(4, 0, 4, 0)
        layout.setSpacing(6)

        self.model_box = QComboBox(self)
        self.model_box.setEditable(True)
        self.model_box.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        self.model_box.setMinimumContentsLength(18)
        self.model_box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.model_box.setToolTip("torchvision classification model (type to search; ● weights in the local cache)")
        items = QStandardItemModel(self.model_box)
        for name, info in self._infos.items():
            cached = any(info.cached.values())
            item = QStandardItem(cached_icon(cached), name)
            size = fmt_count(info.num_params) if info.num_params else "?"
            weights = ", ".join(f"{w} ({'cached' if info.cached.get(w) else 'not cached'})" for w in info.weights)
            item.setToolTip(f"{name}: {size} parameters, {info.input_size} px input\nweights: {weights or 'none'}")
            item.setData(name, _NAME_ROLE)
            items.appendRow(item)
        self.model_box.setModel(items)
        completer = QCompleter(items, self.model_box)
        completer.setFilterMode(Qt.MatchFlag.MatchContains)
        completer.setCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        completer.setCompletionMode(QCompleter.CompletionMode.PopupCompletion)
        self.model_box.setCompleter(completer)

        self.weights_box = QComboBox(self)
        self.weights_box.setToolTip("Pretrained weights (● in the local cache; others need a download)")
        self.weights_box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)

        self.classes = QSpinBox(self)
        self.classes.setRange(0, 1_000_000)
        self.classes.setSpecialValueText("keep")
        self.classes.setToolTip("Classes of a new classification head (keep: the model's own head)")
        self.classes.setMinimumWidth(self.classes.fontMetrics().horizontalAdvance("1000000") + 36)

        self.load_button = QPushButton("Load", self)
        self.load_button.setToolTip("Build the model (a download is only started after asking)")
        self.load_button.clicked.connect(self._emit_request)

        for label, w in (("Model", self.model_box), ("Weights", self.weights_box), ("Classes", self.classes)):
            lab = QLabel(label, self)
            lab.setBuddy(w)
            layout.addWidget(lab)
            layout.addWidget(w)
        layout.addWidget(self.load_button)
        self.model_box.currentIndexChanged.connect(self._refresh_weights)
        self.model_box.lineEdit().returnPressed.connect(self._commit_typed)
        self.set_current({"name": DEFAULT_MODEL})

    # ------------------------------------------------------------------ API
    def model_names(self) -> list[str]:
        """Every architecture the bar offers."""
        return list(self._infos)

    def current_name(self) -> str:
        """The architecture selected (or typed, when it is a known name)."""
        text = self.model_box.currentText().strip()
        return text if text in self._infos else (self.model_box.currentData(_NAME_ROLE) or text)

    def request(self) -> LoadRequest:
        """What the bar describes now.

        Returns:
            A request that does not allow downloads (the window asks first).
        """
        weights = self.weights_box.currentData()
        n = self.classes.value()
        return LoadRequest(name=self.current_name(), weights=weights or None, num_classes=n or None)

    def set_current(self, spec: Mapping[str, Any]) -> None:
        """Show the loaded model's name, weights and head size.

        Args:
            spec: a plan ``model`` block (``name``, ``weights``, ``num_classes``).
        """
        name = spec.get("name")
        if name in self._infos:
            i = self.model_box.findData(name, _NAME_ROLE)
            self.model_box.setCurrentIndex(i)
            self.model_box.setEditText(name)
        self._refresh_weights()
        w = spec.get("weights")
        j = self.weights_box.findData(w) if w else 0
        self.weights_box.setCurrentIndex(max(j, 0))
        n = spec.get("num_classes")
        self.classes.setValue(n if isinstance(n, int) and not isinstance(n, bool) else 0)

    def set_busy(self, busy: bool) -> None:
        """Disable the Load button while a model loads."""
        self.load_button.setEnabled(not busy)

    # ------------------------------------------------------------------ internals
    def _refresh_weights(self, *_: Any) -> None:
        info = self._infos.get(self.current_name())
        previous = self.weights_box.currentData()
        self.weights_box.blockSignals(True)
        self.weights_box.clear()
        self.weights_box.addItem("Random init", None)
        if info is not None:
            for w in info.weights:
                cached = bool(info.cached.get(w))
                label = f"{w} ({'cached' if cached else 'download'})"
                self.weights_box.addItem(cached_icon(cached), label, w)
        j = self.weights_box.findData(previous) if previous else -1
        if j < 0 and info is not None:
            cached = [w for w in info.weights if info.cached.get(w)]
            j = self.weights_box.findData(cached[0]) if cached else 0
        self.weights_box.setCurrentIndex(max(j, 0))
        self.weights_box.blockSignals(False)

    def _commit_typed(self) -> None:
        name = self.model_box.currentText().strip()
        if name in self._infos:
            self.model_box.setCurrentIndex(self.model_box.findData(name, _NAME_ROLE))

    def _emit_request(self) -> None:
        self.loadRequested.emit(self.request())
