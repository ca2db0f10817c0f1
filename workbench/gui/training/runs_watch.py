"""The Runs tab follows the run store and the app's sweeps on disk.

Runs reach the store while the app is open from outside it: ``workbench train --save`` into a
folder of the store, ``workbench sweep`` into the sweeps folder beside it, another window.
:class:`RunsWatcher` watches their folders (a ``QFileSystemWatcher``) and, once a burst of
changes has gone by (:data:`RELOAD_DELAY_MS` after its first), asks the runs to read again what
changed (:meth:`~workbench.gui.training.run_controller.RunController.reload`: only changed run
files are read), then watches the folders that are there now. A folder without its run file
yet, or with one cut short, is passed over and taken in once the file is whole.
"""

from __future__ import annotations

from PySide6.QtCore import QFileSystemWatcher, QObject, QTimer

from workbench.gui.training.run_controller import RunController

__all__ = ["RELOAD_DELAY_MS", "RunsWatcher"]

#: Milliseconds from the first change on disk to the reload (later changes of the burst join it).
RELOAD_DELAY_MS = 500


class RunsWatcher(QObject):
    """Reloads the runs when their folders change on disk.

    Args:
        runs: the window's runs (their store and the app's sweeps are watched).
        parent: Qt parent.
        delay_ms: milliseconds from the first change to the reload.
    """

    def __init__(self, runs: RunController, parent: QObject | None = None, delay_ms: int = RELOAD_DELAY_MS) -> None:
        super().__init__(parent)
        self.runs = runs
        self._fs = QFileSystemWatcher(self)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(delay_ms)
        self._timer.timeout.connect(self.reload)
        self._fs.directoryChanged.connect(self._changed)
        self._fs.fileChanged.connect(self._changed)
        self._watch(first=True)

    def _changed(self, _path: str) -> None:
        if not self._timer.isActive():  # a steady stream of changes still reloads every delay
            self._timer.start()

    def reload(self) -> None:
        """Read again what changed, and watch the folders there now."""
        self.runs.reload()
        self._watch()

    def _watch(self, *, first: bool = False) -> None:
        folders, files = self.runs.watched()
        want = set(folders) | set(files)
        have = set(self._fs.directories()) | set(self._fs.files())
        if have - want:
            self._fs.removePaths(sorted(have - want))
        new = want - have
        if new:
            new -= set(self._fs.addPaths(sorted(new)))  # those it could not watch (permissions) are left out
            if new and not first:  # a folder new since the reload may have changed before its watch began
                self._changed("")

    def watched(self) -> list[str]:
        """The folders and files watched now (sorted)."""
        return sorted(self._fs.directories() + self._fs.files())
