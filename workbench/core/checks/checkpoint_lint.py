"""Lint for activation checkpointing: checkpointing in a frozen prefix buys nothing.

Backward stops at the first module (in execution order) that has trainable parameters; the
modules before it (the frozen prefix) keep no activations for backward anyway, so
``checkpoint: true`` there only costs a second forward pass.
"""

from __future__ import annotations

from collections.abc import Mapping

from workbench.core.checks.findings import Finding
from workbench.core.plan.checkpoint_fit import outermost_fitting
from workbench.core.plan.keys import Effective
from workbench.core.plan.tree import ModelTree

__all__ = ["checkpoint_findings", "frozen_prefix_end"]


def _trains(e: Effective) -> bool:
    return not e.frozen or e.reparam is not None or e.partial is not None


def frozen_prefix_end(eff: Mapping[str, Effective], tree: ModelTree) -> int:
    """The module order (``ModuleNode.order``) of the first module whose own parameters train.

    Args:
        eff: effective settings per path (:meth:`FreezePlan.resolve`).
        tree: the model's tree.

    Returns:
        That order; one past the last module when nothing trains.
    """
    owning = [n for n in tree.nodes.values() if n.own_params and _trains(eff[n.path])]
    return min((n.order for n in owning), default=len(tree.nodes))


def checkpoint_findings(eff: Mapping[str, Effective], tree: ModelTree) -> list[Finding]:
    """Warnings for checkpointed modules that lie wholly in the frozen prefix.

    Only the modules that are wrapped count (:func:`outermost_fitting`).

    Args:
        eff: effective settings per path.
        tree: the model's tree.

    Returns:
        One ``checkpoint-frozen-prefix`` warning per such module.
    """
    end = frozen_prefix_end(eff, tree)
    out: list[Finding] = []
    for path in outermost_fitting([p for p, e in eff.items() if e.checkpoint], tree):
        node = tree.nodes[path]
        last = max(n.order for n in node.walk())
        if last < end:
            out.append(
                Finding(
                    "checkpoint-frozen-prefix",
                    "warning",
                    path,
                    "checkpointing in the frozen prefix: no backward runs through this module",
                    "it keeps no activations for backward anyway, so checkpointing only adds a second forward",
                    "remove checkpoint: true here, or checkpoint blocks after the first trainable module",
                )
            )
    return out
