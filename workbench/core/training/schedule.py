"""Learning-rate schedules that survive plan changes.

torch's schedulers remember each param group's starting lr (``initial_lr``) and the number of
groups when they are built, so they break when a stage or a live edit adds groups
(``OneCycleLR`` raises ``KeyError: 'initial_lr'``, ``LambdaLR`` a ``ValueError``). Here the
schedule is a pure function of the step, :func:`lr_factor`, and :class:`LrSchedule` sets
``group["lr"] = group["base_lr"] * factor`` for every group at every step. A group's
``base_lr`` is its lr as the plan gives it (the run's lr times the group's ``lr_scale``),
recorded the first time the schedule sees the group, so a group added mid-run joins the
schedule at the current point.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

__all__ = ["SCHEDULERS", "LrSchedule", "lr_factor"]

#: Schedule shapes: constant (after warm-up), cosine decay, linear decay, one-cycle.
SCHEDULERS: tuple[str, ...] = ("constant", "cosine", "linear", "onecycle")

#: One-cycle: the lr starts at peak / 25 and ends at start / 1e4 (torch's ``OneCycleLR``).
_ONECYCLE_DIV = 25.0
_ONECYCLE_FINAL_DIV = 1e4
#: One-cycle without ``warmup``: the share of the run spent rising (``OneCycleLR``'s ``pct_start``).
_ONECYCLE_PCT_START = 0.3


def _cos_anneal(start: float, end: float, pct: float) -> float:
    return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1.0)


def lr_factor(step: int, total: int, warmup: int = 0, kind: str = "constant") -> float:
    """The factor the base learning rate is multiplied by at ``step``.

    Shapes (``warmup`` steps of linear warm-up first, except for ``onecycle``):

    - ``constant``: 1 after warm-up;
    - ``cosine``: cosine decay from 1 towards 0 over the steps after warm-up;
    - ``linear``: linear decay from 1 towards 0 over the steps after warm-up;
    - ``onecycle``: torch's ``OneCycleLR`` shape (cosine annealing): rises from 1/25 to 1
      over ``warmup`` steps (0: the first 30 % of the run), then falls to 1/250000.

    Warm-up rises linearly: ``(step + 1) / warmup`` for ``step < warmup``, so no step trains
    with lr 0.

    Args:
        step: 0-based index of the step about to be taken.
        total: steps in the run.
        warmup: warm-up steps (0: none).
        kind: one of :data:`SCHEDULERS`.

    Returns:
        The factor, in ``(0, 1]``.

    Raises:
        ValueError: unknown ``kind``, or ``total``/``warmup``/``step`` out of range.
    """
    if kind not in SCHEDULERS:
        raise ValueError(f"unknown scheduler {kind!r}; use one of {', '.join(SCHEDULERS)}")
    if total < 1 or warmup < 0 or step < 0:
        raise ValueError(f"lr_factor needs total >= 1, warmup >= 0 and step >= 0, got {total}, {warmup}, {step}")
    step = min(step, total - 1)
    if kind == "onecycle":
        up_end = (warmup if warmup else _ONECYCLE_PCT_START * total) - 1.0
        start, end = 1.0 / _ONECYCLE_DIV, 1.0 / (_ONECYCLE_DIV * _ONECYCLE_FINAL_DIV)
        if step <= up_end:
            return _cos_anneal(start, 1.0, step / up_end if up_end > 0 else 1.0)
        span = (total - 1) - up_end
        return _cos_anneal(1.0, end, min(1.0, (step - up_end) / span) if span > 0 else 1.0)
    if step < warmup:
        return (step + 1) / warmup
    if kind == "constant":
        return 1.0
    progress = (step - warmup) / max(1, total - warmup)
    if kind == "linear":
        return 1.0 - progress
    return 0.5 * (1.0 + math.cos(math.pi * progress))


class LrSchedule:
    """Sets every param group's lr from :func:`lr_factor` at each step.

    Args:
        kind: one of :data:`SCHEDULERS`.
        total: steps in the run.
        warmup: warm-up steps.

    Raises:
        ValueError: see :func:`lr_factor`.
    """

    def __init__(self, kind: str, total: int, warmup: int = 0) -> None:
        lr_factor(0, total, warmup, kind)  # validates the arguments
        self.kind = kind
        self.total = total
        self.warmup = warmup

    @property
    def active(self) -> bool:
        """The schedule changes the lr at some step (not constant without warm-up)."""
        return self.kind != "constant" or self.warmup > 0

    def apply(self, optimizer: torch.optim.Optimizer, step: int) -> float:
        """Set ``lr = base_lr * factor`` for every group (new groups record ``base_lr`` first).

        Args:
            optimizer: the optimizer; a group without ``base_lr`` takes its current ``lr``
                as the base (the engine adds groups with their unscheduled lr).
            step: 0-based index of the step about to be taken.

        Returns:
            The factor applied.
        """
        factor = lr_factor(step, self.total, self.warmup, self.kind)
        for group in optimizer.param_groups:
            base = group.setdefault("base_lr", group["lr"])
            group["lr"] = base * factor
        return factor
