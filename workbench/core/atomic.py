"""Atomic file writes: a temp file in the destination folder, then ``os.replace``.

A reader never sees a half-written plan, checkpoint or export, and an existing file stays
intact when writing fails.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_path", "atomic_write"]


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success it replaces ``path``.

    Use it with libraries that write to a path themselves (``torch.save``,
    ``safetensors.torch.save_file``).

    Args:
        path: the destination file.

    Yields:
        The temporary file's path (same folder, so the rename is atomic).

    Raises:
        OSError: the folder is not writable. Whatever the body raises propagates and the
            temporary file is removed.
    """
    dest = Path(path)
    parent = dest.parent if str(dest.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=parent)
    os.close(fd)
    try:
        mode = _target_mode(dest)
        os.chmod(tmp, mode)
        yield Path(tmp)
        os.chmod(tmp, mode)  # a library that recreated the file (safetensors) left mkstemp's 0600
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _target_mode(dest: Path) -> int:
    """The mode a plain ``open(dest, "w")`` would give: the existing file's, else 0o666 & ~umask."""
    try:
        return dest.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def atomic_write(path: str | os.PathLike[str], data: str | bytes, encoding: str = "utf-8") -> None:
    """Write ``data`` to ``path`` atomically.

    Args:
        path: destination file.
        data: text (encoded with ``encoding``) or bytes.
        encoding: text encoding.

    Raises:
        OSError: the folder is not writable.
    """
    payload = data.encode(encoding) if isinstance(data, str) else data
    with atomic_path(path) as tmp:
        tmp.write_bytes(payload)
