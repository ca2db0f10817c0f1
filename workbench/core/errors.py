"""The base of every error that describes bad input rather than a bug.

The CLI prints such errors as one line and exits non-zero; the GUI shows them in a dialog.
Every module-specific error (plans, model sources, data, A+B, partial freezing, export)
subclasses :class:`WorkbenchError`, and its message says what went wrong and what to do.
"""

from __future__ import annotations

__all__ = ["WorkbenchError"]


class WorkbenchError(Exception):
    """An error the user can fix: the message says what went wrong and what to do."""
