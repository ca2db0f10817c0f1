"""Training runs kept on disk: one folder per run with ``run.json`` and ``metrics.csv`` (Qt-free).

A :class:`RunRecord` is what the window knows about a run: its name, the plan and training
config it ran with, the model, how it ended (status, message, the engine's summary, the
verify report), the plan changes it saw (``events``) and its per-step metrics.
:class:`RunStore` writes it atomically into ``<folder>/<run id>/``:

- ``run.json``: everything but the metrics (format ``workbench-run``, version 1);
- ``metrics.csv``: the :class:`~workbench.core.training.metrics.StepMetrics` records, written with
  :class:`~workbench.core.training.metrics.MetricsWriter` (readable with ``load_metrics``).

A run that was still ``running`` when the app ended is listed as ``interrupted``. The user's
own words about a run (its name, ``notes`` and ``tags``) live in ``run.json`` too.

:meth:`RunRecord.segments` splits a run at its plan changes, so runs that froze or unfroze
mid-way are compared by the medians of each plan segment, not by their last numbers.
"""

from __future__ import annotations

import builtins
import datetime as _dt
import json
import math
import os
import secrets
import shutil
import statistics
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.core import safe_json
from workbench.core.atomic import atomic_write
from workbench.core.errors import WorkbenchError
from workbench.core.training.metrics import MetricsError, MetricsWriter, StepMetrics, iter_metrics

__all__ = [
    "MAX_KEPT_METRICS_BYTES",
    "MAX_NAME_LENGTH",
    "RUN_FORMAT",
    "RUN_VERSION",
    "RunRecord",
    "RunStore",
    "RunStoreError",
    "Segment",
    "Validation",
    "clean_name",
    "clean_tags",
    "plan_text",
    "validation_text",
]

RUN_FORMAT = "workbench-run"
RUN_VERSION = 1
_RUN_FILE = "run.json"
_METRICS_FILE = "metrics.csv"
#: Statuses a record can have: the engine's, plus ``running`` and ``interrupted``.
_STATUSES = ("running", "completed", "stopped", "failed", "nonfinite", "interrupted")
#: Longest run name kept (longer names are cut).
MAX_NAME_LENGTH = 120
#: Bytes of a run's metrics file read in full; a larger file is read through, keeping every
#: k-th record (and the last) so that about this many bytes of records stay in memory.
MAX_KEPT_METRICS_BYTES = 32 * 2**20


def _inside(path: Path, folder: Path) -> bool:
    """``path`` (after following its links) lies inside ``folder`` (after following its links)."""
    try:
        return path.resolve().is_relative_to(folder.resolve())
    except (OSError, RuntimeError):  # a link loop
        return False


class RunStoreError(WorkbenchError):
    """A run cannot be written or read; the message names the file and what to do."""


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


def _now() -> str:
    return _dt.datetime.now().astimezone().isoformat(timespec="microseconds")  # runs in the same second sort in order


def _clean(value: Any) -> Any:
    """JSON-safe copy: non-finite floats become None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
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


def _rule_text(rule: Mapping[str, Any]) -> str:
    select = str(rule.get("select") or "*")
    bits = []
    for key, value in rule.items():
        if key == "select":
            continue
        if key == "frozen":
            bits.append("frozen" if value else "trains")
        elif key == "reparam":
            bits.append("A+B" if value else "no A+B")
        elif key == "lr_scale":
            bits.append(f"lr×{value:g}" if isinstance(value, (int, float)) else f"lr×{value}")
        elif value is True:
            bits.append(str(key))
        else:
            bits.append(f"{key}={value}")
    return f"{select} {' '.join(bits)}".strip()


def plan_text(plan: Mapping[str, Any] | None, *, most: int = 2) -> str:
    """A plan in a few words for the runs table: ``layer1 frozen, fc trains +1``.

    Args:
        plan: the plan as a dict (``FreezePlan.to_dict()``), possibly hand-edited.
        most: rules spelled out; the rest are counted.

    Returns:
        The text; ``"all train"`` for a plan without rules.
    """
    if not isinstance(plan, Mapping):
        return "no plan"
    rules = [r for r in plan.get("rules") or [] if isinstance(r, Mapping)]
    text = ", ".join(_rule_text(r) for r in rules[:most]) if rules else "all train"
    if len(rules) > most:
        text += f" +{len(rules) - most}"
    stages = plan.get("stages")
    if isinstance(stages, list) and stages:
        text += f", {len(stages)} stage{'s' if len(stages) > 1 else ''}"
    return text


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
    """

    loss: float
    step: int
    best_loss: float
    best_step: int
    acc: float | None = None
    best_acc: float | None = None


