"""Training on a ``QThread``: a worker ``QObject`` drives :class:`workbench.core.training.engine.Trainer`.

:class:`TrainingSession` (GUI thread) owns one run: a :class:`TrainingWorker` moved to its own
``QThread``. The worker copies the model (the loaded model is never trained, so every run
starts from the same weights), builds the :class:`~workbench.core.training.engine.Trainer` and
iterates :meth:`~workbench.core.training.engine.Trainer.steps`.

- **Control** never goes through queued slots (the worker's loop would never run them):
  :meth:`TrainingSession.stop`, :meth:`~TrainingSession.pause`, :meth:`~TrainingSession.resume`
  and :meth:`~TrainingSession.request_plan` call the Trainer's thread-safe methods directly;
  the loop looks at them once per step. A stop or pause asked for before the Trainer exists
  is handed to it as soon as it does.
- **Metrics** travel as plain data (``StepMetrics.to_dict()``), batched by
  :class:`MetricsBatcher`: at most one ``metricsBatch`` signal per 50 ms however fast the
  steps are, plus one at the end (and one as soon as a pause is asked for).
- **Errors** travel as data too: bad input found by the Trainer's setup, or any unexpected
  exception, ends up in :attr:`TrainingSession.ended`; failures inside a step are in the
  engine's result (status ``failed``).
- :attr:`TrainingSession.ended` is emitted only after the thread has ended.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QCoreApplication, QObject, QThread, Signal, Slot

from workbench.core.errors import WorkbenchError
from workbench.core.models.source_errors import ModelSourceError
from workbench.core.models.spec import ModelSpec
from workbench.core.plan.rules import FreezePlan
from workbench.core.training.config import TrainConfig
from workbench.core.training.cpu_threads import use_worker_threads
from workbench.gui.background import track_thread, untrack_thread

if TYPE_CHECKING:  # pragma: no cover - typing only
    from torch import nn

__all__ = ["EMIT_INTERVAL_S", "MetricsBatcher", "TrainingJob", "TrainingSession", "TrainingWorker", "run_spec"]

#: Minimum seconds between two ``metricsBatch`` signals (at most 20 per second).
EMIT_INTERVAL_S = 0.05


class MetricsBatcher:
    """Collects metric records and releases them at most once per ``interval`` (Qt-free).

    Args:
        interval: minimum seconds between two released batches.
        clock: monotonic time source (tests pass a fake one).
    """

    def __init__(self, interval: float = EMIT_INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._clock = clock
        self._items: list[dict[str, Any]] = []
        self._last = -float("inf")
        self.released = 0

    def add(self, record: dict[str, Any], force: bool = False) -> list[dict[str, Any]] | None:
        """Add one record.

        Args:
            record: the record.
            force: release now whatever the interval (a pause was asked for).

        Returns:
            A batch to send now, or None.
        """
        self._items.append(record)
        now = self._clock()
        if force or now - self._last >= self.interval:
            self._last = now
            return self._take()
        return None

    def flush(self) -> list[dict[str, Any]] | None:
        """Release whatever is held (at the end of a run).

        Returns:
            The batch, or None when empty.
        """
        return self._take() if self._items else None

    def _take(self) -> list[dict[str, Any]]:
        items, self._items = self._items, []
        self.released += 1
        return items


def run_spec(spec: Mapping[str, Any]) -> ModelSpec | None:
    """The spec a run of the loaded model comes from, as the command line builds it.

    Args:
        spec: the loaded model's plan ``model`` block (:attr:`Controller.spec`).

    Returns:
        The spec, or None when the block names no model (one handed to the window): then the
        run, like :func:`~workbench.core.training.setup.run_image_size`, reads the model alone.
    """
    try:
        return ModelSpec.from_dict(spec) if spec else None
    except ModelSourceError:
        return None


@dataclass
class TrainingJob:
    """What one run trains.

    Attributes:
        config: the training settings (``model``/``plan`` fields are ignored: see below).
        model: the model to train a copy of (the loaded model; never modified).
        plan: the plan to start with (copied).
        spec: where the model comes from (:func:`run_spec`), or None: the run takes the
            image size and the weights' preset transforms from it, as the command line's
            run of that spec and the exported script do.
        model_lock: held while the model is copied (other threads that modify the loaded
            model in place, like the doctor check, hold it too).
        trainer_kwargs: further :class:`~workbench.core.training.engine.Trainer` arguments
            (``dataset``, ``loss_fn``, ``step_hook``); tests inject failures with ``step_hook``.
        watch_steps: also run the freeze doctor's static check after setup and
            :func:`workbench.core.checks.doctor.watch` over this many steps.
        copy_model: train a deep copy of ``model`` (default); False trains it in place.
        emit_interval: minimum seconds between metric batches.
    """

    config: TrainConfig
    model: nn.Module
    plan: FreezePlan
    spec: ModelSpec | None = None
    model_lock: Any = None
    trainer_kwargs: dict[str, Any] = field(default_factory=dict)
    watch_steps: int | None = None
    copy_model: bool = True
    emit_interval: float = EMIT_INTERVAL_S


class _Control:
    """Thread-safe hand-off of stop / pause / plan requests to a Trainer that may not exist yet."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.trainer: Any = None
        self.stop_requested = False
        self.pause_requested = False

    def attach(self, trainer: Any) -> None:
        with self._lock:
            self.trainer = trainer
            if self.stop_requested:
                trainer.stop()
            elif self.pause_requested:
                trainer.pause()

    def detach(self) -> None:
        with self._lock:
            self.trainer = None

    def stop(self) -> None:
        with self._lock:
            self.stop_requested = True
            if self.trainer is not None:
                self.trainer.stop()

    def pause(self, paused: bool) -> None:
        with self._lock:
            self.pause_requested = paused
            if self.trainer is not None:
                (self.trainer.pause if paused else self.trainer.resume)()

    def request_plan(self, plan: FreezePlan) -> bool:
        with self._lock:
            trainer = self.trainer
        if trainer is None:
            return False
        trainer.request_plan(plan)  # stores it; refuses a plan that does not fit (PlanError)
        return True


