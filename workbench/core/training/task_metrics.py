"""What validation measures besides the loss: one row per metric; ``--metric`` and the app read the table.

===============  ===============================================================
name             measures
===============  ===============================================================
``accuracy``     top-1 accuracy of class logits against class labels (the default)
``top5``         top-5 accuracy
``py:FILE:FUNC`` your own: ``FUNC(output, target)`` returns a number for a batch;
                 the run reports its mean over the validation samples
===============  ===============================================================

A new metric is one :class:`MetricKind` row and its builder (the accumulators, which need torch,
are in :mod:`workbench.core.training.batch_metrics`; this table does not import torch, so the
app lists the metrics before torch is imported). A ``py:`` metric runs code: it runs
only when the caller named it (:mod:`workbench.core.training.py_code`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workbench.core.errors import WorkbenchError
from workbench.core.training.py_code import is_py_spec, load_py_function, table_or_py_name

if TYPE_CHECKING:  # pragma: no cover - typing only
    from workbench.core.training.batch_metrics import BatchMetric

__all__ = ["METRICS", "MetricKind", "MetricSpecError", "higher_is_better", "make_metric", "metric_label",
           "metric_name", "task_summary"]


class MetricSpecError(WorkbenchError, ValueError):
    """A metric name that is neither a row of :data:`METRICS` nor ``py:FILE:FUNC``."""


@dataclass(frozen=True)
class MetricKind:
    """One built-in metric.

    Attributes:
        name: the config value (``TrainConfig.metric``, ``--metric``).
        label: what the app shows (the validation plot's title).
        higher_is_better: whether a larger value is better (accuracy: yes).
        builder: makes a fresh :class:`~workbench.core.training.batch_metrics.BatchMetric`.
    """

    name: str
    label: str
    higher_is_better: bool
    builder: Callable[[], BatchMetric]


def _top_k(k: int, name: str) -> BatchMetric:
    from workbench.core.training.batch_metrics import TopK

    return TopK(k, name)


METRICS: dict[str, MetricKind] = {k.name: k for k in (
    MetricKind("accuracy", "Accuracy", True, lambda: _top_k(1, "accuracy")),
    MetricKind("top5", "Top-5 accuracy", True, lambda: _top_k(5, "top5")),
)}

_ALIASES = {"acc": "accuracy", "top1": "accuracy", "top_1": "accuracy", "top_5": "top5"}


def metric_name(text: Any) -> str:
    """The canonical name of a metric setting (aliases accepted, ``py:`` specs kept).

    Args:
        text: ``accuracy``, ``top5`` or ``py:FILE:FUNC``.

    Returns:
        The name.

    Raises:
        MetricSpecError: anything else.
    """
    return table_or_py_name(text, METRICS, _ALIASES, MetricSpecError)


def metric_label(name: str) -> str:
    """What the app and the summary call a metric: the row's label, or the function's name.

    Args:
        name: a metric setting.

    Returns:
        ``"Accuracy"``, or ``"pitch_accuracy"`` for ``py:crepe_pitch.py:pitch_accuracy``.
    """
    if is_py_spec(name):
        return name.rpartition(":")[2] or name
    kind = METRICS.get(name)
    return kind.label if kind is not None else name


def make_metric(name: str, *, origin: str | None = None) -> BatchMetric:
    """A fresh accumulator of the metric a setting names.

    Args:
        name: a row of :data:`METRICS` or ``py:FILE.py:FUNC``.
        origin: what file named it (a ``py:`` metric is then refused); None: the caller did.

    Returns:
        The accumulator.

    Raises:
        MetricSpecError: an unknown name.
        CodeFromFileError: a ``py:`` metric named by a file.
        PyCodeError: a ``py:`` metric that cannot be loaded.
    """
    from workbench.core.training.batch_metrics import UserMetric

    name = metric_name(name)
    if is_py_spec(name):
        return UserMetric(name, load_py_function(name, what="metric", flag="--metric", origin=origin))
    return METRICS[name].builder()


def higher_is_better(name: str) -> bool:
    """Whether a larger value of the metric is better (``py:`` metrics: assumed so).

    Args:
        name: a metric setting.

    Returns:
        The row's ``higher_is_better``; True for ``py:`` metrics.
    """
    kind = METRICS.get(name)
    return kind.higher_is_better if kind is not None else True


def task_summary(config: Any, custom_loss: bool, val_metric: float | None, best_val_metric: float | None,
                 start: Any, input_shape: Any) -> dict[str, Any]:
    """The run summary's entries of the task: loss, metric (last, best, before training), input shape.

    Args:
        config: the run's :class:`~workbench.core.training.config.TrainConfig`.
        custom_loss: a ``loss_fn`` was handed to the Trainer (then ``loss_name`` is ``"loss_fn"``).
        val_metric / best_val_metric: the metric of the last validation, and the best one.
        start: the :class:`~workbench.core.training.validation.Validation` before the first
            step, or None.
        input_shape: one sample's input shape, ``{key: shape}``, or None.

    Returns:
        ``loss_name``, ``metric_name``, ``val_metric``, ``best_val_metric``,
        ``start_val_loss``, ``start_val_acc``, ``start_val_metric`` and ``input_shape``.
    """
    shape = ({k: list(s) for k, s in input_shape.items()} if isinstance(input_shape, dict)
             else list(input_shape) if input_shape is not None else None)
    return {
        "loss_name": "loss_fn" if custom_loss else config.loss, "metric_name": config.metric,
        "val_metric": val_metric, "best_val_metric": best_val_metric,
        "start_val_loss": start.loss if start is not None else None,
        "start_val_acc": start.acc if start is not None else None,
        "start_val_metric": start.metric if start is not None else None,
        "input_shape": shape,
    }
