"""Gradient-signal ranking: which blocks to unfreeze first, measured by a short probe run.

Instead of "the last k blocks", the blocks can be unfrozen in the order of their *relative
gradient norm* ``‖g‖ / ‖w‖`` (the criterion of Auto-RGN in Lee et al., "Surgical Fine-Tuning
Improves Adaptation to Distribution Shifts", ICLR 2023): a block whose gradient is large
relative to its weights is the one the data most wants to change.

The probe runs a few forward/backward passes of the real model (its loaded weights, every
parameter requiring a gradient, no optimizer step, so the weights stay as they are) on
synthetic data shaped like the training batches, and averages each block's
``sqrt(Σ g²) / sqrt(Σ w²)`` over all its parameters and steps.

Typical use::

    signal = probe_signal(ModelSpec(name="resnet50", weights="DEFAULT"), (16, 3, 224, 224))
    advise(model, budget, shape, block_order=signal.order)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from workbench.core.advisor.candidates import block_sequence
from workbench.core.advisor.profile import AdvisorError, profile_model
from workbench.core.models.spec import ModelSpec
from workbench.core.training.batches import forward_loss, move_batch
from workbench.core.training.data import synthetic_for_model, text_task_of

__all__ = ["GradSignal", "block_grad_signal", "probe_signal"]


@dataclass(frozen=True)
class GradSignal:
    """Each block's mean relative gradient norm over the probe steps.

    Attributes:
        signal: block path -> mean ``‖g‖ / ‖w‖``, in block-sequence order.
        steps: probe steps averaged.
        order: the blocks by decreasing signal (ties keep the later block first).
    """

    signal: dict[str, float]
    steps: int
    order: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """``{"signal": {block: value}, "steps": n, "order": [...]}``."""
        return {"signal": dict(self.signal), "steps": self.steps, "order": list(self.order)}


def _ranked(signal: dict[str, float]) -> list[str]:
    blocks = list(signal)
    return sorted(blocks, key=lambda b: (-signal[b], -blocks.index(b)))


def block_grad_signal(
    model: nn.Module,
    blocks: list[str],
    batches: Iterable[Any],
    loss: Callable[[nn.Module, Any], torch.Tensor],
) -> GradSignal:
    """Measure each block's relative gradient norm on ``batches``.

    Args:
        model: the model (its weights are not changed; its gradients are cleared after).
        blocks: dotted paths of the blocks to score.
        batches: the probe batches (already on the model's device).
        loss: ``loss(model, batch)`` -> scalar loss.

    Returns:
        The signal per block and the order.

    Raises:
        AdvisorError: no batches, a block without parameters, or a non-finite loss.
    """
    params = {b: [p for p in model.get_submodule(b).parameters() if p.is_floating_point()] for b in blocks}
    empty = [b for b, ps in params.items() if not ps]
    if empty:
        raise AdvisorError(f"block {empty[0]} has no parameters to score")
    was_training = model.training
    flags = {id(p): p.requires_grad for p in model.parameters()}
    totals = dict.fromkeys(blocks, 0.0)
    steps = 0
    model.train()
    try:
        for p in model.parameters():
            p.requires_grad_(p.is_floating_point())
        for batch in batches:
            model.zero_grad(set_to_none=True)
            value = loss(model, batch)
            if not torch.isfinite(value):
                raise AdvisorError(f"the probe's loss is {value.item()} at step {steps}; the gradient signal needs a finite loss")
            value.backward()
            for b, ps in params.items():
                g2 = sum(float(p.grad.detach().float().pow(2).sum()) for p in ps if p.grad is not None)
                w2 = sum(float(p.detach().float().pow(2).sum()) for p in ps)
                totals[b] += math.sqrt(g2) / math.sqrt(w2) if w2 > 0 else 0.0
            steps += 1
    finally:
        model.zero_grad(set_to_none=True)
        for p in model.parameters():
            p.requires_grad_(flags[id(p)])
        model.train(was_training)
    if not steps:
        raise AdvisorError("the gradient-signal probe got no batches")
    signal = {b: totals[b] / steps for b in blocks}
    return GradSignal(signal, steps, _ranked(signal))


def probe_signal(
    spec: ModelSpec,
    input_shape: tuple[int, ...],
    *,
    device: str = "cpu",
    steps: int = 3,
    seed: int = 0,
) -> GradSignal:
    """Build the model (with its weights) and measure its blocks' gradient signal on synthetic data.

    Args:
        spec: the model (its weights, if any, are what the signal is measured on).
        input_shape: one batch's shape (``(batch, seq_len)`` for text models).
        device: where the probe runs (``auto``, ``cpu``, ``cuda[:N]``).
        steps: probe batches.
        seed: seed of the synthetic data.

    Returns:
        The signal of the model's block sequence.

    Raises:
        AdvisorError: the model has fewer than two blocks, or the probe failed.
        WorkbenchError: the model cannot be built.
    """
    if steps < 1:
        raise AdvisorError(f"the gradient-signal probe needs at least 1 step, got {steps}")
    torch.manual_seed(seed)
    model = spec.build(allow_download=False)
    blocks = block_sequence(model, profile_model(model, input_shape))
    if len(blocks) < 2:
        raise AdvisorError("the model has fewer than two blocks: there is no order to rank (use --rank-by depth)")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(device)
    batch_size = input_shape[0]
    task = text_task_of(model)
    if task is None:
        classes = _classes(model)
        data = synthetic_for_model(model, steps * batch_size, image_size=input_shape[-1], num_classes=classes, seed=seed)
    else:
        data = synthetic_for_model(model, steps * batch_size, seq_len=input_shape[1], seed=seed)
    loader = torch.utils.data.DataLoader(data, batch_size=batch_size)
    task_name = task or "classification"
    return block_grad_signal(model, blocks, (move_batch(b, device) for b in loader),
                             lambda m, b: forward_loss(m, b, task=task_name)[0])


def _classes(model: nn.Module) -> int:
    from workbench.core.models.zoo import current_num_classes

    return current_num_classes(model) or 10
