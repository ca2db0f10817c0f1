"""Resuming a *Train each* the app cancelled, or that a crash or a kill cut short.

A sweep folder resumes where it stopped when the same sweep runs in it again (the study knows
which candidates are done: :mod:`workbench.core.advisor.sweep`). For the Suggest… dialog to
offer the right folder, *Train each* notes in each sweep folder what makes it that sweep
(:meth:`Sweep.identity <workbench.core.advisor.sweep.Sweep.identity>`: candidates, budget, model,
data, settings) in :data:`IDENTITY_FILE`, and keeps ``report.json`` up to date as candidates
finish. :func:`find_resumable` then picks the newest folder of the app's sweeps whose sweep is
the one the dialog would train now and which has candidates left; the dialog's
:class:`ResumeButton` offers it (or a sweep folder the user picks). Everything here reads files
bounded (:mod:`workbench.core.safe_json`) and never changes a folder it cannot read: a link, a
damaged or foreign file is passed over.
"""

from __future__ import annotations

import json
import os
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from PySide6.QtWidgets import QMenu, QPushButton, QWidget

from workbench.core import safe_json
from workbench.core.atomic import atomic_write
from workbench.core.runs.sweeps import REPORT_FILE, is_sweep_folder

__all__ = ["DONE", "IDENTITY_FILE", "ResumeButton", "Resumable", "find_resumable", "progress_of", "write_identity"]

#: The file in a sweep folder that says which sweep the app trained there.
IDENTITY_FILE = "identity.json"
#: Report statuses of a candidate that a resume does not train again.
DONE = frozenset({"completed", "pruned", "failed"})


@dataclass(frozen=True)
class Resumable:
    """An unfinished sweep folder.

    Attributes:
        folder: the sweep folder.
        done: candidates finished there (trained to the end, stopped early, or failed).
        total: candidates of the sweep.
    """

    folder: Path
    done: int
    total: int

    @property
    def text(self) -> str:
        """``<folder name> (k of n trained)``, the Resume menu's entry."""
        return f"{self.folder.name} ({self.done} of {self.total} trained)"


def write_identity(folder: Path, identity: dict[str, Any]) -> None:
    """Note which sweep trains in ``folder`` (atomically; an existing note is left as it is).

    Args:
        folder: the sweep folder (it exists).
        identity: :meth:`Sweep.identity <workbench.core.advisor.sweep.Sweep.identity>`.

    Raises:
        OSError: the folder cannot be written.
    """
    path = folder / IDENTITY_FILE
    if not os.path.lexists(path):
        atomic_write(path, json.dumps(identity, indent=1) + "\n")


def _read(path: Path) -> Any:
    """A small JSON file of a sweep folder, or None when it is missing, a link, not a regular file or not JSON."""
    try:
        if not os.path.lexists(path) or path.is_symlink():
            return None
        return safe_json.load(path, what=path.name)
    except Exception:  # unreadable, too large, not JSON, a FIFO: passed over, left as it is
        return None


def progress_of(folder: Path, total: int) -> int | None:
    """How many candidates of the sweep in ``folder`` are done, from its last report.

    Args:
        folder: the sweep folder.
        total: candidates of the sweep (a folder without a report has done none).

    Returns:
        The count, or None when every candidate is done (nothing to resume).
    """
    report = _read(folder / REPORT_FILE)
    rows = report.get("rows") if isinstance(report, dict) else None
    done = sum(1 for r in rows if isinstance(r, dict) and r.get("status") in DONE) if isinstance(rows, list) else 0
    return None if done >= total else done


def find_resumable(sweeps: Path, identity: dict[str, Any]) -> Resumable | None:
    """The newest sweep folder in ``sweeps`` of this very sweep that has candidates left.

    Args:
        sweeps: the app's folder of sweeps (:func:`~workbench.core.runs.sweeps.sweeps_folder`).
        identity: the sweep the dialog would train now (:meth:`Sweep.identity`).

    Returns:
        The folder and its progress, or None.
    """
    try:
        folders = sorted((p for p in sweeps.iterdir() if not p.is_symlink() and p.is_dir()), reverse=True)
    except OSError:
        return None
    want = json.loads(json.dumps(identity, default=str))
    total = len(want.get("candidates") or [])
    for folder in folders:
        if not is_sweep_folder(folder) or _read(folder / IDENTITY_FILE) != want:
            continue
        done = progress_of(folder, total)
        if done is not None:
            return Resumable(folder, done, total)
    return None