def _number(v: Any) -> float | None:
    """A finite float, or None (None, bools, NaN, inf, non-numbers)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


def validation_text(v: Validation | None, *, best: bool = True) -> str:
    """``val loss 0.5120 (best 0.4980 after step 20) · acc 81.2 % (best 83.0 %)``.

    Args:
        v: a run's validation results (None: the run did not validate).
        best: add the best values where they differ from the last.

    Returns:
        The text, ``""`` for None.
    """
    if v is None:
        return ""
    text = f"val loss {v.loss:.4f}"
    if best and v.best_step != v.step:
        text += f" (best {v.best_loss:.4f} after step {v.best_step})"
    if v.acc is not None:
        text += f" · acc {100 * v.acc:.1f} %"
        if best and v.best_acc is not None and v.best_acc > v.acc:
            text += f" (best {100 * v.best_acc:.1f} %)"
    return text


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _finite(records: Iterable[Mapping[str, Any]], key: str) -> list[float]:
    """The finite numbers of ``key`` in metric records (missing, None, NaN and bools skipped)."""
    out = []
    for m in records:
        v = m.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out.append(float(v))
    return out


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
            stored runs (see :meth:`RunStore.load_metrics`).
        metrics_loaded: whether :attr:`metrics` holds the run's records.
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

    # ------------------------------------------------------------ derived numbers
    @property
    def running(self) -> bool:
        """The run has not ended."""
        return self.status == "running"

    def _metric_values(self, key: str) -> list[float]:
        return _finite(self.metrics, key)

    def median_step_ms(self) -> float | None:
        """Median step time in ms (the engine's summary, else from the metrics)."""
        v = self.summary.get("median_step_time_s")
        if isinstance(v, (int, float)) and math.isfinite(v):
            return float(v) * 1e3
        xs = sorted(self._metric_values("step_time_s"))
        return xs[len(xs) // 2] * 1e3 if xs else None

    def peak_memory(self) -> float | None:
        """The run's peak memory in bytes (``peak_memory_bytes``: see ``core.training.metrics``)."""
        v = self.summary.get("peak_memory_bytes")
        if isinstance(v, (int, float)) and math.isfinite(v):
            return float(v)
        xs = self._metric_values("mem_peak")
        return max(xs) if xs else None

    def memory_source(self) -> str:
        """What :meth:`peak_memory` measures (the engine's ``memory_source``), or ``""``."""
        src = self.summary.get("memory_source")
        return str(src) if src else ""

    def trainable(self) -> int | None:
        """Trainable parameters at the end of the run."""
        v = self.summary.get("trainable_params")
        if isinstance(v, int):
            return v
        xs = self._metric_values("trainable_params")
        return int(xs[-1]) if xs else None

    def final_loss(self) -> float | None:
        """The last finite loss."""
        v = self.summary.get("final_loss")
        if isinstance(v, (int, float)) and math.isfinite(v):
            return float(v)
        xs = self._metric_values("loss")
        return xs[-1] if xs else None

    def validation(self) -> Validation | None:
        """The run's validation results: the engine's summary, else its metrics (a run in
        progress); None when it did not validate.

        Returns:
            The last and best validation loss and accuracy, or None.
        """
        s = self.summary
        loss, step = _number(s.get("val_loss")), s.get("val_step")
        if loss is not None and isinstance(step, int):
            best = _number(s.get("best_val_loss"))
            best_step = s.get("best_val_step")
            acc = _number(s.get("val_acc"))
            best_acc = _number(s.get("best_val_acc"))
            return Validation(
                loss, step,
                best if best is not None else loss,
                best_step if isinstance(best_step, int) and best is not None else step,
                acc, best_acc if best_acc is not None else acc,
            )
        rows = [
            (int(m.get("step", 0)), v, _number(m.get("val_acc")))
            for m in self.metrics
            if (v := _number(m.get("val_loss"))) is not None
        ]
        if not rows:
            return None
        best_step, best, _a = min(rows, key=lambda r: r[1])
        accs = [a for _s, _l, a in rows if a is not None]
        last_step, last, last_acc = rows[-1]
        return Validation(last, last_step, best, best_step, last_acc, max(accs) if accs else None)

    def steps(self) -> int:
        """Steps done (from the summary, else the metrics)."""
        v = self.summary.get("steps")
        if isinstance(v, int):
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

    # ------------------------------------------------------------ (de)serialization
    def to_dict(self) -> dict[str, Any]:
        """The ``run.json`` content (no metrics, no folder)."""
        return _clean(
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
            }
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], folder: Path | None = None) -> RunRecord:
        """Read a ``run.json`` content.

        Args:
            data: the parsed JSON.
            folder: the run's folder.

        Returns:
            The record, without metrics (``metrics_loaded`` False).

        Raises:
            RunStoreError: not a run file, or a newer version.
        """
        if not isinstance(data, Mapping) or data.get("format") != RUN_FORMAT:
            raise RunStoreError("not a workbench run file (format is not 'workbench-run')")
        version = data.get("version")
        if not isinstance(version, int) or version > RUN_VERSION:
            raise RunStoreError(f"run file version {version!r} is newer than this app reads ({RUN_VERSION}); update the workbench")
        if not isinstance(data.get("id"), str) or not isinstance(data.get("name"), str):
            raise RunStoreError("run file lacks 'id' or 'name'")
        raw_status = data.get("status")
        status = raw_status if isinstance(raw_status, str) and raw_status in _STATUSES else "interrupted"

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
        )


