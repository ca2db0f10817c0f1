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

``import workbench`` never imports Qt.
"""

from __future__ import annotations

from importlib import metadata as _metadata

from workbench.core.apply import AppliedPlan, Counts, PlanDiff, apply_plan
from workbench.core.plan import Effective, FreezePlan, PlanError, PlanWarning, Rule, Stage
from workbench.core.tree import ModelTree, ModuleNode, fingerprint
from workbench.core.verify import VerifyReport

try:
    __version__ = _metadata.version("freeze-workbench")
except _metadata.PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.1.0"

__all__ = [
    "AppliedPlan",
    "Counts",
    "Effective",
    "FreezePlan",
    "ModelTree",
    "ModuleNode",
    "PlanDiff",
    "PlanError",
    "PlanWarning",
    "Rule",
    "Stage",
    "VerifyReport",
    "__version__",
    "apply_plan",
    "fingerprint",
]
