"""Capture what a script did to a model as a compact freeze plan (the way back into the GUI).

:func:`capture_plan` parses what :func:`workbench.core.freezing.state_reader.observed_plan` reads
from a live model; the tree helpers it uses (also used by :mod:`workbench.core.export` and
:mod:`workbench.core.checks.doctor`, from :mod:`workbench.core.plan.covering`) are re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from workbench.core.freezing.state_reader import (
    a_plus_b_names,
    bn_eval_locked,
    fixed_parameter_ids,
    observed_plan,
    partial_spec,
)
from workbench.core.plan.covering import cover_paths, minimal_assignments
from workbench.core.plan.rules import FreezePlan

__all__ = [
    "a_plus_b_names",
    "bn_eval_locked",
    "capture_plan",
    "cover_paths",
    "fixed_parameter_ids",
    "minimal_assignments",
    "partial_spec",
]


def capture_plan(
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    *,
    base_lr: float | None = None,
    model_info: Mapping[str, Any] | None = None,
) -> FreezePlan:
    """Capture a model's freezing state as a compact plan (see :func:`observed_plan`).

    Args:
        model: the model as a script left it (in train mode, as the training loop has it).
        optimizer: optional; its param groups give ``lr_scale`` per module.
        base_lr: the base learning rate (default: the largest group learning rate).
        model_info: extra keys for the plan's ``model`` block (``name``, ``weights``...).

    Returns:
        A plan whose :meth:`~FreezePlan.resolve` gives every module the state observed.

    Warns:
        PlanWarning: a state no plan can express; the plan keeps the majority.
    """
    return FreezePlan.from_dict(observed_plan(model, optimizer, base_lr=base_lr, model_info=model_info))
