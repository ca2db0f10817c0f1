"""A+B reparameterization ``W = A + B`` (``A`` fixed, ``B`` trained), one folder per technique.

- :mod:`.base`: :class:`DeltaHandle`, what every handle shares (``remove`` as a template method);
- :mod:`.full`: full-rank A+B (exact: a parametrization; fused: train ``W``, ``B = W - A``);
- :mod:`.low_rank`: rank r (the LoRA family), with the variant seam of :mod:`.variants`
  (init / weight / output / merge / unmerge) and :mod:`.dora` (``"dora": true``);
- :mod:`.sources`: A and the initial B from the loaded weights, zeros, a seeded draw or a file;
- :mod:`.ops`: choose, reset, export / load deltas, statistics, on handles;
- :mod:`.decay`: weight decay of fused-mode ``B`` as a per-optimizer step pre-hook;
- :mod:`.peft`: PEFT LoRA / DoRA adapters out and in.

The spec (parsing, ``changes_function``, ``describe``) is
:class:`~workbench.core.plan.reparam_spec.ReparamSpec`, re-exported here. The model-level
operations are methods of :class:`~workbench.core.freezing.plan_handle.AppliedPlan`
(``merge``, ``reset_b``, ``export_deltas``, ``load_deltas``, ``reparam_stats``, ``to_peft``,
``load_peft``, ``attach_optimizer``). See ``docs/reparam.md``.
"""

from __future__ import annotations

# each LoRA-family variant's module, imported so its class registers under its name
from workbench.core.freezing.reparam import dora  # noqa: F401
from workbench.core.freezing.reparam.base import ORDER_ATTR, DeltaHandle
from workbench.core.freezing.reparam.decay import DECAY_KEY, adjust_param_groups
from workbench.core.freezing.reparam.full import APlusB, FullRankHandle, ReparamHandle, install
from workbench.core.freezing.reparam.low_rank import LowRankHandle, install_a_plus_b
from workbench.core.freezing.reparam.ops import (
    DELTA_FORMAT,
    ddp_ignore_names,
    export_deltas,
    load_deltas,
    module_stats,
    reset,
    select,
    stats,
)
from workbench.core.plan.reparam_spec import ReparamError, ReparamSpec, changes_function, describe, parse_spec

__all__ = [
    "APlusB",
    "DECAY_KEY",
    "DELTA_FORMAT",
    "ORDER_ATTR",
    "DeltaHandle",
    "FullRankHandle",
    "LowRankHandle",
    "ReparamError",
    "ReparamHandle",
    "ReparamSpec",
    "adjust_param_groups",
    "changes_function",
    "ddp_ignore_names",
    "describe",
    "export_deltas",
    "install",
    "install_a_plus_b",
    "load_deltas",
    "module_stats",
    "parse_spec",
    "reset",
    "select",
    "stats",
]
