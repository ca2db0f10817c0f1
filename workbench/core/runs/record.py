"""One training run as a typed record: :class:`RunRecord`, and the numbers runs are compared by.

A :class:`RunRecord` is what is known about a run: its name, the plan and training config it
ran with, the model, how it ended (status, message, the engine's summary, the verify report),
the plan changes it saw (``events``) and its per-step metrics. :meth:`RunRecord.to_dict` and
:meth:`RunRecord.from_dict` are the one reader and writer of ``run.json`` (format
``workbench-run``, :data:`RUN_VERSION`); :mod:`workbench.core.runs.store` reads and writes the
folders.

:meth:`RunRecord.summarize` gives the :class:`RunSummary`: the numbers a run is shown and
compared by (median step time, peak memory, trainable parameters, final loss, validation,
and the same per plan segment, :class:`Segment`), measured in one place for the app's Runs
tab and ``workbench runs``.

Schema versions of ``run.json``:

- 1: the record as written by the app, first without ``notes`` and ``tags`` (read as empty),
  then with them; its metrics are ``metrics.csv``.
- 2: adds ``metrics_file``, the name of the metrics file beside it: the engine writes
  ``run.json`` into a ``workbench train --save`` folder too (:func:`write_run_file`), whose
  metrics are ``metrics.jsonl``. Save folders of earlier versions (``summary.json``,
  ``config.json``, ``plan.json``, ``metrics.jsonl`` and no ``run.json``) are read into the same
  record (:meth:`RunRecord.from_result`, :func:`workbench.core.runs.store.open_run`).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import statistics
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.core.atomic import atomic_write
from workbench.core.errors import WorkbenchError

__all__ = [
    "MAX_NAME_LENGTH",
    "RUN_FORMAT",
    "METRICS_FILES",
    "RUN_FILE",
    "RUN_VERSION",
    "STATUSES",
    "RunRecord",
    "SweepTag",
    "RunStoreError",
    "RunSummary",
    "Segment",
    "Validation",
    "clean_name",
    "clean_tags",
    "write_run_file",
]

RUN_FORMAT = "workbench-run"
#: The ``run.json`` schema version this code writes (and the newest it reads).
RUN_VERSION = 2
#: The name of a run's record in its folder.
RUN_FILE = "run.json"
#: Metrics file names a record may name: the app's CSV, the engine's JSON lines.
METRICS_FILES: tuple[str, ...] = ("metrics.csv", "metrics.jsonl")
#: Statuses a record can have: the engine's, plus ``running`` and ``interrupted``.
STATUSES: tuple[str, ...] = ("running", "completed", "stopped", "failed", "nonfinite", "interrupted")
#: Longest run name kept (longer names are cut).
MAX_NAME_LENGTH = 120


class RunStoreError(WorkbenchError):
    """A run cannot be written or read; the message names the file and what to do."""


def _now() -> str:
    return _dt.datetime.now().astimezone().isoformat(timespec="microseconds")  # runs in the same second sort in order


def clean_json(value: Any) -> Any:
    """A JSON-safe copy: non-finite floats become None, keys become strings.

    Args:
        value: a value made of dicts, lists, numbers and strings.

    Returns:
        The copy.
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): clean_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_json(v) for v in value]
    return value


def clean_name(name: str) -> str:
    """A run name as stored: one line, surrounding spaces removed, at most :data:`MAX_NAME_LENGTH`.

    Args:
        name: what the user typed.

    Returns:
        The name; ``""`` when nothing is left (the caller keeps the old name).
    """
    return " ".join(str(name).split())[:MAX_NAME_LENGTH]


def clean_tags(tags: str | Iterable[Any]) -> list[str]:
    """Tags as stored: from ``"a, b"`` or a list; spaces trimmed, empty and repeated ones dropped.

    Args:
        tags: comma-separated text or a list of tags.

    Returns:
        The tags in the order given.
    """
    raw = tags.split(",") if isinstance(tags, str) else [t for t in tags if isinstance(t, str)]
    out: list[str] = []
    for t in raw:
        t = " ".join(t.split())[:60]
        if t and t not in out:
            out.append(t)
    return out


@dataclass(frozen=True)
class Segment:
    """The steps of a run between two plan changes, with their medians.

    Attributes:
        start: first step of the segment.
        end: last step of the segment.
        label: the plan change that started it (``""`` for the starting plan).
        step_ms: median step time in ms, or None.
        trainable: median trainable parameter count, or None.
    """

    start: int
    end: int
    label: str
    step_ms: float | None
    trainable: float | None


