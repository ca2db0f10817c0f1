"""Freeze plans: the plan schema (rules, stages), its keys and selectors. Plain data, no torch state.

``from workbench.core.plan import FreezePlan`` is the stable import; the modules inside hold
the parts.
"""

from workbench.core.plan.keys import RULE_KEYS, Effective, PlanKey, schema_markdown
from workbench.core.plan.partial_spec import PartialSpec
from workbench.core.plan.problems import PlanError, PlanProblem, PlanWarning
from workbench.core.plan.reparam_spec import ReparamSpec
from workbench.core.plan.rules import FORMAT, VERSION, FreezePlan, Rule, Stage
from workbench.core.plan.selectors import select_paths
from workbench.core.plan.specs import SPECS

__all__ = [
    "FORMAT",
    "VERSION",
    "RULE_KEYS",
    "SPECS",
    "Effective",
    "FreezePlan",
    "PartialSpec",
    "PlanError",
    "PlanKey",
    "PlanProblem",
    "PlanWarning",
    "ReparamSpec",
    "Rule",
    "Stage",
    "schema_markdown",
    "select_paths",
]