class SweepDialog(Protocol):
    """What :class:`ResumeButton` asks of its dialog."""

    def sweep_identity(self) -> dict[str, Any] | str:
        """The sweep *Train each* would run now, or one line saying why there is none."""

    def sweeps_dir(self) -> Path:
        """The app's folder of sweeps."""

    def train_each(self, folder: Path | None = None) -> bool:
        """Train (resume) the sweep in ``folder``; True when it started."""

    def say(self, text: str) -> None:
        """Show one line in the dialog's status."""


class ResumeButton(QPushButton):
    """The Suggest… dialog's *Resume* button: its menu offers the last unfinished *Train each* of the
    rows and settings the dialog would train now, or a sweep folder to pick.

    Args:
        dialog: the dialog (held weakly: the button never keeps it alive).
        parent: the button's parent widget.

    Attributes:
        last_action: the menu's first entry, set each time the menu opens (:meth:`offer`).
    """

    def __init__(self, dialog: SweepDialog, parent: QWidget | None = None) -> None:
        super().__init__("Resume", parent)
        self._dialog = weakref.ref(dialog)
        self.setToolTip("Resume a Train each that was cancelled or cut short: the rows trained there fill in, "
                        "the rest train")
        menu = QMenu(self)
        self.last_action = menu.addAction("Resume the last unfinished Train each")
        self.last_action.triggered.connect(self.resume_last)
        menu.addAction("Pick a sweep folder…").triggered.connect(lambda: self.resume_folder())
        menu.aboutToShow.connect(self.offer)
        self.setMenu(menu)

    def offer(self) -> Resumable | None:
        """Find the newest unfinished sweep of what the dialog would train now and name it in the menu.

        Returns:
            The sweep to resume, or None (the menu's entry is off and says why).
        """
        dialog = self._dialog()
        identity = dialog.sweep_identity() if dialog is not None else "The dialog is closed"
        found = find_resumable(dialog.sweeps_dir(), identity) if dialog is not None and isinstance(identity, dict) else None
        why = identity if isinstance(identity, str) else "No unfinished Train each of these candidates and settings"
        self.last_action.setEnabled(found is not None)
        self.last_action.setText(f"Resume {found.text}" if found is not None else why)
        return found

    def resume_last(self) -> bool:
        """Resume the newest unfinished sweep of what the dialog would train now (:meth:`offer`).

        Returns:
            True when it started; False with one line in the status when there is none.
        """
        found, dialog = self.offer(), self._dialog()
        if dialog is None:
            return False
        if found is None:
            dialog.say(f"Not resumed: {self.last_action.text()[:1].lower()}{self.last_action.text()[1:]}.")
            return False
        return dialog.train_each(folder=found.folder)

    def resume_folder(self, path: str = "") -> bool:
        """Resume a sweep folder the user picks (asked for when ``path`` is empty).

        Args:
            path: the folder, or "" to ask.

        Returns:
            True when it started; a folder that is not a sweep folder is one line (another sweep's
            folder is refused by the sweep itself, in one line).
        """
        dialog = self._dialog()
        if dialog is None:
            return False
        if not path:
            from workbench.gui import dialogs

            path = dialogs.open_dir(self, "Resume a sweep folder", str(dialog.sweeps_dir()))
            if not path:
                return False
        folder = Path(path)
        if folder.is_symlink() or not is_sweep_folder(folder):
            dialog.say(f"Not resumed: {folder} is not a sweep folder (it holds no runs/ beside study.db or "
                       "report.json, or it is a link); pick a folder Train each or workbench sweep made.")
            return False
        return dialog.train_each(folder=folder)
