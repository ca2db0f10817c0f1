"""Runs on disk: the app's run store, ``workbench train --save`` folders, and reading either.

The app keeps one folder per run in its store (:class:`RunStore`):

- ``run.json``: the :class:`~workbench.core.runs.record.RunRecord` without its metrics;
- ``metrics.csv``: the :class:`~workbench.core.training.metrics.StepMetrics` records, written with
  :class:`~workbench.core.training.metrics.MetricsWriter`.

A ``workbench train --save DIR`` folder holds the engine's ``summary.json`` (the run's
result), ``config.json``, ``plan.json`` (the plan in force at the end) and ``metrics.jsonl``;
:func:`open_run` reads it into the same record, so ``workbench runs`` and the app compare
both kinds. Every file is read bounded: JSON through :mod:`workbench.core.safe_json` (regular
files only, size and depth capped), metrics streamed a line at a time with every k-th record
kept past :data:`MAX_KEPT_METRICS_BYTES`; no file that links outside its run folder is read.

A run that was still ``running`` when the app ended is listed as ``interrupted``.

Plan sweeps keep their candidates as run folders too (:mod:`workbench.core.runs.sweeps`): a
run read from ``<sweep>/runs/<candidate>/`` carries its :class:`~workbench.core.runs.record.SweepTag`;
the app lists its sweeps' runs with its own (:meth:`RunStore.list` with ``sweeps=True``), and
never deletes one on its own (:meth:`RunStore.delete` says why in one line).
"""

from __future__ import annotations

import builtins
import datetime as _dt
import json
import os
import secrets
import shutil
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from workbench.core import safe_json
from workbench.core.errors import WorkbenchError
from workbench.core.runs.record import RUN_FILE, RunRecord, RunStoreError, events_of, write_run_file
from workbench.core.runs.sweeps import is_sweep_folder, refusal, sweep_run_folders, sweep_tag_of, sweeps_folder
from workbench.core.training.metrics import MetricsError, MetricsWriter, StepMetrics, iter_metrics

__all__ = [
    "APP_METRICS_FILE",
    "MAX_KEPT_METRICS_BYTES",
    "RUNS_DIR_ENV",
    "RUN_FILE",
    "SAVE_METRICS_FILE",
    "RunStore",
    "default_runs_dir",
    "load_metrics",
    "open_run",
    "read_run_folder",
    "read_runs",
    "read_sweep_runs",
]

APP_METRICS_FILE = "metrics.csv"
#: The files of a ``workbench train --save`` folder read into a record.
SAVE_SUMMARY_FILE, SAVE_CONFIG_FILE, SAVE_PLAN_FILE, SAVE_METRICS_FILE = (
    "summary.json", "config.json", "plan.json", "metrics.jsonl")
#: Bytes of a run's metrics file read in full; a larger file is read through, keeping every
#: k-th record (and the last) so that about this many bytes of records stay in memory.
MAX_KEPT_METRICS_BYTES = 32 * 2**20
#: Environment variable that overrides the app's runs folder (tests point it at a temporary folder).
RUNS_DIR_ENV = "WORKBENCH_RUNS_DIR"
_ORGANIZATION, _APPLICATION = "FreezeWorkbench", "Freeze Workbench"


def default_runs_dir() -> Path:
    """The app's runs folder without Qt: ``$WORKBENCH_RUNS_DIR``, else the per-user data folder + ``runs``.

    Returns:
        ``~/.local/share/FreezeWorkbench/Freeze Workbench/runs`` on Linux (``$XDG_DATA_HOME``
        when set), ``~/Library/Application Support/...`` on macOS, ``%APPDATA%\\...`` on Windows.
    """
    env = os.environ.get(RUNS_DIR_ENV)
    if env:
        return Path(env).expanduser()
    if sys.platform == "win32":
        base = Path(os.environ.get("APPDATA") or Path.home() / "AppData" / "Roaming")
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support"
    else:
        base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / _ORGANIZATION / _APPLICATION / "runs"


def _inside(path: Path, folder: Path) -> bool:
    """``path`` (after following its links) lies inside ``folder`` (after following its links)."""
    try:
        return path.resolve().is_relative_to(folder.resolve())
    except (OSError, RuntimeError):  # a link loop
        return False


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


