"""Plot data of one training run: a ring buffer of metric columns (Qt-free).

:class:`SeriesBuffer` keeps the latest ``capacity`` reported steps as float columns in one
numpy array. Each row is written twice, at ``i`` and ``i + capacity`` (the "double write"
ring), so the newest ``n`` rows are always one contiguous slice: the plots read views, never
copies, and appending a batch is a couple of fancy-index assignments.

Columns (see :data:`COLUMNS`) are in plot units: milliseconds, megabytes (10⁶ bytes),
parameter elements, samples per second. ``state_mb`` is the bytes of gradients plus
optimizer state (exact tensor sizes, comparable between runs on any device). Missing values (no reserved memory on CPU, a
non-finite loss) are NaN. ``step_ms_ema`` and ``loss_ema`` are exponential moving averages
with the factor :attr:`SeriesBuffer.ema` (0 turns smoothing off).
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

__all__ = ["COLUMNS", "DEFAULT_CAPACITY", "SeriesBuffer"]

#: Column names, in storage order.
COLUMNS: tuple[str, ...] = (
    "step",
    "wall",
    "step_ms",
    "step_ms_ema",
    "data_ms",
    "mem_alloc",
    "mem_peak",
    "mem_reserved",
    "state_mb",
    "trainable",
    "loss",
    "loss_ema",
    "throughput",
)
_INDEX = {name: i for i, name in enumerate(COLUMNS)}
#: Rows kept per run by default (about 19 MB as float64 with the double write).
DEFAULT_CAPACITY = 100_000


def _num(value: Any, scale: float = 1.0) -> float:
    """A finite float times ``scale``, or NaN for None / non-numbers / NaN / inf."""
    if value is None or isinstance(value, bool):
        return math.nan
    try:
        f = float(value)
    except (TypeError, ValueError):
        return math.nan
    return f * scale if math.isfinite(f) else math.nan


def _state_mb(m: Mapping[str, Any]) -> float:
    """Megabytes of gradients plus optimizer state (NaN when the record has neither)."""
    grads, state = m.get("grad_bytes"), m.get("optimizer_state_bytes")
    if grads is None and state is None:
        return math.nan
    return _num(grads or 0) * 1e-6 + _num(state or 0) * 1e-6


class SeriesBuffer:
    """The newest ``capacity`` metric rows of a run, as contiguous numpy columns.

    Args:
        capacity: rows kept; older rows drop out (the run store keeps every row).
        ema: smoothing factor of the ``*_ema`` columns, in [0, 1); 0 means no smoothing.

    Raises:
        ValueError: capacity < 1 or ema outside [0, 1).

    Example:
        >>> buf = SeriesBuffer(capacity=4)
        >>> buf.append([{"step": i, "step_time_s": 0.01 * (i + 1)} for i in range(6)])
        6
        >>> buf.column("step").tolist()
        [2.0, 3.0, 4.0, 5.0]
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY, ema: float = 0.9) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self._data = np.full((2 * self.capacity, len(COLUMNS)), np.nan, dtype=np.float64)
        self.total = 0  # rows ever appended
        self.ema = self._check_ema(ema)
        self._ema_state = {"step_ms": math.nan, "loss": math.nan}
        self.version = 0  # bumped on every change (plots redraw when it moved)

    @staticmethod
    def _check_ema(ema: float) -> float:
        if not 0.0 <= float(ema) < 1.0:
            raise ValueError(f"ema must be in [0, 1), got {ema}")
        return float(ema)

    def __len__(self) -> int:
        return min(self.total, self.capacity)

    def clear(self) -> None:
        """Drop every row."""
        self._data.fill(np.nan)
        self.total = 0
        self._ema_state = {"step_ms": math.nan, "loss": math.nan}
        self.version += 1

    # ------------------------------------------------------------ writing
    def _smooth(self, key: str, x: float) -> float:
        prev = self._ema_state[key]
        if math.isnan(x):
            return prev
        value = x if (math.isnan(prev) or self.ema == 0.0) else self.ema * prev + (1.0 - self.ema) * x
        self._ema_state[key] = value
        return value

    def _row(self, m: Mapping[str, Any]) -> list[float]:
        step_ms = _num(m.get("step_time_s"), 1e3)
        loss = _num(m.get("loss"))
        return [
            _num(m.get("step")),
            _num(m.get("wall_time")),
            step_ms,
            self._smooth("step_ms", step_ms),
            _num(m.get("data_time_s"), 1e3),
            _num(m.get("mem_allocated"), 1e-6),
            _num(m.get("mem_peak"), 1e-6),
            _num(m.get("mem_reserved"), 1e-6),
            _state_mb(m),
            _num(m.get("trainable_params")),
            loss,
            self._smooth("loss", loss),
            _num(m.get("samples_per_s")),
        ]

    def append(self, metrics: Iterable[Mapping[str, Any]]) -> int:
        """Add metric records (``StepMetrics.to_dict()`` form).

        Args:
            metrics: records in step order.

        Returns:
            How many rows were added.
        """
        rows = [self._row(m) for m in metrics]
        k = len(rows)
        if not k:
            return 0
        block = np.asarray(rows, dtype=np.float64)
        if k > self.capacity:  # only the newest rows fit
            block = block[-self.capacity :]
        first = self.total + k - len(block)
        pos = (first + np.arange(len(block))) % self.capacity
        self._data[pos] = block
        self._data[pos + self.capacity] = block
        self.total += k
        self.version += 1
        return k

    def set_ema(self, ema: float) -> None:
        """Change the smoothing factor and recompute the ``*_ema`` columns.

        Args:
            ema: factor in [0, 1); 0 turns smoothing off (the EMA equals the raw value).

        Raises:
            ValueError: out of range.
        """
        self.ema = self._check_ema(ema)
        n = len(self)
        start = self._start()
        for raw, col in (("step_ms", "step_ms_ema"), ("loss", "loss_ema")):
            xs = self._data[start : start + n, _INDEX[raw]]
            out = np.empty(n)
            prev = math.nan
            for i, x in enumerate(xs.tolist()):
                if not math.isnan(x):
                    prev = x if (math.isnan(prev) or self.ema == 0.0) else self.ema * prev + (1.0 - self.ema) * x
                out[i] = prev
            self._write_column(col, out)
            self._ema_state[raw] = prev
        self.version += 1

    def _write_column(self, name: str, values: np.ndarray) -> None:
        n = len(values)
        if not n:
            return
        pos = (self.total - n + np.arange(n)) % self.capacity
        j = _INDEX[name]
        self._data[pos, j] = values
        self._data[pos + self.capacity, j] = values

    # ------------------------------------------------------------ reading
    def _start(self) -> int:
        return (self.total - len(self)) % self.capacity

    def column(self, name: str) -> np.ndarray:
        """The newest rows of one column, oldest first (a read-only view).

        Args:
            name: one of :data:`COLUMNS`.

        Returns:
            A 1-D float array of ``len(self)`` values.

        Raises:
            KeyError: unknown column.
        """
        j = _INDEX[name]
        s = self._start()
        view = self._data[s : s + len(self), j]
        view.flags.writeable = False
        return view

    def last(self, name: str) -> float:
        """The newest value of a column (NaN when empty)."""
        if not self.total:
            return math.nan
        return float(self._data[(self.total - 1) % self.capacity, _INDEX[name]])

    def has_values(self, name: str) -> bool:
        """Whether a column holds any non-NaN value."""
        col = self.column(name)
        return bool(col.size) and not bool(np.isnan(col).all())

    def nearest(self, x_name: str, x: float) -> dict[str, float] | None:
        """The row whose ``x_name`` column is closest to ``x`` (the column must be increasing).

        Args:
            x_name: ``"step"`` or ``"wall"``.
            x: the position.

        Returns:
            ``{column: value}``, or None when empty.
        """
        xs = self.column(x_name)
        if not xs.size:
            return None
        i = int(np.searchsorted(xs, x))
        if i >= xs.size:
            i = xs.size - 1
        elif i > 0 and abs(xs[i - 1] - x) <= abs(xs[i] - x):
            i -= 1
        s = self._start()
        row = self._data[s + i]
        return {name: float(row[j]) for name, j in _INDEX.items()}

    def first(self, name: str) -> float:
        """The oldest finite value of a column that is kept (NaN when none)."""
        col = self.column(name)
        finite = col[np.isfinite(col)]
        return float(finite[0]) if finite.size else math.nan

    def median(self, name: str, skip: int = 0) -> float:
        """Median of a column over the kept rows, after the first ``skip`` (NaN when none).

        Args:
            name: column.
            skip: leading rows left out (warm-up).
        """
        col = self.column(name)[skip:]
        col = col[~np.isnan(col)]
        return float(np.median(col)) if col.size else math.nan

    @classmethod
    def from_metrics(
        cls, metrics: Sequence[Mapping[str, Any]], capacity: int | None = None, ema: float = 0.9
    ) -> "SeriesBuffer":
        """A buffer filled with a whole run's records (for overlays of stored runs).

        Args:
            metrics: the records.
            capacity: rows kept (default: all of them, at least 1).
            ema: smoothing factor.

        Returns:
            The buffer.
        """
        buf = cls(capacity or max(1, len(metrics)), ema)
        buf.append(metrics)
        return buf
