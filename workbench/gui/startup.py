"""Start-up: a window on screen at once, the full window before torch, torch behind it.

Importing torch and torchvision takes seconds. So :func:`workbench.gui.app.main` first shows a
:class:`StartupWindow` (Qt only, painted within a fraction of a second): the window's title,
its model bar with the start-up model, and the model's tree or an empty tree that says what
is loading. Once it is painted, the full window (whose modules import no torch) takes its
place, and :class:`HeavyImports` imports torch and torchvision on a thread behind it; then
the devices and the model list fill in and the model loads in the background.

When the start-up model's tree was described the last time it loaded
(:mod:`workbench.core.models.tree_cache`), the start-up window shows it at once in the window's
own module tree, under one line saying it is from the last start
(:mod:`workbench.gui.plan.tree_preview`): its checkboxes edit the plan with the plan engine,
which needs no torch. The full window takes the tree and the edits over, and keeps them when
the live tree replaces the described one.

This module imports nothing but Qt, the standard library and the Qt-free tree description
(no torch); the described tree's modules (numpy, the plan engine, the tree view) only when
there is a description.

``WORKBENCH_STARTUP_TRACE=1`` prints ``startup: <event> <unix time> <CPU seconds>`` lines on stderr
(``first-paint``, ``cached-tree`` when the first paint showed a described tree,
``window-modules``, ``window``, ``imported-<module>`` for each of :data:`HEAVY_MODULES`,
``imports-done``, ``tree``); ``tests/benchmarks/bench_startup.py`` reads them.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QEvent, QObject, QSettings, Qt, QThread, Signal
from PySide6.QtGui import QCloseEvent, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QComboBox,
    QLabel,
    QMainWindow,
    QProgressBar,
    QToolBar,
    QTreeView,
    QTreeWidget,
    QVBoxLayout,
    QWidget,
)

from workbench.core.models.tree_cache import CachedTree
from workbench.gui.window_geometry import restore_geometry

if TYPE_CHECKING:  # pragma: no cover - typing only
    from workbench.gui.plan.tree_preview import DescribedTree

__all__ = ["HEAVY_MODULES", "STARTUP_TRACE_ENV", "HeavyImports", "StartupWindow", "loading_text", "trace"]

#: Environment variable that makes start-up print its timestamps on stderr.
STARTUP_TRACE_ENV = "WORKBENCH_STARTUP_TRACE"
#: What the model's load needs that the window does not: imported on :class:`HeavyImports`' thread.
HEAVY_MODULES: tuple[str, ...] = (
    "torch",
    "torchvision",
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


class _FirstPaint(QObject):
    """Watches a tree's viewport; reports its first paint once (``painted``, and the trace)."""

    painted = Signal()

    def __init__(self, tree: QTreeView) -> None:
        super().__init__(tree)
        self._tree = tree
        tree.viewport().installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Paint:
            self._tree.viewport().removeEventFilter(self)
            trace("first-paint")
            if self._tree.model() is not None and self._tree.model().rowCount() > 0:
                trace("cached-tree")
            self.painted.emit()
        return False


class StartupWindow(QMainWindow):
    """The window as it first shows: title, model bar, an empty tree that says what loads.

    Signals:
        painted(): once, when the window (its tree) has been painted the first time.
        closed(): when the window closes (by the user, or when the full window replaces it).

    Args:
        model: the model that will load (shown in the model bar and the tree).
        settings: where the window's geometry was saved (the real window's place).
        parent: Qt parent.
        preview: the model's described tree, shown in the window's module tree, whose checkboxes
            edit the plan until the full window takes the tree and the edits over (None: an empty
            tree saying what loads).

    Attributes:
        model_box / tree / loading_label / progress / notice / status_label: the widgets
            (read by tests).
        preview: the described tree shown, or None.
        described: its controller, tree model and view (None without a description).
        edits_taken: the full window took the plan edits over (closing then asks nothing;
            otherwise unsaved edits are asked about: Save, Discard, Cancel).
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
        self.notice = QLabel(self)
        self.notice.setWordWrap(True)
        self.notice.hide()
        layout.addWidget(self.notice)
        self.preview = preview
        self.described: DescribedTree | None = None
        #: The full window took the plan edits over: closing asks nothing.
        self.edits_taken = False
        if preview is not None:
            # numpy, the plan engine and the tree view: imported only for a description
            from workbench.gui.plan.tree_preview import described_tree, preview_notice

            self.described = described_tree(preview, central)
            self.tree: QTreeView = self.described.view
            self.notice.setText(preview_notice(preview))
            self.notice.show()
            self.described.controller.errorOccurred.connect(self._error)
            undo_stack = self.described.controller.undo_stack
            QShortcut(QKeySequence.StandardKey.Undo, self, undo_stack.undo)
            QShortcut(QKeySequence.StandardKey.Redo, self, undo_stack.redo)
        else:
            empty = QTreeWidget(central)
            empty.setHeaderLabels(["Module", "Type", "Params"])
            self.tree = empty
        self.loading_label = QLabel(loading_text(model), self.tree.viewport())
        self.loading_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.loading_label.setWordWrap(True)
        self.loading_label.setStyleSheet("color: palette(mid); font-size: 13pt")
        QVBoxLayout(self.tree.viewport()).addWidget(self.loading_label)  # the whole viewport, as it resizes
        self.loading_label.setVisible(preview is None)
        self._first_paint = _FirstPaint(self.tree)
        self._first_paint.painted.connect(self.painted)
        layout.addWidget(self.tree)
        self.setCentralWidget(central)
        self.progress = QProgressBar(self)
        self.progress.setRange(0, 0)
        self.progress.setMaximumWidth(140)
        self.progress.setMaximumHeight(14)
        self.status_label = QLabel("Starting…", self)
        self.statusBar().addWidget(self.status_label)
        self.statusBar().addWidget(self.progress)
        # the full window's rules: a saved geometry only when it fits this screen
        restore_geometry(self, settings.value("window/geometry") if settings is not None else None)

    def _error(self, title: str, message: str, details: str) -> None:
        """An edit or a save that failed: one dialog, as in the full window."""
        from workbench.gui import dialogs

        dialogs.error(self, title, message, details)

    def closeEvent(self, event: QCloseEvent) -> None:
        if not self.edits_taken and not self._edits_let_go():
            event.ignore()
            return
        super().closeEvent(event)
        if event.isAccepted():
            self.closed.emit()

    def _edits_let_go(self) -> bool:
        """Ask before plan edits made on the described tree are lost (Save, Discard, Cancel).

        Returns:
            True when the window may close (nothing unsaved, saved, or discarded).
        """
        described = self.described
        if described is None or not described.controller.dirty:
            return True
        from workbench.gui import dialogs

        c = described.controller
        answer = dialogs.ask(
            self, "Unsaved changes",
            f"The plan has {len(c.done_edits())} unsaved edit(s), made while {c.plan.model.get('name', 'the model')} "
            "loaded. Save them first?",
            ("Save", "Discard", "Cancel"), "Save",
        )
        if answer != "Save":
            return answer == "Discard"
        name = c.plan.model.get("name") or "model"
        path = dialogs.save_file(self, "Save plan as", str(Path.home() / f"{name}.plan.json"), dialogs.PLAN_FILTER)
        if not path:
            return False
        return c.save(path if path.lower().endswith(".json") else path + ".json")
