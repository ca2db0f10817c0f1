"""The plots' range maths, Qt-free: y intervals without outliers, coarse y ranges that move
only now and then, nice round numbers, paused intervals of a run, and the share of a core
live redraws may use."""

from __future__ import annotations

import math
import os

import numpy as np

__all__ = [
    "MIN_COLUMN_PX", "ROBUST_MIN_POINTS", "coarse_range", "drawing_budget", "grid_columns", "nice_ceiling",
    "pause_intervals",
    "robust_bounds",
]

#: Values needed before outliers are left out of a y range.
ROBUST_MIN_POINTS = 32


def drawing_budget(device: str = "cpu", threads: int | None = None) -> float:
    """The share of one core live redraws may use (see :attr:`PlotsPanel.budget`).

    When a run on the CPU has torch threads on every core, each repaint of the window takes
    a core (and the GIL) from the training step, which then waits for it; drawing is then
    held to 1 % of a core (a redraw costs about 7 ms, so the plots redraw about once a
    second, the least they do while a run is live). With a core to spare, or a run on a GPU
    (its CPU threads mostly wait for the device), 50 %.

    Args:
        device: the device the run trains on (``"cpu"``, ``"cuda:0"``, ``"mps"``), or ``"idle"``
            when no run is live.
        threads: the run's torch threads (default: the training thread's count,
            :func:`workbench.core.training.cpu_threads.worker_thread_count`).

    Returns:
        The fraction.
    """
    from workbench.core.training.cpu_threads import worker_thread_count

    if device != "cpu":  # a GPU run, or "idle": no run is live
        return 0.5
    spare = (os.cpu_count() or 1) - (threads or worker_thread_count())
    return 0.5 if spare >= 1 else 0.01


def robust_bounds(y: np.ndarray, ignore_outliers: bool = True) -> tuple[float, float] | None:
    """The y interval to show for values ``y``: all of them, or all but the outliers.

    Outliers are values beyond 3 interquartile ranges from the quartiles (Tukey's far
    fences), so a single 3.8 s step does not flatten a 150 → 120 ms change. With fewer than
    :data:`ROBUST_MIN_POINTS` values every value counts (quartiles of a handful of points
    say nothing).

    Args:
        y: values (NaN and inf are skipped).
        ignore_outliers: leave outliers out of the interval.

    Returns:
        ``(low, high)``, or None when no value is finite.
    """
    y = np.asarray(y, dtype=np.float64)
    y = y[np.isfinite(y)]
    if not y.size:
        return None
    lo, hi = float(y.min()), float(y.max())
    if ignore_outliers and y.size >= ROBUST_MIN_POINTS:
        q1, q3 = (float(v) for v in np.percentile(y, [25.0, 75.0]))
        fence = 3.0 * (q3 - q1)
        lo, hi = max(lo, q1 - fence), min(hi, q3 + fence)
    return lo, hi


def nice_ceiling(v: float) -> float:
    """The smallest of 1, 1.5, 2, 3, 4, 5, 6, 8 × 10^k that is >= ``v`` (> 0)."""
    if v <= 0:
        return 1.0
    k = math.floor(math.log10(v))
    for m in (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0):
        c = m * 10.0**k
        if c >= v * (1 - 1e-12):
            return c
    return 10.0 ** (k + 1)


def coarse_range(lo: float, hi: float, current: tuple[float, float] | None) -> tuple[float, float]:
    """A y range for data spanning ``lo``..``hi`` that changes only now and then.

    The current range is kept while it holds the data clear of its edges (2 % of it) and the
    data fill at least half of it; otherwise the new range pads the data by 10 % and rounds
    outwards to a nice step (a range for data that are all 0 or above stays there).

    Args:
        lo: smallest value shown.
        hi: largest value shown.
        current: the range now, or None.

    Returns:
        ``(bottom, top)``.
    """
    if current is not None:
        c_lo, c_hi = current
        margin = 0.02 * (c_hi - c_lo)
        if c_lo + margin <= lo and hi <= c_hi - margin and (hi - lo) >= 0.5 * (c_hi - c_lo):
            return current
    span = hi - lo
    if span <= 0:
        span = abs(hi) * 0.2 or 1.0
    q = nice_ceiling(span * 1.2 / 8)
    bottom = math.floor((lo - 0.1 * span) / q) * q
    top = math.ceil((hi + 0.1 * span) / q) * q
    if lo >= 0 > bottom:
        bottom = 0.0
    return bottom, top


#: A gap between two reports counts as time not training when it is this many seconds longer
#: than the steps in it took (and :data:`GAP_FACTOR` times as long).
GAP_MIN_S = 0.5
GAP_FACTOR = 2.0


def pause_intervals(
    step: np.ndarray, wall: np.ndarray, step_ms: np.ndarray, data_ms: np.ndarray, val_loss: np.ndarray | None = None
) -> list[tuple[float, float, str]]:
    """The wall-time intervals in which a run did not train: pauses, and validation.

    Between two reports the run trained for ``(steps between them) × (step + data time)``;
    the rest of the wall time between them went elsewhere. A gap longer than that by
    :data:`GAP_MIN_S` seconds and :data:`GAP_FACTOR` times is an interval not trained: it
    starts at the earlier report and lasts as long as the gap. The gap of a report that
    validated is validation time; any other is a pause (or a stall of the data loader).

    Args:
        step: the reports' steps.
        wall: their wall times (seconds since the run started, pauses included).
        step_ms: their step times (ms per step).
        data_ms: their data times (ms per step).
        val_loss: their validation losses (NaN where they did not validate), or None.

    Returns:
        ``[(start, end, kind)]`` in wall-time order, kind ``"paused"`` or ``"validation"``.
    """
    step, wall = np.asarray(step, dtype=np.float64), np.asarray(wall, dtype=np.float64)
    n = min(len(step), len(wall))
    if n < 2:
        return []
    busy = np.nan_to_num(np.asarray(step_ms, dtype=np.float64)[:n]) + np.nan_to_num(np.asarray(data_ms, dtype=np.float64)[:n])
    trained = np.maximum(np.diff(step[:n]), 1.0) * busy[1:] / 1000.0
    gap = np.diff(wall[:n]) - trained
    found = np.nonzero(np.isfinite(gap) & (gap > GAP_MIN_S) & (gap > GAP_FACTOR * trained))[0]
    val = np.asarray(val_loss, dtype=np.float64)[:n] if val_loss is not None else None
    out: list[tuple[float, float, str]] = []
    for i in found:
        start = float(wall[i])
        kind = "validation" if val is not None and math.isfinite(float(val[i + 1])) else "paused"
        out.append((start, start + float(gap[i]), kind))
    return out


#: A plot column is at least this wide (pixels) before the grid takes another column.
MIN_COLUMN_PX = 200


def grid_columns(width: float, plots: int, current: int = 0) -> int:
    """How many columns the plot grid takes: by the canvas's width only, so a neighbour that
    grows in height never makes the grid jump; 20 px of hysteresis keeps a width near a
    threshold from flipping it back and forth.

    Args:
        width: the canvas's width in pixels.
        plots: the plots shown (the read-out takes a cell too).
        current: the columns now (0: none yet).

    Returns:
        1, 2 or 3 (never more than the cells to fill).
    """
    cells = max(1, plots + 1)
    want = max(1, min(3, int(width // MIN_COLUMN_PX), cells))
    if current and want != current:
        keep = max(1, min(3, int((width + (20 if want < current else -20)) // MIN_COLUMN_PX), cells))
        if keep == current:
            return current
    return want
