"""Per-step training metrics: the :class:`StepMetrics` record, its files, and how memory figures read.

Everything the GUI plots comes from :class:`StepMetrics`. It is plain data (numbers, strings
and lists), safe to hand across threads and to write as JSON lines or CSV.

Memory is read cheaply once per reported step. **Peak memory** is one number per run, the
same in the plots' read-out, the cost panel's "measured" line, the Runs table and its compare
line, the CLI summary and ``summary.json`` (``peak_memory_bytes``, with ``memory_source``
naming the measure); :func:`fmt_memory` writes it the same way everywhere:

- CUDA: ``torch.cuda.max_memory_allocated`` since the run's first step (the peak statistics
  are reset then: weights, gradients, optimizer state and activations; not the caching
  allocator's reserve, which is ``mem_reserved``);
- MPS: the largest ``torch.mps.current_allocated_memory`` sampled (driver memory as reserved);
- CPU: **peak tensor bytes**: the most bytes of live tensor storages during a training step
  (:class:`~workbench.core.training.memory_probe.LiveTensorBytes`, a dispatch mode that counts every storage an op creates and
  subtracts it when it is freed), weights, buffers, gradients, optimizer state and what A+B
  keeps beside the model (:func:`~workbench.core.training.memory_probe.training_tensors`) included:
  the quantity the advisor predicts and its measurement reads. The mode costs Python work
  per op, so it watches the first :data:`TENSOR_STEPS` steps of the run and of each plan
  change (the step's memory repeats while the plan and the batch do), not every step. A run
  whose forward is compiled (``compile_backend``) is not watched: its peak is the RSS growth
  below, and ``memory_source`` says so.

On the CPU the process's **RSS growth** is a second quantity with its own name: the largest
resident set size sampled at reported steps minus the RSS when the run's setup began (heap
memory freed earlier is handed back first, :func:`~workbench.core.training.memory_probe.release_freed_heap`), ``mem_allocated``
per step and ``peak_rss_growth_bytes`` in the summary. It counts every allocation of the
process (data loading, Python objects, libraries loaded late, allocator caches), so it is
not tensor bytes. The absolute process RSS is a third, ``mem_rss`` per step and
``peak_rss_bytes`` in the summary (CPU runs). On Linux RSS is read from
``/proc/self/statm`` through a file descriptor kept open (about 1.5 µs; psutil takes about
12 µs, which is the fallback elsewhere).

The probes and byte counters that take these measurements are in
:mod:`workbench.core.training.memory_probe` (they need torch; this module does not, so the app
reads and formats metrics before torch is imported).
"""

from __future__ import annotations

import contextlib
import csv
import itertools
import json
import math
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import IO, Any

from workbench.core.atomic import atomic_path
from workbench.core.errors import WorkbenchError

__all__ = [
    "MEMORY_SOURCES",
    "METRICS_SUFFIXES",
    "RSS_GROWTH_SOURCE",
    "TENSOR_STEPS",
    "MetricsError",
    "MetricsWriter",
    "StepMetrics",
    "fmt_memory",
    "iter_metrics",
    "load_metrics",
]

#: File suffixes :class:`MetricsWriter` understands (JSON lines or CSV).
METRICS_SUFFIXES: tuple[str, ...] = (".jsonl", ".json", ".csv")

_LIST_SEP = ";"
_EVENT_SEP = " | "


class MetricsError(WorkbenchError):
    """A metrics file cannot be written or read; the message says what to do."""


