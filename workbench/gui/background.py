"""Run slow work (building or reading a model) on a ``QThread`` and report on the GUI thread.

A :class:`BackgroundTask` runs one callable in a worker ``QObject`` moved to its own
``QThread``. The outcome travels back as a queued signal; errors travel as text (never as
an exception escaping the thread). The task emits :attr:`BackgroundTask.done` only after
its thread has ended, so whoever reacts to it can rely on no thread being left behind.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QThread, Signal, Slot

from workbench.core.errors import WorkbenchError

__all__ = ["BackgroundTask", "running_threads", "track_thread", "untrack_thread"]

#: Worker threads started by the app and not yet ended (tests check it is empty).
_LIVE: set[QThread] = set()


def running_threads() -> list[QThread]:
    """Worker threads of this process that are still running.

    Returns:
        The running ``QThread`` objects started by :class:`BackgroundTask` or registered
        with :func:`track_thread` (the training thread).
    """
    return [t for t in list(_LIVE) if t.isRunning()]


def track_thread(thread: QThread) -> None:
    """Register a worker thread the app starts, so :func:`running_threads` sees it.

    Args:
        thread: the thread (call before starting it).
    """
    _LIVE.add(thread)


def untrack_thread(thread: QThread) -> None:
    """Forget a thread once it has ended.

    Args:
        thread: the thread.
    """
    _LIVE.discard(thread)


class _Job(QObject):
    """Lives on the worker thread; calls the function once."""

    succeeded = Signal(object)
    failed = Signal(str, str)

    def __init__(self, fn: Callable[[], Any]) -> None:
        super().__init__()
        self._fn = fn

    @Slot()
    def run(self) -> None:
        try:
            # torch's thread settings for this thread (imported here: the start-up window's
            # controller holds no model and runs no task, and imports no torch)
            from workbench.core.training.cpu_threads import use_worker_threads

            use_worker_threads()
            result = self._fn()
        except WorkbenchError as e:
            self.failed.emit(str(e), "")
        except Exception as e:  # a bug or an unexpected library error: keep the traceback
            self.failed.emit(f"{type(e).__name__}: {e}", traceback.format_exc())
        else:
            self.succeeded.emit(result)
        finally:
            self._fn = None  # type: ignore[assignment]  # drop references held by the closure
            thread = QThread.currentThread()
            thread.quit()


class BackgroundTask(QObject):
    """One callable run on its own thread.

    Signals:
        done(result, error, details): on the GUI thread after the worker thread has ended;
            ``result`` is the return value (None on failure), ``error`` the one-line
            message ("" on success), ``details`` a traceback for unexpected errors.

    Example:
        >>> task = BackgroundTask(lambda: load_model(request))   # doctest: +SKIP
        >>> task.done.connect(on_done); task.start()             # doctest: +SKIP
    """

    done = Signal(object, str, str)

    def __init__(self, fn: Callable[[], Any], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._thread = QThread()
        self._thread.setObjectName("workbench-worker")
        self._job = _Job(fn)
        self._job.moveToThread(self._thread)
        self._result: Any = None
        self._error = ""
        self._details = ""
        self._emitted = False
        self._thread.started.connect(self._job.run)
        self._job.succeeded.connect(self._on_succeeded)
        self._job.failed.connect(self._on_failed)
        self._thread.finished.connect(self._on_finished)

    def start(self) -> None:
        """Start the worker thread."""
        track_thread(self._thread)
        self._thread.start()

    def is_running(self) -> bool:
        """Whether the worker thread is still running."""
        return self._thread.isRunning()

    def wait(self) -> None:
        """Block until the worker thread has ended (the callable cannot be interrupted)."""
        self._thread.wait()
        untrack_thread(self._thread)

    @Slot(object)
    def _on_succeeded(self, result: Any) -> None:
        self._result = result

    @Slot(str, str)
    def _on_failed(self, error: str, details: str) -> None:
        self._error, self._details = error, details

    @Slot()
    def _on_finished(self) -> None:
        self.wait()  # `finished` comes just before the thread really ends
        if self._emitted:
            return
        self._emitted = True
        result, self._result = self._result, None
        self.done.emit(result, self._error, self._details)
