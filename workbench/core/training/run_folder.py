"""Where a training run writes its files, so that two runs never mix.

A run's save folder (``--save DIR``: trainable state, A+B deltas, the plan in force, the
config, the summary, the metrics) is written to a fresh hidden folder next to ``DIR`` and
swapped in when the run ends, in one atomic step (an exchange of the two folders, see
:meth:`RunOutputs.commit`): ``DIR`` holds one whole run, never files of two, and at any
instant either the earlier run or the new one. A commit a kill interrupted is finished on
the next run (:func:`recover_save`), which says so. A finished run is never deleted: when
files appear in ``DIR`` during the run, it is kept in a visible ``DIR.unsaved-*`` folder.
An OS file lock (``filelock``) on ``.DIR.lock`` (and next to a ``--metrics`` file) makes a
concurrent run that names the same path fail at start with one line.

:func:`check_save_folder` is the start-of-run check the CLI makes: an existing run folder is
replaced only with ``--overwrite``, and a folder holding anything that is not a run's files
is never replaced.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import glob
import json
import os
import secrets
import shutil
import stat
import sys
import tempfile
from datetime import datetime
from pathlib import Path

import filelock

from workbench.core.errors import WorkbenchError
from workbench.core.training.metrics import MetricsWriter

__all__ = ["RUN_FILES", "PathLock", "RunFolderError", "RunOutputs", "check_save_folder", "recover_save"]

#: Files a run writes into its save folder (a folder holding only these is an earlier run).
RUN_FILES: frozenset[str] = frozenset(
    {"trainable.safetensors", "deltas.safetensors", "plan.json", "config.json", "summary.json", "metrics.jsonl",
     "auto_freeze.plan.json"}
)
_METRICS_FILE = "metrics.jsonl"


class RunFolderError(WorkbenchError):
    """A save folder or metrics file cannot be used by this run; the message says why and what to do."""


def _is_dir(p: Path) -> bool:
    return os.path.isdir(p)


def _interrupted(p: Path) -> bool:
    if _journal_path(p).exists():
        return True
    return not os.path.lexists(p) and p.parent.is_dir() and any(p.parent.glob(f".{glob.escape(p.name)}.old-*"))


def check_save_folder(path: str | os.PathLike[str], *, overwrite: bool) -> str | None:
    """Check that a run may write its save folder at ``path``, after recovering an interrupted save.

    Args:
        path: the ``--save`` folder.
        overwrite: an earlier run's folder may be replaced.

    Returns:
        One line saying what :func:`recover_save` did, or None.

    Raises:
        RunFolderError: ``path`` is a file; it holds an earlier run and ``overwrite`` is
            false; or it holds files that are not a run's (never replaced); or another run
            holds it while an interrupted save needs recovering.
    """
    p = Path(path)
    note = None
    if _interrupted(p):
        lock = PathLock(p, "save folder")
        try:
            note = recover_save(p)
        finally:
            lock.release()
    try:
        _check_contents(p, overwrite=overwrite)
    except RunFolderError as e:
        if note:
            raise RunFolderError(f"{note}; {e}") from None
        raise
    return note


def _check_contents(p: Path, *, overwrite: bool) -> None:
    if not p.exists():
        return
    if not p.is_dir():
        raise RunFolderError(f"--save {p} is a file, not a folder; choose a folder path")
    try:
        names = sorted(e.name for e in p.iterdir())
    except OSError as e:
        raise RunFolderError(f"--save folder {p} cannot be read ({e.strerror or e}); check its permissions") from None
    if not names:
        return
    foreign = [n for n in names if n not in RUN_FILES]
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise RunFolderError(
            f"--save folder {p} holds files that are not a run's ({shown}); choose an empty or new folder"
        )
    if not overwrite:
        raise RunFolderError(
            f"--save folder {p} holds an earlier run ({', '.join(names)}); pass --overwrite to replace it, "
            "or choose a new folder"
        )


# ---------------------------------------------------------------- the lock
class PathLock:
    """An exclusive lock on a path: an OS file lock (``filelock``) on ``.<name>.lock`` next to it.

    The operating system releases the lock when its process ends, however it ends, so a lock
    is never stale; the lock file itself may stay on disk (it holds nothing).

    Args:
        path: the file or folder to lock.
        what: what the path is, for the message (``"save folder"``).

    Raises:
        RunFolderError: another process (or another run in this one) holds the lock, or the
            lock file cannot be made.
    """

    def __init__(self, path: str | os.PathLike[str], what: str) -> None:
        target = Path(path)
        self.path = target.with_name(f".{target.name}.lock")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # not thread-local, not re-entrant: a second run of this process on the same path waits like any other
            self._lock: filelock.BaseFileLock | None = filelock.FileLock(
                str(self.path), timeout=0, thread_local=False, is_singleton=False
            )
            self._lock.acquire(timeout=0)
        except filelock.Timeout:
            self._lock = None
            raise RunFolderError(
                f"another run is writing the {what} {target}; wait for it to end or choose another path"
            ) from None
        except OSError as e:
            self._lock = None
            raise RunFolderError(
                f"cannot lock the {what} {target} ({e.strerror or e}); check that its folder is writable"
            ) from None

    @property
    def held(self) -> bool:
        """The lock is held by this object."""
        return self._lock is not None and self._lock.is_locked

    def release(self) -> None:
        """Release the lock (once)."""
        lock, self._lock = self._lock, None
        if lock is not None:
            with contextlib.suppress(OSError):
                lock.release(force=True)


# ---------------------------------------------------------------- the commit
# A save is committed in one atomic step: the staging folder (complete) and DIR are exchanged
# (renameat2 RENAME_EXCHANGE on Linux, renamex_np RENAME_SWAP on macOS), or, without DIR,
# staging is renamed to DIR. Before that step a journal ``.DIR.commit.json`` names the staging
# folder and its inode; after it the earlier run (now at the staging name) is removed and the
# journal dropped. Where no exchange exists (Windows, some file systems) DIR is renamed aside
# and staging renamed in: the journal makes that window recoverable. :func:`recover_save`
# finishes or undoes a commit a kill interrupted, on the next run.

_EXCHANGE_NAMES = ("renameat2", "renamex_np")


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically; False where this platform or file system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return False
    if sys.platform.startswith("linux") and hasattr(libc, "renameat2"):
        at_fdcwd, rename_exchange = -100, 2
        rc = libc.renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    elif sys.platform == "darwin" and hasattr(libc, "renamex_np"):
        rc = libc.renamex_np(os.fsencode(a), os.fsencode(b), 0x2)  # RENAME_SWAP
    else:
        return False
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EXDEV, errno.EPERM):
        return False  # not supported here: the journaled two-step commit
    raise OSError(err, os.strerror(err), str(a))


def _journal_path(final: Path) -> Path:
    return final.with_name(f".{final.name}.commit.json")


def _write_journal(final: Path, staging: Path, aside: Path) -> None:
    """Step 1: the journal (written whole: a temporary file renamed over)."""
    data = {"staging": staging.name, "aside": aside.name, "inode": os.lstat(staging).st_ino}
    tmp = final.with_name(f".{final.name}.commit.tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, _journal_path(final))


def _swap_in(final: Path, staging: Path, aside: Path) -> None:
    """Step 2: the atomic step (or the journaled two-step where there is no exchange)."""
    if not os.path.lexists(final):
        os.rename(staging, final)
        return
    if _exchange(staging, final):
        return
    os.rename(final, aside)  # the window the journal covers
    os.rename(staging, final)


def _drop_earlier(staging: Path, aside: Path) -> None:
    """Step 3: remove the earlier run (at the staging name after an exchange, or aside)."""
    for p in (staging, aside):
        if os.path.lexists(p):
            shutil.rmtree(p)


def _clear_journal(final: Path) -> None:
    """Step 4: the commit is over."""
    with contextlib.suppress(FileNotFoundError):
        _journal_path(final).unlink()


def _is(p: Path, inode: int) -> bool:
    try:
        st = os.lstat(p)
    except OSError:
        return False
    return st.st_ino == inode and stat.S_ISDIR(st.st_mode)


def recover_save(path: str | os.PathLike[str]) -> str | None:
    """Finish or undo a commit of the save folder ``path`` that a kill interrupted.

    Call it holding the folder's lock. A journal whose staging folder is already at ``path``
    is finished (the earlier run removed); one whose staging folder is still aside is rolled
    forward (the finished run is put in place); without the staging folder, the earlier run
    is put back if it was moved aside. A hidden ``.DIR.old-*`` folder left by an older
    version with no ``DIR`` is put back. A hidden staging folder with no journal is a run
    killed before its commit: kept as a visible ``DIR.unsaved-*`` folder when it finished
    (its ``summary.json``, written last, is there), removed otherwise.

    Args:
        path: the ``--save`` folder.

    Returns:
        One line saying what was recovered, or None when there was nothing to do.

    Raises:
        RunFolderError: the journal cannot be read or the recovery cannot be done; the
            message names the folders that hold the runs.
    """
    final = Path(path)
    journal = _journal_path(final)
    note: str | None = None
    if journal.exists():
        try:
            data = json.loads(journal.read_text(encoding="utf-8"))
            staging, aside, inode = final.with_name(data["staging"]), final.with_name(data["aside"]), int(data["inode"])
            if not (staging.name.startswith(f".{final.name}.") and aside.name.startswith(f".{final.name}.")):
                raise ValueError("names outside the save folder's own")
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise RunFolderError(
                f"the save of {final} was interrupted and its journal {journal} cannot be read ({e}); "
                "look at the hidden folders next to it, keep the run you want as the folder, and delete the journal"
            ) from None
        try:
            if _is(final, inode):
                note = f"finished an interrupted save: {final} holds the run that was being saved"
            elif _is(staging, inode):
                _swap_in(final, staging, aside)
                note = f"completed an interrupted save: {final} now holds the run that had finished"
            elif not os.path.lexists(final) and os.path.isdir(aside):
                os.rename(aside, final)
                note = f"undid an interrupted save: {final} holds the earlier run again"
            if _is(final, inode):
                _drop_earlier(staging, aside)
        except OSError as e:
            raise RunFolderError(
                f"the save of {final} was interrupted and cannot be completed ({e.strerror or e}); the runs are in "
                f"{staging} and {aside}"
            ) from None
        _clear_journal(final)
    if not os.path.lexists(final):
        legacy = sorted(final.parent.glob(f".{glob.escape(final.name)}.old-*")) if final.parent.is_dir() else []
        if legacy:
            os.rename(legacy[-1], final)
            note = f"recovered an interrupted save: {final} holds the earlier run again (it was in {legacy[-1].name})"
    for stale in sorted(final.parent.glob(f".{glob.escape(final.name)}.staging-*")) if final.parent.is_dir() else []:
        if (stale / "summary.json").is_file():  # written last: a finished run killed before its commit
            kept = _visible_name(final)
            with contextlib.suppress(OSError):
                os.rename(stale, kept)
                note = (note + "; " if note else "") + f"a finished run killed before its save is kept in {kept}"
                continue
        shutil.rmtree(stale, ignore_errors=True)  # a run that never finished
    return note


def _visible_name(final: Path) -> Path:
    """A new visible folder name next to ``final`` for a run that could not be put at ``final``."""
    return final.with_name(f"{final.name}.unsaved-{datetime.now().strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}")


class RunOutputs:
    """The files of one run: locked paths, metrics writers, and the staged save folder.

    Create with :meth:`open`; call :meth:`commit` after the save folder's files are written
    to :attr:`staging`, and :meth:`close` in every case (it drops an uncommitted staging
    folder and releases the locks).

    Attributes:
        save_dir: the final save folder, or None.
        staging: the folder the run writes instead (None without ``save_dir``).
        writers: the metrics writers to feed, already open.
    """

    def __init__(self, save_dir: Path | None) -> None:
        self.save_dir = save_dir
        self.staging: Path | None = None
        self.writers: list[MetricsWriter] = []
        self._locks: list[PathLock] = []
        self._committed = False
        #: what :func:`recover_save` did at open (an interrupted earlier commit), or None.
        self.recovered: str | None = None

    @classmethod
    def open(
        cls, save_dir: str | os.PathLike[str] | None, metrics_path: str | os.PathLike[str] | None
    ) -> RunOutputs:
        """Lock the paths, create the staging folder and open the metrics writers.

        Args:
            save_dir: the run's save folder (its ``metrics.jsonl`` is written there), or None.
            metrics_path: a separate metrics file, or None.

        Returns:
            The outputs.

        Raises:
            RunFolderError: a path is locked by a running process or cannot be written.
            MetricsError: a metrics file cannot be written.
        """
        out = cls(Path(save_dir) if save_dir else None)
        try:
            if out.save_dir is not None:
                out._locks.append(PathLock(out.save_dir, "save folder"))
                out.recovered = recover_save(out.save_dir)
                try:
                    out.staging = Path(tempfile.mkdtemp(prefix=f".{out.save_dir.name}.staging-", dir=out.save_dir.parent))
                    umask = os.umask(0)
                    os.umask(umask)
                    out.staging.chmod(0o777 & ~umask)  # the mode a plain mkdir gives, not mkdtemp's 0700
                except OSError as e:
                    raise RunFolderError(
                        f"cannot write next to the save folder {out.save_dir} ({e.strerror or e}); choose a writable folder"
                    ) from None
            in_folder = out.save_dir is not None and metrics_path is not None and (
                Path(metrics_path).resolve() == (out.save_dir / _METRICS_FILE).resolve()
            )
            if metrics_path and not in_folder:
                out._locks.append(PathLock(metrics_path, "metrics file"))
                out.writers.append(MetricsWriter(metrics_path))
            if out.staging is not None:
                out.writers.append(MetricsWriter(out.staging / _METRICS_FILE))
        except BaseException:
            out.close()
            raise
        return out

    def commit(self) -> None:
        """Put the staged run in place as the save folder, in one atomic step.

        An earlier run there is replaced whole. A kill at any instant leaves either the
        earlier run or this one at the save folder, and the next run finishes the commit
        (:func:`recover_save`). Files that appeared in the save folder during the run are
        never replaced: the finished run is then kept in a visible folder beside it.

        Raises:
            RunFolderError: the save folder got files that are not a run's, or the swap failed;
                the message names the visible folder that holds the finished run.
        """
        if self.save_dir is None or self.staging is None or self._committed:
            return
        final, staging = self.save_dir, self.staging
        try:
            _check_contents(final, overwrite=True)
        except RunFolderError as e:
            self._keep_aside(f"{e}".split(";")[0] + " (they appeared during the run)")
        aside = final.with_name(f".{final.name}.old-{secrets.token_hex(4)}")
        try:
            _write_journal(final, staging, aside)
            _swap_in(final, staging, aside)
        except OSError as e:
            with contextlib.suppress(OSError, RunFolderError):
                recover_save(final)  # rolls forward, or puts the earlier run back
            if _is_dir(final) and not os.path.lexists(staging):
                self._committed = True  # the recovery finished the commit
                return
            self._keep_aside(f"cannot put the run in {final} ({e.strerror or e})")
        self._committed = True
        _drop_earlier(staging, aside)  # a kill before the journal is cleared: the next run finishes this
        _clear_journal(final)

    def _keep_aside(self, why: str) -> None:
        """Move the finished run to a visible folder next to the save folder and raise."""
        assert self.save_dir is not None and self.staging is not None
        final, staging = self.save_dir, self.staging
        _clear_journal(final)
        kept = _visible_name(final)
        try:
            os.rename(staging, kept)
        except OSError:
            kept = staging
        self.staging = kept
        self._committed = True  # never dropped by close()
        raise RunFolderError(f"{why}; the finished run is kept in {kept}")

    def close(self) -> None:
        """Close the writers, drop an uncommitted staging folder, release the locks."""
        for w in self.writers:
            with contextlib.suppress(Exception):
                w.close()
        if self.staging is not None and not self._committed:
            shutil.rmtree(self.staging, ignore_errors=True)
            if self.save_dir is not None and _journal_path(self.save_dir).exists():
                with contextlib.suppress(OSError, RunFolderError):
                    recover_save(self.save_dir)  # interrupted inside the commit: the earlier run back in place
        for lock in self._locks:
            lock.release()
        self._locks = []