@dataclass
class StepMetrics:
    """What happened in one reported training step (or a window of ``window`` steps).

    Attributes:
        step: 0-based index of the (last) step of the report.
        epoch: 0-based epoch of that step.
        loss: training loss of the step (mean over the window); NaN when it was not finite.
        step_time_s: forward + backward + optimizer time per step, device-synchronized (CUDA
            events on CUDA); excludes data loading. Mean over the window.
        data_time_s: time waiting for the batch and copying it to the device, per step.
        samples_per_s: samples of this process per second, ``batch / (step + data time)``.
        wall_time: seconds since the run started (pauses included).
        mem_allocated: bytes: CUDA/MPS allocated, or the RSS growth since the run began (CPU).
        mem_peak: bytes: the run's peak memory so far (see the module docstring: CUDA peak
            allocated, MPS largest allocated seen, CPU peak RSS growth).
        mem_reserved: bytes reserved by the CUDA caching allocator (MPS: driver memory);
            None on CPU.
        mem_rss: bytes: the absolute process RSS (CPU runs; None elsewhere).
        trainable_params: trainable parameter elements in the plan in force.
        frozen_params: frozen parameter elements.
        grad_bytes: bytes of gradients of the trainable parameters (what backward allocates).
        optimizer_state_bytes: actual bytes held in ``optimizer.state``.
        lr: learning rate of each optimizer param group at this step (scheduled).
        lr_scales: the plan's ``lr_scale`` of each group, in the order of ``lr`` (the key
            of a group's lr curve: groups come and go with plan changes).
        plan_version: 0 for the starting plan, +1 per plan change in force.
        events: what changed at this step (plan changes, stages), for plot markers.
        device: the device the model trains on (``cuda:0``, ``cpu`` ...).
        batch_size: samples per step on this process.
        nonfinite_skipped: steps skipped so far because the loss was not finite.
        window: how many steps this report covers (``log_every``; 1 by default).
        val_loss: mean validation loss measured after this step, None when not measured.
        val_acc: validation top-1 accuracy (0..1) after this step, None when not measured or
            the task is not classification.
        val_metric: the run's metric (``metric_name``) on the validation data after this
            step, None when not measured or it does not apply to the outputs.
        metric_name: the run's metric (``TrainConfig.metric``: ``accuracy``, ``top5``, ``py:...``).
        module_stats: per-module gradient and update sums of squares
            (:class:`~workbench.core.training.module_stats.ModuleStats`) when a step of the
            window was measured, else None. Live only: not part of :meth:`to_dict`, JSON
            lines or CSV.
    """

    step: int
    epoch: int
    loss: float
    step_time_s: float
    data_time_s: float
    samples_per_s: float
    wall_time: float
    mem_allocated: int | None
    mem_peak: int | None
    mem_reserved: int | None
    trainable_params: int
    frozen_params: int
    grad_bytes: int
    optimizer_state_bytes: int
    lr: list[float] = field(default_factory=list)
    lr_scales: list[float] = field(default_factory=list)
    plan_version: int = 0
    events: list[str] = field(default_factory=list)
    device: str = "cpu"
    batch_size: int = 0
    nonfinite_skipped: int = 0
    window: int = 1
    val_loss: float | None = None
    val_acc: float | None = None
    mem_rss: int | None = None
    val_metric: float | None = None
    metric_name: str = "accuracy"
    module_stats: Any = field(default=None, repr=False, compare=False, metadata={"live": True})

    def to_dict(self) -> dict[str, Any]:
        """Plain-data copy (lists copied; a non-finite loss stays a float NaN/inf).

        Returns:
            ``{field: value}`` in field order, without the live-only ``module_stats``.
        """
        return {f.name: _copied(getattr(self, f.name)) for f in _record_fields()}

    def to_json(self) -> str:
        """One line of strict JSON (non-finite numbers written as ``null``).

        Returns:
            The JSON text, without a newline.
        """
        return json.dumps(_finite_or_none(self.to_dict()), allow_nan=False, ensure_ascii=False)

    def csv_row(self) -> list[str]:
        """Values for :meth:`csv_header`'s columns (lists joined, None empty, NaN empty)."""
        row: list[str] = []
        for f in _record_fields():
            v = getattr(self, f.name)
            if f.name in _LIST_FIELDS:
                row.append(_LIST_SEP.join(repr(float(x)) for x in v))
            elif f.name == "events":
                row.append(_EVENT_SEP.join(v))
            elif v is None or (isinstance(v, float) and not math.isfinite(v)):
                row.append("")
            elif isinstance(v, float):
                row.append(repr(v))
            else:
                row.append(str(v))
        return row

    @staticmethod
    def csv_header() -> list[str]:
        """CSV column names: the field names in order."""
        return [f.name for f in _record_fields()]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepMetrics:
        """Build from :meth:`to_dict` / a JSON line (``null`` loss read back as NaN).

        Args:
            data: the mapping; unknown keys are ignored, missing optional ones defaulted.

        Returns:
            The record.

        Raises:
            MetricsError: a required field is missing.
        """
        names = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        for k in ("loss", "step_time_s", "data_time_s", "samples_per_s", "wall_time"):
            if k in kwargs and kwargs[k] is None:
                kwargs[k] = math.nan
        try:
            return cls(**kwargs)
        except TypeError as e:
            raise MetricsError(f"not a metrics record ({e}); was the file written by `workbench train`?") from None


