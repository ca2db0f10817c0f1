"""The app's runs read again where they changed on disk (Qt-free).

Runs reach the app's run store and its sweeps from outside the app: ``workbench train --save``
into a folder of the store, ``workbench sweep --out`` into the sweeps folder, another window.
:class:`StoreScan` remembers each run folder's ``run.json`` as it was last read (its change
time, size and inode) and, when asked, lists the store's and the sweeps' run folders again and
opens only those whose file is new or changed: a listed run whose file is as it was stays the
same object (its selection, its loaded metrics), and so does one whose file changed without a
new start, end or status (a rename or a note the app saved itself).

A folder without ``run.json`` yet (one being written) is not a run; a ``run.json`` that cannot
be read (cut short) is one line, said once for that state of the file, and read again when the
file changes. The watching itself (the file system's notifications, a delay that gathers a burst
of them) is the GUI's: :meth:`StoreScan.watched` names what to watch.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from workbench.core.runs.record import RUN_FILE, RunRecord
from workbench.core.runs.store import SAVE_SUMMARY_FILE, RunStore, read_run_folder
from workbench.core.runs.sweeps import SWEEP_RUNS, is_sweep_folder, sweep_run_folders

__all__ = ["StoreScan", "file_state", "run_file"]

#: A run file's state: change time (ns), size and inode; None when there is none.
FileState = tuple[int, int, int] | None


def run_file(folder: Path) -> Path:
    """The file a run folder is read from: its ``run.json``, else (an earlier ``--save`` folder) its
    ``summary.json``."""
    path = folder / RUN_FILE
    return path if os.path.lexists(path) else folder / SAVE_SUMMARY_FILE


def file_state(folder: Path) -> FileState:
    """The state of a run folder's run file (:func:`run_file`): a file replaced, grown or cut has another.

    Args:
        folder: the run's folder.

    Returns:
        ``(mtime_ns, size, inode)``, or None when the folder holds no run file.
    """
    try:
        st = os.stat(run_file(folder))
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


def _key(r: RunRecord) -> tuple[str, str | None, str]:
    """What a write from outside changes: the start, the end and the status."""
    return r.created, r.finished, r.status


def _sub_dirs(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if p.is_dir() and not p.is_symlink())
    except OSError:
        return []


class StoreScan:
    """What changed in the app's run store and its sweeps since they were last read.

    Args:
        store: the app's run store (its sweeps lie beside it).
        records: the runs listed now (as read by ``store.list(sweeps=True)``).
    """

    def __init__(self, store: RunStore, records: Sequence[RunRecord]) -> None:
        self.store = store
        self._seen: dict[Path, FileState] = {r.folder: file_state(r.folder) for r in records if r.folder is not None}
        self._said: dict[Path, FileState] = {}  # the file state whose problem was said
        self._bad: set[Path] = set()  # run files that could not be read: watched for their completion
        found, problems = self._found()
        self._listing = tuple(problems)  # the listing's problems said at the last look (at start: by the app)
        for folder in found:  # unreadable at start: the app said so with its listing
            if folder not in self._seen:
                self._said[folder] = file_state(folder)
        self._bad = {run_file(f) for f in self._said}

    def _found(self) -> tuple[list[Path], list[str]]:
        """The run folders of the store and of the sweeps, and the listing's problems."""
        own, problems = self.store.run_folders()
        swept, trouble = sweep_run_folders([self.store.sweeps_folder])
        return own + swept, problems + trouble

    def merge(
        self, records: Sequence[RunRecord], *, keep: RunRecord | None = None
    ) -> tuple[list[RunRecord], list[str]]:
        """``records`` with the store's and the sweeps' run folders read again where they changed.

        Args:
            records: the runs listed now.
            keep: a run that stays as it is whatever its folder holds (the one in progress).

        Returns:
            ``(records, problems)``: oldest first; a run whose folder is gone is dropped (one the
            app holds but never found on disk, such as a run whose save failed, stays); one line
            per folder that cannot be read, each said once for one state of its file.
        """
        found, problems = self._found()
        on_disk = set(found)
        listed = {r.folder: r for r in records if r.folder is not None}
        merged = [r for r in records if r is keep or r.folder is None
                  or (r.folder not in self._seen and r.folder not in on_disk)]  # never on disk: the app's own
        taken = {id(r) for r in merged}
        problems = self._new_lines(problems)
        self._bad.clear()
        for folder in found:
            state = file_state(folder)
            old = listed.get(folder)
            if old is not None and id(old) in taken:
                continue
            if old is not None and self._seen.get(folder, False) == state:
                merged.append(old)
                continue
            if self._said.get(folder, False) == state:  # as unreadable as at the last look
                self._bad.add(run_file(folder))
                if old is not None:
                    merged.append(old)
                continue
            rec = read_run_folder(folder)
            if isinstance(rec, str):  # what the store's listing says of it
                self._bad.add(run_file(folder))
                problems.append(rec)
                self._said[folder] = state
                if old is not None:  # the run as it was last read, until its file is whole again
                    merged.append(old)
                continue
            self._seen[folder] = state
            self._said.pop(folder, None)
            merged.append(old if old is not None and _key(old) == _key(rec) else rec)
        for known in (self._seen, self._said):
            for folder in set(known) - on_disk:
                del known[folder]
        merged.sort(key=lambda r: (r.created, r.id))
        return merged, problems

    def _new_lines(self, lines: list[str]) -> list[str]:
        """The listing's problems when they differ from the last look's (a link out of the store is said once)."""
        said, self._listing = self._listing, tuple(lines)
        return [] if said == self._listing else lines

    def watched(self) -> tuple[list[str], list[str]]:
        """What to watch for runs arriving or changing.

        Returns:
            ``(folders, files)``: the store's parent (where the store and the sweeps folder
            appear), the store and every folder in it (a run's ``run.json`` appears there), the
            sweeps folder, each sweep, its runs folder and each candidate's folder; and the run
            files that could not be read at the last look (written in place, they change no
            folder).
        """
        store = self.store.folder
        folders = [store.parent, store, *_sub_dirs(store)]
        sweeps = self.store.sweeps_folder
        folders.append(sweeps)
        for sweep in _sub_dirs(sweeps):
            folders.append(sweep)
            if is_sweep_folder(sweep):
                folders.append(sweep / SWEEP_RUNS)
                folders.extend(_sub_dirs(sweep / SWEEP_RUNS))
        return [str(p) for p in folders if p.is_dir()], sorted(str(p) for p in self._bad if p.is_file())
