"""Your own code as a data source, a loss or a metric: ``py:FILE.py:FUNC`` or ``py:MODULE:FUNC``.

Loading such a spec **runs that file (or imports that module)** with the rights of the current
user, as a ``py:`` model does. It runs only when the caller named it: a command-line flag, a
Python call, or the app's dialog that showed the file and was confirmed. Named by a config file
or a run record it is refused with one line, by the same rule as models
(:func:`~workbench.core.models.sources.check_code_origin`).

A file is read only when it is a regular file of at most :data:`MAX_CODE_BYTES` and UTF-8 text:
a FIFO or a device is refused before it is opened for reading (no read can block), a symbolic
link is followed to the file it names.
"""

from __future__ import annotations

import importlib
import os
import stat
import sys
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from workbench.core.errors import WorkbenchError, first_line
from workbench.core.suggest import did_you_mean

__all__ = ["MAX_CODE_BYTES", "PyCodeError", "is_py_spec", "load_py_function", "py_target_file", "table_or_py_name"]

#: Largest code file a ``py:`` spec runs (a larger one is refused, not read).
MAX_CODE_BYTES = 8 * 1024 * 1024

_MODULES: dict[tuple[str, int, int], ModuleType] = {}  # (path, mtime, size) -> module already run


class PyCodeError(WorkbenchError):
    """A ``py:`` data source, loss or metric cannot be loaded; the message says why."""


def is_py_spec(text: Any) -> bool:
    """Whether ``text`` is a ``py:`` spec (code)."""
    return isinstance(text, str) and text.strip().lower().startswith("py:")


def table_or_py_name(
    text: Any, names: Collection[str], aliases: Mapping[str, str], error: type[Exception]
) -> str:
    """The canonical name of a setting that is a row of a table or ``py:FILE:FUNC`` (a loss, a metric).

    Args:
        text: what the user gave: a row's name, one of its aliases (case and ``-``/``_`` folded),
            or a ``py:`` spec (kept as given, trimmed).
        names: the table's row names.
        aliases: other spellings of those names.
        error: the exception class to raise.

    Returns:
        The row's name, or the trimmed ``py:`` spec.

    Raises:
        error: anything else, with the table's names and the nearest one.
    """
    choices = ", ".join(names)
    if not isinstance(text, str) or not text.strip():
        raise error(f"must be one of {choices} or py:FILE.py:FUNC, got {text!r}")
    if is_py_spec(text):
        return "py:" + text.strip()[3:].strip()
    key = text.strip().lower().replace("-", "_")
    key = aliases.get(key, key)
    if key not in names:
        hint = did_you_mean(key, tuple(names))
        raise error(f"{text!r} is not one of {choices} or py:FILE.py:FUNC" + (f"; {hint}" if hint else ""))
    return key


def _split(spec: str, what: str) -> tuple[str, str]:
    name = spec.strip()[3:].strip()
    target, sep, func = name.rpartition(":")
    if not sep or not target.strip() or not func.isidentifier():
        raise PyCodeError(f"{what} spec {spec.strip()[:200]!r} must be py:FILE.py:FUNC or py:MODULE:FUNC "
                          "(FUNC: a function of that file)")
    return target.strip(), func


def py_target_file(spec: str) -> Path | None:
    """The file a ``py:FILE.py:FUNC`` spec runs (absolute, links followed), None for a module spec.

    Args:
        spec: the ``py:`` spec.

    Returns:
        The path, or None.
    """
    target = spec.strip()[3:].rpartition(":")[0].strip()
    return Path(target).expanduser().resolve() if target.endswith(".py") else None


def _read_code(path: Path, what: str) -> bytes:
    """The bytes of a code file: a regular file, not too large; never blocks on a FIFO."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise PyCodeError(f"{what} file {path} cannot be read ({e.strerror or first_line(e)}); give the path of a .py file") from None
    if not stat.S_ISREG(st.st_mode):
        raise PyCodeError(f"{what} file {path} is not a regular file (a FIFO, device or folder); give the path of a .py file")
    if st.st_size > MAX_CODE_BYTES:
        raise PyCodeError(f"{what} file {path} is {st.st_size:,} bytes, more than the {MAX_CODE_BYTES // (1024 * 1024)} MB "
                          "a code file may have; is it the right file?")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # replaced since the stat
                raise PyCodeError(f"{what} file {path} is not a regular file; give the path of a .py file")
            return f.read(MAX_CODE_BYTES + 1)[:MAX_CODE_BYTES]
    except OSError as e:
        raise PyCodeError(f"{what} file {path} cannot be read ({e.strerror or first_line(e)})") from None


def _run_file(path: Path, what: str) -> ModuleType:
    data = _read_code(path, what)
    try:
        st = os.stat(path)
    except OSError:  # gone since it was read: run what was read
        st = None
    key = (str(path), st.st_mtime_ns if st else 0, st.st_size if st else -1)
    if key in _MODULES:
        return _MODULES[key]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PyCodeError(f"{what} file {path} is not UTF-8 text (byte {e.start}); save it as UTF-8") from None
    name = f"workbench_user_code_{abs(hash(str(path)))}"
    module = ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module  # dataclasses and pickling look the module up
    try:
        code = compile(text, str(path), "exec")
        exec(code, module.__dict__)
    except Exception as e:
        sys.modules.pop(name, None)
        raise PyCodeError(f"running {what} file {path} failed: {type(e).__name__}: {first_line(e)}; fix the file") from e
    _MODULES[key] = module
    return module


def _import_module(target: str, what: str) -> ModuleType:
    if not all(p.isidentifier() for p in target.split(".")):
        raise PyCodeError(f"{what} spec names {target!r}, neither a .py file nor a module name")
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(target)
    except Exception as e:
        raise PyCodeError(f"could not import {target!r} for the {what} ({type(e).__name__}: {first_line(e)}); "
                          "fix the module or the spec") from e
    finally:
        if added:
            sys.path.remove(cwd)


def load_py_function(spec: str, *, what: str, flag: str, origin: str | None) -> Callable[..., Any]:
    """The function a ``py:`` spec names, its file run (or module imported) once.

    Args:
        spec: ``py:FILE.py:FUNC`` or ``py:MODULE:FUNC``.
        what: what the code is for, in messages (``"data"``, ``"loss"``, ``"metric"``).
        flag: the command-line flag that names it (``--data``).
        origin: None when the caller named the spec; else what file named it (then nothing
            runs and :class:`~workbench.core.models.sources.CodeFromFileError` is raised).

    Returns:
        The function.

    Raises:
        CodeFromFileError: a file named the spec.
        PyCodeError: a bad spec, a file that cannot be read or run, no such function.
    """
    from workbench.core.models.sources import check_code_origin

    target, func = _split(spec, what)
    check_code_origin("py", f"{target}:{func}", origin, flag=flag, what=f"{what} code")
    if target.endswith(".py"):
        module = _run_file(Path(target).expanduser().resolve(), what)
    else:
        module = _import_module(target, what)
    fn = getattr(module, func, None)
    if not callable(fn):
        raise PyCodeError(f"{target!r} has no function {func!r}; name a function of that file ({flag} py:{target}:NAME)")
    return fn