class RunStore:
    """Runs kept in a folder, one sub-folder per run.

    Args:
        folder: the store's folder (created on the first save).

    Example:
        >>> store = RunStore(tmp_path)                         # doctest: +SKIP
        >>> rec = store.new_record("#1 resnet18", config={...}) # doctest: +SKIP
        >>> store.save(rec)                                     # doctest: +SKIP
        >>> [r.name for r in store.list()[0]]                   # doctest: +SKIP
        ['#1 resnet18']
    """

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)

    def new_record(self, name: str, **fields: Any) -> RunRecord:
        """A new record with a unique id and its folder assigned (nothing written yet).

        Args:
            name: the run's label.
            **fields: other :class:`RunRecord` fields (``config``, ``plan``, ``model`` ...).

        Returns:
            The record, status ``running``.
        """
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        while True:
            rid = f"{stamp}-{secrets.token_hex(2)}"
            if not (self.folder / rid).exists():
                break
        return RunRecord(id=rid, name=name, folder=self.folder / rid, **fields)

    def save(self, record: RunRecord, *, metrics: bool = True) -> Path:
        """Write ``run.json`` (and ``metrics.csv``) atomically.

        Args:
            record: the run.
            metrics: also write the metrics (only when they are loaded).

        Returns:
            The run's folder.

        Raises:
            RunStoreError: the folder cannot be written (the message says which).
        """
        folder = record.folder or (self.folder / record.id)
        record.folder = folder
        try:
            folder.mkdir(parents=True, exist_ok=True)
            if metrics and record.metrics_loaded:
                self._write_metrics(record.metrics, folder / _METRICS_FILE)
            atomic_write(folder / _RUN_FILE, json.dumps(record.to_dict(), indent=1) + "\n")
        except (OSError, MetricsError) as e:
            raise RunStoreError(f"cannot save the run to {folder} ({e}); check that the folder is writable") from None
        return folder

    @staticmethod
    def _write_metrics(metrics: Iterable[Mapping[str, Any]], path: Path) -> None:
        with MetricsWriter(path) as w:
            for m in metrics:
                w.write(StepMetrics.from_dict(dict(m)))

    def list(self) -> tuple[list[RunRecord], list[str]]:
        """Every run in the store, oldest first (metrics not loaded).

        Returns:
            ``(records, problems)``: unreadable runs are skipped and described in
            ``problems``; a run left ``running`` by an app that ended is ``interrupted``.
        """
        records: list[RunRecord] = []
        problems: list[str] = []
        store_problem = self.problem()
        if store_problem:
            return records, [store_problem]
        if not self.folder.exists():
            return records, problems
        try:
            subs = sorted(p for p in self.folder.iterdir() if p.is_dir())
        except OSError as e:
            return records, [f"{self.folder}: the run store cannot be read ({e.strerror or e}); check its permissions"]
        for sub in subs:
            f = sub / _RUN_FILE
            if not _inside(sub, self.folder) or (os.path.lexists(f) and not _inside(f, sub)):
                problems.append(f"{sub}: links outside the run store; not read")
                continue
            try:
                if not f.is_file():
                    if not os.access(sub, os.R_OK | os.X_OK):
                        problems.append(f"{sub}: unreadable run folder (permission denied); check its permissions")
                    continue
                rec = RunRecord.from_dict(safe_json.load(f, what="run file"), sub)
            except (OSError, UnicodeDecodeError, json.JSONDecodeError, WorkbenchError) as e:
                problems.append(f"{f}: unreadable run ({_one_line(e)})")
                continue
            except Exception as e:  # a hand-edited run.json must never stop the app from starting
                problems.append(f"{f}: unreadable run ({type(e).__name__}: {_one_line(e)})")
                continue
            if rec.status == "running":
                rec.status = "interrupted"
                rec.message = rec.message or "the app ended while this run was training"
            records.append(rec)
        records.sort(key=lambda r: (r.created, r.id))
        return records, problems

    def problem(self) -> str | None:
        """Why the store's folder cannot hold runs (it is a file, or not writable), if it cannot.

        Returns:
            One line for the window to show once, or None when the folder is usable (or does
            not exist yet: it is created on the first save).
        """
        if self.folder.exists() and not self.folder.is_dir():
            return f"the run store {self.folder} is a file, not a folder: runs are not kept; move the file away"
        if self.folder.is_dir() and not os.access(self.folder, os.W_OK | os.X_OK):
            return f"the run store {self.folder} is not writable: runs are not kept; check its permissions"
        return None

    def load_metrics(self, record: RunRecord) -> builtins.list[dict[str, Any]]:  # RunStore.list shadows list
        """Read a stored run's metrics into ``record.metrics`` (once), in bounded memory.

        The file is streamed a line at a time; one larger than
        :data:`MAX_KEPT_METRICS_BYTES` keeps every k-th record and the last. A metrics file
        that links outside the run folder is not followed.

        Args:
            record: the run.

        Returns:
            The records (an empty list when the run has no metrics file).

        Raises:
            RunStoreError: the metrics file is unreadable, not a regular file, has a line
                that is too long or malformed, or links outside the run folder.
        """
        if record.metrics_loaded:
            return record.metrics
        folder = record.folder or self.folder / record.id
        path = folder / _METRICS_FILE
        if os.path.lexists(path):
            if not _inside(path, folder):
                raise RunStoreError(f"{path} links outside its run folder; not read (copy the file into the folder)")
            try:
                size = os.stat(path).st_size
                stride = max(1, -(-size // MAX_KEPT_METRICS_BYTES))  # ceil: about MAX_KEPT_METRICS_BYTES kept
                kept: builtins.list[dict[str, Any]] = []
                last: StepMetrics | None = None
                for i, m in enumerate(iter_metrics(path)):
                    last = m
                    if i % stride == 0:
                        kept.append(m.to_dict())
                if last is not None and (not kept or kept[-1]["step"] != last.step):
                    kept.append(last.to_dict())
            except OSError as e:
                raise RunStoreError(f"cannot read {path} ({e.strerror or e}); check its permissions") from None
            except MetricsError as e:
                raise RunStoreError(str(e)) from None
            record.metrics = kept
        record.metrics_loaded = True
        return record.metrics

    def export_csv(self, record: RunRecord, path: str | os.PathLike[str]) -> Path:
        """Write a run's metrics as CSV (atomically) to ``path``.

        Args:
            record: the run (its metrics are loaded when needed).
            path: destination ``.csv``.

        Returns:
            The path written.

        Raises:
            RunStoreError: unreadable metrics, or the destination cannot be written.
        """
        dest = Path(path)
        metrics = self.load_metrics(record)
        try:
            self._write_metrics(metrics, dest)
        except (OSError, MetricsError) as e:
            raise RunStoreError(f"cannot write {dest} ({e}); choose another folder or file name") from None
        return dest

    def delete(self, record: RunRecord) -> None:
        """Remove a run's folder.

        Args:
            record: the run.

        Raises:
            RunStoreError: the folder cannot be removed.
        """
        folder = record.folder or self.folder / record.id
        if not folder.exists():
            return
        if folder.resolve().parent != self.folder.resolve():
            raise RunStoreError(f"{folder} is not a run folder of {self.folder}; not deleting it")
        try:
            shutil.rmtree(folder)
        except OSError as e:
            raise RunStoreError(f"cannot delete {folder} ({e}); remove it by hand") from None
