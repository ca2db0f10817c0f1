"""Validation: a held-out split of the training data, and the evaluation pass.

:func:`holdout_split` divides a dataset into disjoint training and validation subsets
(seeded, so every rank and every rerun agrees); :func:`evaluate` runs the model over a
validation loader under ``torch.no_grad()`` in eval mode and puts the model back in the
mode it was in, with ``train()``, so the plan's eval locks (BatchNorm ``bn_eval``) stay
in force.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Mapping, Sized
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, Subset

from workbench.core.errors import WorkbenchError
from workbench.core.training.batches import batch_size_of, forward_loss, move_batch

__all__ = ["Validation", "ValidationError", "evaluate", "holdout_split"]


class ValidationError(WorkbenchError):
    """Validation data cannot be provided; the message says why and what to do."""


def holdout_split(dataset: Dataset[Any], fraction: float, seed: int = 0) -> tuple[Subset[Any], Subset[Any]]:
    """Split a dataset into disjoint training and validation subsets.

    Args:
        dataset: a map-style dataset with a length.
        fraction: share of the samples held out for validation (0 < f < 1); at least one
            sample goes to each side.
        seed: seed of the random choice of held-out indices.

    Returns:
        ``(train, val)`` subsets; their ``indices`` are disjoint and cover the dataset.

    Raises:
        ValidationError: the dataset has no length or fewer than 2 samples, or ``fraction``
            is out of range.
    """
    if not 0 < fraction < 1:
        raise ValidationError(f"the validation fraction must be between 0 and 1, got {fraction!r}")
    if not isinstance(dataset, Sized):
        raise ValidationError("a dataset without a length cannot be split for validation; give a validation dataset (--val DATA)")
    total = len(dataset)
    if total < 2:
        raise ValidationError(f"the dataset has {total} sample(s), too few to hold some out for validation; give --val DATA")
    n_val = min(total - 1, max(1, round(total * fraction)))
    order = torch.randperm(total, generator=torch.Generator().manual_seed(seed)).tolist()
    val_idx = sorted(order[:n_val])
    train_idx = sorted(order[n_val:])
    return Subset(dataset, train_idx), Subset(dataset, val_idx)


@dataclass
class Validation:
    """The result of one validation pass.

    Attributes:
        loss: mean loss per sample (NaN when not finite).
        acc: top-1 accuracy (0..1), None when the outputs are not class logits with labels.
        samples: samples evaluated.
        seconds: wall time of the pass.
        metric: the run's metric (``metric`` of :func:`evaluate`) over the samples, None when
            none was given or it does not apply to the outputs.
    """

    loss: float
    acc: float | None
    samples: int
    seconds: float
    metric: float | None = None


def _logits(out: Any) -> torch.Tensor | None:
    if isinstance(out, torch.Tensor):
        return out
    logits = getattr(out, "logits", None)
    return logits if isinstance(logits, torch.Tensor) else None


def evaluate(
    model: nn.Module,
    loader: DataLoader[Any],
    loss_fn: Callable[[Any, torch.Tensor], torch.Tensor],
    device: torch.device,
    *,
    amp_dtype: torch.dtype | None = None,
    channels_last: bool = False,
    metric: Any = None,
) -> Validation:
    """Evaluate ``model`` on every batch of ``loader``.

    Runs under ``torch.no_grad()`` with ``model.eval()``; afterwards ``model.train(mode)``
    restores the mode it had (modules locked in eval by a plan stay in eval).

    Args:
        model: the model (the plain module, not a DDP wrapper: no collectives run here).
        loader: batches of ``(inputs, labels)``.
        loss_fn: ``loss_fn(output, labels) -> loss`` (mean over the batch).
        device: where the model is.
        amp_dtype: autocast dtype of the run, or None.
        channels_last: move 4-D inputs in channels-last format.
        metric: a :class:`~workbench.core.training.task_metrics.BatchMetric` fed every batch
            (reset first), or None.

    Returns:
        The :class:`Validation`.

    Raises:
        ValidationError: the loader yields no batch.
        Exception: whatever the model or the loss raises (the model's mode is restored).
    """
    t0 = time.perf_counter()
    was_training = model.training
    loss_sum = 0.0
    correct = 0
    classified = 0
    n = 0
    classification = True
    autocast = torch.autocast(device.type, dtype=amp_dtype) if amp_dtype is not None else contextlib.nullcontext()
    if metric is not None:
        metric.reset()
    model.eval()
    try:
        with torch.no_grad(), autocast:
            for batch in loader:
                if isinstance(batch, Mapping):  # model inputs of a text model, labels inside
                    inputs = move_batch(batch, device)
                    y = inputs.get("labels")
                    loss, out = forward_loss(model, inputs, loss_fn)
                else:
                    x, y = batch[0], batch[1]
                    if isinstance(x, torch.Tensor):
                        fmt = torch.channels_last if channels_last and x.dim() == 4 else torch.preserve_format
                        inputs = x.to(device, memory_format=fmt)
                    else:  # a dict of input tensors
                        inputs = move_batch(x, device)
                    y = move_batch(y, device)
                    loss, out = forward_loss(model, (inputs, y), loss_fn)
                bs = batch_size_of(inputs)
                if metric is not None:
                    metric.update(out, y, bs)
                loss_sum += float(loss) * bs
                n += bs
                logits = _logits(out)
                if (
                    classification and logits is not None and isinstance(y, torch.Tensor)
                    and logits.dim() == 2 and y.dim() == 1 and not y.is_floating_point()
                ):
                    correct += int((logits.argmax(1) == y).sum())
                    classified += bs
                else:
                    classification = False
    finally:
        model.train(was_training)
    if n == 0:
        raise ValidationError("the validation data yielded no batch; give a validation dataset with samples (--val DATA)")
    mean_loss = loss_sum / n
    return Validation(
        loss=mean_loss if math.isfinite(mean_loss) else math.nan,
        acc=correct / classified if classification and classified else None,
        samples=n,
        seconds=time.perf_counter() - t0,
        metric=metric.value() if metric is not None else None,
    )