@dataclass(frozen=True)
class Validation:
    """A run's validation results.

    Attributes:
        loss: the last validation loss.
        step: the step after which it was measured.
        best_loss: the lowest validation loss of the run.
        best_step: the step after which the lowest was measured.
        acc: the last validation accuracy (0..1), or None (not a classifier).
        best_acc: the highest validation accuracy, or None.
        metric: the last value of the run's metric, or None.
        metric_name: the run's metric (``TrainConfig.metric``: ``accuracy``, ``top5``, ``py:...``).
        samples: validation samples measured, or None when unknown.
    """

    loss: float
    step: int
    best_loss: float
    best_step: int
    acc: float | None = None
    best_acc: float | None = None
    metric: float | None = None
    metric_name: str = "accuracy"
    samples: int | None = None

    @classmethod
    def from_summary(cls, s: Mapping[str, Any], prefix: str = "") -> Validation | None:
        """The validation numbers of an engine summary (``val_loss``, ``val_step``, ``best_val_loss`` ...).

        Args:
            s: the summary (``RunResult.summary``), possibly hand-edited.
            prefix: ``"start_"`` for the validation before training (``start_val_loss`` ...;
                it has no step: 0, and no best).

        Returns:
            The results, or None when the summary has no finite validation loss (and, without
            a prefix, no step).
        """
        loss = _number(s.get(f"{prefix}val_loss"))
        step = 0 if prefix else _count(s.get("val_step"))
        if loss is None or step is None:
            return None
        acc = _number(s.get(f"{prefix}val_acc"))
        best = None if prefix else _number(s.get("best_val_loss"))
        best_step = _count(s.get("best_val_step"))
        best_acc = None if prefix else _number(s.get("best_val_acc"))
        return cls(
            loss, step,
            best if best is not None else loss,
            best_step if best_step is not None and best is not None else step,
            acc, best_acc if best_acc is not None else acc,
            metric=_number(s.get(f"{prefix}val_metric")), metric_name=str(s.get("metric_name") or "accuracy"),
            samples=_count(s.get("val_samples")),
        )


@dataclass(frozen=True)
class RunSummary:
    """The numbers a run is shown and compared by, each measured once (see :meth:`RunRecord.summarize`).

    Attributes:
        steps: steps done.
        step_ms: median step time in ms, or None.
        peak_memory: the run's peak memory in bytes (``peak_memory_bytes``), or None.
        memory_source: what ``peak_memory`` measures (``""`` when unknown).
        peak_rss: the absolute peak resident set of the process in bytes (CPU runs), or None.
        trainable: trainable parameters at the end, or None.
        total: all parameters of the model, or None.
        final_loss: the last finite training loss, or None.
        validation: the last and best validation results, or None (the run did not validate).
        segments: the run split at its plan changes, with per-segment medians.
    """

    steps: int
    step_ms: float | None
    peak_memory: float | None
    memory_source: str
    peak_rss: float | None
    trainable: int | None
    total: int | None
    final_loss: float | None
    validation: Validation | None
    segments: tuple[Segment, ...]


def _number(v: Any) -> float | None:
    """A finite float, or None (None, bools, NaN, inf, non-numbers)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


def _count(v: Any) -> int | None:
    """A non-negative int, or None (bools and the rest)."""
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _finite(records: Iterable[Mapping[str, Any]], key: str) -> list[float]:
    """The finite numbers of ``key`` in metric records (missing, None, NaN and bools skipped)."""
    return [v for m in records if (v := _number(m.get(key))) is not None]


def events_of(metrics: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The plan changes and stages recorded in per-step metrics (their ``events``).

    Args:
        metrics: metric records (``StepMetrics.to_dict()`` form).

    Returns:
        ``[{"step", "wall_time", "label"}]`` in record order.
    """
    return [
        {"step": m.get("step"), "wall_time": m.get("wall_time"), "label": str(label)}
        for m in metrics
        for label in (m.get("events") or [])
    ]


@dataclass(frozen=True)
class SweepTag:
    """The plan sweep a run belongs to: its run folder is ``<sweep folder>/runs/<candidate>/``.

    Attributes:
        sweep: the sweep folder's name (the app names it by its start time).
        candidate: the candidate's run folder name (``c00-head-only``: its id and name).
        folder: the sweep folder.
    """

    sweep: str
    candidate: str
    folder: Path

    @property
    def text(self) -> str:
        """``<sweep> · <candidate id>`` (``20261202-143501 · c01``): the Runs tab's and ``workbench runs``' tag."""
        return f"{self.sweep} · {self.candidate.partition('-')[0]}"


