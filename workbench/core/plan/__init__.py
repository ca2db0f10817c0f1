"""Freeze plans: the plan schema (rules, stages), its keys and selectors. Plain data, no torch state.

``from workbench.core.plan import FreezePlan`` is the stable import; the modules inside hold
the parts.
"""

from workbench.core.plan.rules import (
    FORMAT,
    VERSION,
    Effective,
    FreezePlan,
    PlanError,
    PlanProblem,
    PlanWarning,
    Rule,
    Stage,
    select_paths,
)

__all__ = [
    "FORMAT",
    "VERSION",
    "Effective",
    "FreezePlan",
    "PlanError",
    "PlanProblem",
    "PlanWarning",
    "Rule",
    "Stage",
    "select_paths",
]
