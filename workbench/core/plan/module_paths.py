"""Module paths as the tree shows them: workbench internals folded into their owner (plain data).

A plan applied to a model adds modules of its own (the ``parametrizations`` containers of
:mod:`torch.nn.utils.parametrize`, low-rank A+B's ``wb_lowrank``); their paths fold into the
module that owns them, so the tree of a model with a plan applied has the paths of the plain model.
"""

from __future__ import annotations

__all__ = ["INTERNAL_SEGMENTS", "split_internal", "visible_path"]

#: Child names of workbench internals folded into their owner (parametrize's containers,
#: low-rank A+B's U and V).
INTERNAL_SEGMENTS = ("parametrizations", "wb_lowrank")


def split_internal(path: str) -> tuple[str, str]:
    """Split a raw dotted path at the first workbench-internal segment.

    Args:
        path: a dotted path from ``named_modules()`` or ``named_parameters()``.

    Returns:
        ``(visible_owner_path, rest)`` where ``rest`` is empty for ordinary paths.
    """
    parts = path.split(".") if path else []
    for i, part in enumerate(parts):
        if part in INTERNAL_SEGMENTS:
            return ".".join(parts[:i]), ".".join(parts[i:])
    return path, ""


def visible_path(path: str) -> str:
    """Map a raw module path to the path shown in the tree (internals folded in).

    Args:
        path: a dotted path from ``named_modules()``.

    Returns:
        The path of the visible module that owns ``path``.
    """
    return split_internal(path)[0]
