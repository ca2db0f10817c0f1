"""The base of every error that describes bad input rather than a bug.

The CLI prints such errors as one line and exits non-zero; the GUI shows them in a dialog.
Every module-specific error (plans, model sources, data, A+B, partial freezing, export)
subclasses :class:`WorkbenchError`, and its message says what went wrong and what to do.
"""

from __future__ import annotations

__all__ = ["WorkbenchError", "first_line"]


class WorkbenchError(Exception):
    """An error the user can fix: the message says what went wrong and what to do."""


def first_line(exc: BaseException, limit: int = 400) -> str:
    """The first line of an exception's message, for one-line reports.

    Args:
        exc: the exception.
        limit: at most this many characters.

    Returns:
        The first line (the exception's class name when the message is empty).
    """
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:limit]