def _record_fields() -> tuple[Any, ...]:
    """The fields written to files (all but the live-only ones)."""
    return _RECORD_FIELDS


def _copied(v: Any) -> Any:
    return list(v) if isinstance(v, list) else v


def _finite_or_none(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite_or_none(v) for v in obj]
    return obj


_RECORD_FIELDS = tuple(f for f in fields(StepMetrics) if not f.metadata.get("live"))

_INT_FIELDS = {
    "step", "epoch", "mem_allocated", "mem_peak", "mem_reserved", "trainable_params",
    "frozen_params", "grad_bytes", "optimizer_state_bytes", "plan_version", "batch_size",
    "nonfinite_skipped", "window", "mem_rss",
}
_FLOAT_FIELDS = {"loss", "step_time_s", "data_time_s", "samples_per_s", "wall_time"}
_OPTIONAL_FLOAT_FIELDS = {"val_loss", "val_acc", "val_metric"}
_LIST_FIELDS = {"lr", "lr_scales"}


def _from_csv_row(row: dict[str, str]) -> StepMetrics:
    data: dict[str, Any] = {}
    for k, v in row.items():
        if k in _INT_FIELDS:
            data[k] = int(v) if v != "" else None
        elif k in _FLOAT_FIELDS:
            data[k] = float(v) if v != "" else math.nan
        elif k in _OPTIONAL_FLOAT_FIELDS:
            data[k] = float(v) if v != "" else None
        elif k in _LIST_FIELDS:
            data[k] = [float(x) for x in v.split(_LIST_SEP)] if v else []
        elif k == "events":
            data[k] = v.split(_EVENT_SEP) if v else []
        else:
            data[k] = v
    return StepMetrics.from_dict(data)


