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
import re
import secrets
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import filelock

from workbench.core import safe_json
from workbench.core.errors import WorkbenchError
from workbench.core.training.metrics import MetricsWriter

__all__ = ["RUN_FILES", "PathLock", "RunFolderError", "RunOutputs", "check_save_folder", "recover_save"]

#: Files a run writes into its save folder (a folder holding only these is an earlier run).
RUN_FILES: frozenset[str] = frozenset(
    {"trainable.safetensors", "deltas.safetensors", "plan.json", "config.json", "summary.json", "metrics.jsonl",
     "auto_freeze.plan.json", "run.json"}
)
_METRICS_FILE = "metrics.jsonl"


class RunFolderError(WorkbenchError):
    """A save folder or metrics file cannot be used by this run; the message says why and what to do."""


def _is_dir(p: Path) -> bool:
    return os.path.isdir(p)


def _interrupted(p: Path) -> bool:
    if os.path.lexists(_journal_path(p)):  # a link or a pipe too: recovery refuses it in one line
        return True
    return not os.path.lexists(p) and p.parent.is_dir() and any(
        _is_aside_name(p, q.name) for q in p.parent.glob(f".{glob.escape(p.name)}.old-*"))


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
    foreign = [n for n in names if n not in RUN_FILES and n != OWNER_FILE]  # a mark a kill left
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
# staging is renamed to DIR. Where no exchange exists (Windows, some file systems) DIR is
# renamed aside and staging renamed in: the journal makes that window recoverable.
#
# Ownership: each staging folder holds OWNER_FILE with a random token from its creation; the
# journal ``.DIR.commit.json`` repeats the token, the exact names the commit generated
# (``.DIR.staging-XXXXXXXX``, ``.DIR.old-XXXXXXXX``) and both folders' inodes, and the earlier
# run is marked with the same token before it is moved. :func:`recover_save` deletes a folder
# only when its name is one of those, its inode is the journal's and it holds the token: a
# planted journal cannot name a folder this program did not make. The steps, in order, are
# :data:`COMMIT_STEPS`; a test can stop the commit at each (:data:`commit_fault_hook`).

#: The file inside each staging folder (and inside the earlier run while a commit moves it)
#: holding the commit's random token.
OWNER_FILE = ".workbench-owner"
#: The points of :meth:`RunOutputs.commit` at which a kill is tested: before each step, and
#: ``"done"`` after the last. ``"swap-in"`` is reached only in the two-step commit.
COMMIT_STEPS: tuple[str, ...] = ("journal", "mark", "swap", "swap-in", "drop", "clear", "unmark", "done")
#: Called with each name of :data:`COMMIT_STEPS` as the commit reaches it (None: nothing). A
#: test sets it to raise or to end the process there.
commit_fault_hook: Callable[[str], None] | None = None

_EXCHANGE_NAMES = ("renameat2", "renamex_np")
_JOURNAL_FORMAT = "workbench-save-journal"
_JOURNAL_MAX_BYTES = 64 * 1024
_TOKEN = re.compile(r"[0-9a-f]{32}")
_MKDTEMP_TAIL = re.compile(r"[a-z0-9_]{8}")  # tempfile's random names: 8 of these characters
_ASIDE_TAIL = re.compile(r"[0-9a-f]{8}")


def _step(name: str) -> None:
    hook = commit_fault_hook
    if hook is not None:
        hook(name)


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


def _is_staging_name(final: Path, name: str) -> bool:
    head = f".{final.name}.staging-"
    return name.startswith(head) and _MKDTEMP_TAIL.fullmatch(name[len(head):]) is not None


def _is_aside_name(final: Path, name: str) -> bool:
    head = f".{final.name}.old-"
    return name.startswith(head) and _ASIDE_TAIL.fullmatch(name[len(head):]) is not None


