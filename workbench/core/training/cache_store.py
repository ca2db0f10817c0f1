"""Where the frozen-prefix cache keeps its rows: device or host memory within a budget, then a file.

One row per sample index, in the activations' own dtype. The first rows (up to the budget)
live in memory on the training device; the rest, when a spill folder is given, in a
memory-mapped file there (``torch.from_file``, so bfloat16 rows stay bfloat16). The file is
created fresh (``O_EXCL | O_NOFOLLOW``: never through a symbolic link, never over an existing
file) and removed by :meth:`RowStore.close`.

A mapped file whose blocks the disk cannot supply kills the process with SIGBUS at the first
write past the free space, with no message. So the file's whole size is reserved before it is
mapped (``posix_fallocate``, or zeros written through where the file system cannot reserve),
after a check that the disk has it free with :data:`SPILL_HEADROOM` to spare; when it has
not, those rows stay uncached and :attr:`RowStore.note` says so in one line.

:func:`parse_budget` reads a ``--cache-budget`` value; :func:`default_budget` is the default
(a quarter of the free device memory, or of the available RAM on the CPU).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from workbench.core.errors import WorkbenchError

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

__all__ = [
    "BUDGET_FRACTION", "CacheBudgetError", "RowStore", "SPILL_HEADROOM", "SPILL_NAME", "SPILL_NAME_2", "SpillSpaceError",
    "create_spill_file", "default_budget", "parse_budget",
]

#: Share of the free device memory (or available RAM) the cache may hold by default.
BUDGET_FRACTION = 0.25
#: Name of the spill file in the run folder.
SPILL_NAME = "frozen_cache.bin"
#: Name of a second spill file, while rows move from one cut to the next (both open at once).
SPILL_NAME_2 = "frozen_cache.next.bin"
#: Bytes a spill file leaves free on its disk (the run's metrics and summary still need room).
SPILL_HEADROOM = 16 << 20
#: Bytes of zeros written at a time where the file system cannot reserve space itself.
_ZERO_CHUNK = 1 << 20
#: ``posix_fallocate`` errors that mean "not supported here" (then zeros are written through).
_NO_FALLOCATE = frozenset(e for e in (errno.EOPNOTSUPP, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP), errno.EINVAL,
                                      errno.ENOSYS) if e is not None)
#: Largest budget accepted (1 PiB): anything above is a typo, not a machine.
_MAX_BUDGET = 1 << 50
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}
_BUDGET_RE = re.compile(r"^\s*(\d{1,20}(?:\.\d{1,12})?)\s*([a-zA-Z]{0,3})\s*$", re.ASCII)


class CacheBudgetError(WorkbenchError, ValueError):
    """A cache budget is not a size; the message says what is accepted."""


def parse_budget(text: str | int | None) -> int | None:
    """Read a cache budget: bytes, or a number with a unit (``512M``, ``2G``, ``1.5GiB``).

    Args:
        text: the value; None or ``auto`` for the default.

    Returns:
        Bytes, or None for the default.

    Raises:
        CacheBudgetError: not a size, negative, or above 1 PiB.
    """
    if text is None:
        return None
    if isinstance(text, bool):
        raise CacheBudgetError(f"cache budget must be a size such as 512M or 2G, got {text!r}")
    if isinstance(text, int):
        value = text
    else:
        if not isinstance(text, str):
            raise CacheBudgetError(f"cache budget must be a size such as 512M or 2G, got {type(text).__name__}")
        if text.strip().lower() == "auto":
            return None
        m = _BUDGET_RE.match(text) if len(text) <= 64 else None
        unit = m.group(2).lower() if m else ""
        if m is None or unit not in _UNITS:
            shown = text if len(text) <= 40 else text[:40] + "..."
            raise CacheBudgetError(f"cache budget {shown!r} is not a size; give bytes or a number with K, M, G or T (e.g. 512M)")
        value = int(float(m.group(1)) * _UNITS[unit]) if "." in m.group(1) else int(m.group(1)) * _UNITS[unit]
    if value < 0:
        raise CacheBudgetError(f"cache budget must be >= 0 bytes, got {value}")
    if value > _MAX_BUDGET:
        raise CacheBudgetError(f"cache budget {value} bytes is above 1 PiB; give a size such as 2G")
    return value


def default_budget(device: torch.device) -> int:
    """The default cache budget: a quarter of the free memory where the rows live.

    Args:
        device: the training device (CUDA: its free memory; else the available RAM).

    Returns:
        Bytes.
    """
    import torch

    if device.type == "cuda":
        with contextlib.suppress(Exception):
            free, _ = torch.cuda.mem_get_info(device)
            return int(free * BUDGET_FRACTION)
    try:
        import psutil

        return int(psutil.virtual_memory().available * BUDGET_FRACTION)
    except Exception:
        return 1 << 30


class SpillSpaceError(OSError):
    """The disk has not the room a spill file needs; ``strerror`` says how much it needs and has."""


def _reserve(fd: int, nbytes: int) -> None:
    """Make every block of the file's first ``nbytes`` bytes exist on the disk (not a sparse hole)."""
    fallocate = getattr(os, "posix_fallocate", None)
    if fallocate is not None:
        try:
            fallocate(fd, 0, nbytes)
            return
        except OSError as e:
            if e.errno not in _NO_FALLOCATE:
                raise
    zeros = bytes(min(nbytes, _ZERO_CHUNK))  # write-through: a full disk fails here, as ENOSPC
    done = 0
    while done < nbytes:
        done += os.write(fd, zeros[: min(len(zeros), nbytes - done)])


