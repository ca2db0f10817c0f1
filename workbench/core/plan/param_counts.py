"""Frozen parameter elements per module, with parameter-level settings and sub-tensor freezing.

One count for :meth:`FreezePlan.summary` and the app's trainable column: a parameter a
``param:`` rule freezes counts as frozen in its module, and a module with ``partial`` counts
only the spec's trainable share of its tensor as trainable.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from workbench.core.plan.keys import Effective
from workbench.core.plan.partial_spec import PartialError, trainable_fraction
from workbench.core.plan.tree import ModelTree

__all__ = ["frozen_elements"]


def frozen_elements(
    tree: ModelTree, effective: Mapping[str, Effective], param_effective: Mapping[str, Effective]
) -> dict[str, int]:
    """Frozen elements of each module's own parameters.

    Args:
        tree: the model's tree (its ``param_shapes``).
        effective: ``plan.resolve(tree)``.
        param_effective: ``plan.resolve_params(tree)``.

    Returns:
        ``{module path: frozen elements}`` for the modules with frozen elements.
    """
    out: dict[str, int] = {}
    for name, shape in tree.param_shapes.items():
        owner, _, short = name.rpartition(".")
        numel = math.prod(shape)
        pe = param_effective.get(name)
        if pe is None:
            continue
        if pe.frozen:
            frozen = numel
        else:
            spec = effective[owner].partial
            if spec is None or spec.param != short:
                continue
            try:
                frozen = round(numel * (1.0 - trainable_fraction(spec, shape)))
            except PartialError:
                continue  # does not fit the tensor: reported as a plan problem
        if frozen:
            out[owner] = min(tree.nodes[owner].own_params, out.get(owner, 0) + frozen)
    return out