def _format_of(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in METRICS_SUFFIXES:
        raise MetricsError(
            f"metrics file {path} has an unknown suffix {suffix!r}; use .jsonl (JSON lines) or .csv"
        )
    return "csv" if suffix == ".csv" else "jsonl"


class MetricsWriter:
    """Write :class:`StepMetrics` records to a JSON-lines or CSV file, one per line.

    Lines go to a temporary file next to ``path`` (flushed after every record, so the run can
    be followed with ``tail -f`` on it, see :attr:`temp_path`) that replaces ``path``
    atomically on :meth:`close`. A reader of ``path`` never sees half a file.

    Args:
        path: ``*.jsonl`` (or ``*.json``) for JSON lines, ``*.csv`` for CSV.

    Raises:
        MetricsError: unknown suffix, or the folder is not writable.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.format = _format_of(self.path)
        self._stack = contextlib.ExitStack()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._tmp = self._stack.enter_context(atomic_path(self.path))
            self._file: IO[str] = open(self._tmp, "w", encoding="utf-8", newline="")  # noqa: SIM115 - closed by close()
        except OSError as e:
            self._stack.__exit__(type(e), e, e.__traceback__)  # abort: no file appears at path
            raise MetricsError(f"cannot write metrics to {self.path} ({e}); check the folder and permissions") from None
        self._csv = csv.writer(self._file) if self.format == "csv" else None
        if self._csv is not None:
            self._csv.writerow(StepMetrics.csv_header())
        self.count = 0
        self._closed = False

    @property
    def temp_path(self) -> Path:
        """The file being written until :meth:`close` (for following a live run)."""
        return self._tmp

    def write(self, m: StepMetrics) -> None:
        """Append one record and flush it.

        Args:
            m: the record.
        """
        if self._csv is not None:
            self._csv.writerow(m.csv_row())
        else:
            self._file.write(m.to_json() + "\n")
        self._file.flush()
        self.count += 1

    def close(self) -> None:
        """Finish the file: it replaces ``path`` atomically (records written so far are kept)."""
        if self._closed:
            return
        self._closed = True
        self._file.close()
        self._stack.close()

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: Longest line of a metrics file (a record is a few hundred bytes).
MAX_METRICS_LINE_BYTES = 1 << 20


def _open_regular(p: Path) -> IO[bytes]:
    """Open a regular file for reading without blocking on a FIFO or a device."""
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise MetricsError(f"cannot read metrics file {p} ({e.strerror or e}); check the path") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file (a device, pipe or socket)"
        raise MetricsError(f"metrics file {p} is {kind}; pass a metrics file written by `workbench train`")
    return os.fdopen(fd, "rb")


def _lines(f: IO[bytes], p: Path) -> Iterator[str]:
    """The file's lines, each read with a bound (a line past the bound is an error naming it)."""
    for i in itertools.count(1):
        raw = f.readline(MAX_METRICS_LINE_BYTES + 1)
        if not raw:
            return
        if len(raw) > MAX_METRICS_LINE_BYTES:
            raise MetricsError(f"{p}, line {i}: longer than {MAX_METRICS_LINE_BYTES:,} bytes; not a metrics record")
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError:
            raise MetricsError(
                f"{p}, line {i}: not UTF-8 text; is it a metrics file written by `workbench train`?"
            ) from None


def iter_metrics(path: str | os.PathLike[str]) -> Iterator[StepMetrics]:
    """Stream the records of a metrics file, one line at a time (memory bounded per line).

    Args:
        path: a JSON-lines or CSV file written by :class:`MetricsWriter`; a regular file.

    Yields:
        The records in file order.

    Raises:
        MetricsError: missing or not a regular file, unknown suffix, a line longer than
            :data:`MAX_METRICS_LINE_BYTES`, or a malformed line (its number is named).
    """
    p = Path(path)
    fmt = _format_of(p)
    with _open_regular(p) as f:
        if fmt == "csv":
            reader = csv.DictReader(_lines(f, p))
            try:
                names = reader.fieldnames
            except csv.Error as e:
                raise MetricsError(f"{p}, line 1: {e}") from None
            known = StepMetrics.csv_header()
            if not names or any(n not in known for n in names):
                raise MetricsError(f"{p}: unexpected CSV columns {names}; was it written by `workbench train`?")
            i = 1
            while True:
                try:
                    row = next(reader)
                except StopIteration:
                    return
                except csv.Error as e:
                    raise MetricsError(f"{p}, line {reader.line_num}: {e}") from None
                i += 1
                try:
                    yield _from_csv_row(row)
                except (ValueError, TypeError, MetricsError) as e:
                    raise MetricsError(f"{p}, line {i}: {e}") from None
        for i, line in enumerate(_lines(f, p), start=1):
            if not line.strip():
                continue
            try:
                yield StepMetrics.from_dict(json.loads(line))
            except (json.JSONDecodeError, MetricsError, AttributeError, TypeError) as e:
                raise MetricsError(f"{p}, line {i}: not a metrics record ({e})") from None


def load_metrics(path: str | os.PathLike[str]) -> list[StepMetrics]:
    """Read a metrics file written by :class:`MetricsWriter` (JSON lines or CSV).

    Args:
        path: the file.

    Returns:
        The records in file order.

    Raises:
        MetricsError: missing file, unknown suffix, or a malformed line (its number is named).
    """
    return list(iter_metrics(path))


# ---------------------------------------------------------------- memory
#: ``memory_source`` per device kind: what ``peak_memory_bytes`` and ``mem_peak`` measure.
MEMORY_SOURCES: dict[str, str] = {
    "cuda": "CUDA peak allocated",
    "mps": "MPS peak allocated",
    "cpu": "peak tensor bytes",
}
#: ``memory_source`` of a CPU run whose steps were not watched (a compiled forward): the RSS growth.
RSS_GROWTH_SOURCE = "peak RSS growth"
#: Steps watched for the CPU tensor peak at the run's start and after each plan change.
TENSOR_STEPS = 3


def fmt_memory(n: float | None) -> str:
    """A memory figure as every read-out shows it: decimal megabytes, no decimals.

    A figure above zero that rounds to no megabyte (0.5 MB or less) reads ``"<1 MB"``, so that
    a small measured peak is not taken for nothing measured; zero reads ``"0 MB"``.

    Args:
        n: bytes, or None.

    Returns:
        ``"1,234 MB"``, ``"<1 MB"`` for 0 < n <= 0.5 MB, or ``"–"`` for None (or not finite).
    """
    if n is None or not math.isfinite(float(n)):
        return "–"
    text = f"{float(n) / 1e6:,.0f}"
    return "<1 MB" if float(n) > 0 and text == "0" else f"{text} MB"
