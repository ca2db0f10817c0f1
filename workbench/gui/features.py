"""Which optional core features this installation has (A+B, partial freezing, export, doctor).

The window enables the A+B column, the partial-freezing dialog and the export menu only
when the core module that implements them is present; the checks do not import them.
"""

from __future__ import annotations

import importlib.util

__all__ = ["has_doctor", "has_export", "has_partial", "has_reparam"]


def _present(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def has_reparam() -> bool:
    """Whether A+B reparameterization (``workbench.core.freezing.reparam``) is available."""
    return _present("workbench.core.freezing.reparam")


def has_partial() -> bool:
    """Whether sub-tensor freezing (``workbench.core.freezing.partial``) is available."""
    return _present("workbench.core.freezing.partial")


def has_export() -> bool:
    """Whether plan → script export (``workbench.core.export``) is available."""
    return _present("workbench.core.export")


def has_doctor() -> bool:
    """Whether the freeze doctor (``workbench.core.checks.doctor``) is available."""
    return _present("workbench.core.checks.doctor")
