"""Where plan sweeps keep their runs, and which runs are a sweep's (Qt-free).

``workbench sweep --out DIR`` and Suggest… ▸ *Train each* keep each candidate as a normal run
folder under ``<sweep folder>/runs/<id-name>/``, beside the sweep's study (``study.db``), its
report (``report.json``) and its lock (``.sweep.lock``). The app puts its sweeps beside its run
store: ``<runs>/../sweeps/<date-time>/`` (:func:`sweeps_folder`).

A run whose folder lies there is tagged with its :class:`~workbench.core.runs.record.SweepTag`
(:func:`sweep_tag_of`), so the Runs tab and ``workbench runs`` tell a sweep's runs from the
user's own. :func:`sweep_run_folders` finds the run folders of one sweep folder or of a folder
of sweeps; a link that leaves the folder, a ``runs`` that is not a folder, a sweep folder that
cannot be read: one line each, nothing is changed.

The sweep folder's file names are defined here once; :mod:`workbench.core.advisor.sweep`, which
writes the folder, takes them from here (this package imports nothing of the advisor).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from workbench.core.runs.record import SweepTag

__all__ = [
    "LOCK_FILE",
    "REPORT_FILE",
    "STUDY_FILE",
    "SWEEPS_FOLDER",
    "SWEEP_MARKERS",
    "SWEEP_RUNS",
    "is_sweep_folder",
    "refusal",
    "sweep_run_folders",
    "sweep_tag_of",
    "sweeps_folder",
]

#: The app's folder of sweeps, beside its run store.
SWEEPS_FOLDER = "sweeps"
#: A sweep folder's folder of candidate runs.
SWEEP_RUNS = "runs"
#: A sweep folder's Optuna study (SQLite), when no database URL is given.
STUDY_FILE = "study.db"
#: A sweep folder's report: rows, fronts and recommendation.
REPORT_FILE = "report.json"
#: A sweep folder's lock, held by the processes working on it.
LOCK_FILE = ".sweep.lock"
#: Files only a sweep folder holds (any one is enough): its study, its report, its lock.
SWEEP_MARKERS: tuple[str, ...] = (STUDY_FILE, REPORT_FILE, LOCK_FILE)


def sweeps_folder(runs_folder: str | os.PathLike[str]) -> Path:
    """The app's folder of sweeps: ``<runs folder>/../sweeps``.

    Args:
        runs_folder: the app's run store.

    Returns:
        The folder (it may not exist).
    """
    return Path(runs_folder).parent / SWEEPS_FOLDER


def _inside(path: Path, folder: Path) -> bool:
    try:
        return path.resolve().is_relative_to(folder.resolve())
    except (OSError, RuntimeError):  # a link loop
        return False


def is_sweep_folder(folder: str | os.PathLike[str]) -> bool:
    """Whether ``folder`` is a sweep folder: it holds ``runs/`` and one of :data:`SWEEP_MARKERS`.

    Args:
        folder: any path.

    Returns:
        True for a sweep folder (read only: nothing is opened).
    """
    p = Path(folder)
    try:
        return os.path.lexists(p / SWEEP_RUNS) and any(os.path.lexists(p / m) for m in SWEEP_MARKERS)
    except OSError:
        return False


def sweep_tag_of(run_folder: str | os.PathLike[str]) -> SweepTag | None:
    """The sweep a run folder belongs to, read from where it lies (``<sweep>/runs/<candidate>``).

    Args:
        run_folder: the run's folder.

    Returns:
        The tag, or None for a run that is not a sweep's.
    """
    p = Path(run_folder)
    if p.parent.name != SWEEP_RUNS or not is_sweep_folder(p.parent.parent):
        return None
    return SweepTag(p.parent.parent.name, p.name, p.parent.parent)


def refusal(tag: SweepTag, name: str) -> str:
    """The one line that says why a sweep's run is not deleted on its own.

    Args:
        tag: the run's sweep.
        name: the run's name.

    Returns:
        The line (it names the sweep and its folder, and what to do instead).
    """
    return (f"{name} is kept: it is candidate {tag.candidate} of the sweep {tag.sweep}, whose study holds its result "
            f"(resuming the sweep would not train it again); delete the sweep's folder {tag.folder} to remove the "
            "sweep with its runs")


def _sub_folders(folder: Path, problems: list[str], what: str) -> list[Path]:
    """The visible sub-folders of ``folder`` that stay inside it (a link out is one problem line)."""
    try:
        entries = sorted(folder.iterdir())
    except OSError as e:
        problems.append(f"{folder}: the {what} cannot be read ({e.strerror or e}); check its permissions")
        return []
    out = []
    for p in entries:
        if p.name.startswith("."):  # a run being written (swapped in when it ends), a lock
            continue
        try:
            if not p.is_dir():
                continue
        except OSError:
            continue
        if p.is_symlink() or not _inside(p, folder):
            problems.append(f"{p}: links outside the {what}, or in a loop; not read")
            continue
        out.append(p)
    return out


def sweep_run_folders(folders: Iterable[str | os.PathLike[str]]) -> tuple[list[Path], list[str]]:
    """The candidates' run folders of sweep folders, or of folders of sweeps.

    Args:
        folders: sweep folders (``workbench sweep --out``), or folders holding them (the app's
            ``sweeps``); one that does not exist holds none.

    Returns:
        ``(run folders, problems)``: every sub-folder of each sweep's ``runs/`` (those being
        written, hidden, are left out), and one line per folder that could not be read.
    """
    runs: list[Path] = []
    problems: list[str] = []
    for raw in folders:
        folder = Path(raw)
        if not os.path.lexists(folder):
            continue
        if not folder.is_dir():
            problems.append(f"{folder}: not a folder of sweeps; move it away")
            continue
        sweeps = [folder] if is_sweep_folder(folder) else [
            p for p in _sub_folders(folder, problems, "folder of sweeps") if is_sweep_folder(p)]
        for sweep in sweeps:
            store = sweep / SWEEP_RUNS
            if not store.is_dir() or store.is_symlink():
                problems.append(f"{store}: the sweep's runs are not a folder here (a file or a link); not read")
                continue
            runs.extend(_sub_folders(store, problems, "sweep's runs folder"))
    return runs, problems
