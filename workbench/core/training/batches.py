"""From a batch to a loss, for image batches ``(x, y)`` and dict batches of text models.

Dict batches (``input_ids``, ``attention_mask``, ``labels``, ...) are passed as keyword
arguments, ``model(**batch)``; a Hugging Face output's ``.loss`` is used when the model
computed one, else its ``.logits`` go through the task's loss (cross-entropy on classes,
or on tokens, shifted by one for causal language models).

Typical use in a training loop::

    batch = move_batch(batch, device)
    loss, out = forward_loss(model, batch, loss_fn=None, task="causal_lm")
    loss.backward()
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from workbench.core.errors import WorkbenchError

__all__ = ["IGNORE_INDEX", "TASKS", "batch_size_of", "batch_to_device", "forward_loss", "move_batch", "task_loss"]

#: Label value that token-level losses skip (the Hugging Face convention).
IGNORE_INDEX = -100
#: Tasks :func:`task_loss` knows.
TASKS: tuple[str, ...] = ("classification", "causal_lm", "masked_lm")

LossFn = Callable[[Any, torch.Tensor], torch.Tensor]


def batch_size_of(inputs: Any) -> int:
    """Samples in a batch's inputs: a tensor's first dimension, or that of a dict's first tensor.

    Args:
        inputs: The images tensor, or the mapping of model inputs.

    Returns:
        The batch size (0 when no tensor is found).
    """
    if isinstance(inputs, torch.Tensor):
        return int(inputs.shape[0]) if inputs.dim() else 1
    if isinstance(inputs, Mapping):
        return next((int(v.shape[0]) for v in inputs.values() if isinstance(v, torch.Tensor) and v.dim()), 0)
    return 0


def move_batch(batch: Any, device: torch.device | str, non_blocking: bool = False) -> Any:
    """Move every tensor of a batch (tensor, tuple/list or mapping, nested) to a device.

    Args:
        batch: The batch.
        device: Target device.
        non_blocking: Passed to ``Tensor.to``.

    Returns:
        The same structure with tensors on ``device``.
    """
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, Mapping):
        return {k: move_batch(v, device, non_blocking) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(move_batch(v, device, non_blocking) for v in batch)
    return batch


def batch_to_device(batch: Any, device: torch.device, *, channels_last: bool = False,
                    non_blocking: bool = False) -> tuple[Any, Any]:
    """A loader's batch on the device: ``(inputs, targets)``, or ``(inputs dict, None)`` for text models.

    Args:
        batch: a dict of model inputs (labels inside), or ``(inputs, targets)``: the inputs a
            tensor or a dict of tensors.
        device: the device.
        channels_last: move 4-D input tensors in channels-last format.
        non_blocking: passed to ``Tensor.to``.

    Returns:
        ``(inputs, targets or None)``.

    Raises:
        TypeError: a batch of another form.
    """
    if isinstance(batch, Mapping):  # model(**batch): input_ids, attention_mask, labels, ...
        return move_batch(batch, device, non_blocking), None
    if not isinstance(batch, (list, tuple)) or len(batch) < 2:
        raise TypeError(f"expected batches of (inputs, targets) or dicts of model inputs, got {type(batch).__name__}")
    x, y = batch[0], batch[1]
    if isinstance(x, torch.Tensor) and channels_last and x.dim() == 4:
        x = x.to(device, non_blocking=non_blocking, memory_format=torch.channels_last)
    else:
        x = move_batch(x, device, non_blocking)
    return x, move_batch(y, device, non_blocking)


def _logits(out: Any) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    logits = getattr(out, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    raise WorkbenchError(
        f"the model returned {type(out).__name__} without logits; give a model with a task head "
        "(e.g. ...ForSequenceClassification, ...ForCausalLM) or a loss function"
    )


def task_loss(out: Any, labels: torch.Tensor, task: str = "classification") -> torch.Tensor:
    """The task's loss on a model output's logits.

    Args:
        out: A tensor of logits, or an output with ``.logits``.
        labels: Class ids ``(batch,)`` or token ids ``(batch, seq)`` (``-100`` is skipped).
        task: ``"classification"``, ``"causal_lm"`` (predict token ``t+1`` from ``t``) or
            ``"masked_lm"``.

    Returns:
        The scalar cross-entropy.

    Raises:
        WorkbenchError: Unknown task, or an output without logits.
    """
    if task not in TASKS:
        raise WorkbenchError(f"unknown task {task!r}; use one of {', '.join(TASKS)}")
    logits = _logits(out)
    if task == "causal_lm":
        logits, labels = logits[:, :-1], labels[:, 1:]
    if logits.dim() > 2:
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1), ignore_index=IGNORE_INDEX)
    return F.cross_entropy(logits.float(), labels, ignore_index=IGNORE_INDEX)


def forward_loss(
    model: nn.Module | Callable[..., Any],
    batch: Any,
    loss_fn: LossFn | None = None,
    *,
    task: str = "classification",
) -> tuple[torch.Tensor, Any]:
    """Run the model on a batch and return its loss.

    A mapping batch is called as ``model(**batch)``; the output's ``.loss`` is used when
    present, else ``loss_fn(out, batch["labels"])`` (default: :func:`task_loss`). A
    ``(x, y, ...)`` batch is called as ``model(x)`` (``model(**x)`` when ``x`` is a dict of
    input tensors) and scored with ``loss_fn(out, y)``.

    Args:
        model: The model (or its forward callable).
        batch: A mapping of model inputs, or a ``(inputs, labels)`` sequence, on the model's device.
        loss_fn: ``loss_fn(output, labels) -> loss``; default the task's cross-entropy.
        task: Task of the default loss (see :func:`task_loss`).

    Returns:
        ``(loss, output)``.

    Raises:
        WorkbenchError: A batch of another shape, a dict batch with neither a model loss
            nor ``labels``, or an output without logits.
    """
    score = loss_fn or (lambda out, labels: task_loss(out, labels, task))
    if isinstance(batch, Mapping):
        out = model(**batch)
        loss = out.get("loss") if isinstance(out, Mapping) else getattr(out, "loss", None)
        if isinstance(loss, torch.Tensor):
            return loss, out
        labels = batch.get("labels", batch.get("label"))
        if not isinstance(labels, torch.Tensor):
            raise WorkbenchError(
                "the batch has no 'labels' and the model computed no loss; add labels to the batch"
            )
        return score(out, labels), out
    if isinstance(batch, (list, tuple)) and len(batch) >= 2:
        out = model(**batch[0]) if isinstance(batch[0], Mapping) else model(batch[0])  # a dict input: keywords
        return score(out, batch[1]), out
    raise WorkbenchError(
        f"expected a batch of (inputs, labels) or a dict of model inputs, got {type(batch).__name__}"
    )