@dataclass
class RunRecord:
    """One training run.

    Attributes:
        id: folder name, unique in the store (``20250101-120000-ab12``).
        name: label shown in the runs table and the plot legends (``#3 resnet18``).
        created: ISO time the run started.
        status: ``running``, ``completed``, ``stopped``, ``failed``, ``nonfinite`` or
            ``interrupted`` (the app ended during the run).
        message: one line from the engine (what happened, what to do).
        config: the :class:`~workbench.core.training.config.TrainConfig` as a dict.
        plan: the plan the run started with, as a dict.
        final_plan: the plan in force at the end (live changes and stages), as a dict.
        model: ``{"label": ..., "spec": {...}}`` of the model trained.
        summary: the engine's end-of-run numbers (``median_step_time_s``,
            ``peak_memory_bytes``, ``trainable_params``, ``final_loss`` ...).
        verify: the verify report as a dict (``ok``, ``checked``, ``violations``,
            ``module_status``), or None.
        events: ``[{"step", "wall_time", "label"}]``: plan changes and stages seen.
        notes: the user's notes (free text).
        tags: the user's tags.
        error: traceback of a failure, if any.
        finished: ISO time the run ended, or None.
        folder: where it is stored (None until saved).
        metrics: per-step records (``StepMetrics.to_dict()`` form); loaded lazily for
            stored runs (see :func:`workbench.core.runs.store.load_metrics`).
        metrics_loaded: whether :attr:`metrics` holds the run's records.
        metrics_file: the metrics file's name in :attr:`folder` (``metrics.csv`` for the app's
            runs, ``metrics.jsonl`` for ``workbench train --save`` folders).
        sweep: the plan sweep whose candidate this run is (read from where its folder lies, never
            written to ``run.json``), or None.
    """

    id: str
    name: str
    created: str = field(default_factory=_now)
    status: str = "running"
    message: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    plan: dict[str, Any] = field(default_factory=dict)
    final_plan: dict[str, Any] | None = None
    model: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    verify: dict[str, Any] | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    notes: str = ""
    tags: list[str] = field(default_factory=list)
    error: str | None = None
    finished: str | None = None
    folder: Path | None = None
    metrics: list[dict[str, Any]] = field(default_factory=list)
    metrics_loaded: bool = True
    metrics_file: str = "metrics.csv"
    sweep: SweepTag | None = None

    # ------------------------------------------------------------ derived numbers
    @property
    def running(self) -> bool:
        """The run has not ended."""
        return self.status == "running"

    def median_step_ms(self) -> float | None:
        """Median step time in ms (the engine's summary, else from the metrics)."""
        v = _number(self.summary.get("median_step_time_s"))
        if v is not None:
            return v * 1e3
        xs = sorted(_finite(self.metrics, "step_time_s"))
        return xs[len(xs) // 2] * 1e3 if xs else None

    def peak_memory(self) -> float | None:
        """The run's peak memory in bytes (``peak_memory_bytes``: see ``core.training.metrics``)."""
        v = _number(self.summary.get("peak_memory_bytes"))
        if v is not None:
            return v
        xs = _finite(self.metrics, "mem_peak")
        return max(xs) if xs else None

    def memory_source(self) -> str:
        """What :meth:`peak_memory` measures (the engine's ``memory_source``), or ``""``."""
        src = self.summary.get("memory_source")
        return str(src) if src else ""

    def trainable(self) -> int | None:
        """Trainable parameters at the end of the run."""
        v = _count(self.summary.get("trainable_params"))
        if v is not None:
            return v
        xs = _finite(self.metrics, "trainable_params")
        return int(xs[-1]) if xs else None

    def final_loss(self) -> float | None:
        """The last finite loss."""
        v = _number(self.summary.get("final_loss"))
        if v is not None:
            return v
        xs = _finite(self.metrics, "loss")
        return xs[-1] if xs else None

    def validation(self) -> Validation | None:
        """The run's validation results: the engine's summary, else its metrics (a run in
        progress); None when it did not validate.

        Returns:
            The last and best validation loss and accuracy, or None.
        """
        v = Validation.from_summary(self.summary)
        if v is not None:
            return v
        rows = [m for m in self.metrics if _number(m.get("val_loss")) is not None]
        if not rows:
            return None
        best_row = min(rows, key=lambda m: float(m["val_loss"]))
        accs = [a for m in rows if (a := _number(m.get("val_acc"))) is not None]
        last = rows[-1]
        return Validation(
            float(last["val_loss"]), int(last.get("step", 0)), float(best_row["val_loss"]), int(best_row.get("step", 0)),
            _number(last.get("val_acc")), max(accs) if accs else None,
            metric=_number(last.get("val_metric")), metric_name=str(last.get("metric_name") or "accuracy"),
        )

    def steps(self) -> int:
        """Steps done (from the summary, else the metrics)."""
        v = _count(self.summary.get("steps"))
        if v is not None:
            return v
        return int(self.metrics[-1].get("step", -1)) + 1 if self.metrics else 0

    def num_classes(self) -> int | None:
        """Classes the run trained on (its head's outputs), when known."""
        for v in (self.summary.get("num_classes"), self.config.get("num_classes")):
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
        return None

    def segments(self) -> list[Segment]:
        """The run split at its plan changes (``events``), with per-segment medians.

        A change applies at the step it is recorded at, so that step opens the new segment.
        Without metrics (not loaded, or none written), one segment from the summary.

        Returns:
            The segments in step order (segments without steps are left out).
        """
        if not self.metrics:
            return [Segment(0, max(self.steps() - 1, 0), "", self.median_step_ms(),
                            float(t) if (t := self.trainable()) is not None else None)]
        cuts: dict[int, str] = {}
        for e in self.events:
            step = e.get("step")
            if isinstance(step, int) and not isinstance(step, bool):
                cuts[step] = f"{cuts[step]}; {e.get('label', '')}" if step in cuts else str(e.get("label", ""))
        bounds = sorted(cuts)
        groups: dict[int, list[Mapping[str, Any]]] = {}
        for m in self.metrics:
            step = m.get("step")
            if isinstance(step, int):
                groups.setdefault(bisect_right(bounds, step), []).append(m)
        out = []
        for index in sorted(groups):
            ms = groups[index]
            out.append(Segment(
                start=int(ms[0]["step"]), end=int(ms[-1]["step"]),
                label=cuts[bounds[index - 1]] if index else "",
                step_ms=_median([v * 1e3 for v in _finite(ms, "step_time_s")]),
                trainable=_median(_finite(ms, "trainable_params")),
            ))
        return out

    def summarize(self) -> RunSummary:
        """The numbers the run is shown and compared by (the Runs tab and ``workbench runs``).

        Returns:
            The run's :class:`RunSummary` (per-segment numbers need :attr:`metrics` loaded).
        """
        return RunSummary(
            steps=self.steps(),
            step_ms=self.median_step_ms(),
            peak_memory=self.peak_memory(),
            memory_source=self.memory_source(),
            peak_rss=_number(self.summary.get("peak_rss_bytes")),
            trainable=self.trainable(),
            total=_count(self.summary.get("total_params")),
            final_loss=self.final_loss(),
            validation=self.validation(),
            segments=tuple(self.segments()),
        )

    # ------------------------------------------------------------ (de)serialization
    def to_dict(self) -> dict[str, Any]:
        """The ``run.json`` content (no metrics, no folder)."""
        out: dict[str, Any] = clean_json(
            {
                "format": RUN_FORMAT,
                "version": RUN_VERSION,
                "id": self.id,
                "name": self.name,
                "created": self.created,
                "finished": self.finished,
                "status": self.status,
                "message": self.message,
                "config": self.config,
                "plan": self.plan,
                "final_plan": self.final_plan,
                "model": self.model,
                "summary": self.summary,
                "verify": self.verify,
                "events": self.events,
                "notes": self.notes,
                "tags": self.tags,
                "error": self.error,
                "metrics_file": self.metrics_file,
            }
        )
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], folder: Path | None = None) -> RunRecord:
        """Read a ``run.json`` content (any version up to :data:`RUN_VERSION`).

        Args:
            data: the parsed JSON.
            folder: the run's folder.

        Returns:
            The record, without metrics (``metrics_loaded`` False).

        Raises:
            RunStoreError: not a run file; its version missing, not a version number, or newer.
        """
        if not isinstance(data, Mapping) or data.get("format") != RUN_FORMAT:
            raise RunStoreError("not a workbench run file (format is not 'workbench-run')")
        version = data.get("version")
        if version is None:
            raise RunStoreError(f"run file has no 'version' (this app reads versions 1 to {RUN_VERSION})")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise RunStoreError(f"run file version {version!r} is not a version number (this app reads 1 to {RUN_VERSION})")
        if version > RUN_VERSION:
            raise RunStoreError(f"run file version {version!r} is newer than this app reads ({RUN_VERSION}); update the workbench")
        if not isinstance(data.get("id"), str) or not isinstance(data.get("name"), str):
            raise RunStoreError("run file lacks 'id' or 'name'")
        raw_status = data.get("status")
        status = raw_status if isinstance(raw_status, str) and raw_status in STATUSES else "interrupted"

        def mapping(key: str) -> dict[str, Any]:
            v = data.get(key)
            return dict(v) if isinstance(v, Mapping) else {}

        events = [dict(e) for e in data.get("events") or [] if isinstance(e, Mapping)]
        return cls(
            id=data["id"],
            name=data["name"],
            created=str(data.get("created") or ""),
            status=status,
            message=str(data.get("message") or ""),
            config=mapping("config"),
            plan=mapping("plan"),
            final_plan=mapping("final_plan") or None,
            model=mapping("model"),
            summary=mapping("summary"),
            verify=mapping("verify") or None,
            events=events,
            notes=notes if isinstance(notes := data.get("notes"), str) else "",
            tags=clean_tags(tags) if isinstance(tags := data.get("tags"), list) else [],
            error=data.get("error") if isinstance(data.get("error"), str) else None,
            finished=data.get("finished") if isinstance(data.get("finished"), str) else None,
            folder=folder,
            metrics=[],
            metrics_loaded=False,
            metrics_file=m if (m := data.get("metrics_file")) in METRICS_FILES else METRICS_FILES[0],
        )

    @classmethod
    def from_result(
        cls, name: str, result: Mapping[str, Any], config: Any, plan: Any = None, *,
        created: str | None = None, folder: Path | None = None,
    ) -> RunRecord:
        """The record of a run the engine ran: its ``RunResult`` as a dict (``summary.json``).

        Args:
            name: the run's name (its save folder's name).
            result: ``RunResult.to_dict()``: status, message, steps, summary, verify, the
                plan in force at the end, error.
            config: the ``TrainConfig`` as a dict (anything else reads as empty).
            plan: the plan the run started with (its stages included) as a dict; None or
                anything else: the plan in force at the end.
            created: ISO time of the run (default: now).
            folder: the run's folder.

        Returns:
            The record, its metrics in ``metrics.jsonl`` (not loaded).

        Raises:
            RunStoreError: ``result`` is not the summary of a run.
        """
        if not isinstance(result, Mapping) or not isinstance(result.get("summary"), Mapping):
            raise RunStoreError("summary.json is not the summary of a `workbench train` run")
        summary = dict(result["summary"])
        steps = result.get("steps")
        if _count(steps) is not None:
            summary.setdefault("steps", steps)
        status = result.get("status")
        final_plan = result.get("plan")
        cfg = dict(config) if isinstance(config, Mapping) else {}
        verify, error = result.get("verify"), result.get("error")
        when = created or _now()
        return cls(
            id=name,
            name=name,
            created=when,
            finished=when,
            status=status if isinstance(status, str) and status in STATUSES else "interrupted",
            message=str(result.get("message") or ""),
            config=cfg,
            plan=dict(plan) if isinstance(plan, Mapping) else dict(final_plan) if isinstance(final_plan, Mapping) else {},
            final_plan=dict(final_plan) if isinstance(final_plan, Mapping) else None,
            model={"label": str(cfg.get("model") or "")},
            summary=summary,
            verify=dict(verify) if isinstance(verify, Mapping) else None,
            error=error if isinstance(error, str) else None,
            folder=folder,
            metrics_loaded=False,
            metrics_file=METRICS_FILES[1],
        )


def write_run_file(folder: Path, record: RunRecord) -> Path:
    """Write a record's ``run.json`` into ``folder``, atomically (the metrics are written apart).

    Args:
        folder: the run's folder (it exists).
        record: the run.

    Returns:
        The file written.

    Raises:
        OSError: the file cannot be written.
    """
    path = Path(folder) / RUN_FILE
    atomic_write(path, json.dumps(record.to_dict(), indent=1) + "\n")
    return path
