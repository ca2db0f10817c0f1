"""The accumulators of validation metrics: what :data:`~workbench.core.training.task_metrics.METRICS`
rows and ``py:`` metrics build (an exported script carries their source).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["BatchMetric", "TopK", "UserMetric"]


class BatchMetric:
    """Accumulates a metric over the batches of one validation pass.

    Attributes:
        name: the metric's name (``accuracy``, ``py:pitch.py:raw_accuracy``).
    """

    name = ""

    def reset(self) -> None:
        """Start a new pass."""
        self._sum = 0.0
        self._n = 0
        self._off = False

    def __init__(self) -> None:
        self.reset()

    def batch_value(self, out: Any, target: Any) -> float | None:
        """The metric of one batch (None: it does not apply to such outputs)."""
        raise NotImplementedError

    def update(self, out: Any, target: Any, batch_size: int) -> None:
        """Add one batch (weighted by its samples).

        Args:
            out: the model's output.
            target: the batch's targets.
            batch_size: samples in the batch.
        """
        if self._off:
            return
        v = self.batch_value(out, target)
        if v is None:
            self._off = True
            return
        self._sum += v * batch_size
        self._n += batch_size

    def value(self) -> float | None:
        """The mean over the samples added, None when it did not apply or nothing was added."""
        if self._off or not self._n:
            return None
        v = self._sum / self._n
        return v if math.isfinite(v) else math.nan


def _logits(out: Any) -> torch.Tensor | None:
    if isinstance(out, torch.Tensor):
        return out
    logits = getattr(out, "logits", None)
    return logits if isinstance(logits, torch.Tensor) else None


class TopK(BatchMetric):
    """Top-k accuracy of class logits ``(B, C)`` against labels ``(B,)``; does not apply otherwise."""

    def __init__(self, k: int, name: str) -> None:
        self.k = k
        self.name = name
        super().__init__()

    def batch_value(self, out: Any, target: Any) -> float | None:
        logits = _logits(out)
        if (logits is None or not isinstance(target, torch.Tensor) or logits.dim() != 2 or target.dim() != 1
                or target.is_floating_point()):
            return None
        k = min(self.k, logits.shape[1])
        top = logits.topk(k, dim=1).indices
        return float((top == target[:, None]).any(dim=1).float().mean())


class UserMetric(BatchMetric):
    """A ``py:`` metric, its result checked: a finite number per batch (one line otherwise)."""

    def __init__(self, spec: str, fn: Callable[[Any, Any], Any]) -> None:
        self.name = spec
        self.fn = fn
        super().__init__()

    def batch_value(self, out: Any, target: Any) -> float | None:
        """The user's metric of one batch.

        Raises:
            TypeError: the function returned something that is not a number.
        """
        v = self.fn(out, target)
        if isinstance(v, torch.Tensor) and v.numel() == 1:
            v = v.item()
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"metric {self.name} returned {type(v).__name__}, not a number; return one number per batch")
        return float(v)