def _finding_dicts(findings: list[Any]) -> list[dict[str, Any]]:
    return [f.to_dict() for f in findings]


class TrainingWorker(QObject):
    """Runs one :class:`TrainingJob` on the thread it was moved to.

    Signals:
        prepared(info): setup is done: ``total_steps``, ``steps_per_epoch``, ``device``, ``num_classes``,
            ``torch_threads`` (of the training thread), ``image_size``, ``batch_size``,
            ``trainable_params``, ``total_params``, ``new_heads``.
        metricsBatch(records): a list of ``StepMetrics.to_dict()`` records.
        moduleStats(stats): the latest measured
            :class:`~workbench.core.training.module_stats.ModuleStats`, sent with a batch.
        result(result): the engine's ``RunResult.to_dict()``.
        failed(message, details): the run could not start (bad input: ``details`` empty) or
            an unexpected error (``details`` holds the traceback).
        watched(findings, summary): with ``watch_steps``: the doctor's findings (as dicts)
            and the watch summary.
    """

    prepared = Signal(dict)
    metricsBatch = Signal(list)
    moduleStats = Signal(object)
    result = Signal(dict)
    failed = Signal(str, str)
    watched = Signal(list, dict)

    def __init__(self, job: TrainingJob, control: _Control) -> None:
        super().__init__()
        self._job: TrainingJob | None = job
        self._control = control

    @Slot()
    def run(self) -> None:
        """Train (called once, on the worker thread); the thread quits at the end."""
        try:
            self._run()
        except WorkbenchError as e:
            self.failed.emit(str(e), "")
        except Exception as e:  # a bug or an unexpected library error: keep the traceback
            self.failed.emit(f"{type(e).__name__}: {e}", traceback.format_exc())
        finally:
            self._control.detach()
            self._job = None
            QThread.currentThread().quit()

    def _run(self) -> None:
        import torch

        from workbench.core.training.engine import Trainer
        from workbench.core.training.setup import BuiltModel

        job = self._job
        assert job is not None
        use_worker_threads(job.config.torch_threads)
        model = job.model
        if job.copy_model:
            with job.model_lock if job.model_lock is not None else contextlib.nullcontext():
                model = copy.deepcopy(model)
        given: nn.Module | BuiltModel = model
        if job.spec is not None:  # handed in (its head kept as it is), with where it came from
            given = BuiltModel(model, job.spec.name, job.spec.weights, provided=True, spec=job.spec)
        trainer = Trainer(job.config, model=given, plan=job.plan, **job.trainer_kwargs)
        self._control.attach(trainer)
        trainer.setup()  # bad input raises WorkbenchError: reported by run()
        assert trainer.applied is not None and trainer.optimizer is not None
        counts = trainer.applied.counts(trainer.optimizer)
        from workbench.core.models.zoo import current_num_classes

        self.prepared.emit(
            {
                "total_steps": trainer.total_steps,
                "steps_per_epoch": trainer.steps_per_epoch,
                "device": str(trainer.device),
                "torch_threads": torch.get_num_threads(),
                "image_size": trainer.image_size,
                "batch_size": job.config.batch_size,
                "trainable_params": int(counts.trainable),
                "total_params": int(counts.total),
                "new_heads": list(trainer.new_heads),
                "num_classes": current_num_classes(trainer.model) if trainer.model is not None else None,
            }
        )
        watch, static = None, []
        if job.watch_steps:
            from workbench.core.checks import doctor

            assert trainer.model is not None
            trainer.model.train()
            static = doctor.check(trainer.model, trainer.optimizer, trainer.plan)
            watch = doctor.watch(trainer.model, trainer.optimizer, steps=job.watch_steps).start()
        batcher = MetricsBatcher(job.emit_interval)
        control = self._control
        gen = trainer.steps()
        stats = None
        try:
            for m in gen:
                stats = m.module_stats or stats
                batch = batcher.add(m.to_dict(), force=control.pause_requested)
                if batch is not None:
                    self.metricsBatch.emit(batch)
                    if stats is not None:
                        self.moduleStats.emit(stats)
                        stats = None
        finally:
            gen.close()
            if watch is not None:
                watch.stop()
        rest = batcher.flush()
        if rest is not None:
            self.metricsBatch.emit(rest)
        if stats is not None:
            self.moduleStats.emit(stats)
        if watch is not None:
            from workbench.core.checks import doctor

            findings = doctor.merge_findings(static, watch.findings())
            self.watched.emit(_finding_dicts(findings), watch.summary())
        assert trainer.result is not None
        self.result.emit(trainer.result.to_dict())


