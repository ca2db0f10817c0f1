"""Apply a :class:`~workbench.core.plan.rules.FreezePlan` to a live model: :func:`apply_plan`.

The handle it returns, :class:`~workbench.core.freezing.plan_handle.AppliedPlan`, and the counting
helpers live in :mod:`workbench.core.freezing.plan_handle`; they are re-exported here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import nn

from workbench.core.freezing.plan_handle import (
    INSTALLERS,
    AppliedPlan,
    Counts,
    Installed,
    Installer,
    PlanDiff,
    check_extensions,
    count_parameters,
    install_plan,
    is_bn_eval_locked,
    optimizer_state_factor,
)
from workbench.core.plan.rules import FreezePlan

__all__ = [
    "INSTALLERS",
    "AppliedPlan",
    "Counts",
    "Installed",
    "Installer",
    "PlanDiff",
    "apply_plan",
    "check_extensions",
    "count_parameters",
    "is_bn_eval_locked",
    "optimizer_state_factor",
]


def apply_plan(
    model: nn.Module,
    plan: FreezePlan | str | os.PathLike[str] | Mapping[str, Any],
    *,
    strict: bool = False,
    base_dir: str | os.PathLike[str] | None = None,
) -> AppliedPlan:
    """Apply a plan to a model in place.

    Args:
        model: the model.
        plan: a :class:`FreezePlan`, a path to a plan file, or the plan's dict.
        strict: a fingerprint mismatch is an error instead of a warning.
        base_dir: folder for relative file references inside the plan (A+B tensors from a
            file). Defaults to the plan file's folder, or the working directory.

    Returns:
        The handle.

    Raises:
        PlanError: the plan is invalid or names modules the model lacks; the model is left
            untouched.
        TypeError: ``plan`` is none of the accepted types.
    """
    if isinstance(plan, (str, os.PathLike)):
        base_dir = base_dir or Path(plan).resolve().parent
        plan = FreezePlan.load(plan)
    elif isinstance(plan, Mapping):
        plan = FreezePlan.from_dict(dict(plan))
    elif not isinstance(plan, FreezePlan):
        raise TypeError(f"plan must be a FreezePlan, a path or a dict, got {type(plan).__name__}")
    return install_plan(model, plan, strict=strict, base_dir=base_dir)
