"""Whether ``checkpoint: true`` fits the modules a rule selects.

Checkpointing recomputes a module's forward in backward; a module needs parameters in its
subtree (otherwise there is nothing to save memory for) and a forward of its own that returns
activations (``ModuleList``/``ModuleDict`` containers have none). A glob or ``type:``
selector may also match modules that do not fit (``"blocks.*"`` reaches ``blocks.0.act``);
those are skipped (:func:`outermost_fitting`) as long as the selector reaches one that fits.
Inside a checkpointed module, a checkpointed descendant would only run forward a third time,
so it is skipped too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from workbench.core.plan.problems import PlanProblem
from workbench.core.plan.rule import Rule, Stage
from workbench.core.plan.selectors import is_pattern, matcher
from workbench.core.plan.tree import ModelTree

__all__ = ["CONTAINER_TYPES", "StagedRules", "checkpoint_problems", "outermost_fitting", "unfit_reason"]


class StagedRules(Protocol):
    """What the checkpointing check reads of a plan (a :class:`~workbench.core.plan.rules.FreezePlan`)."""

    @property
    def rules(self) -> Sequence[Rule]:
        """The base rules, in order."""

    @property
    def stages(self) -> Sequence[Stage]:
        """The stages, in the order they are reached."""

#: Module classes without a forward of their own (calling them raises).
CONTAINER_TYPES: frozenset[str] = frozenset({"ModuleList", "ModuleDict", "ParameterList", "ParameterDict"})


def unfit_reason(tree: ModelTree, path: str) -> str | None:
    """Why a module cannot be checkpointed, or None when it can.

    Args:
        tree: the model's tree.
        path: dotted module path.

    Returns:
        One sentence naming the module, or None.
    """
    node = tree.nodes[path]
    name = path or "(root)"
    if node.type_name in CONTAINER_TYPES:
        return (
            f"module {name!r} is a {node.type_name} with no forward of its own, so there are no "
            f"outputs to checkpoint; select its items instead (e.g. \"{path}.0\")"
        )
    if node.total_params == 0:
        return (
            f"module {name!r} ({node.type_name}) has no parameters, so checkpointing it saves no "
            "memory; select the block that contains it"
        )
    return None


def outermost_fitting(paths: list[str], tree: ModelTree) -> list[str]:
    """Of the modules the plan checkpoints, those to wrap: fitting, and not inside another one.

    Args:
        paths: paths whose effective ``checkpoint`` is true.
        tree: the model's tree.

    Returns:
        The paths to wrap, in tree order.
    """
    fitting = sorted((p for p in paths if unfit_reason(tree, p) is None), key=lambda p: tree.nodes[p].order)
    out: list[str] = []
    for p in fitting:
        if not any(q == "" or p.startswith(q + ".") for q in out):
            out.append(p)
    return out


def checkpoint_problems(plan: StagedRules, tree: ModelTree) -> list[PlanProblem]:
    """Rules (stages included) that ask for checkpointing of a module that cannot use it.

    A plain path must name a module that fits; a glob or ``type:`` selector must reach at
    least one.

    Args:
        plan: the plan.
        tree: the model's tree.

    Returns:
        One problem per offending rule, naming the first module that does not fit.
    """
    m = matcher(tree)
    problems: list[PlanProblem] = []

    def check(rules: Sequence[Rule], stage: int | None) -> None:
        for i, r in enumerate(rules):
            if not r.checkpoint:
                continue
            paths = m.direct(r.select)
            reasons = [unfit_reason(tree, p) for p in paths]
            if not paths or (is_pattern(r.select) and not all(reasons)):
                continue  # matches nothing (reported elsewhere), or a pattern that reaches a fitting module
            reason = next((x for x in reasons if x), None)
            if reason is not None:
                problems.append(PlanProblem(reason, i, "checkpoint", stage))

    check(plan.rules, None)
    for si, st in enumerate(plan.stages):
        check(st.rules, si)
    return problems
