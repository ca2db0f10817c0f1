"""Where a training run writes its files, so that two runs never mix.

A run's save folder (``--save DIR``: trainable state, A+B deltas, the plan in force, the
config, the summary, the metrics) is written to a fresh hidden folder next to ``DIR`` and
swapped in when the run ends: ``DIR`` holds one whole run, never files of two. A lock file
next to ``DIR`` (and next to a ``--metrics`` file) makes a concurrent run that names the same
path fail at start with one line, instead of losing one run's files silently.

:func:`check_save_folder` is the start-of-run check the CLI makes: an existing run folder is
replaced only with ``--overwrite``, and a folder holding anything that is not a run's files
is never replaced.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
from pathlib import Path

from workbench.core.errors import WorkbenchError
from workbench.core.training.metrics import MetricsWriter

__all__ = ["RUN_FILES", "PathLock", "RunFolderError", "RunOutputs", "check_save_folder"]

#: Files a run writes into its save folder (a folder holding only these is an earlier run).
RUN_FILES: frozenset[str] = frozenset(
    {"trainable.safetensors", "deltas.safetensors", "plan.json", "config.json", "summary.json", "metrics.jsonl",
     "auto_freeze.plan.json"}
)
_METRICS_FILE = "metrics.jsonl"


class RunFolderError(WorkbenchError):
    """A save folder or metrics file cannot be used by this run; the message says why and what to do."""


def check_save_folder(path: str | os.PathLike[str], *, overwrite: bool) -> None:
    """Check that a run may write its save folder at ``path``.

    Args:
        path: the ``--save`` folder.
        overwrite: an earlier run's folder may be replaced.

    Raises:
        RunFolderError: ``path`` is a file; it holds an earlier run and ``overwrite`` is
            false; or it holds files that are not a run's (never replaced).
    """
    p = Path(path)
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


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    except OSError:
        return False
    return True


class PathLock:
    """An exclusive lock on a path for this process: the file ``.<name>.lock`` next to it.

    A lock left by a process that no longer runs is taken over.

    Args:
        path: the file or folder to lock.
        what: what the path is, for the message (``"save folder"``).

    Raises:
        RunFolderError: another running process holds the lock, or the lock cannot be made.
    """

    def __init__(self, path: str | os.PathLike[str], what: str) -> None:
        target = Path(path)
        self.path = target.with_name(f".{target.name}.lock")
        self._held = False
        for _ in range(2):
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = self._holder()
                if holder is not None and holder != os.getpid() and _pid_alive(holder):
                    raise RunFolderError(
                        f"another run (process {holder}) is writing the {what} {target}; wait for it to end "
                        f"or choose another path (a stale lock is {self.path})"
                    ) from None
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()  # stale: its process ended
                continue
            except OSError as e:
                raise RunFolderError(
                    f"cannot lock the {what} {target} ({e.strerror or e}); check that its folder is writable"
                ) from None
            with os.fdopen(fd, "w") as f:
                f.write(str(os.getpid()))
            self._held = True
            return
        raise RunFolderError(f"cannot lock the {what} {target}: {self.path} keeps reappearing; retry")

    def _holder(self) -> int | None:
        try:
            return int(self.path.read_text().strip() or "0")
        except (OSError, ValueError):
            return None

    def release(self) -> None:
        """Remove the lock file (once)."""
        if self._held:
            self._held = False
            with contextlib.suppress(OSError):
                self.path.unlink()


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
                try:
                    out.staging = Path(tempfile.mkdtemp(prefix=f".{out.save_dir.name}.staging-", dir=out.save_dir.parent))
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
        """Swap the staging folder in as the save folder (an earlier run there is replaced whole).

        Raises:
            RunFolderError: the save folder holds files that are not a run's, or the swap failed
                (the staged files stay in the hidden folder named in the message).
        """
        if self.save_dir is None or self.staging is None or self._committed:
            return
        final = self.save_dir
        check_save_folder(final, overwrite=True)
        old = final.with_name(f".{final.name}.old-{secrets.token_hex(4)}")
        try:
            if final.exists():
                os.rename(final, old)
            os.rename(self.staging, final)
        except OSError as e:
            if old.exists() and not final.exists():
                with contextlib.suppress(OSError):
                    os.rename(old, final)
            raise RunFolderError(
                f"cannot put the run in {final} ({e.strerror or e}); its files are in {self.staging}"
            ) from None
        self._committed = True
        shutil.rmtree(old, ignore_errors=True)

    def close(self) -> None:
        """Close the writers, drop an uncommitted staging folder, release the locks."""
        for w in self.writers:
            with contextlib.suppress(Exception):
                w.close()
        if self.staging is not None and not self._committed:
            shutil.rmtree(self.staging, ignore_errors=True)
        for lock in self._locks:
            lock.release()
        self._locks = []
