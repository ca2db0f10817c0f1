"""A finding: one freezing pitfall found in a plan, a model or a running training.

Shared by the plan linter (:mod:`workbench.core.checks.lint`, the GUI's cost panel) and the freeze
doctor (:mod:`workbench.core.checks.doctor`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Finding", "SEVERITIES"]

#: Severities, most severe first.
SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Finding:
    """One pitfall.

    Attributes:
        code: stable identifier (``"bn-frozen-train-mode"``), for filtering and tests.
        severity: ``"error"``, ``"warning"`` or ``"info"``.
        path: dotted module (or parameter) path it concerns; ``""`` for the whole model.
        message: what is wrong.
        why: what it costs (time, memory, silently wrong training).
        fix: what to do.
    """

    code: str
    severity: str
    path: str
    message: str
    why: str = ""
    fix: str = ""

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")

    def one_line(self) -> str:
        """``warning layer1.bn1: message — fix``."""
        where = self.path or "(model)"
        tail = f" — {self.fix}" if self.fix else ""
        return f"{self.severity} {where}: {self.message}{tail}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)
