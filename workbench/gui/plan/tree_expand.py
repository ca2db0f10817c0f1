"""Expand many rows of a tree view a slice at a time, so that no click waits for it.

Expanding a row makes the view ask the model about each of its children; a filter that
matches 60,000 modules has 16,000 rows to expand, seconds of such calls into a Python model.
:class:`SlicedExpander` expands the rows it is given top down, for at most
:data:`SLICE_MS` at a time: the first slice at once (the top of the view is filled before the
call returns), the rest from the event loop between the user's clicks and keystrokes. The second slice waits for the view to
paint the first (or :data:`PAINT_WAIT_MS`, for a view that does not paint), so the rows a
filter or Expand All shows at the top are on screen before more rows are laid out. A new
request, collapsing the view or a model reset cancels what is left.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
from PySide6.QtCore import QEvent, QModelIndex, QObject, QTimer, Signal
from PySide6.QtWidgets import QTreeView

__all__ = ["PAINT_WAIT_MS", "SLICE_MS", "SlicedExpander"]

#: Longest run of expanding at a time, in milliseconds.
SLICE_MS = 30
#: Longest wait for the view to paint the first slice before the second runs, in milliseconds.
PAINT_WAIT_MS = 100


class SlicedExpander(QObject):
    """Expands rows of a view in slices (top down, each row once its parent is shown).

    Signals:
        finished(): every row asked for is expanded (not emitted when cancelled).

    Args:
        view: the tree view.
        index_of: ``index_of(row id) -> QModelIndex`` in the view's model (invalid when the row
            is not shown there, e.g. filtered out).
        slice_ms: the longest slice.
    """

    finished = Signal()

    def __init__(self, view: QTreeView, index_of: Callable[[int], QModelIndex], slice_ms: float = SLICE_MS) -> None:
        super().__init__(view)
        self._view = view
        self._index_of = index_of
        self.slice_ms = slice_ms  # a slice expands at least one row, however small this is
        self._ids: Sequence[int] | np.ndarray = ()
        self._next = 0
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(0)
        self._timer.timeout.connect(self._run_slice)
        self._await_paint: QObject | None = None  # after the first slice: the viewport whose paint we wait for
        self.slices = 0  # slices run for the latest request (read by tests and the benchmark)

    @property
    def busy(self) -> bool:
        """Whether rows are left to expand."""
        return self._next < len(self._ids)

    def start(self, ids: Sequence[int] | np.ndarray) -> None:
        """Expand these rows: the first slice now, the rest from the event loop.

        Args:
            ids: row ids, parents before their children (pre-order); a row already expanded
                or not shown is skipped.
        """
        self.cancel()
        self._ids, self._next, self.slices = ids, 0, 0
        self._view.doItemsLayout()  # after a reset: lay out the top now, so each expand below shows at once
        self._run_slice()
        if self.busy and self._view.isVisible():  # the top on screen first, then the rest
            self._await_paint = self._view.viewport()
            self._await_paint.installEventFilter(self)
            self._timer.start(PAINT_WAIT_MS)

    def cancel(self) -> None:
        """Forget the rows not expanded yet."""
        self._timer.stop()
        self._stop_waiting()
        self._ids, self._next = (), 0

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        """After the first slice: the view's viewport paints it, so the next slice may run."""
        if watched is self._await_paint and event.type() == QEvent.Type.Paint:
            self._stop_waiting()
            self._timer.start(0)
        return False

    def _stop_waiting(self) -> None:
        if self._await_paint is not None:
            self._await_paint.removeEventFilter(self)
            self._await_paint = None

    def finish(self) -> None:
        """Expand every row left now, in one go (tests, and a caller that must see them all)."""
        while self.busy:
            self._run_slice()
        self._timer.stop()

    def _run_slice(self) -> None:
        ids, view = self._ids, self._view
        end = time.perf_counter() + self.slice_ms / 1000.0
        i = self._next
        while i < len(ids):
            idx = self._index_of(int(ids[i]))
            i += 1
            if idx.isValid() and not view.isExpanded(idx):
                view.expand(idx)
            if time.perf_counter() > end:
                break
        self._next = i
        self.slices += 1
        self._stop_waiting()
        if self.busy:
            self._timer.start(0)
        elif len(ids):
            self._ids, self._next = (), 0
            self.finished.emit()
