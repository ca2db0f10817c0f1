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

Validation is sparse: ``val_loss`` and ``val_acc`` (percent) hold a number at the steps that
validated and NaN elsewhere. The learning rate of each optimizer param group is kept apart,
one column per ``lr_scale`` (groups come and go with plan changes; groups of one scale share
their lr), read with :meth:`SeriesBuffer.lr_scales` and :meth:`SeriesBuffer.lr_column`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["COLUMNS", "DEFAULT_CAPACITY", "Column", "SeriesBuffer", "lr_group_name"]

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


def lr_group_name(scale: float, plan: Mapping[str, Any] | None = None, limit: int = 28) -> str:
    """A readable name of the param groups with this ``lr_scale``: ``×0.1 layer3, layer4``.

    Args:
        scale: the groups' ``lr_scale``.
        plan: the run's plan (its rules with this ``lr_scale`` name the modules); None: the
            scale alone.
        limit: longest name; longer ones end with ``…``.

    Returns:
        ``base ×1`` for the run's own lr, else ``×scale`` and the selectors of the plan's
        rules that give this scale.
    """
    if scale == 1.0:
        return "base ×1"
    selects: list[str] = []
    for rule in (plan or {}).get("rules") or []:
        value = rule.get("lr_scale") if isinstance(rule, Mapping) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isclose(float(value), scale):
            select = rule.get("select")
            selects.extend(select if isinstance(select, list) else [str(select)])
    text = f"×{scale:.3g}" + (" " + ", ".join(selects) if selects else "")
    return text if len(text) <= limit else text[: limit - 1].rstrip(", ") + "…"


def _lr_by_scale(m: Mapping[str, Any]) -> dict[float, float]:
    """``{lr_scale: lr}`` of a metric record's param groups (the first group of each scale)."""
    lrs = m.get("lr") or []
    scales = m.get("lr_scales") or [1.0] * len(lrs)
    out: dict[float, float] = {}
    for lr, scale in zip(lrs, scales, strict=False):
        key = _num(scale)
        if not math.isnan(key):
            out.setdefault(key, _num(lr))
    return out


def _state_mb(m: Mapping[str, Any]) -> float:
    """Megabytes of gradients plus optimizer state (NaN when the record has neither)."""
    grads, state = m.get("grad_bytes"), m.get("optimizer_state_bytes")
    if grads is None and state is None:
        return math.nan
    return _num(grads or 0) * 1e-6 + _num(state or 0) * 1e-6


def _field(name: str, scale: float = 1.0) -> Callable[[Mapping[str, Any], str], float]:
    """A reader of one record field times ``scale``."""
    return lambda m, _metric: _num(m.get(name), scale)


def _metric(m: Mapping[str, Any], metric_name: str) -> float:
    """The validation metric: accuracy in percent, any other metric as it is."""
    return _num(m.get("val_acc"), 100.0) if metric_name == "accuracy" else _num(m.get("val_metric"))


@dataclass(frozen=True)
class Column:
    """One series column: its name and how a metric record gives its value.

    Attributes:
        name: the column's name (plots name it in their curves).
        read: its value in a record (``StepMetrics.to_dict()`` form) and the run's validation
            metric name, in plot units; NaN where missing.
        smooth: the name of the column this one is the moving average of (``""``: none; then
            ``read`` is not used).
    """

    name: str
    read: Callable[[Mapping[str, Any], str], float] = field(default=lambda _m, _metric: math.nan)
    smooth: str = ""


