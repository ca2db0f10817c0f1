"""The workbench's losses and metrics in the forms other training loops take them.

A loss or metric setting is what ``--loss`` / ``--metric`` take (``bce``, ``mse``, ``top5``,
``py:FILE.py:FUNC`` ...; see :mod:`workbench.core.training.losses` and
:mod:`workbench.core.training.task_metrics`). The Hugging Face ``Trainer`` takes a loss as
``compute_loss_func(outputs, labels, num_items_in_batch)`` and metrics as
``compute_metrics(EvalPrediction) -> {name: value}``: :class:`TrainerLoss` and
:class:`TrainerMetric` are those (the ``Trainer`` callback installs them from its ``loss=`` and
``metric=``). PyTorch Lightning takes both inside the ``LightningModule`` (``training_step``
returns the loss, ``validation_step`` logs metrics), where no callback reaches: call
:func:`~workbench.core.training.losses.make_loss` and
:func:`~workbench.core.training.task_metrics.make_metric` there (docs/integrations.md shows how).

A ``py:`` setting passed here was named by the caller, so its code runs (the trust rule of
``py:`` code named in Python).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from workbench.core.training.losses import make_loss
from workbench.core.training.py_code import is_py_spec
from workbench.core.training.task_metrics import make_metric, metric_name

__all__ = ["TrainerLoss", "TrainerMetric", "model_output"]


def model_output(outputs: Any) -> Any:
    """The tensor a loss or metric reads from a model's outputs: ``logits`` of a ``ModelOutput`` (or a dict),
    the first item of a tuple, else the outputs themselves."""
    if isinstance(outputs, Mapping) and "logits" in outputs:
        return outputs["logits"]
    if isinstance(outputs, (tuple, list)) and outputs:
        return outputs[0]
    return outputs


class TrainerLoss:
    """A loss setting as the Hugging Face ``Trainer``'s ``compute_loss_func``.

    Args:
        loss: a loss setting (``bce``, ``mse``, ``py:FILE.py:FUNC`` ...).

    Raises:
        LossSpecError: an unknown loss.
        PyCodeError: a ``py:`` loss that cannot be loaded.
    """

    def __init__(self, loss: str) -> None:
        self.name = loss
        self._fn = make_loss(loss)

    def __call__(self, outputs: Any, labels: Any, num_items_in_batch: Any = None) -> torch.Tensor:
        """The batch's loss of the model's ``logits`` (or output) against ``labels``."""
        return self._fn(model_output(outputs), labels)


class TrainerMetric:
    """A metric setting as the Hugging Face ``Trainer``'s ``compute_metrics``.

    The Trainer gathers the evaluation's predictions and labels as arrays; the metric is their
    value over all samples, under the name ``key`` (the Trainer logs it as ``eval_<key>``).

    Args:
        metric: a metric setting (``accuracy``, ``top5``, ``py:FILE.py:FUNC``).

    Attributes:
        key: ``accuracy``, ``top5``, or the ``py:`` function's name.

    Raises:
        MetricSpecError: an unknown metric.
        PyCodeError: a ``py:`` metric that cannot be loaded.
    """

    def __init__(self, metric: str) -> None:
        name = metric_name(metric)
        self.key = name.rpartition(":")[2] if is_py_spec(name) else name
        self._metric = make_metric(name)

    def __call__(self, prediction: Any) -> dict[str, float]:
        """``{key: value}`` of an ``EvalPrediction`` (empty when the metric does not apply to such outputs)."""
        out = torch.as_tensor(model_output(prediction.predictions))
        target = torch.as_tensor(model_output(prediction.label_ids))
        self._metric.reset()
        self._metric.update(out, target, int(target.shape[0]) if target.ndim else 1)
        value = self._metric.value()
        return {} if value is None else {self.key: float(value)}
