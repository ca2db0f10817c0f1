"""Freeze Workbench: decide which parts of a pretrained PyTorch model train.

The script API::

    import workbench as wb
    plan = wb.FreezePlan.load("resnet18.plan.json")
    applied = plan.apply(model)
    opt = torch.optim.AdamW(applied.param_groups(lr=1e-3, weight_decay=0.01))
    ...
    report = applied.verify()
    applied.remove()

    wb.apply_plan(model, "plan.json")   # one-line form

    result = wb.Trainer(wb.TrainConfig(model="py:net.py:build", data="py:net.py:data", loss="bce",
                                       plan="plan.json", steps=100)).run()   # a training run

``import workbench`` never imports Qt, and imports torch only when a name below is first
used (so ``workbench --help`` starts instantly).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from workbench.core.version import __version__

#: Public name -> module that defines it (imported on first access, PEP 562).
_EXPORTS: dict[str, str] = {
    "AppliedPlan": "workbench.core.freezing.apply",
    "Counts": "workbench.core.freezing.apply",
    "PlanDiff": "workbench.core.freezing.apply",
    "apply_plan": "workbench.core.freezing.apply",
    "Effective": "workbench.core.plan.rules",
    "FreezePlan": "workbench.core.plan.rules",
    "PlanError": "workbench.core.plan.rules",
    "PlanWarning": "workbench.core.plan.rules",
    "Rule": "workbench.core.plan.rules",
    "Stage": "workbench.core.plan.rules",
    "ModelTree": "workbench.core.plan.tree",
    "ModuleNode": "workbench.core.plan.tree",
    "fingerprint": "workbench.core.plan.tree_from_model",
    "VerifyReport": "workbench.core.checks.verify",
    "WorkbenchError": "workbench.core.errors",
    "Trainer": "workbench.core.training.engine",
    "RunResult": "workbench.core.training.engine",
    "TrainConfig": "workbench.core.training.config",
    "StepMetrics": "workbench.core.training.metrics",
}

__all__ = sorted([*_EXPORTS, "__version__"])

if TYPE_CHECKING:  # for type checkers and IDEs
    from workbench.core.checks.verify import VerifyReport
    from workbench.core.errors import WorkbenchError
    from workbench.core.freezing.apply import AppliedPlan, Counts, PlanDiff, apply_plan
    from workbench.core.plan.rules import Effective, FreezePlan, PlanError, PlanWarning, Rule, Stage
    from workbench.core.plan.tree import ModelTree, ModuleNode
    from workbench.core.plan.tree_from_model import fingerprint
    from workbench.core.training.config import TrainConfig
    from workbench.core.training.engine import RunResult, Trainer
    from workbench.core.training.metrics import StepMetrics


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'workbench' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