def _write_owner(folder: Path, token: str) -> None:
    """Write the token into ``folder`` (a fresh file renamed over: a planted pipe is never opened)."""
    fd, tmp = tempfile.mkstemp(prefix=f"{OWNER_FILE}.", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(token)
        os.replace(tmp, folder / OWNER_FILE)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _token_in(folder: Path) -> str | None:
    """The token a folder holds: a real folder (no link) with a small regular OWNER_FILE."""
    try:
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            return None
        fd = os.open(folder / OWNER_FILE, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        text = os.read(fd, 64).decode("ascii", "replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)
    return text if _TOKEN.fullmatch(text) else None


def _unmark(folder: Path, token: str) -> None:
    """Remove the token from a run folder that holds it (the commit is over)."""
    if _token_in(folder) == token:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(folder / OWNER_FILE)


def _owned(p: Path, inode: int | None, token: str) -> bool:
    """``p`` is the folder of this commit: its inode is the journal's and it holds the token."""
    return inode is not None and _is(p, inode) and _token_in(p) == token


def _write_journal(final: Path, staging: Path, aside: Path, token: str) -> _Journal:
    """Step 1: the journal (written whole: a fresh temporary file renamed over); returns it."""
    earlier = os.lstat(final).st_ino if _is_dir(final) and not os.path.islink(final) else None
    data = {"format": _JOURNAL_FORMAT, "token": token, "staging": staging.name, "aside": aside.name,
            "inode": os.lstat(staging).st_ino, "earlier_inode": earlier}
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.commit-", suffix=".tmp", dir=final.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(data))
        os.replace(tmp, _journal_path(final))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return _Journal(final, data)


class _Journal:
    """A journal read back and checked: names, token and inodes of this save folder's commit."""

    def __init__(self, final: Path, data: Any) -> None:
        if not isinstance(data, dict) or data.get("format") != _JOURNAL_FORMAT:
            raise ValueError("not a journal this program writes")
        token, staging, aside = data.get("token"), data.get("staging"), data.get("aside")
        inode, earlier = data.get("inode"), data.get("earlier_inode")
        if not (isinstance(token, str) and _TOKEN.fullmatch(token)):
            raise ValueError("no valid token")
        if not (isinstance(staging, str) and _is_staging_name(final, staging)):
            raise ValueError(f"{str(staging)[:80]!r} is not a staging folder name this program makes")
        if not (isinstance(aside, str) and _is_aside_name(final, aside)):
            raise ValueError(f"{str(aside)[:80]!r} is not a backup folder name this program makes")
        if type(inode) is not int or not (earlier is None or type(earlier) is int):
            raise ValueError("no valid inode")
        self.token: str = token
        self.staging, self.aside = final.with_name(staging), final.with_name(aside)
        self.inode: int = inode
        self.earlier: int | None = earlier


def _read_journal(final: Path) -> _Journal:
    """The journal, read within limits: a regular file (never a link, pipe or device), small, JSON."""
    journal = _journal_path(final)
    try:
        st = os.lstat(journal)
        if stat.S_ISLNK(st.st_mode):
            raise ValueError("it is a symbolic link, never followed")
        data = safe_json.load(journal, what="save journal", max_bytes=_JOURNAL_MAX_BYTES, max_depth=4)
        return _Journal(final, data)
    except (OSError, ValueError) as e:  # JsonInputError and JSONDecodeError are ValueErrors
        why = " ".join(str(e.strerror if isinstance(e, OSError) and e.strerror else e).split())[:200]
        raise RunFolderError(
            f"the save of {final} was interrupted and its journal {journal} cannot be read ({why}); nothing was "
            "changed: look at the hidden folders next to it, keep the run you want as the folder, and delete the journal"
        ) from None


def _swap_in(final: Path, staging: Path, aside: Path) -> None:
    """Step 3: the atomic step (or the journaled two-step where there is no exchange)."""
    if not os.path.lexists(final):
        os.rename(staging, final)
        return
    if _exchange(staging, final):
        return
    os.rename(final, aside)  # the window the journal covers
    _step("swap-in")
    os.rename(staging, final)


def _drop_earlier(j: _Journal) -> list[str]:
    """Step 4: remove the earlier run (at the staging name after an exchange, or aside), when it is
    the journal's; returns the names left alone."""
    left = []
    for p in (j.staging, j.aside):
        if not os.path.lexists(p):
            continue
        if _owned(p, j.earlier, j.token):
            shutil.rmtree(p)
        else:
            left.append(p.name)
    return left


def _clear_journal(final: Path) -> None:
    """Step 5: the commit is over."""
    with contextlib.suppress(FileNotFoundError):
        _journal_path(final).unlink()


def _is(p: Path, inode: int) -> bool:
    try:
        st = os.lstat(p)
    except OSError:
        return False
    return st.st_ino == inode and stat.S_ISDIR(st.st_mode)


def _recover_journal(final: Path) -> str | None:
    """Finish or undo the commit the journal describes; delete only the folders it proves it made."""
    j = _read_journal(final)
    note: str | None = None
    left: list[str] = []
    try:
        if _owned(final, j.inode, j.token):
            left = _drop_earlier(j)
            note = f"finished an interrupted save: {final} holds the run that was being saved"
        elif _owned(j.staging, j.inode, j.token):
            if not os.path.lexists(final) or _owned(final, j.earlier, j.token):
                _swap_in(final, j.staging, j.aside)  # the earlier run was marked: the commit had begun
                left = _drop_earlier(j)
                note = f"completed an interrupted save: {final} now holds the run that had finished"
            else:  # killed before the earlier run was marked: nothing is replaced, the finished run is kept
                kept = _visible_name(final)
                os.rename(j.staging, kept)
                _unmark(kept, j.token)
                note = f"a run killed while its save began is kept in {kept}; {final} holds the earlier run"
        elif not os.path.lexists(final) and _owned(j.aside, j.earlier, j.token):
            os.rename(j.aside, final)
            note = f"undid an interrupted save: {final} holds the earlier run again"
        else:
            found = [p.name for p in (final, j.staging, j.aside) if os.path.lexists(p)]
            raise RunFolderError(
                f"the save of {final} was interrupted and its journal {_journal_path(final)} names folders this program "
                f"cannot prove it made (found: {', '.join(found) or 'none of them'}); nothing was changed: keep the run "
                "you want as the folder and delete the journal"
            )
    except OSError as e:
        raise RunFolderError(
            f"the save of {final} was interrupted and cannot be completed ({e.strerror or e}); the runs are in "
            f"{j.staging} and {j.aside}"
        ) from None
    _clear_journal(final)
    _unmark(final, j.token)
    if left:
        note = f"{note}; left alone (not provably made by this save): {', '.join(left)}"
    return note


def _stale_journal_tmp(final: Path, p: Path) -> bool:
    """A journal's temporary file a kill left (exact name, small regular file, a journal inside)."""
    head = f".{final.name}.commit-"
    if not (p.name.startswith(head) and p.name.endswith(".tmp")
            and _MKDTEMP_TAIL.fullmatch(p.name[len(head):-4])):
        return False
    try:
        st = os.lstat(p)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _JOURNAL_MAX_BYTES:
            return False
        return _Journal(final, safe_json.load(p, max_bytes=_JOURNAL_MAX_BYTES, max_depth=4)) is not None
    except (OSError, ValueError):
        return False


def recover_save(path: str | os.PathLike[str]) -> str | None:
    """Finish or undo a commit of the save folder ``path`` that a kill interrupted.

    Call it holding the folder's lock. The journal is read within limits (a regular file,
    never a link, pipe or device; at most 64 KiB of JSON): an unreadable one is one
    :class:`RunFolderError` line and is left in place. A commit whose staging folder is at
    ``path`` is finished (the earlier run removed); one whose earlier run was already marked
    is rolled forward; one killed before that keeps the finished run in a visible
    ``DIR.unsaved-*`` folder; without the staging folder, the earlier run is put back if it
    was moved aside. A folder is deleted only when its name is one the commit generated, its
    inode is the journal's and it holds the journal's token: anything else is left alone and
    the line says what was found. A hidden ``.DIR.old-*`` folder left by an older version with
    no ``DIR`` is put back. A staging folder with no journal, holding a token, is a run killed
    before its commit: kept as a visible ``DIR.unsaved-*`` folder when it finished (its
    ``summary.json``, written last, is there), removed otherwise.

    Args:
        path: the ``--save`` folder.

    Returns:
        One line saying what was recovered, or None when there was nothing to do.

    Raises:
        RunFolderError: the journal cannot be read, names folders this program cannot prove
            it made, or the recovery cannot be done; the message names what was found.
    """
    final = Path(path)
    note: str | None = None

    def add(line: str) -> None:
        nonlocal note
        note = f"{note}; {line}" if note else line

    if os.path.lexists(_journal_path(final)):
        note = _recover_journal(final)
    else:
        stray = _token_in(final)  # the mark of a commit killed after its journal was cleared
        if stray is not None:
            _unmark(final, stray)
    siblings = sorted(final.parent.iterdir()) if final.parent.is_dir() else []
    if not os.path.lexists(final):
        legacy = [p for p in siblings if _is_aside_name(final, p.name) and _is_dir(p) and not p.is_symlink()]
        if legacy:
            os.rename(legacy[-1], final)
            add(f"recovered an interrupted save: {final} holds the earlier run again (it was in {legacy[-1].name})")
    alone = []
    for p in siblings:
        if _stale_journal_tmp(final, p):
            with contextlib.suppress(OSError):
                p.unlink()
            continue
        if not _is_staging_name(final, p.name) or not os.path.lexists(p):
            continue
        token = _token_in(p)
        if token is None:  # not provably a staging folder of this program: never touched
            alone.append(p.name)
            continue
        if (p / "summary.json").is_file():  # written last: a finished run killed before its commit
            kept = _visible_name(final)
            with contextlib.suppress(OSError):
                os.rename(p, kept)
                _unmark(kept, token)
                add(f"a finished run killed before its save is kept in {kept}")
                continue
        shutil.rmtree(p, ignore_errors=True)  # a run that never finished
    if alone:
        add(f"left alone (not made by this program): {', '.join(alone)}")
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
        self._token = secrets.token_hex(16)  # written in the staging folder and the journal: proves ownership
        self._staging_inode = -1
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
                    out._staging_inode = os.lstat(out.staging).st_ino
                    umask = os.umask(0)
                    os.umask(umask)
                    out.staging.chmod(0o777 & ~umask)  # the mode a plain mkdir gives, not mkdtemp's 0700
                    _write_owner(out.staging, out._token)
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
        inode = os.lstat(staging).st_ino
        try:
            _step("journal")
            journal = _write_journal(final, staging, aside, self._token)
            _step("mark")
            if journal.earlier is not None:
                _write_owner(final, self._token)  # the earlier run: recovery may remove it only with this
            _step("swap")
            _swap_in(final, staging, aside)
        except OSError as e:
            note = None
            with contextlib.suppress(OSError, RunFolderError):
                note = recover_save(final)  # rolls forward, or keeps the finished run visible
            if _is(final, inode):
                self._committed = True  # the recovery finished the commit
                return
            if _is(staging, inode):
                self._keep_aside(f"cannot put the run in {final} ({e.strerror or e})")
            self._committed = True
            raise RunFolderError(f"cannot put the run in {final} ({e.strerror or e}); {note or 'see the folders next to it'}") from None
        self._committed = True
        with contextlib.suppress(OSError):  # a failure here leaves the journal: the next run finishes this
            _step("drop")
            _drop_earlier(journal)
            _step("clear")
            _clear_journal(final)
            _step("unmark")
            _unmark(final, self._token)
            _step("done")

    def _keep_aside(self, why: str) -> None:
        """Move the finished run to a visible folder next to the save folder and raise."""
        assert self.save_dir is not None and self.staging is not None
        final, staging = self.save_dir, self.staging
        with contextlib.suppress(RunFolderError):
            if os.path.lexists(_journal_path(final)) and _read_journal(final).token == self._token:
                _clear_journal(final)  # this commit's own journal only
        _unmark(final, self._token)
        kept = _visible_name(final)
        try:
            os.rename(staging, kept)
            _unmark(kept, self._token)
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
            if self.save_dir is not None and os.path.lexists(_journal_path(self.save_dir)):
                with contextlib.suppress(OSError, RunFolderError):
                    recover_save(self.save_dir)  # interrupted inside the commit: finished, or the earlier run kept
            with contextlib.suppress(OSError):
                if _is(self.staging, self._staging_inode):  # still this run's own folder
                    shutil.rmtree(self.staging, ignore_errors=True)
        for lock in self._locks:
            lock.release()
        self._locks = []
