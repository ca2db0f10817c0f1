"""Whether a plan is ready to train a model: it fits the model and leaves something trainable.

One Qt-free predicate, decided in one place for every caller: the GUI's plan state (the
cost panel and the Start button), :meth:`Trainer.request_plan
<workbench.core.training.engine.Trainer.request_plan>` (refuses in the caller) and the
training thread's plan boundary (refuses with an event)::

    readiness = check_plan(plan, tree)
    if not readiness.ok:
        print("\\n".join(readiness.messages()))
    readiness.raise_if_not_ok()        # PlanError naming each problem
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from workbench.core.plan.keys import Effective
from workbench.core.plan.problems import PlanError, PlanProblem
from workbench.core.plan.selectors import is_param_selector
from workbench.core.plan.tree import ModelTree

if TYPE_CHECKING:  # pragma: no cover - typing only (the freezing layer imports this module)
    from workbench.core.plan.rules import FreezePlan

__all__ = ["NOTHING_TRAINABLE", "PlanReadiness", "check_plan", "leaves_trainable", "plan_leaves_trainable"]

#: The message for a plan under which no parameter trains.
NOTHING_TRAINABLE = "the plan leaves nothing trainable; keep at least one module unfrozen"


@dataclass(frozen=True)
class PlanReadiness:
    """What :func:`check_plan` found.

    Attributes:
        problems: rules that do not fit the model (selectors that match no module, A+B or
            sub-tensor specs the model refuses), each naming its rule and what to do.
        trainable: the plan leaves at least one parameter trainable; None when this was
            not judged (a plan with stages: what trains depends on the step).
    """

    problems: tuple[PlanProblem, ...] = ()
    trainable: bool | None = True

    @property
    def fits(self) -> bool:
        """Every rule fits the model."""
        return not self.problems

    @property
    def ok(self) -> bool:
        """The plan fits the model and does not leave everything frozen."""
        return self.fits and self.trainable is not False

    def messages(self) -> list[str]:
        """One line per problem, the nothing-trainable one first.

        Returns:
            The lines (empty when :attr:`ok`).
        """
        out = [NOTHING_TRAINABLE] if self.trainable is False else []
        return out + [str(p) for p in self.problems]

    def raise_if_not_ok(self) -> None:
        """Raise when the plan is not ready.

        Raises:
            PlanError: listing every problem (the nothing-trainable one first).
        """
        if self.ok:
            return
        first = [PlanProblem(NOTHING_TRAINABLE)] if self.trainable is False else []
        raise PlanError(first + list(self.problems))


def leaves_trainable(
    effective: Mapping[str, Effective],
    tree: ModelTree,
    param_effective: Mapping[str, Effective] | None = None,
) -> bool:
    """Whether resolved settings leave some module with parameters unfrozen.

    A module with sub-tensor freezing counts as trainable (its spec keeps part of the
    tensor training); A+B on an unfrozen module trains B.

    Args:
        effective: ``plan.resolve(tree)``.
        tree: the model's tree.
        param_effective: ``plan.resolve_params(tree)``, which ``param:`` rules make decide.

    Returns:
        True when at least one parameter element trains.
    """
    if param_effective is not None and tree.param_shapes:
        return any(not e.frozen for e in param_effective.values())
    return any(node.own_params and not effective[path].frozen for path, node in tree.nodes.items())


def plan_leaves_trainable(plan: FreezePlan, tree: ModelTree, effective: Mapping[str, Effective]) -> bool:
    """:func:`leaves_trainable` for a plan's base rules, ``param:`` rules included.

    Args:
        plan: the plan.
        tree: the model's tree.
        effective: ``plan.resolve(tree)`` (or the caller's resolution, which decides for
            plans without ``param:`` rules).

    Returns:
        True when at least one parameter element trains.
    """
    by_param = plan.resolve_params(tree) if any(is_param_selector(r.select) for r in plan.rules) else None
    return leaves_trainable(effective, tree, by_param)


def check_plan(
    plan: FreezePlan,
    tree: ModelTree,
    *,
    effective: Mapping[str, Effective] | None = None,
) -> PlanReadiness:
    """Check that ``plan`` fits the model of ``tree`` and leaves something trainable.

    Rules of every stage are checked against the model; what trains is judged for a plan
    without stages only (for a staged plan it depends on the step: check ``plan.at(step,
    epoch)`` for a given point of a run).

    Args:
        plan: the plan.
        tree: the model's tree.
        effective: ``plan.resolve(tree)`` when the caller has it already.

    Returns:
        The readiness (``ok`` when nothing is wrong).
    """
    eff = effective if effective is not None else plan.resolve(tree)
    problems = plan.fit_problems(tree)
    trainable = None if plan.stages else plan_leaves_trainable(plan, tree, eff)
    return PlanReadiness(tuple(problems), trainable)
