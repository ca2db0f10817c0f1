"""The ``py`` model source: your own code, ``py:MODULE:FACTORY`` or ``py:path/to/file.py:FACTORY``.

Opening such a spec **imports that module or runs that file and calls ``FACTORY()``**, with
the rights of the current user: only name code you trust. The factory takes no arguments
and returns an ``nn.Module``; ``num_classes`` then replaces its classification head.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

from torch import nn

from workbench.core.models.build_request import BuildRequest, device_context, first_line
from workbench.core.models.zoo import ModelSourceError, replace_head

__all__ = ["build_py", "split_py_name"]


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
        with device_context(req.meta):
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
