"""The module tree of a model: it lives beside the plan, in :mod:`workbench.core.plan.tree` (plain
data) and :mod:`workbench.core.plan.tree_from_model` (reading a model into it).

This module keeps the old import path working (the plan resolves against the tree, so the tree
sits below the model sources in the layer order: ``plan < models``).
"""

from __future__ import annotations

from workbench.core.plan.tree import ModelTree, ModuleNode, visible_path
from workbench.core.plan.tree_from_model import (
    bn_stats_fixed,
    canonical_parameters,
    fingerprint,
    is_batchnorm,
    tensor_bytes,
)

__all__ = [
    "ModelTree",
    "ModuleNode",
    "bn_stats_fixed",
    "canonical_parameters",
    "fingerprint",
    "is_batchnorm",
    "tensor_bytes",
    "visible_path",
]
