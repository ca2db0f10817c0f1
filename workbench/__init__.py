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

``import workbench`` never imports Qt, and imports torch only when a name below is first
used (so ``workbench --help`` starts instantly).
"""

from __future__ import annotations

import importlib
from importlib import metadata as _metadata
from typing import TYPE_CHECKING, Any

try:
    __version__ = _metadata.version("freeze-workbench")
except _metadata.PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.1.0"

#: Public name -> module that defines it (imported on first access, PEP 562).
_EXPORTS: dict[str, str] = {
    "AppliedPlan": "workbench.core.apply",
    "Counts": "workbench.core.apply",
    "PlanDiff": "workbench.core.apply",
    "apply_plan": "workbench.core.apply",
    "Effective": "workbench.core.plan",
    "FreezePlan": "workbench.core.plan",
    "PlanError": "workbench.core.plan",
    "PlanWarning": "workbench.core.plan",
    "Rule": "workbench.core.plan",
    "Stage": "workbench.core.plan",
    "ModelTree": "workbench.core.tree",
    "ModuleNode": "workbench.core.tree",
    "fingerprint": "workbench.core.tree",
    "VerifyReport": "workbench.core.verify",
    "WorkbenchError": "workbench.core.errors",
}

__all__ = sorted([*_EXPORTS, "__version__"])

if TYPE_CHECKING:  # for type checkers and IDEs
    from workbench.core.apply import AppliedPlan, Counts, PlanDiff, apply_plan
    from workbench.core.errors import WorkbenchError
    from workbench.core.plan import Effective, FreezePlan, PlanError, PlanWarning, Rule, Stage
    from workbench.core.tree import ModelTree, ModuleNode, fingerprint
    from workbench.core.verify import VerifyReport


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'workbench' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
