"""Layer-wise learning-rate decay: the plan-level ``lr_decay`` turned into ``lr_scale`` values.

A parameter of layer ``i`` of ``L`` (layers from
:func:`workbench.core.plan.layers.parameter_layers`, kept on the tree) gets
``lr_scale = lr_decay ** (L - 1 - i)``: the head trains at the base rate, each layer below at
``lr_decay`` times the one above, as timm's ``param_groups_layer_decay`` does.
"""

from __future__ import annotations

import math
from typing import Any

from workbench.core.plan.tree import ModelTree

__all__ = ["module_scales", "parameter_scales", "parse_lr_decay"]


def parse_lr_decay(v: Any) -> float:
    """Check a plan's ``lr_decay`` value.

    Args:
        v: the JSON value.

    Returns:
        The decay as a float.

    Raises:
        ValueError: not a number in (0, 1] (the message says what to use).
    """
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"must be a number in (0, 1] such as 0.75, got {type(v).__name__}")
    if not math.isfinite(v) or v <= 0 or v > 1:
        raise ValueError(f"must be in (0, 1] (1 = no decay; 0.75 is usual for ViT fine-tuning), got {v}")
    return float(v)


def parameter_scales(tree: ModelTree, decay: float) -> dict[str, float]:
    """``lr_scale`` of every parameter under layer-wise decay.

    Args:
        tree: the model's tree (its ``layer_ids``).
        decay: the plan's ``lr_decay``.

    Returns:
        ``{canonical parameter name: decay ** (L - 1 - layer)}``.
    """
    ids = tree.layer_ids
    if not ids:
        return {}
    last = max(ids.values())
    return {name: decay ** (last - ids.get(name, last)) for name in tree.param_shapes}


def module_scales(tree: ModelTree, decay: float) -> dict[str, float]:
    """``lr_scale`` shown for each module under layer-wise decay: that of the first parameter
    in its subtree (the modules of one block share it); a module without parameters below
    shows its parent's.

    Args:
        tree: the model's tree.
        decay: the plan's ``lr_decay``.

    Returns:
        ``{module path: scale}`` for every module (none when the model has no layers).
    """
    scales = parameter_scales(tree, decay)
    out: dict[str, float] = {}
    for name, scale in scales.items():
        path = name.rpartition(".")[0]
        while True:
            if path in out:
                break
            out[path] = scale
            if not path:
                break
            path = path.rpartition(".")[0]
            while path and path not in tree.nodes:
                path = path.rpartition(".")[0]
    if out:
        for node in tree.root.walk():
            if node.path not in out and node.parent is not None:
                out[node.path] = out[node.parent.path]
    return out
