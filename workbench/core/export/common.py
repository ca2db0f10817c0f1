"""What the parts of the script exporter share: its error, literals and paths."""

from __future__ import annotations

from typing import Any

from workbench.core.errors import WorkbenchError
from workbench.core.models.script_code import script_path  # the model sources name files the same way

__all__ = ["ExportError", "literal", "script_path"]


class ExportError(WorkbenchError):
    """The plan or the model cannot be exported as a plain script; the message says what to do."""


def literal(value: Any, indent: int = 0) -> str:
    """A Python literal, short containers on one line, long ones one item per line.

    Args:
        value: plain data (lists, dicts, tuples, numbers, strings, None).
        indent: columns of indentation of the line the literal starts on.

    Returns:
        Source text that evaluates to ``value``.
    """
    flat = repr(value)
    if len(flat) + indent <= 96 or not isinstance(value, (list, dict)) or not value:
        return flat
    pad = " " * (indent + 4)
    if isinstance(value, list):
        items = [pad + literal(v, indent + 4) + "," for v in value]
        return "[\n" + "\n".join(items) + "\n" + " " * indent + "]"
    items = [f"{pad}{k!r}: {literal(v, indent + 4)}," for k, v in value.items()]
    return "{\n" + "\n".join(items) + "\n" + " " * indent + "}"
