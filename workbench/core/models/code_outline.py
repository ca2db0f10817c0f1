"""What importing a Python file runs: its top-level statements, read without running it.

A ``py:`` model runs in two steps: the file is imported (every top-level statement runs:
imports, assignments, calls, decorators, default values and class bodies), then the factory
is called. The app's "Run model code?" dialog shows both (:func:`top_level_statements` and
:func:`workbench.core.models.py_models.code_preview`), so no code runs that was not shown.
"""

from __future__ import annotations

import ast
from pathlib import Path

__all__ = ["MAX_OUTLINE_STATEMENTS", "top_level_statements"]

#: Most top-level statements listed (the rest are counted).
MAX_OUTLINE_STATEMENTS = 60
_MAX_LINE_CHARS = 120


def top_level_statements(path: str | Path, *, max_bytes: int = 2_000_000, limit: int = MAX_OUTLINE_STATEMENTS) -> str:
    """The top-level statements of a Python file, one line each, with their line numbers.

    A statement over several lines shows its first line and ``…``; a ``def`` or ``class``
    shows its header (decorators included: they run at import, as a class body does).

    Args:
        path: the ``.py`` file (parsed, never imported).
        max_bytes: larger files are not read (the text says so).
        limit: most statements listed; the rest are counted.

    Returns:
        The listing, or one line saying why the file cannot be shown.
    """
    p = Path(path)
    try:
        if not p.is_file():
            return "(not a file: nothing can be shown)"
        if p.stat().st_size > max_bytes:
            return f"(file larger than {max_bytes // 1_000_000} MB: not shown; importing it runs all of it)"
        text = p.read_text(encoding="utf-8")
        tree = ast.parse(text, filename=str(p))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError, RecursionError, MemoryError) as e:
        return f"(cannot read the file: {type(e).__name__}; importing it runs all of it)"
    lines = text.splitlines()
    out = []
    for node in tree.body[:limit]:
        decorators = getattr(node, "decorator_list", [])
        start = min([node.lineno, *(d.lineno for d in decorators)])
        end = getattr(node, "end_lineno", None) or start
        first = lines[start - 1].rstrip() if start - 1 < len(lines) else ""
        if len(first) > _MAX_LINE_CHARS:
            first = first[:_MAX_LINE_CHARS] + "…"
        out.append(f"{start:>5}  {first}" + (" …" if end > start else ""))
    if len(tree.body) > limit:
        out.append(f"       … and {len(tree.body) - limit} more top-level statements")
    return "\n".join(out) if out else "(no statements)"
