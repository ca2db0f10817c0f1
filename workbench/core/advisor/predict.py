"""Predicted step time relative to full fine-tuning: a FLOP-proportional model.

A training step costs, in FLOPs counted on the model's profile:

- the forward pass: every op;
- the backward pass through the inputs: only ops after the first one that reads a
  trainable parameter (autograd stops at a frozen prefix);
- the weight gradients: only ops that read a trainable parameter;
- the optimizer: a few FLOPs per trainable element.

The ratio of a plan's cost to the cost with every parameter trainable is its predicted step
time relative to full fine-tuning. It ignores kernel efficiency and memory traffic, so it is
a ranking more than a stopwatch: ``--measure`` reports the real ratio.
"""

from __future__ import annotations

from collections.abc import Collection

from workbench.core.advisor.memory import first_trainable_op
from workbench.core.advisor.profile import ModelProfile, batch_size_of

__all__ = ["OPTIMIZER_FLOPS_PER_ELEMENT", "cache_row_bytes", "cached_step_flops", "step_flops", "step_ratio"]

#: FLOPs per trainable element of one optimizer step.
OPTIMIZER_FLOPS_PER_ELEMENT = {"sgd": 2, "sgd_momentum": 4, "adam": 12, "adamw": 14}


def step_flops(profile: ModelProfile, trainable: Collection[str], optimizer: str = "adamw") -> int:
    """FLOPs of one training step with ``trainable`` parameters.

    Args:
        profile: the model's profile.
        trainable: names of the trainable parameters.
        optimizer: ``sgd``, ``sgd_momentum``, ``adam`` or ``adamw``.

    Returns:
        The FLOPs (forward + backward through inputs + weight gradients + optimizer).
    """
    trainable = set(trainable)
    forward = profile.total_flops
    start = first_trainable_op(profile, trainable)
    if start is None:
        return forward
    input_grads = sum(op.flops for op in profile.ops[start + 1:])
    weight_grads = sum(op.flops for op in profile.ops if any(n in trainable for n in op.params))
    elements = sum(p.numel for p in profile.params if p.name in trainable)
    return forward + input_grads + weight_grads + OPTIMIZER_FLOPS_PER_ELEMENT.get(optimizer, 14) * elements


def step_ratio(profile: ModelProfile, trainable: Collection[str], optimizer: str = "adamw") -> float:
    """Predicted step time of a plan relative to full fine-tuning.

    Args:
        profile: the model's profile.
        trainable: names of the trainable parameters.
        optimizer: the optimizer.

    Returns:
        ``step_flops(trainable) / step_flops(all parameters)`` (1.0 for full fine-tuning).
    """
    full = step_flops(profile, [p.name for p in profile.params], optimizer)
    return step_flops(profile, trainable, optimizer) / full if full else 1.0


def cached_step_flops(profile: ModelProfile, trainable: Collection[str], optimizer: str = "adamw") -> int | None:
    """FLOPs of a step served by the frozen-prefix cache (after the first epoch): the frozen
    ops before the first trainable one do not run.

    Args:
        profile: the model's profile.
        trainable: names of the trainable parameters.
        optimizer: the optimizer.

    Returns:
        The FLOPs, or None when nothing frozen runs first (the cache does not apply).
    """
    trainable = set(trainable)
    start = first_trainable_op(profile, trainable)
    if not start:
        return None
    skipped = sum(op.flops for op in profile.ops[:start])
    return step_flops(profile, trainable, optimizer) - skipped


def cache_row_bytes(profile: ModelProfile, trainable: Collection[str]) -> int | None:
    """Bytes the frozen-prefix cache keeps per sample: the output of the last frozen op before
    the first trainable one, over the batch.

    Args:
        profile: the model's profile.
        trainable: names of the trainable parameters.

    Returns:
        Bytes per sample, or None when the cache does not apply.
    """
    start = first_trainable_op(profile, set(trainable))
    if not start:
        return None
    last = next((op for op in reversed(profile.ops[:start]) if op.out_bytes), None)
    batch = batch_size_of(profile.input_shape)
    return last.out_bytes // max(batch, 1) if last is not None else None
