"""What can be wrong with a plan: :class:`PlanProblem` (one problem and where), :class:`PlanError`, :class:`PlanWarning`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from workbench.core.errors import WorkbenchError

__all__ = ["PlanError", "PlanProblem", "PlanWarning"]


@dataclass(frozen=True)
class PlanProblem:
    """One thing wrong with a plan.

    Attributes:
        message: what is wrong and what to do.
        rule_index: index of the rule in ``rules`` (None for top-level problems).
        field: the offending key (``"lr_scale"``, ``"select"``...), if any.
        stage_index: index of the stage when the rule is inside ``stages``.
    """

    message: str
    rule_index: int | None = None
    field: str | None = None
    stage_index: int | None = None

    def where(self) -> str:
        """Human-readable location: ``stage 0, rule 2, field 'lr_scale'``."""
        parts = []
        if self.stage_index is not None:
            parts.append(f"stage {self.stage_index}")
        if self.rule_index is not None:
            parts.append(f"rule {self.rule_index}")
        if self.field is not None:
            parts.append(f"field '{self.field}'")
        return ", ".join(parts)

    def __str__(self) -> str:
        where = self.where()
        return f"{where}: {self.message}" if where else self.message


class PlanError(WorkbenchError, ValueError):
    """A plan is invalid. ``problems`` lists every problem found, each with its location.

    The message names the rule index, the field and what to do, one problem per line.
    """

    def __init__(self, problems: PlanProblem | str | Iterable[PlanProblem], source: str | None = None):
        if isinstance(problems, str):
            problems = [PlanProblem(problems)]
        elif isinstance(problems, PlanProblem):
            problems = [problems]
        self.problems: list[PlanProblem] = list(problems)
        self.source = source
        head = f"{source}: " if source else ""
        if len(self.problems) == 1:
            msg = head + str(self.problems[0])
        else:
            msg = head + f"{len(self.problems)} problems in plan:\n" + "\n".join(
                f"  - {p}" for p in self.problems
            )
        super().__init__(msg)

    @property
    def rule_index(self) -> int | None:
        """Rule index of the first problem."""
        return self.problems[0].rule_index if self.problems else None

    @property
    def field(self) -> str | None:
        """Field of the first problem."""
        return self.problems[0].field if self.problems else None

    @property
    def rule_indices(self) -> list[int]:
        """Indices of all rules that have a problem."""
        return sorted({p.rule_index for p in self.problems if p.rule_index is not None})


class PlanWarning(UserWarning):
    """A plan is usable but something is off (for example a different model fingerprint)."""
