"""What every model source is asked to build, and the helpers all sources share.

A :class:`BuildRequest` carries the source-independent arguments (name, weights, number of
classes, meta device, download and pickle permissions); :func:`device_context` builds on
the ``meta`` device when asked; :func:`require_extra` imports an optional dependency or
says which ``pip install`` provides it.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType

from workbench.core.models.source_errors import ModelSourceError

__all__ = ["BuildRequest", "device_context", "did_you_mean", "first_line", "missing_extra_message", "require_extra"]


@dataclass(frozen=True)
class BuildRequest:
    """The arguments of one model build, whatever the source.

    Attributes:
        name: The source-specific name (registry name, folder or repo id, ``MODULE:FACTORY``).
        weights: Pretrained weights (source-specific meaning), or ``None``.
        num_classes: Output classes of the final head, or ``None`` to keep the model's.
        meta: Build on the ``meta`` device: shapes only, no memory, no weights read.
        allow_download: Whether missing pretrained weights may be downloaded.
        trust_pickle: Whether weight files that need unpickling may be read.
    """

    name: str
    weights: str | None = None
    num_classes: int | None = None
    meta: bool = False
    allow_download: bool = False
    trust_pickle: bool = False


@contextlib.contextmanager
def device_context(meta: bool) -> Iterator[None]:
    """Create tensors on the ``meta`` device inside the block when ``meta`` is true.

    Args:
        meta: Whether to build on the meta device.
    """
    import torch

    if not meta:
        yield
        return
    with torch.device("meta"):
        yield


def missing_extra_message(extra: str, module: str) -> str:
    """The one-line message for an optional dependency that is not installed.

    Args:
        extra: The package extra that provides it (``"timm"``, ``"hf"``).
        module: The module that failed to import.

    Returns:
        A message naming the ``pip install`` command.
    """
    return (
        f"this model source needs the optional package {module!r}, which is not installed; "
        f"install it with: pip install 'freeze-workbench[{extra}]'"
    )


def require_extra(module: str, extra: str) -> ModuleType:
    """Import an optional dependency.

    Args:
        module: Module name, e.g. ``"timm"``.
        extra: The extra that installs it, e.g. ``"timm"``.

    Returns:
        The imported module.

    Raises:
        ModelSourceError: The module is not installed (message names the pip command).
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ModelSourceError(missing_extra_message(extra, module)) from exc


def did_you_mean(name: str, names: Sequence[str]) -> str:
    """``"did you mean a, b?"`` for close matches of ``name``, or an empty string."""
    close = difflib.get_close_matches(name, list(names), n=3, cutoff=0.6)
    return f"did you mean {', '.join(close)}?" if close else ""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type name when empty), at most 300 chars."""
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]
