"""The model source bar: Source ▾ · Model ▾ · … · Weights ▾ · Classes · Structure only · Load.

The source selector offers every row of :data:`workbench.core.models.sources.SOURCES`
(torchvision, timm, Hugging Face, your own code), with the row's label, placeholder, ``…``
button (its ``browse``) and weights (its ``own_weights``): the bar iterates the table and
never switches on source names. Each source's names come from
:func:`~workbench.core.models.sources.search_models` (a registry search, run once per source
on a worker thread) with a mark when the model opens offline (weights or repo in the local
cache); typing in the model box searches them. Hugging Face folders and ``.py`` files can be
typed, or picked with the ``…`` button.

The bar only describes what to load (a :class:`~workbench.gui.model_loading.LoadRequest`);
the window decides whether a download may happen (it asks) and the controller loads off the
GUI thread.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from html import escape
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QIcon, QStandardItem, QStandardItemModel
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QCompleter,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSpinBox,
    QToolButton,
    QWidget,
)

from workbench.core.formatting import fmt_count
from workbench.core.models import zoo
from workbench.core.models.code_outline import top_level_statements
from workbench.core.models.py_models import code_preview
from workbench.core.models.sources import (
    DEFAULT_SOURCE,
    SOURCES,
    architecture_source,
    parse_model_spec,
    search_models,
    source_of,
)
from workbench.gui import dialogs, torch_ready
from workbench.gui.background import BackgroundTask
from workbench.gui.icons import dot_icon
from workbench.gui.model_loading import DEFAULT_MODEL, LoadRequest

__all__ = ["SOURCE_LABELS", "ModelSourceBar", "cached_icon"]

_NAME_ROLE = int(Qt.ItemDataRole.UserRole) + 10
_CACHED_ROLE = int(Qt.ItemDataRole.UserRole) + 11

#: What the source selector shows for each source key (the table's ``label`` column).
SOURCE_LABELS: dict[str, str] = {key: row.label for key, row in SOURCES.items()}


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
    """Source ▾ · Model ▾ · … · Weights ▾ · Classes · Structure only · Load.

    Signals:
        loadRequested(LoadRequest): the user pressed Load.
        browseRequested(str): the ``…`` button was pressed for a source with a ``browse``
            row (``"hf"``: pick a folder; ``"py"``: pick a ``.py`` file); the window asks and
            opens it.
        namesReady(str): the names of a source arrived (after :meth:`select_source`).

    Args:
        parent: Qt parent.

    Attributes:
        source_box / model_box / browse_button / weights_box / classes / meta_box /
        load_button: the bar's widgets.
    """

    loadRequested = Signal(object)
    browseRequested = Signal(str)
    namesReady = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._infos: dict[str, zoo.ModelInfo] = {}  # torchvision's models, once listed (:meth:`_list_registry`)
        self._lists: dict[str, QStandardItemModel] = {}
        self._searched: set[str] = set()
        self._search: BackgroundTask | None = None
        self._queued: str | None = None
        self._typed: dict[str, str] = {}
        self._source = DEFAULT_SOURCE
        layout = QHBoxLayout(self)
        layout.setContentsMargins(4, 0, 4, 0)
        layout.setSpacing(6)

        self.source_box = QComboBox(self)
        for key, row in SOURCES.items():
            self.source_box.addItem(row.label, key)
            self.source_box.setItemData(self.source_box.count() - 1, row.description, Qt.ItemDataRole.ToolTipRole)
        self.source_box.setToolTip("Where the model comes from")

        self.model_box = QComboBox(self)
        self.model_box.setEditable(True)
        self.model_box.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        self.model_box.setMinimumContentsLength(18)
        self.model_box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self._completer = QCompleter(self.model_box)
        self._completer.setFilterMode(Qt.MatchFlag.MatchContains)
        self._completer.setCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self._completer.setCompletionMode(QCompleter.CompletionMode.PopupCompletion)
        self._lists[DEFAULT_SOURCE] = QStandardItemModel(self)
        self._searched.add(DEFAULT_SOURCE)

        self.browse_button = QToolButton(self)
        self.browse_button.setText("…")
        self.browse_button.clicked.connect(lambda: self.browseRequested.emit(self._source))

        self.weights_box = QComboBox(self)
        self.weights_box.setToolTip("Pretrained weights (● in the local cache; others need a download)")
        self.weights_box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)

        self.classes = QSpinBox(self)
        self.classes.setRange(0, 1_000_000)
        self.classes.setSpecialValueText("keep")
        self.classes.setToolTip("Classes of a new classification head (keep: the model's own head)")
        self.classes.setMinimumWidth(self.classes.fontMetrics().horizontalAdvance("1000000") + 36)

        self.meta_box = QCheckBox("Structure only", self)
        self.meta_box.setToolTip(
            "Build on the meta device: the tree, counts, plan and cost panel work without reading or\n"
            "allocating any weights (7B-class models open in seconds). Training and verify need real tensors.\n"
            "A Hugging Face folder with only config.json always opens this way."
        )

        self.load_button = QPushButton("Load", self)
        self.load_button.setToolTip("Build the model (a download is only started after asking)")
        self.load_button.clicked.connect(self._emit_request)

        src = QLabel("Source", self)
        src.setBuddy(self.source_box)
        layout.addWidget(src)
        layout.addWidget(self.source_box)
        lab = QLabel("Model", self)
        lab.setBuddy(self.model_box)
        layout.addWidget(lab)
        layout.addWidget(self.model_box)
        layout.addWidget(self.browse_button)
        for label, w in (("Weights", self.weights_box), ("Classes", self.classes)):
            lab = QLabel(label, self)
            lab.setBuddy(w)
            layout.addWidget(lab)
            layout.addWidget(w)
        layout.addWidget(self.meta_box)
        layout.addWidget(self.load_button)
        self.source_box.activated.connect(lambda i: self.select_source(self.source_box.itemData(i)))
        self.model_box.currentIndexChanged.connect(self._refresh_weights)
        edit = self.model_box.lineEdit()
        assert edit is not None  # an editable combo box has one
        edit.returnPressed.connect(self._commit_typed)
        edit.textEdited.connect(self._typed_text)
        self._show_source(DEFAULT_SOURCE)
        self.set_current({"name": DEFAULT_MODEL})
        if torch_ready.is_ready():
            self._list_registry()
        else:  # start-up: the start-up model alone until torchvision is imported
            torch_ready.notifier().ready.connect(self._list_registry)

    # ------------------------------------------------------------------ API
    def model_names(self) -> list[str]:
        """Every name the bar offers for the current source (so far: registries fill in
        once their search has finished)."""
        items = self._lists.get(self._source)
        if items is None:
            return []
        return [n for r in range(items.rowCount()) if (n := items.item(r).data(_NAME_ROLE))]

    def current_source(self) -> str:
        """The source selected: a key of the source table (``"torchvision"``, ``"timm"``, ``"hf"``, ``"py"``)."""
        return self._source

    def current_name(self) -> str:
        """The model selected or typed (the default source: typed text only when it is a known name)."""
        text = self.model_box.currentText().strip()
        if self._source != DEFAULT_SOURCE:
            return text
        return text if text in self._infos else (self.model_box.currentData(_NAME_ROLE) or text)

    def request(self) -> LoadRequest:
        """What the bar describes now.

        Returns:
            A request that does not allow downloads (the window asks first).
        """
        weights = self.weights_box.currentData()
        n = self.classes.value()
        return LoadRequest(
            name=self.current_name(),
            weights=weights or None,
            num_classes=n or None,
            source=self._source,
            meta=self.meta_box.isChecked(),
            origin="the model bar" if SOURCES[self._source].runs_code else None,  # code: confirmed first
        )

    def set_current(self, spec: Mapping[str, Any]) -> None:
        """Show the loaded model's source, name, weights and head size.

        Args:
            spec: a plan ``model`` block (``source``, ``name``, ``weights``, ``num_classes``);
                a ``name`` written as a prefixed spec (``"timm:resnet10t"``) selects its source.
        """
        source = spec.get("source")
        name = spec.get("name")
        if (source is None or architecture_source(source) == DEFAULT_SOURCE) and isinstance(name, str) and ":" in name:
            with contextlib.suppress(zoo.ModelSourceError):
                source, name = parse_model_spec(name)
        if source in SOURCES and source != self._source:
            self._show_source(source)
        if isinstance(name, str):
            i = self.model_box.findData(name, _NAME_ROLE)
            if i >= 0:
                self.model_box.setCurrentIndex(i)
            if self._source != DEFAULT_SOURCE or name in self._infos or not self._infos:
                self.model_box.setEditText(name)
        self._refresh_weights()
        w = spec.get("weights")
        j = self.weights_box.findData(w) if w else 0
        self.weights_box.setCurrentIndex(max(j, 0))
        n = spec.get("num_classes")
        self.classes.setValue(n if isinstance(n, int) and not isinstance(n, bool) else 0)

    def select_source(self, source: str, search: bool = True) -> None:
        """Switch the bar to a source; its registry is searched once (on a worker thread).

        Args:
            source: a key of :data:`~workbench.core.models.sources.SOURCES`.
            search: start the search for the source's names when not done yet
                (:attr:`namesReady` follows).
        """
        if source != self._source:
            self._show_source(source)
        if search:
            self._ensure_names(source)

    def set_busy(self, busy: bool) -> None:
        """Disable the Load button while a model loads."""
        self.load_button.setEnabled(not busy)

    def searching(self) -> bool:
        """Whether a registry search is running."""
        return self._search is not None

    def wait(self) -> None:
        """Block until a running registry search has ended (the window calls it on close)."""
        if self._search is not None:
            self._search.wait()

    # ------------------------------------------------------------------ sources
    def _list_registry(self) -> None:
        """List the default source's names with their weights (``zoo.list_models``: needs
        torchvision), keeping the model shown."""
        shown = self.model_box.currentText().strip()
        self._infos = {m.name: m for m in zoo.list_models()}
        items = self._lists[DEFAULT_SOURCE]
        for name, info in self._infos.items():
            cached = any(info.cached.values())
            item = QStandardItem(cached_icon(cached), name)
            size = fmt_count(info.num_params) if info.num_params else "?"
            weights = ", ".join(f"{w} ({'cached' if info.cached.get(w) else 'not cached'})" for w in info.weights)
            item.setToolTip(f"{name}: {size} parameters, {info.input_size} px input\nweights: {weights or 'none'}")
            item.setData(name, _NAME_ROLE)
            item.setData(cached, _CACHED_ROLE)
            items.appendRow(item)
        if self._source == DEFAULT_SOURCE and shown:
            self.set_current({"name": shown})

    def _show_source(self, source: str) -> None:
        """Put a source's list, placeholder and weights in the bar (no search started)."""
        self._typed[self._source] = self.model_box.currentText()
        self._source = source
        i = self.source_box.findData(source)
        if i >= 0 and i != self.source_box.currentIndex():
            self.source_box.setCurrentIndex(i)
        items = self._lists.get(source)
        if items is None:
            items = self._lists[source] = QStandardItemModel(self)
        self.model_box.blockSignals(True)
        self.model_box.setModel(items)
        self.model_box.setCurrentIndex(-1)
        self.model_box.setEditText(self._typed.get(source, ""))
        self.model_box.blockSignals(False)
        self._completer.setModel(items)
        self.model_box.setCompleter(self._completer)
        row = source_of(source)
        edit = self.model_box.lineEdit()
        if edit is not None:
            edit.setPlaceholderText(row.placeholder)
        tip = row.description + (" (● opens offline)" if row.searchable else "")
        if row.runs_code:
            tip += "\nLoading runs that code with your rights: only name code you trust."
        self.model_box.setToolTip(tip)
        self.browse_button.setVisible(row.browse is not None)
        self.browse_button.setToolTip(row.browse.tip if row.browse is not None else "")
        self._refresh_weights()

    def _ensure_names(self, source: str) -> None:
        if source in self._searched:
            return
        if self._search is not None:
            self._queued = source
            return
        self._searched.add(source)
        items = self._lists[source]
        if items.rowCount() == 0:
            wait = QStandardItem(f"searching {source_of(source).label}…")
            wait.setEnabled(False)
            items.appendRow(wait)
        task = BackgroundTask(lambda: search_models(source), self)
        task.done.connect(lambda result, error, _details: self._names_done(source, result, error))
        self._search = task
        task.start()

    def _names_done(self, source: str, result: list[tuple[str, bool]] | None, error: str) -> None:
        task, self._search = self._search, None
        if task is not None:
            task.deleteLater()
        items = self._lists[source]
        text = self.model_box.currentText() if source == self._source else ""
        items.clear()
        if result is None:
            item = QStandardItem(error or f"no {source} names")
            item.setToolTip(error)
            item.setEnabled(False)
            items.appendRow(item)
        for name, cached in result or []:
            item = QStandardItem(cached_icon(cached), name)
            where = source_of(source).cache_where
            item.setToolTip(f"{name}: {'in the ' + where if cached else 'not cached (weights need a download)'}")
            item.setData(name, _NAME_ROLE)
            item.setData(cached, _CACHED_ROLE)
            items.appendRow(item)
        if source == self._source:
            self.model_box.blockSignals(True)
            self.model_box.setCurrentIndex(-1)
            self.model_box.setEditText(text)
            self.model_box.blockSignals(False)
            self._refresh_weights()
        self.namesReady.emit(source)
        queued, self._queued = self._queued, None
        if queued is not None:
            self._ensure_names(queued)

    # ------------------------------------------------------------------ internals
    def _typed_text(self, _text: str) -> None:
        self._ensure_names(self._source)  # typing searches the source's names
        self._refresh_weights()

    def _cached_mark(self, name: str) -> bool | None:
        i = self.model_box.findData(name, _NAME_ROLE)
        return self.model_box.itemData(i, _CACHED_ROLE) if i >= 0 else None

    def _refresh_weights(self, *_: Any) -> None:
        previous = self.weights_box.currentData()
        self.weights_box.blockSignals(True)
        self.weights_box.clear()
        own = source_of(self._source).own_weights
        if own is not None:
            self.weights_box.addItem(own.entry, None)
            self.weights_box.setEnabled(False)
            self.weights_box.blockSignals(False)
            return
        self.weights_box.setEnabled(True)
        self.weights_box.addItem("Random init", None)
        if self._source != DEFAULT_SOURCE:  # one "Pretrained" entry: the source's default tag
            name = self.current_name()
            if name:
                cached = bool(self._cached_mark(name))
                self.weights_box.addItem(cached_icon(cached), f"Pretrained ({'cached' if cached else 'download'})", "DEFAULT")
            j = self.weights_box.findData(previous) if previous else 0
            self.weights_box.setCurrentIndex(max(j, 0))
            self.weights_box.blockSignals(False)
            return
        info = self._infos.get(self.current_name())
        if info is not None:
            for w in info.weights:
                cached = bool(info.cached.get(w))
                label = f"{w} ({'cached' if cached else 'download'})"
                self.weights_box.addItem(cached_icon(cached), label, w)
        j = self.weights_box.findData(previous) if previous else -1
        if j < 0 and info is not None:
            in_cache = [w for w in info.weights if info.cached.get(w)]
            j = self.weights_box.findData(in_cache[0]) if in_cache else 0
        self.weights_box.setCurrentIndex(max(j, 0))
        self.weights_box.blockSignals(False)

    def _commit_typed(self) -> None:
        name = self.model_box.currentText().strip()
        i = self.model_box.findData(name, _NAME_ROLE)
        if i >= 0:
            self.model_box.setCurrentIndex(i)

    def _emit_request(self) -> None:
        self.loadRequested.emit(self.request())


