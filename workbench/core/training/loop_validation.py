"""The training loop's validations: when one is due, the pass over sharded weights, and what it keeps.

Private to :mod:`workbench.core.training.engine`, which times each pass and turns a failing one
into the run's failure; :func:`~workbench.core.training.validation.evaluate` is the pass itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from workbench.core.training import fsdp as wfsdp
from workbench.core.training.loop_state import LoopState
from workbench.core.training.task_metrics import higher_is_better
from workbench.core.training.validation import Validation, evaluate

__all__ = ["record_validation", "validate_model", "validation_due"]


def validation_due(st: LoopState, total_steps: int, every: int | None) -> bool:
    """Whether the loop validates now, after its step ``st.step``: every ``every`` steps and after the last.

    Args:
        st: the loop's state (a run that failed or stopped does not validate).
        total_steps: the run's steps.
        every: ``config.val_every``, or None for after the last step only.

    Returns:
        True when a validation pass is due.
    """
    if st.status != "completed" or st.step == 0:
        return False
    return st.step >= total_steps or (every is not None and st.step % every == 0)


def validate_model(
    model: nn.Module,
    loader: DataLoader[Any],
    loss_fn: Callable[[Any, torch.Tensor], torch.Tensor],
    device: torch.device,
    *,
    sharded: bool,
    amp_dtype: torch.dtype | None,
    channels_last: bool,
    metric: Any,
) -> Validation:
    """One pass of :func:`~workbench.core.training.validation.evaluate`; under FSDP over the gathered weights.

    Args:
        model: the plain model (not a DDP wrapper).
        loader: the validation batches.
        loss_fn: the run's loss.
        device: where the model is.
        sharded: the model is sharded by FSDP: rank 0's BatchNorm statistics are sent to every
            rank first (as DDP validates with) and the shards are put back afterwards.
        amp_dtype: the run's autocast dtype, or None.
        channels_last: move 4-D inputs channels-last.
        metric: the run's metric accumulator, or None.

    Returns:
        The pass's :class:`~workbench.core.training.validation.Validation`.

    Raises:
        Exception: whatever the model, the loss or the data raise; the engine ends the run with it.
    """
    if sharded:
        wfsdp.sync_buffers(model)
    v = evaluate(model, loader, loss_fn, device, amp_dtype=amp_dtype, channels_last=channels_last, metric=metric)
    if sharded:
        wfsdp.reshard(model)
    return v


def record_validation(st: LoopState, v: Validation, step: int, metric_name: str) -> None:
    """Keep a validation after ``step`` in the loop's state: the latest values, the report's, and the best.

    A non-finite loss or metric is reported but never the best.

    Args:
        st: the loop's state; its window carries the values to the next report.
        v: the pass's result.
        step: the step it followed.
        metric_name: ``config.metric``, which says whether higher is better.
    """
    st.window.val_loss = st.val_loss = v.loss
    st.window.val_acc = st.val_acc = v.acc
    st.window.val_metric = st.val_metric = v.metric
    if v.metric is not None and math.isfinite(v.metric) and (
            st.best_val_metric is None or (v.metric > st.best_val_metric) == higher_is_better(metric_name)):
        st.best_val_metric = v.metric
    st.val_step, st.val_samples = step, v.samples
    if v.loss is not None and math.isfinite(v.loss) and (st.best_val_loss is None or v.loss < st.best_val_loss):
        st.best_val_loss, st.best_val_step = v.loss, step
    if v.acc is not None and (st.best_val_acc is None or v.acc > st.best_val_acc):
        st.best_val_acc = v.acc
    st.val_time += v.seconds
