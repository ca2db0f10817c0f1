"""The Pareto front of candidate plans and the chosen one.

A candidate is on the front when no other candidate is at least as good on all three of
predicted peak memory (lower is better), trainable parameters (more is better) and predicted
step time (lower is better), and better by more than 1 % on one (closer is a tie). The chosen plan is the one that trains the
most parameters within the memory budget (ties: the smaller peak, then the faster step).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

__all__ = ["TIE_SHARE", "Point", "choose", "pareto_front"]


class Point(NamedTuple):
    """A candidate's coordinates: predicted peak bytes, trainable parameters, step ratio."""

    peak_bytes: int
    trainable_params: int
    step_ratio: float


#: Better by less than this share is a tie: predictions are not that precise, and a plan
#: that differs in kind (BatchNorm in eval mode) should not hide its neighbour by a few bytes.
TIE_SHARE = 0.01


def _dominates(a: Point, b: Point) -> bool:
    at_least = a.peak_bytes <= b.peak_bytes and a.trainable_params >= b.trainable_params and a.step_ratio <= b.step_ratio
    better = (
        a.peak_bytes < b.peak_bytes * (1 - TIE_SHARE)
        or a.trainable_params > b.trainable_params * (1 + TIE_SHARE)
        or a.step_ratio < b.step_ratio * (1 - TIE_SHARE)
    )
    return at_least and better


def pareto_front(points: Sequence[Point]) -> list[int]:
    """Indices of the points no other point dominates, in input order.

    Equal points are all kept (they are equally good).

    Args:
        points: the candidates' coordinates.

    Returns:
        The indices on the front.
    """
    return [i for i, p in enumerate(points) if not any(_dominates(q, p) for q in points)]


def choose(points: Sequence[Point], budget_bytes: int) -> int | None:
    """The index of the point with the most trainable parameters whose peak fits the budget.

    Args:
        points: the candidates' coordinates.
        budget_bytes: the memory budget.

    Returns:
        The index, or None when nothing fits.

    Example:
        >>> choose([Point(100, 10, 0.3), Point(200, 50, 0.5)], 150)
        0
    """
    fits = [i for i, p in enumerate(points) if p.peak_bytes <= budget_bytes]
    if not fits:
        return None
    most = max(points[i].trainable_params for i in fits)
    best = [i for i in fits if points[i].trainable_params == most]
    lowest = min(points[i].peak_bytes for i in best)
    near = [i for i in best if points[i].peak_bytes <= lowest * (1 + TIE_SHARE)]
    return min(near, key=lambda i: (points[i].step_ratio * (1 - TIE_SHARE) > min(points[j].step_ratio for j in near), i))
