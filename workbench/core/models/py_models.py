"""The ``py`` model source: your own code, ``py:MODULE:FACTORY`` or ``py:path/to/file.py:FACTORY``.

Opening such a spec **imports that module or runs that file and calls ``FACTORY()``**, with
the rights of the current user: only name code you trust. It runs only when the user named it
(:func:`~workbench.core.models.sources.check_code_origin`); :func:`code_preview` reads what it
would run, without running it, for the app's confirmation. The factory takes no arguments
and returns an ``nn.Module``; ``num_classes`` then replaces its classification head.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from workbench.core.models.build_request import BuildRequest, device_context, first_line
from workbench.core.models.heads import replace_head
from workbench.core.models.source_errors import ModelSourceError

if TYPE_CHECKING:  # pragma: no cover - typing only
    from torch import nn

__all__ = ["build_py", "code_preview", "split_py_name"]


def split_py_name(name: str) -> tuple[str, str]:
    """Split ``MODULE:FACTORY`` or ``path/file.py:FACTORY``.

    Args:
        name: The part after ``py:``.

    Returns:
        ``(module or file, factory name)``.

    Raises:
        ModelSourceError: No ``:FACTORY`` part.
    """
    target, sep, factory = name.rpartition(":")
    if not sep or not target or not factory.isidentifier():
        raise ModelSourceError(
            f"py model spec {name!r} must be py:MODULE:FACTORY or py:path/to/file.py:FACTORY "
            "(FACTORY: a function that returns the nn.Module)"
        )
    return target, factory


def _module_file(target: str) -> Path | None:
    """The file ``MODULE`` or ``path.py`` names, found without importing anything."""
    if target.endswith(".py"):
        path = Path(target).expanduser().resolve()
        return path if path.is_file() else None
    parts = target.split(".")
    if not all(p.isidentifier() for p in parts):
        return None
    for entry in [os.getcwd(), *sys.path]:
        base = Path(entry or ".").joinpath(*parts)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate.resolve()
    return None


def code_preview(name: str, lines: int = 12, max_bytes: int = 2_000_000) -> tuple[str, str]:
    """The file a ``py:`` spec runs and the first lines of its factory, read without running it.

    What the app shows before it runs model code (the file is parsed, never imported).

    Args:
        name: The part after ``py:`` (``path/file.py:FACTORY`` or ``MODULE:FACTORY``).
        lines: How many lines of the function to show at most.
        max_bytes: Larger files are not read (the preview says so).

    Returns:
        ``(file path, first lines of the factory)``; the text says so when the file or the
        function cannot be found or read.

    Raises:
        ModelSourceError: The spec is not ``TARGET:FACTORY``.
    """
    target, factory = split_py_name(name)
    path = _module_file(target)
    if path is None:
        return target, f"(file of {target!r} not found: nothing will run)"
    try:
        if path.stat().st_size > max_bytes:
            return str(path), f"(file larger than {max_bytes // 1_000_000} MB: not shown)"
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text, filename=str(path))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError) as e:
        return str(path), f"(cannot read the file: {first_line(e)})"
    node = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                 and n.name == factory), None)
    if node is None:
        return str(path), f"(no top-level function {factory!r} in the file; importing it still runs the file)"
    start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    source = text.splitlines()[start - 1:]
    end = getattr(node, "end_lineno", None) or start + lines
    shown = source[: min(lines, end - start + 1)]
    more = "\n    …" if end - start + 1 > lines else ""
    return str(path), "\n".join(shown) + more


def _import(target: str) -> ModuleType:
    try:
        if target.endswith(".py"):
            path = Path(target).expanduser().resolve()
            if not path.is_file():
                raise ModelSourceError(f"model file {target!r} does not exist; give the path of a .py file")
            mod_name = f"workbench_user_model_{abs(hash(str(path)))}"
            spec = importlib.util.spec_from_file_location(mod_name, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[mod_name] = module
            spec.loader.exec_module(module)
            return module
        cwd = os.getcwd()
        added = cwd not in sys.path
        if added:
            sys.path.insert(0, cwd)
        try:
            return importlib.import_module(target)
        finally:
            if added:
                sys.path.remove(cwd)
    except ModelSourceError:
        raise
    except Exception as exc:  # SyntaxError, ImportError, errors at import time
        raise ModelSourceError(
            f"could not import {target!r} ({type(exc).__name__}: {first_line(exc)}); fix the module or the spec"
        ) from exc


def build_py(req: BuildRequest) -> nn.Module:
    """Import a module (or run a file) and call its factory.

    Args:
        req: ``req.name`` is ``MODULE:FACTORY`` or ``path.py:FACTORY``; ``req.weights`` must
            be ``None`` (load weights in the factory, or with a checkpoint);
            ``req.num_classes`` replaces the head; ``req.meta`` calls the factory under the
            meta device.

    Returns:
        The module the factory returned.

    Raises:
        ModelSourceError: Bad spec, import failure, no such factory, the factory raised or
            returned something that is not an ``nn.Module``.
    """
    from torch import nn

    if req.weights is not None:
        raise ModelSourceError(
            "a py: model takes no weights name; load the weights in the factory or give a checkpoint file"
        )
    target, factory_name = split_py_name(req.name)
    module = _import(target)
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise ModelSourceError(f"{target!r} has no function {factory_name!r}; name a function that returns the model")
    try:
        with device_context(req.meta), warnings.catch_warnings():
            if req.meta:  # a factory that loads its weights: on meta that is a no-op, one warning per tensor
                warnings.filterwarnings("ignore", message=".*copying from a non-meta parameter")
            model = factory()
    except Exception as exc:
        raise ModelSourceError(
            f"model factory {factory_name}() in {target!r} raised {type(exc).__name__}: {first_line(exc)}"
        ) from exc
    if not isinstance(model, nn.Module):
        raise ModelSourceError(
            f"model factory {factory_name}() in {target!r} returned {type(model).__name__}, not a torch.nn.Module; "
            "make it return the model"
        )
    if req.num_classes is not None:
        with device_context(req.meta):
            replace_head(model, req.num_classes)
    return model