def _read_json(path: Path, folder: Path, what: str) -> Any:
    """A JSON file of a run folder, read bounded; a link out of the folder is refused."""
    if os.path.lexists(path) and not _inside(path, folder):
        raise RunStoreError(f"{path.name} links outside its run folder, or in a loop; not read")
    try:
        return safe_json.load(path, what=what)
    except json.JSONDecodeError as e:
        raise RunStoreError(f"{path.name} is not valid JSON ({e.msg} at line {e.lineno}); was it cut short or edited?") from None


def _write_metrics(metrics: Iterable[Mapping[str, Any]], path: Path) -> None:
    with MetricsWriter(path) as w:
        for m in metrics:
            w.write(StepMetrics.from_dict(dict(m)))


def load_metrics(record: RunRecord) -> builtins.list[dict[str, Any]]:
    """Read a stored run's metrics into ``record.metrics`` (once), in bounded memory.

    The file is streamed a line at a time; one larger than :data:`MAX_KEPT_METRICS_BYTES`
    keeps every k-th record and the last. A metrics file that links outside the run folder
    is not followed. A record without plan changes takes them from the metrics' ``events``
    (a ``--save`` folder keeps them there).

    Args:
        record: the run (its :attr:`~RunRecord.folder` and :attr:`~RunRecord.metrics_file`).

    Returns:
        The records (an empty list when the run has no metrics file or no folder).

    Raises:
        RunStoreError: the metrics file is unreadable, not a regular file, has a line
            that is too long or malformed, or links outside the run folder.
    """
    if record.metrics_loaded or record.folder is None:
        record.metrics_loaded = True
        return record.metrics
    folder = record.folder
    path = folder / record.metrics_file
    if os.path.lexists(path):
        if not _inside(path, folder):
            raise RunStoreError(f"{path} links outside its run folder; not read (copy the file into the folder)")
        events: builtins.list[dict[str, Any]] = []
        try:
            size = os.stat(path).st_size
            stride = max(1, -(-size // MAX_KEPT_METRICS_BYTES))  # ceil: about MAX_KEPT_METRICS_BYTES kept
            kept: builtins.list[dict[str, Any]] = []
            last: StepMetrics | None = None
            for i, m in enumerate(iter_metrics(path)):
                last = m
                if m.events:
                    events.extend(events_of([{"step": m.step, "wall_time": m.wall_time, "events": m.events}]))
                if i % stride == 0:
                    kept.append(m.to_dict())
            if last is not None and (not kept or kept[-1]["step"] != last.step):
                kept.append(last.to_dict())
        except OSError as e:
            raise RunStoreError(f"cannot read {path} ({e.strerror or e}); check its permissions") from None
        except MetricsError as e:
            raise RunStoreError(str(e)) from None
        record.metrics = kept
        if not record.events:
            record.events = events
    record.metrics_loaded = True
    return record.metrics


def _from_save_folder(folder: Path) -> RunRecord:
    """A ``workbench train --save`` folder of an earlier version (no ``run.json``) as a record."""
    result = _read_json(folder / SAVE_SUMMARY_FILE, folder, "run summary")
    config: Any = {}
    if os.path.lexists(folder / SAVE_CONFIG_FILE):
        config = _read_json(folder / SAVE_CONFIG_FILE, folder, "run config")
    plan = config.get("plan") if isinstance(config, Mapping) else None  # a path in a --save folder: the final plan
    try:
        created = _dt.datetime.fromtimestamp(os.stat(folder / SAVE_SUMMARY_FILE).st_mtime).astimezone()
    except OSError:
        created = None
    return RunRecord.from_result(folder.name, result, config, plan, folder=folder,
                                 created=created.isoformat(timespec="microseconds") if created else "")


def open_run(path: str | os.PathLike[str]) -> RunRecord:
    """Read one run folder of any kind: an app run (``run.json``) or a ``--save`` folder (``summary.json``).

    Args:
        path: the run's folder.

    Returns:
        The record (metrics not loaded: :func:`load_metrics`). A run left ``running`` by an
        app that ended is ``interrupted``.

    Raises:
        RunStoreError: not a folder, not a run folder, or its run file is unreadable; one
            line naming the folder.
    """
    folder = Path(path)
    try:
        if not folder.is_dir():
            what = "does not exist" if not os.path.lexists(folder) else "is not a folder"
            raise RunStoreError(f"{folder}: {what}; name a run folder (it holds run.json or summary.json)")
        if os.path.lexists(folder / RUN_FILE):
            rec = RunRecord.from_dict(_read_json(folder / RUN_FILE, folder, "run file"), folder)
        elif os.path.lexists(folder / SAVE_SUMMARY_FILE):
            rec = _from_save_folder(folder)
        else:
            raise RunStoreError(
                f"{folder}: not a run folder (no run.json or summary.json); name a folder of the app's runs "
                "or one `workbench train --save` wrote")
    except RunStoreError as e:
        text = str(e)
        raise RunStoreError(text if text.startswith(str(folder)) else f"{folder}: unreadable run ({text})") from None
    except (OSError, UnicodeDecodeError, ValueError, WorkbenchError, RecursionError) as e:
        raise RunStoreError(f"{folder}: unreadable run ({_one_line(e)})") from None
    if rec.status == "running":
        rec.status = "interrupted"
        rec.message = rec.message or "the app ended while this run was training"
    rec.sweep = sweep_tag_of(folder)
    return rec


def _is_run_folder(p: Path) -> bool:
    return os.path.lexists(p / RUN_FILE) or os.path.lexists(p / SAVE_SUMMARY_FILE)


def read_run_folder(folder: Path) -> RunRecord | str:
    """One run folder read for a listing: its record, or one line saying why it cannot be read.

    Args:
        folder: a run folder (``run.json``, or a ``--save`` folder of an earlier version).

    Returns:
        The record, or the line (any error: a hand-edited ``run.json`` must never stop a
        listing or the app's start).
    """
    try:
        return open_run(folder)
    except RunStoreError as e:
        return _one_line(e)
    except Exception as e:
        return f"{folder}: unreadable run ({type(e).__name__}: {_one_line(e)})"


def _open_each(folders: Sequence[Path]) -> tuple[list[RunRecord], list[str]]:
    """Every run folder read, oldest first; one line per folder that cannot be read."""
    records: list[RunRecord] = []
    problems: list[str] = []
    for folder in folders:
        got = read_run_folder(folder)
        if isinstance(got, str):
            problems.append(got)
        else:
            records.append(got)
    records.sort(key=lambda r: (r.created, r.id))
    return records, problems


def read_sweep_runs(folders: Sequence[str | os.PathLike[str]]) -> tuple[list[RunRecord], list[str]]:
    """The candidates' runs of sweep folders, or of folders of sweeps (each tagged with its sweep).

    Args:
        folders: sweep folders or folders holding them (:func:`~workbench.core.runs.sweeps.sweep_run_folders`).

    Returns:
        ``(records, problems)``: the runs oldest first, one line per folder that could not be read.
    """
    found, problems = sweep_run_folders(folders)
    records, trouble = _open_each(found)
    return records, problems + trouble


def _holds_sweeps(folder: Path) -> bool:
    try:
        return any(is_sweep_folder(p) for p in folder.iterdir() if not p.is_symlink())
    except OSError:
        return False


def read_runs(paths: Sequence[str | os.PathLike[str]]) -> tuple[list[RunRecord], list[str]]:
    """The runs named: each path is a run folder, a folder of runs (the app's store), a sweep
    folder or a folder of sweeps (their candidates' runs, tagged with their sweep).

    Args:
        paths: run folders, folders holding run folders, sweep folders or folders of sweeps.

    Returns:
        ``(records, problems)``: the runs in the order named (a store's runs oldest first),
        and one line per folder that could not be read.
    """
    records: list[RunRecord] = []
    problems: list[str] = []
    for raw in paths:
        p = Path(raw)
        try:
            single = _is_run_folder(p) or not p.is_dir()
        except OSError as e:
            problems.append(f"{p}: cannot be read ({e.strerror or e})")
            continue
        if single:
            try:
                records.append(open_run(p))
            except RunStoreError as e:
                problems.append(str(e))
            continue
        if is_sweep_folder(p):
            found, trouble = read_sweep_runs([p])
        else:
            found, trouble = RunStore(p).list(save_folders=True)
            if _holds_sweeps(p):
                more, other = read_sweep_runs([p])
                said = {line.partition(": ")[0] for line in trouble}  # a link both readers met: said once
                found, trouble = found + more, trouble + [line for line in other if line.partition(": ")[0] not in said]
        problems.extend(trouble)
        if not found and not trouble:
            problems.append(f"{p}: no runs in this folder; name a run folder or a folder of runs")
        records.extend(found)
    return records, problems


class RunStore:
    """Runs kept in a folder, one sub-folder per run.

    Args:
        folder: the store's folder (created on the first save).

    Example:
        >>> store = RunStore(tmp_path)                         # doctest: +SKIP
        >>> rec = store.new_record("#1 resnet18", config={...}) # doctest: +SKIP
        >>> store.save(rec)                                     # doctest: +SKIP
        >>> [r.name for r in store.list()[0]]                   # doctest: +SKIP
        ['#1 resnet18']
    """

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)

    def new_record(self, name: str, **fields: Any) -> RunRecord:
        """A new record with a unique id and its folder assigned (nothing written yet).

        Args:
            name: the run's label.
            **fields: other :class:`RunRecord` fields (``config``, ``plan``, ``model`` ...).

        Returns:
            The record, status ``running``.
        """
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        while True:
            rid = f"{stamp}-{secrets.token_hex(2)}"
            if not (self.folder / rid).exists():
                break
        return RunRecord(id=rid, name=name, folder=self.folder / rid, **fields)

    def save(self, record: RunRecord, *, metrics: bool = True) -> Path:
        """Write ``run.json`` (and ``metrics.csv``) atomically.

        Args:
            record: the run.
            metrics: also write the metrics (only when they are loaded).

        Returns:
            The run's folder.

        Raises:
            RunStoreError: the folder cannot be written (the message says which).
        """
        folder = record.folder or (self.folder / record.id)
        record.folder = folder
        try:
            folder.mkdir(parents=True, exist_ok=True)
            if metrics and record.metrics_loaded:
                _write_metrics(record.metrics, folder / record.metrics_file)
            write_run_file(folder, record)
        except (OSError, MetricsError) as e:
            raise RunStoreError(f"cannot save the run to {folder} ({e}); check that the folder is writable") from None
        return folder

    @property
    def sweeps_folder(self) -> Path:
        """The app's folder of sweeps, beside the store (``<store>/../sweeps``)."""
        return sweeps_folder(self.folder)

    def list_sweeps(self) -> tuple[builtins.list[RunRecord], builtins.list[str]]:
        """The runs of the app's sweeps (:attr:`sweeps_folder`), oldest first, each tagged with its sweep.

        Returns:
            ``(records, problems)`` as :meth:`list`.
        """
        return read_sweep_runs([self.sweeps_folder])

    def list(self, *, save_folders: bool = False, sweeps: bool = False) -> tuple[builtins.list[RunRecord], builtins.list[str]]:
        """Every run in the store, oldest first (metrics not loaded).

        Args:
            save_folders: also read ``workbench train --save`` folders among the sub-folders,
                and read a store that is not writable (``workbench runs`` reads; the app lists
                its own runs only, and says once that a store it cannot write keeps no runs).
            sweeps: also list the runs of the app's sweeps (:meth:`list_sweeps`).

        Returns:
            ``(records, problems)``: unreadable runs are skipped and described in
            ``problems``; a run left ``running`` by an app that ended is ``interrupted``.
        """
        runs, problems = self.run_folders(save_folders=save_folders)
        records, trouble = _open_each(runs)
        problems.extend(trouble)
        if sweeps:
            more, trouble = self.list_sweeps()
            records.extend(more)
            problems.extend(trouble)
        records.sort(key=lambda r: (r.created, r.id))
        return records, problems

    def run_folders(self, *, save_folders: bool = False) -> tuple[builtins.list[Path], builtins.list[str]]:
        """The store's run folders (those holding ``run.json``), without reading them.

        A sub-folder without a run file yet (one being written) is not a run folder.

        Args:
            save_folders: also ``workbench train --save`` folders, and a store that is not
                writable (see :meth:`list`).

        Returns:
            ``(folders, problems)``: the folders by name; one line per folder that links out
            of the store or cannot be read, or for a store that cannot hold runs.
        """
        store_problem = self.problem()
        if store_problem and not (save_folders and self.folder.is_dir()):
            return [], [store_problem]
        if not self.folder.exists():
            return [], []
        try:
            subs = sorted(p for p in self.folder.iterdir() if p.is_dir())
        except OSError as e:
            return [], [f"{self.folder}: the run store cannot be read ({e.strerror or e}); check its permissions"]
        runs: builtins.list[Path] = []
        problems: builtins.list[str] = []
        for sub in subs:
            f = sub / RUN_FILE
            if not _inside(sub, self.folder) or (os.path.lexists(f) and not _inside(f, sub)):
                problems.append(f"{sub}: links outside the run store; not read")
                continue
            try:
                held = f.is_file() or (save_folders and os.path.lexists(sub / SAVE_SUMMARY_FILE))
            except OSError:  # open_run says what is wrong with it
                held = True
            if held:
                runs.append(sub)
            elif not os.access(sub, os.R_OK | os.X_OK):
                problems.append(f"{sub}: unreadable run folder (permission denied); check its permissions")
        return runs, problems

    def problem(self) -> str | None:
        """Why the store's folder cannot hold runs (it is a file, or not writable), if it cannot.

        Returns:
            One line for the window to show once, or None when the folder is usable (or does
            not exist yet: it is created on the first save).
        """
        if self.folder.exists() and not self.folder.is_dir():
            return f"the run store {self.folder} is a file, not a folder: runs are not kept; move the file away"
        if self.folder.is_dir() and not os.access(self.folder, os.W_OK | os.X_OK):
            return f"the run store {self.folder} is not writable: runs are not kept; check its permissions"
        return None

    def load_metrics(self, record: RunRecord) -> builtins.list[dict[str, Any]]:  # RunStore.list shadows list
        """Read a stored run's metrics into ``record.metrics`` (once), in bounded memory (:func:`load_metrics`).

        Args:
            record: the run (a record without a folder is looked for in this store).

        Returns:
            The records (an empty list when the run has no metrics file).

        Raises:
            RunStoreError: see :func:`load_metrics`.
        """
        if record.folder is None:
            record.folder = self.folder / record.id
        return load_metrics(record)

    def export_csv(self, record: RunRecord, path: str | os.PathLike[str]) -> Path:
        """Write a run's metrics as CSV (atomically) to ``path``.

        Args:
            record: the run (its metrics are loaded when needed).
            path: destination ``.csv``.

        Returns:
            The path written.

        Raises:
            RunStoreError: unreadable metrics, or the destination cannot be written.
        """
        dest = Path(path)
        metrics = self.load_metrics(record)
        try:
            _write_metrics(metrics, dest)
        except (OSError, MetricsError) as e:
            raise RunStoreError(f"cannot write {dest} ({e}); choose another folder or file name") from None
        return dest

    def delete(self, record: RunRecord) -> None:
        """Remove a run's folder (never a sweep's run: its study holds the candidate's result).

        Args:
            record: the run.

        Raises:
            RunStoreError: the run is a sweep's (one line naming the sweep), or the folder
                cannot be removed.
        """
        tag = record.sweep or (sweep_tag_of(record.folder) if record.folder is not None else None)
        if tag is not None:
            raise RunStoreError(refusal(tag, record.name))
        folder = record.folder or self.folder / record.id
        if not folder.exists():
            return
        if folder.resolve().parent != self.folder.resolve():
            raise RunStoreError(f"{folder} is not a run folder of {self.folder}; not deleting it")
        try:
            shutil.rmtree(folder)
        except OSError as e:
            raise RunStoreError(f"cannot delete {folder} ({e}); remove it by hand") from None
