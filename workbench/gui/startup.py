"""Start-up: a window on screen before torch is imported, the heavy imports behind it.

Importing torch, torchvision and pyqtgraph takes seconds; the window needs them all. So
:func:`workbench.gui.app.main` first shows a :class:`StartupWindow` (Qt only, painted within
a fraction of a second): the window's title, its model bar with the start-up model, and an
empty tree that says what is loading. :class:`HeavyImports` imports torch and the Qt-free
library on a thread meanwhile; then the real window replaces the start-up one at the same
place and loads the model in the background (its tree shows the same loading state).

When the start-up model's tree was described the last time it loaded
(:mod:`workbench.core.models.tree_cache`), the start-up window shows those rows at once,
read-only, under one line saying they are from the last start (:mod:`workbench.gui.plan.tree_preview`);
the live tree replaces them once the model has loaded.

This module imports nothing but Qt, the standard library and the Qt-free tree description
(no torch).

``WORKBENCH_STARTUP_TRACE=1`` prints ``startup: <event> <unix time> <CPU seconds>`` lines on stderr
(``first-paint``, ``cached-tree`` when the first paint showed a described tree, ``imported-<module>``
for each of :data:`HEAVY_MODULES`, ``imports-done``,
``window-modules``, ``window``, ``tree``); ``tests/benchmarks/bench_startup.py`` reads them.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
import traceback
from collections.abc import Sequence
from typing import Any

from PySide6.QtCore import QSettings, Qt, QThread, Signal
from PySide6.QtGui import QCloseEvent, QPaintEvent
from PySide6.QtWidgets import (
    QComboBox,
    QLabel,
    QMainWindow,
    QProgressBar,
    QToolBar,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from workbench.core.models.tree_cache import CachedTree
from workbench.gui.plan.tree_preview import PATH_ROLE, fill_preview, preview_notice, row_click_text
from workbench.gui.window_geometry import restore_geometry

__all__ = ["HEAVY_MODULES", "STARTUP_TRACE_ENV", "HeavyImports", "StartupWindow", "loading_text", "trace"]

#: Environment variable that makes start-up print its timestamps on stderr.
STARTUP_TRACE_ENV = "WORKBENCH_STARTUP_TRACE"
#: What the window needs that Qt does not: imported on :class:`HeavyImports`' thread.
HEAVY_MODULES: tuple[str, ...] = (
    "torch",
    "torchvision",
    "workbench.core.training.cpu_threads",
    "workbench.core.plan.rules",
    "workbench.core.models.zoo",
    "workbench.gui.model_loading",
)


def trace(event: str) -> None:
    """Print ``startup: EVENT TIME CPU`` on stderr when ``$WORKBENCH_STARTUP_TRACE`` is set.

    ``TIME`` is the Unix time, ``CPU`` the process's CPU seconds so far (all threads).

    Args:
        event: what just happened (``first-paint``, ``tree`` ...).
    """
    if os.environ.get(STARTUP_TRACE_ENV):
        print(f"startup: {event} {time.time():.4f} {time.process_time():.4f}", file=sys.stderr, flush=True)


def loading_text(model: str | None) -> str:
    """What the empty tree says while the app starts: ``Loading PyTorch and resnet18…``.

    Args:
        model: the model that will load, if known.

    Returns:
        The text.
    """
    return f"Loading PyTorch and {model}…" if model else "Loading PyTorch…"


class HeavyImports(QThread):
    """Imports :data:`HEAVY_MODULES` on a thread (Python's import lock keeps it safe).

    Signals:
        imported(error, details): on the GUI thread when done; ``error`` is ``""`` on
            success, else one line naming the module that failed and what to do.

    Args:
        modules: the modules to import.
        parent: Qt parent.
    """

    imported = Signal(str, str)

    def __init__(self, modules: Sequence[str] = HEAVY_MODULES, parent: Any = None) -> None:
        super().__init__(parent)
        self.setObjectName("workbench-imports")
        self._modules = tuple(modules)

    def run(self) -> None:
        for name in self._modules:
            try:
                importlib.import_module(name)
                trace(f"imported-{name}")
            except Exception as e:  # a broken installation: say which module, keep the traceback
                first = (str(e).strip().splitlines() or [type(e).__name__])[0]
                self.imported.emit(
                    f"cannot import {name} ({first}); reinstall freeze-workbench and its dependencies (pip install -U freeze-workbench)",
                    traceback.format_exc(),
                )
                return
        self.imported.emit("", "")


class _TracedTree(QTreeWidget):
    """The start-up tree; reports its first paint once (``painted``, and the trace)."""

    painted = Signal()

    def __init__(self, parent: QWidget) -> None:
        super().__init__(parent)
        self._painted = False

    def paintEvent(self, event: QPaintEvent) -> None:
        super().paintEvent(event)
        if not self._painted:
            self._painted = True
            trace("first-paint")
            if self.topLevelItemCount():
                trace("cached-tree")
            self.painted.emit()


class StartupWindow(QMainWindow):
    """The window as it first shows: title, model bar, an empty tree that says what loads.

    Signals:
        painted(): once, when the window (its tree) has been painted the first time.
        closed(): when the window closes (by the user, or when the full window replaces it).

    Args:
        model: the model that will load (shown in the model bar and the tree).
        settings: where the window's geometry was saved (the real window's place).
        parent: Qt parent.
        preview: the model's described tree, shown read-only until the live tree replaces
            the window (None: the empty tree saying what loads).

    Attributes:
        model_box / tree / loading_label / progress / notice / status_label: the widgets
            (read by tests).
        preview: the described tree shown, or None.
    """

    painted = Signal()
    closed = Signal()

    def __init__(
        self,
        model: str | None,
        settings: QSettings | None = None,
        parent: QWidget | None = None,
        *,
        preview: CachedTree | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("StartupWindow")
        self.setWindowTitle("Freeze Workbench")
        bar = QToolBar("Model", self)
        bar.setMovable(False)
        bar.addWidget(QLabel(" Model ", bar))
        self.model_box = QComboBox(bar)
        self.model_box.addItem(model or "…")
        self.model_box.setEnabled(False)
        self.model_box.setMinimumWidth(160)
        bar.addWidget(self.model_box)
        self.addToolBar(bar)
        for title in ("&File", "&Edit", "&View", "&Run", "&Help"):
            self.menuBar().addMenu(title).setEnabled(False)
        central = QWidget(self)
        layout = QVBoxLayout(central)
        layout.setContentsMargins(6, 6, 6, 6)
        self.tree = _TracedTree(central)
        self.tree.painted.connect(self.painted)
        self.tree.setHeaderLabels(["Module", "Type", "Params"])  # what a described tree holds (fill_preview)
        self.tree.header().setStretchLastSection(False)  # Params stays beside its label
        self.loading_label = QLabel(loading_text(model), self.tree.viewport())
        self.loading_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.loading_label.setWordWrap(True)
        self.loading_label.setStyleSheet("color: palette(mid); font-size: 13pt")
        QVBoxLayout(self.tree.viewport()).addWidget(self.loading_label)  # the whole viewport, as it resizes
        self.notice = QLabel(self)
        self.notice.setWordWrap(True)
        self.notice.hide()
        layout.addWidget(self.notice)
        layout.addWidget(self.tree)
        self.setCentralWidget(central)
        self.progress = QProgressBar(self)
        self.progress.setRange(0, 0)
        self.progress.setMaximumWidth(140)
        self.progress.setMaximumHeight(14)
        self.status_label = QLabel("Starting…", self)
        self.statusBar().addWidget(self.status_label)
        self.statusBar().addWidget(self.progress)
        self.preview = preview
        if preview is not None:
            self._show_preview(preview)
        # the full window's rules: a saved geometry only when it fits this screen
        restore_geometry(self, settings.value("window/geometry") if settings is not None else None)

    def _show_preview(self, cached: CachedTree) -> None:
        """The described rows, read-only, with the line saying where they come from."""
        fill_preview(self.tree, cached)
        self.loading_label.hide()
        self.notice.setText(preview_notice(cached))
        self.notice.show()
        metrics = self.tree.fontMetrics()
        self.tree.setColumnWidth(0, max(self.tree.columnWidth(0), metrics.horizontalAdvance("M" * 18)))
        self.tree.setColumnWidth(1, max(self.tree.columnWidth(1), metrics.horizontalAdvance("AdaptiveAvgPool2d  ")))
        self.tree.itemClicked.connect(self._preview_clicked)

    def imports_done(self) -> None:
        """Torch and the library are imported: the lines say that the model loads now."""
        if self.preview is not None:
            self.notice.setText(preview_notice(self.preview, torch_imported=True))
        self.status_label.setText(f"Loading {self.model_box.currentText()}…")

    def _preview_clicked(self, item: QTreeWidgetItem, _column: int) -> None:
        """A click on a preview row: the row stays picked, the status bar says the plan waits."""
        path = item.data(0, PATH_ROLE)
        name = self.preview.name if self.preview is not None else "the model"
        self.status_label.setText(row_click_text(path if isinstance(path, str) else "", name))

    def closeEvent(self, event: QCloseEvent) -> None:
        super().closeEvent(event)
        if event.isAccepted():
            self.closed.emit()
