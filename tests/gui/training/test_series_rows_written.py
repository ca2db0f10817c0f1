"""The series buffer reads only rows it wrote: its columns are left unfilled when it is made and when it is
cleared (filling the default capacity's 2 × 100,000 rows cost every plots panel tens of MB), so whatever
the memory held before must never reach a column, a read-out or the smoothing."""

from __future__ import annotations

import math

import numpy as np

from workbench.gui.training.series import SeriesBuffer

_GARBAGE = 7.77e300


def _poisoned(capacity: int) -> SeriesBuffer:
    """A buffer whose unwritten rows hold garbage, as fresh memory may."""
    buf = SeriesBuffer(capacity=capacity, ema=0.5)
    buf._data.fill(_GARBAGE)
    return buf


def _all_values(buf: SeriesBuffer) -> list[float]:
    out = [v for name in ("step", "loss", "loss_ema", "step_ms") for v in buf.column(name).tolist()]
    out += [buf.last(name) for name in ("step", "loss", "loss_ema")]
    for x in (-1.0, 0.5, 2.0, 99.0):
        row = buf.nearest("step", x)
        out += list(row.values()) if row else []
    return [v for v in out if not math.isnan(v)]


def test_a_new_buffer_reads_only_what_was_appended() -> None:
    buf = _poisoned(4)
    assert len(buf) == 0 and buf.nearest("step", 1.0) is None and math.isnan(buf.last("loss"))
    buf.append([{"step": i, "loss": 1.0 / (i + 1), "step_time_s": 0.01} for i in range(3)])
    assert buf.column("step").tolist() == [0.0, 1.0, 2.0]
    buf.set_ema(0.25)
    assert _GARBAGE not in _all_values(buf) and buf.has_values("loss") and not buf.has_values("val_loss")


def test_a_wrapped_and_a_cleared_buffer_read_only_what_was_appended() -> None:
    buf = _poisoned(3)
    buf.append([{"step": i, "loss": float(i), "step_time_s": 0.01} for i in range(5)])  # wraps: 2, 3, 4 kept
    assert buf.column("step").tolist() == [2.0, 3.0, 4.0] and _GARBAGE not in _all_values(buf)
    buf.clear()
    buf._data.fill(_GARBAGE)
    assert len(buf) == 0 and buf.nearest("step", 0.0) is None
    buf.append([{"step": 10, "loss": 0.5, "step_time_s": 0.02}])
    assert buf.column("loss").tolist() == [0.5] and _GARBAGE not in _all_values(buf)
    assert np.isnan(buf.column("val_loss")).all()
