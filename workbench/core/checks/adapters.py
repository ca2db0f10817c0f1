"""Doctor checks for low-rank adapters: workbench low-rank A+B and Hugging Face PEFT LoRA layers.

- ``lowrank-target-unmatched`` (plan): a rule with ``reparam.rank`` reaches no layer low-rank
  A+B supports, so it adds no adapter at all.
- ``lowrank-base-trains`` (model): a layer carries a low-rank adapter but its base weight
  still has ``requires_grad``: full fine-tuning cost plus the adapter.
- ``lowrank-dropout-merged`` (model): a PEFT LoRA layer is merged into its base weight but
  has dropout configured; a merged layer never applies it, so training sees no dropout.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbench.core.checks.findings import Finding
from workbench.core.plan.peft_config import SUPPORTED_LAYERS
from workbench.core.plan.rules import FreezePlan
from workbench.core.plan.tree import ModelTree

if TYPE_CHECKING:  # pragma: no cover - typing only
    from torch import nn

__all__ = ["adapter_findings", "lint_low_rank"]


def lint_low_rank(plan: FreezePlan, tree: ModelTree) -> list[Finding]:
    """Rules with ``reparam.rank`` that reach no supported layer.

    Args:
        plan: the plan.
        tree: the model's tree.

    Returns:
        One ``lowrank-target-unmatched`` warning per such rule.
    """
    out: list[Finding] = []
    eff = plan.resolve(tree)
    for i, rule in enumerate(plan.rules):
        if rule.reparam is None or rule.reparam.low_rank is None:
            continue
        reached = [p for p, e in eff.items() if e.reparam is rule.reparam and tree.nodes[p].type_name in SUPPORTED_LAYERS]
        if not reached:
            out.append(
                Finding(
                    "lowrank-target-unmatched",
                    "warning",
                    rule.select,
                    f"rule {i}: reparam.rank reaches no {', '.join(SUPPORTED_LAYERS)} layer (or a later rule overrides it)",
                    "the rule adds no adapter: nothing trains there",
                    "select the layers themselves (e.g. \"*.query\") or remove the rule",
                )
            )
    return out


def _base_weight(module: nn.Module) -> nn.Parameter | None:
    """The frozen-by-intent base weight of an adapted layer, or None when it has no adapter."""
    pars = getattr(module, "parametrizations", None)
    if pars is not None and "weight" in pars and any(hasattr(p, "U") and hasattr(p, "V") for p in pars["weight"]):
        return pars["weight"].original
    if "wb_lowrank" in module._modules:
        return module._parameters.get("weight")
    base = getattr(module, "base_layer", None)
    if base is not None and (getattr(module, "lora_A", None) or getattr(module, "lora_embedding_A", None)):
        return getattr(base, "weight", None)
    return None


def adapter_findings(model: nn.Module, tree: ModelTree) -> list[Finding]:
    """Adapted layers whose base still trains, and merged PEFT layers with dropout.

    Args:
        model: the model (with a plan applied, or a PEFT model).
        tree: its tree.

    Returns:
        Findings, one per layer.
    """
    from torch import nn  # a model comes with torch imported

    out: list[Finding] = []
    for path, module in model.named_modules():
        if path not in tree.nodes:
            continue
        w = _base_weight(module)
        if w is not None and w.requires_grad:
            out.append(
                Finding(
                    "lowrank-base-trains",
                    "warning",
                    path,
                    "the layer has a low-rank adapter but its base weight still trains",
                    "the weight's gradient and optimizer state cost what full fine-tuning costs, on top of the adapter",
                    "freeze the base weight (a plan with reparam.rank holds it fixed; for PEFT, do not unfreeze base_layer)",
                )
            )
        drops = getattr(module, "lora_dropout", None)
        if (getattr(module, "merged", False) and isinstance(drops, nn.ModuleDict)
                and any(getattr(d, "p", 0.0) > 0 for d in drops.values())):
                out.append(
                    Finding(
                        "lowrank-dropout-merged",
                        "warning",
                        path,
                        "the LoRA adapter is merged into the weight but has dropout set",
                        "a merged layer never applies its dropout, so training sees none",
                        "unmerge the adapter (model.unmerge_adapter()) before training, or set lora_dropout to 0",
                    )
                )
    return out
