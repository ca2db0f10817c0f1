"""Reading JSON from files a user names, with limits: plans, ``--config``, ``run.json``.

A hostile or broken file must give one clear error, never a hang or a traceback:

* only regular files are read (``/dev/zero``, a FIFO or a folder is refused before reading);
* the size is capped (:data:`MAX_JSON_BYTES`), so a huge file cannot exhaust memory;
* the nesting depth is capped (:data:`MAX_JSON_DEPTH`) before parsing, and a
  ``RecursionError`` from the parser becomes the same one-line error.

Syntax errors are left to the caller as :class:`json.JSONDecodeError`, so each file kind
keeps its own message with the line and column.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from workbench.core.errors import WorkbenchError

__all__ = ["MAX_JSON_BYTES", "MAX_JSON_DEPTH", "JsonInputError", "json_depth", "load", "loads", "read_text"]

#: Largest JSON file read (plans and configs are a few kB; metrics use their own reader).
MAX_JSON_BYTES = 16 * 1024 * 1024
#: Deepest nesting of arrays/objects accepted (plans need about 6 levels).
MAX_JSON_DEPTH = 64

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


class JsonInputError(WorkbenchError, ValueError):
    """A JSON file or text breaks a limit (not a regular file, too large, nested too deep)."""


def json_depth(text: str) -> int:
    """The deepest nesting of ``[``/``{`` in JSON text, ignoring brackets inside strings.

    Args:
        text: JSON text (need not be valid).

    Returns:
        The maximum depth (0 for a scalar).
    """
    depth = deepest = 0
    for m in _BRACKET.finditer(_STRING.sub('""', text)):
        if m.group() in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def loads(text: str, *, what: str = "JSON", max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Parse JSON text whose nesting is at most ``max_depth``.

    Args:
        text: the JSON text.
        what: what the text is, for the message (``"plan file x.json"``).
        max_depth: deepest nesting accepted.

    Returns:
        The parsed value.

    Raises:
        JsonInputError: nested deeper than ``max_depth``.
        json.JSONDecodeError: invalid JSON (the caller words it).
    """
    depth = json_depth(text)
    if depth > max_depth:
        raise JsonInputError(
            f"{what} is nested {depth} levels deep (at most {max_depth} are accepted); "
            "it is not a file this program wrote: check that you picked the right file"
        )
    try:
        return json.loads(text)
    except RecursionError:
        raise JsonInputError(
            f"{what} is nested too deeply to read; check that you picked the right file"
        ) from None


def read_text(path: str | os.PathLike[str], *, what: str = "file", max_bytes: int = MAX_JSON_BYTES) -> str:
    """Read a regular UTF-8 text file of at most ``max_bytes``.

    Args:
        path: the file.
        what: what the file is, for the message (``"plan file"``).
        max_bytes: largest size accepted.

    Returns:
        The text.

    Raises:
        FileNotFoundError: no such file (the caller words it).
        JsonInputError: not a regular file, larger than ``max_bytes``, or not UTF-8.
        OSError: the file cannot be opened or read.
    """
    p = Path(path)
    fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file (a device, pipe or socket)"
        raise JsonInputError(f"{what} {p} is {kind}; pass a .json file")
    with os.fdopen(fd, "rb") as f:
        if st.st_size > max_bytes:
            raise JsonInputError(
                f"{what} {p} is {st.st_size:,} bytes, more than the {max_bytes:,} accepted; "
                "check that you picked the right file"
            )
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise JsonInputError(f"{what} {p} grew past {max_bytes:,} bytes while being read; pass a .json file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise JsonInputError(f"{what} {p} is not UTF-8 text (byte {e.start}); save it as UTF-8 (JSON files are UTF-8)") from None


def load(path: str | os.PathLike[str], *, what: str = "file", max_bytes: int = MAX_JSON_BYTES,
         max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Read and parse a JSON file within the limits of :func:`read_text` and :func:`loads`.

    Args:
        path: the file.
        what: what the file is, for messages.
        max_bytes: largest size accepted.
        max_depth: deepest nesting accepted.

    Returns:
        The parsed value.

    Raises:
        FileNotFoundError: no such file.
        JsonInputError: a limit was broken.
        json.JSONDecodeError: invalid JSON.
        OSError: the file cannot be read.
    """
    return loads(read_text(path, what=what, max_bytes=max_bytes), what=f"{what} {path}", max_depth=max_depth)
