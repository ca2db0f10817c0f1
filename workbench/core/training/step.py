"""One training step: forward, loss, backward, optimizer step; out of memory and non-finite losses.

:class:`TrainStep` is what :class:`~workbench.core.training.engine.Trainer` runs once per
batch. It never raises for what goes wrong inside a step: the :class:`StepOutcome` says
whether the optimizer stepped, whether the loss was not finite (gradients dropped, no step),
or how the step failed (gradients dropped; the optimizer step either happened completely or
not at all). Timing is taken around the compute only, so the engine can report step time
apart from data time and its own bookkeeping.
"""

from __future__ import annotations

import math
import time
import traceback
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import nn

from workbench.core.training.batches import batch_size_of, forward_loss
from workbench.core.training.failure_text import oom_message, step_failed_message
from workbench.core.training.module_stats import ModuleStatsProbe

__all__ = ["ClassificationLoss", "LossFn", "StepFailure", "StepOutcome", "TrainStep", "clear_grads"]

LossFn = Callable[[Any, torch.Tensor], torch.Tensor]


class ClassificationLoss:
    """Cross-entropy on class logits; adds torchvision's auxiliary heads when present."""

    _AUX = (("aux_logits", 0.4), ("aux_logits2", 0.3), ("aux_logits1", 0.3))

    def __init__(self) -> None:
        self.ce = nn.CrossEntropyLoss()

    def __call__(self, out: Any, target: torch.Tensor) -> torch.Tensor:
        """The loss of a model output against class labels.

        Args:
            out: logits, or an output with ``.logits`` (and optional auxiliary logits).
            target: class labels.

        Returns:
            The scalar loss.

        Raises:
            TypeError: the output holds no class logits (pass ``loss_fn=...`` to the Trainer).
        """
        if isinstance(out, torch.Tensor):
            return self.ce(out, target)
        logits = getattr(out, "logits", None)
        if not isinstance(logits, torch.Tensor):
            raise TypeError(
                f"the model returned {type(out).__name__}, not class logits; pass loss_fn=... to the Trainer"
            )
        loss = self.ce(logits, target)
        for name, w in self._AUX:
            aux = getattr(out, name, None)
            if isinstance(aux, torch.Tensor):
                loss = loss + w * self.ce(aux, target)
        return loss


class StepFailure(NamedTuple):
    """How a step failed.

    Attributes:
        message: one line: what happened and what to do.
        traceback: the formatted traceback.
        oom: the device ran out of memory.
    """

    message: str
    traceback: str
    oom: bool


class StepOutcome(NamedTuple):
    """What one step did.

    Attributes:
        loss: the loss value (nan when the step failed before it was known).
        stepped: the optimizer stepped.
        nonfinite: the loss was not finite (on some rank): gradients dropped, no step.
        t_start / t_end: ``time.perf_counter()`` around the compute (0.0 after a failure).
        failure: how the step failed, or None.
    """

    loss: float
    stepped: bool
    nonfinite: bool
    t_start: float
    t_end: float
    failure: StepFailure | None = None


def clear_grads(model: nn.Module | None, optimizer: torch.optim.Optimizer | None) -> None:
    """Drop every gradient (the optimizer's parameters and the model's).

    Args:
        model: the model, or None.
        optimizer: the optimizer, or None.
    """
    if optimizer is not None:
        optimizer.zero_grad(set_to_none=True)
    if model is not None:
        for p in model.parameters():
            p.grad = None


class TrainStep:
    """Runs one optimizer step on a batch.

    Args:
        model: the model (its gradients are dropped after a failure or a non-finite loss).
        optimizer: the optimizer.
        forward: what runs the batch (the model, its DDP wrapper or a compiled form);
            assign :attr:`forward` when it changes.
        loss_fn: ``loss_fn(output, labels) -> loss``.
        device: the device the batch is on.
        amp_dtype: autocast dtype, or None for full precision.
        scaler: a ``GradScaler`` (fp16), or None.
        step_hook: ``step_hook(step)`` called first, inside the failure handling.
        agree: under torchrun, ``agree(bad) -> bad``: called after backward with this rank's
            "loss not finite", returns whether any rank's loss was not finite.
        stats: measures per-module gradient norms and update/weight ratios around the
            optimizer step of the steps it is due on, or None.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        forward: Callable[..., Any],
        loss_fn: LossFn,
        device: torch.device,
        *,
        amp_dtype: torch.dtype | None = None,
        scaler: Any = None,
        step_hook: Callable[[int], None] | None = None,
        agree: Callable[[bool], bool] | None = None,
        stats: ModuleStatsProbe | None = None,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.forward = forward
        self.loss_fn = loss_fn
        self.device = device
        self.amp_dtype = amp_dtype
        self.scaler = scaler
        self.step_hook = step_hook
        self.agree = agree
        self.stats = stats
        self._mps = device.type == "mps"

    def __call__(
        self, step: int, x: Any, y: torch.Tensor | None, events: tuple[Any, Any] | None = None
    ) -> StepOutcome:
        """Run the step.

        Args:
            step: the step number (for the hook and messages).
            x: the inputs, on the device: images, or a mapping of model inputs called as
                ``model(**x)`` (its ``labels`` make a Hugging Face model compute the loss).
            y: the labels, on the device; None for a mapping batch.
            events: a pair of CUDA timing events recorded around the compute, or None.

        Returns:
            The outcome; nothing that goes wrong in the step is raised.
        """
        opt = self.optimizer
        scaler = self.scaler
        loss_val = math.nan
        probe = self.stats if self.stats is not None and self.stats.due(step) else None
        try:
            if self.step_hook is not None:
                self.step_hook(step)
            if events is not None:
                events[0].record()
            ts = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            if self.amp_dtype is not None:
                with torch.autocast(self.device.type, dtype=self.amp_dtype):
                    loss, out = forward_loss(self.forward, x if y is None else (x, y), self.loss_fn)
            else:
                loss, out = forward_loss(self.forward, x if y is None else (x, y), self.loss_fn)
            del out
            if scaler is not None:
                scaler.scale(loss).backward()
            else:
                loss.backward()
            loss_val = loss.item()
            del loss
            bad = not math.isfinite(loss_val)
            if self.agree is not None:
                bad = self.agree(bad)
            if bad:
                clear_grads(self.model, opt)
            else:
                if probe is not None:
                    probe.before_step(step, float(scaler.get_scale()) if scaler is not None else None)
                if scaler is not None:
                    scaler.step(opt)
                    scaler.update()
                else:
                    opt.step()
                if probe is not None:
                    probe.after_step()
            if events is not None:
                events[1].record()
            elif self._mps:
                torch.mps.synchronize()  # the optimizer step runs asynchronously on MPS
            te = time.perf_counter()
        except torch.OutOfMemoryError as e:
            failure = StepFailure(oom_message(e, step, batch_size_of(x), self.device), traceback.format_exc(), True)
        except Exception as e:
            failure = StepFailure(step_failed_message(e, step), traceback.format_exc(), False)
        else:
            return StepOutcome(loss_val, not bad, bad, ts, te)
        # the exception (and the activations its traceback held) is gone: free what is left
        if probe is not None:
            probe.cancel()
        clear_grads(self.model, opt)
        return StepOutcome(loss_val, False, False, 0.0, 0.0, failure)