#: The columns, in storage order.
COLUMNS: tuple[Column, ...] = (
    Column("step", _field("step")),
    Column("wall", _field("wall_time")),
    Column("step_ms", _field("step_time_s", 1e3)),
    Column("step_ms_ema", smooth="step_ms"),
    Column("data_ms", _field("data_time_s", 1e3)),
    Column("mem_alloc", _field("mem_allocated", 1e-6)),
    Column("mem_peak", _field("mem_peak", 1e-6)),
    Column("mem_reserved", _field("mem_reserved", 1e-6)),
    Column("state_mb", lambda m, _metric: _state_mb(m)),
    Column("trainable", _field("trainable_params")),
    Column("loss", _field("loss")),
    Column("loss_ema", smooth="loss"),
    Column("throughput", _field("samples_per_s")),
    Column("val_loss", _field("val_loss")),
    Column("val_acc", _metric),
)


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
        #: the columns (the table as it was when the buffer was made)
        self.columns: tuple[Column, ...] = COLUMNS
        self._index = {c.name: j for j, c in enumerate(self.columns)}
        # left unfilled: every read is of rows written (the kept rows), and the default capacity's
        # 2 × 100,000 rows would be tens of MB to fill (and to page in) for every plots panel
        self._data = np.empty((2 * self.capacity, len(self.columns)), dtype=np.float64)
        self.total = 0  # rows ever appended
        self.ema = self._check_ema(ema)
        self._ema_state = {c.smooth: math.nan for c in self.columns if c.smooth}
        self._lr_scales: list[float] = []  # one column of _lr per scale, in the order first seen
        self._lr = np.full((2 * self.capacity, 0), np.nan, dtype=np.float64)
        self.version = 0  # bumped on every change (plots redraw when it moved)
        #: the run's validation metric (``StepMetrics.metric_name``): the ``val_acc`` column holds
        #: the accuracy in percent for ``accuracy``, else that metric's own value
        self.metric_name = "accuracy"

    @staticmethod
    def _check_ema(ema: float) -> float:
        if not 0.0 <= float(ema) < 1.0:
            raise ValueError(f"ema must be in [0, 1), got {ema}")
        return float(ema)

    def __len__(self) -> int:
        return min(self.total, self.capacity)

    def clear(self) -> None:
        """Drop every row."""
        self._data = np.empty_like(self._data)  # as in __init__: no read reaches a row before it is written
        self.total = 0
        self._ema_state = dict.fromkeys(self._ema_state, math.nan)
        self._lr_scales = []
        self._lr = np.full((2 * self.capacity, 0), np.nan, dtype=np.float64)
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
        name = m.get("metric_name")
        if isinstance(name, str) and name:
            self.metric_name = name
        values: dict[str, float] = {}
        for c in self.columns:  # an average follows its column, which comes first
            values[c.name] = self._smooth(c.smooth, values[c.smooth]) if c.smooth else c.read(m, self.metric_name)
        return list(values.values())

    def append(self, metrics: Iterable[Mapping[str, Any]]) -> int:
        """Add metric records (``StepMetrics.to_dict()`` form).

        Args:
            metrics: records in step order.

        Returns:
            How many rows were added.
        """
        records = list(metrics)
        rows = [self._row(m) for m in records]
        k = len(rows)
        if not k:
            return 0
        block = np.asarray(rows, dtype=np.float64)
        if k > self.capacity:  # only the newest rows fit
            block = block[-self.capacity :]
            records = records[-self.capacity :]
        first = self.total + k - len(block)
        pos = (first + np.arange(len(block))) % self.capacity
        self._data[pos] = block
        self._data[pos + self.capacity] = block
        self._append_lr(records, pos)
        self.total += k
        self.version += 1
        return k

    def _append_lr(self, records: list[Mapping[str, Any]], pos: np.ndarray) -> None:
        """The lr of each group of ``records`` into the lr columns at rows ``pos``."""
        per_row = [_lr_by_scale(m) for m in records]
        new = [sc for row in per_row for sc in row if sc not in self._lr_scales]
        for sc in dict.fromkeys(new):  # a group seen for the first time: a column of NaN
            self._lr_scales.append(sc)
            self._lr = np.hstack([self._lr, np.full((2 * self.capacity, 1), np.nan)])
        if not self._lr_scales:
            return
        block = np.full((len(records), len(self._lr_scales)), np.nan)
        index = {sc: j for j, sc in enumerate(self._lr_scales)}
        for i, row in enumerate(per_row):
            for sc, lr in row.items():
                block[i, index[sc]] = lr
        self._lr[pos] = block
        self._lr[pos + self.capacity] = block

    def lr_scales(self) -> list[float]:
        """The ``lr_scale`` of every param group seen in the kept rows, in the order first seen."""
        return [sc for sc in self._lr_scales if self.has_lr(sc)]

    def has_lr(self, scale: float) -> bool:
        """Whether the group with this scale has an lr in the kept rows."""
        col = self.lr_column(scale)
        return bool(col.size) and not bool(np.isnan(col).all())

    def lr_column(self, scale: float) -> np.ndarray:
        """The lr of the param groups with ``lr_scale == scale``, oldest row first (a
        read-only view; NaN where no such group existed).

        Args:
            scale: a scale of :meth:`lr_scales`.

        Returns:
            A 1-D float array of ``len(self)`` values.

        Raises:
            KeyError: no group ever had this scale.
        """
        if scale not in self._lr_scales:
            raise KeyError(f"no param group with lr_scale {scale}")
        s = self._start()
        view = self._lr[s : s + len(self), self._lr_scales.index(scale)]
        view.flags.writeable = False
        return view

    def last_lr(self) -> dict[float, float]:
        """``{lr_scale: lr}`` of the newest row (groups in force at the last step)."""
        if not self.total:
            return {}
        row = self._lr[(self.total - 1) % self.capacity]
        return {sc: float(v) for sc, v in zip(self._lr_scales, row, strict=False) if not math.isnan(v)}

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
        for raw, col in ((c.smooth, c.name) for c in self.columns if c.smooth):
            xs = self._data[start : start + n, self._index[raw]]
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
        j = self._index[name]
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
        j = self._index[name]
        s = self._start()
        view = self._data[s : s + len(self), j]
        view.flags.writeable = False
        return view

    def last(self, name: str) -> float:
        """The newest value of a column (NaN when empty)."""
        if not self.total:
            return math.nan
        return float(self._data[(self.total - 1) % self.capacity, self._index[name]])

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
        i = self._nearest_index(x_name, x)
        if i is None:
            return None
        row = self._data[self._start() + i]
        return {name: float(row[j]) for name, j in self._index.items()}

    def _nearest_index(self, x_name: str, x: float) -> int | None:
        xs = self.column(x_name)
        if not xs.size:
            return None
        i = int(np.searchsorted(xs, x))
        if i >= xs.size:
            i = xs.size - 1
        elif i > 0 and abs(xs[i - 1] - x) <= abs(xs[i] - x):
            i -= 1
        return i

    def lr_near(self, x_name: str, x: float | None) -> dict[float, float]:
        """``{lr_scale: lr}`` of the row nearest ``x`` (None: the newest row).

        Args:
            x_name: ``"step"`` or ``"wall"``.
            x: the position, or None.

        Returns:
            The groups in force there (empty without rows).
        """
        if x is None:
            return self.last_lr()
        i = self._nearest_index(x_name, x)
        if i is None:
            return {}
        row = self._lr[self._start() + i]
        return {sc: float(v) for sc, v in zip(self._lr_scales, row, strict=False) if not math.isnan(v)}

    def latest(self, name: str, x_name: str, x: float | None = None) -> tuple[float, float] | None:
        """The newest finite value of a sparse column (``val_loss``) at or before ``x``.

        Args:
            name: the column.
            x_name: ``"step"`` or ``"wall"``.
            x: the position (None: the end).

        Returns:
            ``(x of that row, value)``, or None when no row up to ``x`` has a value.
        """
        xs, ys = self.column(x_name), self.column(name)
        end = xs.size if x is None else int(np.searchsorted(xs, x, side="right"))
        finite = np.flatnonzero(np.isfinite(ys[:end]))
        if not finite.size:
            return None
        i = int(finite[-1])
        return float(xs[i]), float(ys[i])

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
    ) -> SeriesBuffer:
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
