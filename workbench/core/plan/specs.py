"""The registry of extension specs: the plan keys whose value is a typed spec, in install order.

Adding a technique: a spec module next to this one (parse, check, describe, conflicts), a row
in :data:`SPECS`, a row in :data:`workbench.core.plan.keys.RULE_KEYS`, and its installer in
:data:`workbench.core.freezing.plan_handle.INSTALLERS`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from workbench.core.plan.keys import Effective
from workbench.core.plan.partial_spec import PartialSpec
from workbench.core.plan.problems import PlanProblem
from workbench.core.plan.reparam_spec import ReparamSpec
from workbench.core.plan.rule import Rule
from workbench.core.plan.spec_base import ExtensionSpec
from workbench.core.plan.tree import ModelTree

__all__ = ["SPECS", "ResolvedPlan", "check_extensions", "rule_index_for", "spec_class"]


class ResolvedPlan(Protocol):
    """What the extension checks read of a plan (a :class:`~workbench.core.plan.rules.FreezePlan`):
    its rules and its resolution on a tree."""

    @property
    def rules(self) -> Sequence[Rule]:
        """The base rules, in order."""

    def resolve(self, model_or_tree: ModelTree) -> Mapping[str, Effective]:
        """Settings in force per module."""

#: Extension spec classes, in the order they are installed on a module.
SPECS: tuple[type[ExtensionSpec], ...] = (PartialSpec, ReparamSpec)


def spec_class(key: str) -> type[ExtensionSpec]:
    """The spec class of an extension key.

    Args:
        key: ``"partial"`` or ``"reparam"``.

    Returns:
        The class.

    Raises:
        KeyError: not an extension key.
    """
    for cls in SPECS:
        if cls.key == key:
            return cls
    raise KeyError(key)


def rule_index_for(plan: ResolvedPlan, key: str, spec: Any) -> int | None:
    """The index of the rule whose ``key`` holds ``spec`` (by identity).

    Args:
        plan: the plan.
        key: an extension key.
        spec: a spec that :meth:`FreezePlan.resolve` returned for some module.

    Returns:
        The rule index, or None when no base rule holds it (a stage rule).
    """
    for i, r in enumerate(plan.rules):
        if getattr(r, key) is spec:
            return i
    return None


def check_extensions(plan: ResolvedPlan, tree: ModelTree) -> list[PlanProblem]:
    """Problems with extension settings that only the model can reveal.

    For example sub-tensor freezing on a module type that does not support it, or two
    extensions that cannot be combined in force on one module. Each problem names the rule
    that set the spec.

    Args:
        plan: the plan.
        tree: the model's tree.

    Returns:
        A list of problems (empty when all is well).
    """
    problems: list[PlanProblem] = []
    eff = plan.resolve(tree)
    order = [cls.key for cls in SPECS]
    for path, e in eff.items():  # conflicts, reported once per pair by the earlier key
        for cls in SPECS:
            spec = getattr(e, cls.key)
            if not spec:
                continue
            for other in cls.conflicts_with:
                if getattr(e, other) and order.index(other) > order.index(cls.key):
                    msg = spec.conflict_message(path, other)
                    idx = rule_index_for(plan, cls.key, spec)
                    problems.append(PlanProblem(f"module {path or '(root)'!r}: {msg}", idx, cls.key))
    for cls in SPECS:
        for path, e in eff.items():
            spec = getattr(e, cls.key)
            if not spec:
                continue
            msg = spec.check(tree.nodes[path])
            if msg:
                idx = rule_index_for(plan, cls.key, spec)
                problems.append(PlanProblem(f"module {path or '(root)'!r}: {msg}", idx, cls.key))
    return problems
