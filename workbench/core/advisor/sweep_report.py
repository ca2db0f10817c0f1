"""What a plan sweep found: one row per candidate, the two Pareto fronts and the recommendation.

A row is a candidate's outcome (:class:`SweepRow`): its metric and validation loss at the end
of the budget, training time, peak memory (the one definition of
:mod:`workbench.core.training.metrics`), trainable parameters, retention, and, for a candidate
the pruner stopped, the step and the reason. Only candidates that trained for the whole budget
are compared: a pruned candidate's metric is that of a shorter run.

- :func:`front_2d`: the candidates no other one beats on both the metric and a cost (time, or
  peak memory);
- :func:`recommend`: the cheapest candidate whose metric is within a share of the best, and
  whose retention is at least a floor.

Qt-free and torch-free: the app's table and chart, the CLI and the JSON read the same report.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from workbench.core.training.metrics import fmt_memory

__all__ = ["COSTS", "SweepReport", "SweepRow", "front_2d", "recommend"]

#: What "cheapest" is measured in: training time or peak memory.
COSTS: tuple[str, ...] = ("time", "memory")


@dataclass
class SweepRow:
    """One candidate of a sweep and what its run measured.

    Attributes:
        id: the candidate's id in the sweep (``c00``, ``c01`` ...).
        name: what the plan trains, for people.
        lr: the learning rate it ran with.
        status: ``completed`` (the whole budget), ``pruned``, ``failed``, ``running`` or
            ``waiting``.
        steps: optimizer steps it ran.
        metric: the objective at its last validation (the metric, or the validation loss
            when the sweep's objective is the loss); None: not measured.
        val_loss: validation loss at its last validation.
        curve: ``(step, value)`` of the objective at every validation.
        time_s: training time (wall time less validation), seconds.
        peak_bytes: the run's peak memory.
        memory_source: what ``peak_bytes`` measures.
        trainable: trainable parameters.
        retention: the metric on the ``--retain`` data after training (None: not measured).
        reason: why it was pruned or failed ("" otherwise).
        run_dir: the candidate's run folder.
        on_time_front / on_memory_front: on the front of metric against time / peak memory.
    """

    id: str
    name: str
    lr: float
    status: str
    steps: int = 0
    metric: float | None = None
    val_loss: float | None = None
    curve: list[tuple[int, float]] = field(default_factory=list)
    time_s: float | None = None
    peak_bytes: int | None = None
    memory_source: str = ""
    trainable: int | None = None
    retention: float | None = None
    reason: str = ""
    run_dir: str = ""
    on_time_front: bool = False
    on_memory_front: bool = False

    @property
    def compared(self) -> bool:
        """It trained for the whole budget and has a metric: it takes part in fronts and choice."""
        return self.status == "completed" and self.metric is not None and math.isfinite(self.metric)

    def cost(self, by: str) -> float:
        """Its cost in ``by`` (``time`` or ``memory``); infinite when not measured."""
        v = self.time_s if by == "time" else self.peak_bytes
        return float(v) if v is not None else math.inf


@dataclass
class SweepReport:
    """A sweep's rows with fronts and recommendation marked.

    Attributes:
        rows: one per candidate, in candidate order.
        objective: the name of what is compared (``accuracy``, the metric's name, or
            ``validation loss``).
        maximize: a larger objective is better.
        recommended: index into ``rows`` of the recommendation, or None.
        recommendation: one sentence saying what is recommended and why, or why nothing is.
        within: the share of the best objective a recommended plan may lose.
        min_retention: the retention floor, or None.
        by: what "cheapest" is measured in.
        retention_before: the retention metric of the model before training, when measured.
    """

    rows: list[SweepRow]
    objective: str = "accuracy"
    maximize: bool = True
    recommended: int | None = None
    recommendation: str = ""
    within: float = 0.01
    min_retention: float | None = None
    by: str = "time"
    retention_before: float | None = None

    @property
    def pruned(self) -> list[SweepRow]:
        """The candidates the pruner stopped."""
        return [r for r in self.rows if r.status == "pruned"]

    def to_dict(self) -> dict[str, Any]:
        """The report as plain JSON data (``workbench sweep --json``)."""
        d = asdict(self)
        d["rows"] = [{**asdict(r), "curve": [list(p) for p in r.curve]} for r in self.rows]
        return d

    @classmethod
    def build(cls, rows: list[SweepRow], *, objective: str, maximize: bool, within: float,
              min_retention: float | None, by: str, retention_before: float | None = None) -> SweepReport:
        """Mark both fronts and the recommendation on ``rows``.

        Args:
            rows: the candidates' rows.
            objective: the objective's name.
            maximize: a larger objective is better.
            within: share of the best objective a recommended plan may lose (0.01: 1 %).
            min_retention: retention floor (None: none).
            by: ``time`` or ``memory``.
            retention_before: the model's retention before training, or None.

        Returns:
            The report.
        """
        for flag, cost in (("on_time_front", "time"), ("on_memory_front", "memory")):
            front = set(front_2d(rows, cost, maximize=maximize))
            for i, r in enumerate(rows):
                setattr(r, flag, i in front)
        chosen, text = recommend(rows, within=within, min_retention=min_retention, by=by, maximize=maximize,
                                 objective=objective)
        return cls(rows, objective, maximize, chosen, text, within, min_retention, by, retention_before)


def _better_or_equal(a: float, b: float, maximize: bool) -> bool:
    return a >= b if maximize else a <= b


def front_2d(rows: Sequence[SweepRow], by: str, *, maximize: bool = True) -> list[int]:
    """Indices of the compared rows that no other compared row beats on both metric and cost.

    Row j beats row i when it costs no more and scores no worse, and is strictly better on one
    of the two; equal rows are both kept.

    Args:
        rows: the sweep's rows (only :attr:`SweepRow.compared` ones take part).
        by: the cost, ``time`` or ``memory``.
        maximize: a larger metric is better.

    Returns:
        Indices into ``rows``, in row order.
    """
    live = [i for i, r in enumerate(rows) if r.compared and math.isfinite(r.cost(by))]
    out = []
    for i in live:
        mi, ci = rows[i].metric, rows[i].cost(by)
        assert mi is not None
        beaten = False
        for j in live:
            mj, cj = rows[j].metric, rows[j].cost(by)
            assert mj is not None
            if j != i and cj <= ci and _better_or_equal(mj, mi, maximize) and (cj < ci or mj != mi):
                beaten = True
                break
        if not beaten:
            out.append(i)
    return out


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def recommend(rows: Sequence[SweepRow], *, within: float, min_retention: float | None, by: str,
              maximize: bool = True, objective: str = "accuracy") -> tuple[int | None, str]:
    """The cheapest compared row within ``within`` of the best objective, with retention at least ``min_retention``.

    "Within" is relative to the best: for a larger-is-better metric ``m >= best * (1 - within)``
    (``best - |best| * within``), for a loss ``m <= best + |best| * within``. Ties in cost go
    to the better metric, then to the earlier row.

    Args:
        rows: the sweep's rows.
        within: the share of the best objective a plan may lose (0.01: 1 %).
        min_retention: rows whose retention is below it (or not measured) are left out; None:
            no floor.
        by: ``time`` or ``memory``.
        maximize: a larger objective is better.
        objective: its name, for the sentence.

    Returns:
        ``(index or None, one sentence)``.
    """
    compared = [i for i, r in enumerate(rows) if r.compared]
    if not compared:
        return None, "nothing to recommend: no candidate trained for the whole budget with a measured " + objective
    values = {i: float(rows[i].metric) for i in compared}  # type: ignore[arg-type]
    best_i = max(compared, key=lambda i: values[i]) if maximize else min(compared, key=lambda i: values[i])
    best = values[best_i]
    slack = abs(best) * within
    near = [i for i in compared if (values[i] >= best - slack if maximize else values[i] <= best + slack)]
    if min_retention is not None:
        kept = [i for i in near if rows[i].retention is not None and rows[i].retention >= min_retention]  # type: ignore[operator]
        if not kept:
            return None, (f"nothing to recommend: no candidate within {within:.0%} of the best {objective} "
                          f"({_fmt(best)}, {rows[best_i].name}) keeps retention >= {_fmt(min_retention)}")
        near = kept
    sign = -1.0 if maximize else 1.0
    chosen = min(near, key=lambda i: (rows[i].cost(by), sign * values[i], i))
    r = rows[chosen]
    cost = f"{r.time_s:.1f} s" if by == "time" and r.time_s is not None else fmt_memory(r.peak_bytes)
    text = (f"recommended: {r.name}: the cheapest by {by} ({cost}) within {within:.0%} of the best "
            f"{objective} ({_fmt(values[chosen])} vs {_fmt(best)}, {rows[best_i].name})")
    if min_retention is not None:
        text += f", retention {_fmt(r.retention or 0.0)} >= {_fmt(min_retention)}"
    return chosen, text