#: Origins of code requests made in the window itself (the dialog names any other origin: a plan).
APP_ORIGINS = ("the model bar", "Open Model Code")
#: Title of the dialog shown before model code runs.
RUN_CODE_TITLE = "Run model code?"


def confirm_code(parent: QWidget | None, request: LoadRequest) -> LoadRequest | None:
    """Ask before a request runs code (``py:``): the file, its top-level statements and the function.

    The one place the window turns a code request named by a plan, the model bar or a file
    dialog into one the user confirmed; without it, :func:`~workbench.gui.model_loading.load_model`
    refuses the request with the command line's one line.

    Args:
        parent: the window.
        request: what to load.

    Returns:
        The request, confirmed (``origin`` None), when it runs no code, already was
        confirmed, or the user chose "Run"; None when the user cancelled.

    Raises:
        ModelSourceError: the spec is not ``TARGET:FACTORY``.
    """
    if request.origin is None or not SOURCES[request.source].runs_code or not request.name:
        return request
    path, lines = code_preview(request.name)
    factory = escape(request.name.rpartition(":")[2])
    named_by = f"<p>Named by {escape(request.origin, quote=False)}.</p>" if request.origin not in APP_ORIGINS else ""
    question = (
        f"{named_by}<p>Loading this model runs this file, then <b>{factory}()</b>:<br><tt>{escape(path, quote=False)}"
        "</tt><br>with your rights. Only run code you trust.</p>"
        "<p>The file's top-level statements (importing it runs them, decorators and class bodies included):</p>"
        f"<pre>{escape(top_level_statements(path), quote=False)}</pre>"
        f"<p>Then <b>{factory}()</b>:</p><pre>{escape(lines, quote=False)}</pre>"
    )
    answer = dialogs.ask(parent, RUN_CODE_TITLE, question, ("Run", "Cancel"), "Cancel")
    return dataclasses.replace(request, origin=None) if answer == "Run" else None