def create_spill_file(path: Path, nbytes: int) -> None:
    """Create a new file of ``nbytes`` bytes, its space reserved, never through a link or over an
    existing file.

    Args:
        path: the file to create.
        nbytes: its size.

    Raises:
        SpillSpaceError: the disk has less than ``nbytes`` plus :data:`SPILL_HEADROOM` free.
        OSError: it exists (a link included), the folder is not writable, or the space could
            not be reserved (``ENOSPC``); nothing is left behind.
    """
    from workbench.core.formatting import fmt_bytes

    try:
        free: int | None = shutil.disk_usage(Path(path).parent).free
    except OSError:
        free = None  # not a folder, gone ...: os.open says what
    if free is not None and nbytes + SPILL_HEADROOM > free:
        raise SpillSpaceError(
            errno.ENOSPC,
            f"no room: it needs {fmt_bytes(nbytes)} plus {fmt_bytes(SPILL_HEADROOM)} to spare, "
            f"and {fmt_bytes(free)} are free on that disk",
        )
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o600)
    try:
        if nbytes:
            _reserve(fd, nbytes)
        os.ftruncate(fd, nbytes)
    except OSError:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    os.close(fd)


class RowStore:
    """Rows of one shape and dtype, addressed by sample index ``0 .. n-1``.

    Args:
        n: number of samples.
        row_shape: shape of one sample's activation.
        dtype: the activations' dtype.
        device: the training device (memory rows live there).
        budget: bytes the memory part may use.
        spill_dir: folder of the spill file for the rows beyond the budget, or None.
        name: the spill file's name in that folder.

    Attributes:
        mem_rows: rows held in memory (indices ``0 .. mem_rows-1``).
        disk_rows: rows held in the spill file.
        note: one line about what could not be held (a spill file that could not be
            created), or ``""``.
    """

    def __init__(
        self, n: int, row_shape: tuple[int, ...], dtype: torch.dtype, device: torch.device,
        budget: int, spill_dir: Path | None, *, name: str = SPILL_NAME,
    ) -> None:
        import torch

        self.n = n
        self.row_shape = tuple(row_shape)
        self.dtype = dtype
        self.device = device
        numel = 1
        for s in self.row_shape:
            numel *= s
        self.row_numel = numel
        self.row_bytes = max(numel * torch.empty((), dtype=dtype).element_size(), 1)
        self.note = ""
        self.mem_rows = min(n, budget // self.row_bytes)
        self.mem: torch.Tensor | None = None
        if self.mem_rows:
            try:
                self.mem = torch.empty((self.mem_rows, *self.row_shape), dtype=dtype, device=device)
            except (torch.OutOfMemoryError, RuntimeError) as e:
                wanted, self.mem_rows = self.mem_rows, 0
                self.note = f"no memory for {self.mem_rows_text(wanted)} of cached activations ({str(e).splitlines()[0][:80]})"
        self.disk_rows = 0
        self.disk: torch.Tensor | None = None
        self.spill_path: Path | None = None
        rest = n - self.mem_rows
        if rest > 0 and spill_dir is not None:
            path = Path(spill_dir) / name
            try:
                create_spill_file(path, rest * self.row_bytes)
                self.spill_path = path
                flat = torch.from_file(str(path), shared=True, size=rest * numel, dtype=dtype)
                self.disk = flat.view(rest, *self.row_shape)
                self.disk_rows = rest
            except (OSError, RuntimeError) as e:
                self._unlink()
                reason = getattr(e, "strerror", None) or str(e).splitlines()[0][:80]
                self.note = f"spill file {path} cannot be created ({reason}); {rest} samples stay uncached"
        elif rest > 0:
            self.note = f"{rest} of {n} samples beyond the cache budget stay uncached (no run folder to spill to)"
        self.filled = torch.zeros(n, dtype=torch.bool)

    def mem_rows_text(self, n: int) -> str:
        """``n`` rows as a size."""
        from workbench.core.formatting import fmt_bytes

        return fmt_bytes(n * self.row_bytes)

    @property
    def capacity(self) -> int:
        """Rows that can be held (memory plus file)."""
        return self.mem_rows + self.disk_rows

    @property
    def bytes_memory(self) -> int:
        """Bytes of the rows filled in memory."""
        return int(self.filled[: self.mem_rows].sum()) * self.row_bytes

    @property
    def bytes_disk(self) -> int:
        """Bytes of the rows filled in the spill file."""
        return int(self.filled[self.mem_rows : self.capacity].sum()) * self.row_bytes

    @property
    def count(self) -> int:
        """Rows filled."""
        return int(self.filled.sum())

    def has_all(self, idx: torch.Tensor) -> bool:
        """All of these sample indices hold a row.

        Args:
            idx: sample indices (CPU, int64).

        Returns:
            True when every index is in range and filled.
        """
        if idx.numel() == 0 or int(idx.min()) < 0 or int(idx.max()) >= self.n:
            return False
        return bool(self.filled[idx].all())

    def held(self, idx: torch.Tensor) -> torch.Tensor:
        """Which of these sample indices hold a row (an index out of range holds none).

        Args:
            idx: sample indices (CPU, int64).

        Returns:
            A boolean tensor, one per index.
        """
        inside = (idx >= 0) & (idx < self.n)
        return inside & self.filled[idx.clamp(0, max(self.n - 1, 0))]

    def put(self, idx: torch.Tensor, rows: torch.Tensor) -> None:
        """Store rows for sample indices that have none yet (others are kept).

        Args:
            idx: sample indices (CPU, int64), one per row.
            rows: the activations, ``(len(idx), *row_shape)``.
        """
        if tuple(rows.shape[1:]) != self.row_shape or rows.dtype != self.dtype:
            return
        rows = rows.detach()
        for where, lo, hi, store in ((0, 0, self.mem_rows, self.mem), (1, self.mem_rows, self.capacity, self.disk)):
            if store is None:
                continue
            sel = (idx >= lo) & (idx < hi)
            if not bool(sel.any()):
                continue
            sel &= ~self.filled[idx.clamp(0, self.n - 1)]
            if not bool(sel.any()):
                continue
            pos = sel.nonzero().flatten()
            slots = idx[pos] - lo
            src = rows[pos.to(rows.device)]
            if where == 0:
                store.index_copy_(0, slots.to(store.device), src.to(store.device))
            else:
                store.index_copy_(0, slots, src.to("cpu"))
            self.filled[idx[pos]] = True

    def get(self, idx: torch.Tensor) -> torch.Tensor:
        """The rows of sample indices that all hold one, on the device.

        Args:
            idx: sample indices (CPU, int64).

        Returns:
            ``(len(idx), *row_shape)`` on the training device.
        """
        import torch

        in_mem = idx < self.mem_rows
        if bool(in_mem.all()) and self.mem is not None:
            return self.mem.index_select(0, idx.to(self.mem.device))
        out = torch.empty((idx.numel(), *self.row_shape), dtype=self.dtype, device=self.device)
        if self.mem is not None and bool(in_mem.any()):
            pos = in_mem.nonzero().flatten()
            out[pos.to(self.device)] = self.mem.index_select(0, idx[pos].to(self.mem.device))
        if self.disk is not None:
            pos = (~in_mem).nonzero().flatten()
            if pos.numel():
                out[pos.to(self.device)] = self.disk.index_select(0, idx[pos] - self.mem_rows).to(self.device)
        return out

    def close(self) -> None:
        """Drop the rows and remove the spill file."""
        self.mem = None
        self.disk = None
        self.filled.zero_()
        self._unlink()

    def _unlink(self) -> None:
        if self.spill_path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.spill_path)
            self.spill_path = None