class TrainingSession(QObject):
    """One training run on its own thread, controlled from the GUI thread.

    Signals:
        prepared(info): see :class:`TrainingWorker`.
        metricsBatch(records): see :class:`TrainingWorker`.
        moduleStats(stats): see :class:`TrainingWorker`.
        ended(outcome): after the thread has ended; ``outcome`` is a dict with ``result``
            (``RunResult.to_dict()`` or None), ``error`` and ``details`` (the run could not
            start or broke unexpectedly), ``watch`` (``{"findings": [...], "summary": {...}}``
            or None).

    Args:
        job: what to train.
        parent: Qt parent.
    """

    prepared = Signal(dict)
    metricsBatch = Signal(list)
    moduleStats = Signal(object)
    ended = Signal(dict)

    def __init__(self, job: TrainingJob, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.job = job
        self._control = _Control()
        self._thread = QThread()
        self._thread.setObjectName("workbench-training")
        self._worker = TrainingWorker(job, self._control)
        self._worker.moveToThread(self._thread)
        self._outcome: dict[str, Any] = {"result": None, "error": "", "details": "", "watch": None}
        self._emitted = False
        self._started = False
        self._thread.started.connect(self._worker.run)
        self._worker.prepared.connect(self._on_prepared)
        self._worker.metricsBatch.connect(self._on_batch)
        self._worker.moduleStats.connect(self.moduleStats)
        self._worker.result.connect(self._on_result)
        self._worker.failed.connect(self._on_failed)
        self._worker.watched.connect(self._on_watched)
        self._thread.finished.connect(self._on_finished)

    # ------------------------------------------------------------ control (GUI thread)
    def start(self) -> None:
        """Start the worker thread (once)."""
        if self._started:
            return
        self._started = True
        track_thread(self._thread)
        self._thread.start()

    def is_running(self) -> bool:
        """The worker thread is running."""
        return self._thread.isRunning()

    @property
    def stop_requested(self) -> bool:
        """:meth:`stop` was called."""
        return self._control.stop_requested

    @property
    def paused(self) -> bool:
        """A pause is in force (asked for and not resumed)."""
        return self._control.pause_requested

    def stop(self) -> None:
        """End the run at the next step boundary (the running step finishes). Thread-safe."""
        self._control.stop()

    def pause(self) -> None:
        """Hold the run at the next step boundary."""
        self._control.pause(True)

    def resume(self) -> None:
        """Continue a paused run."""
        self._control.pause(False)

    def request_plan(self, plan: FreezePlan) -> bool:
        """Switch the run to ``plan`` at the next step.

        The plan is handed over as it is, not copied: the window's plans are replaced on
        every edit, never changed in place (see :class:`~workbench.gui.controller.Controller`).

        Args:
            plan: the plan.

        Returns:
            False when the trainer does not exist yet (the run keeps its starting plan).

        Raises:
            PlanError: the plan does not fit the model or leaves nothing trainable.
        """
        return self._control.request_plan(plan)

    def wait(self) -> None:
        """Block until the thread has ended, then deliver the pending signals at once.

        Used when the window closes: :attr:`ended` has been emitted when this returns.
        """
        self._thread.wait()
        QCoreApplication.sendPostedEvents(self, 0)  # batches, result, finished: in order
        self._on_finished()

    # ------------------------------------------------------------ worker signals (GUI thread)
    @Slot(dict)
    def _on_prepared(self, info: dict) -> None:
        self.prepared.emit(info)

    @Slot(list)
    def _on_batch(self, batch: list) -> None:
        self.metricsBatch.emit(batch)

    @Slot(dict)
    def _on_result(self, result: dict) -> None:
        self._outcome["result"] = result

    @Slot(str, str)
    def _on_failed(self, error: str, details: str) -> None:
        self._outcome["error"], self._outcome["details"] = error, details

    @Slot(list, dict)
    def _on_watched(self, findings: list, summary: dict) -> None:
        self._outcome["watch"] = {"findings": findings, "summary": summary}

    @Slot()
    def _on_finished(self) -> None:
        if self._emitted or not self._started:
            return
        self._thread.wait()  # `finished` comes just before the thread really ends
        untrack_thread(self._thread)
        self._emitted = True
        self.ended.emit(dict(self._outcome))
