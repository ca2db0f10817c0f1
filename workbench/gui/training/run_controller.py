"""The window's training runs: start, control, record, persist (GUI thread).

:class:`RunController` owns the :class:`~workbench.core.runs.store.RunStore`, the list of runs,
and the run in progress (a :class:`~workbench.gui.training.session.TrainingSession`). Panels
never touch the session: the training controls call :meth:`RunController.start` / ``stop`` /
``pause`` / ``resume``; the plots, the runs table, the verify and diagnostics panels listen
to its signals.

Live freezing: while a run trains, every plan edit in the window (click, undo, bulk action,
opened plan) is sent to the trainer as a copy of the new plan; the engine applies it at the
next step and reports it as an event, which the plots show as a marker.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal, Slot

from workbench.core.plan.rules import PlanError
from workbench.core.runs.record import RunRecord, RunStoreError, clean_name, clean_tags
from workbench.core.runs.rescan import StoreScan
from workbench.core.runs.store import RunStore
from workbench.core.runs.text import validation_text
from workbench.core.training.config import TrainConfig
from workbench.gui.controller import Controller
from workbench.gui.training.options_dialog import TENSORBOARD_IN_RUN
from workbench.gui.training.plot_markers import EVALUATION_HEAD
from workbench.gui.training.session import TrainingJob, TrainingSession, run_spec
from workbench.gui.wording import sentence

if TYPE_CHECKING:  # pragma: no cover - typing only
    from workbench.core.training.module_stats import ModuleStats

__all__ = ["LIVE_PLAN_KINDS", "RunController"]

#: ``Controller.planChanged`` kinds that are sent to a running trainer.
LIVE_PLAN_KINDS = frozenset({"edit", "undo", "redo", "open", "new"})
_NUMBER = re.compile(r"^#(\d+)\b")


class RunController(QObject):
    """Runs of the window: the one in progress and those kept in the store.

    Signals:
        runStarted(record): a run started (status ``running``).
        prepared(info): the run's setup is done (``total_steps``, ``device`` ...).
        metricsReceived(records): a batch of metric records of the running run.
        moduleStatsReceived(stats): the running run's latest per-module gradient norms and
            update/weight ratios (:class:`~workbench.core.training.module_stats.ModuleStats`),
            or None when a run starts; only while the window shows the model it trains.
        runEnded(record): the run ended (after its thread ended) and was saved. A run
            refused at setup (bad input, nothing trained) is not kept: its record has status
            ``refused`` and is neither in :attr:`records` nor in the store.
        runsChanged(): runs were added, deleted, renamed or annotated.
        watchFinished(findings, summary): a doctor-watch run ended: findings as dicts and the
            watch summary.
        stateChanged(state): ``"idle"``, ``"starting"``, ``"running"``, ``"paused"``,
            ``"stopping"``.
        statusMessage(text): a one-line note for the status bar.
        errorOccurred(title, message, details): show an error dialog.

    Args:
        controller: the window's model, plan and tree.
        store: where runs are kept.
        parent: Qt parent.

    Attributes:
        records: every run, oldest first (stored ones without metrics until needed).
        current: the run in progress, or None.
        trainer_kwargs: extra :class:`~workbench.core.training.engine.Trainer` arguments for the next
            runs (``dataset``, ``loss_fn``, ``step_hook``): a hook for tests and scripts. By
            default runs measure per-module statistics every ``DEFAULT_EVERY`` steps
            (``module_stats_every``).
        module_stats: the latest :class:`~workbench.core.training.module_stats.ModuleStats`
            of the run in progress (or the last run), or None.
        module_history: the top-level modules' measured steps of that run (the Layers plot).
        preflight: ``preflight(config) -> dict | None`` asked by :meth:`start` once the run
            could start: None cancels it (the user said no), a dict is added to the new
            run's summary (the predicted step memory). None: no check.
    """

    runStarted = Signal(object)
    prepared = Signal(dict)
    metricsReceived = Signal(list)
    moduleStatsReceived = Signal(object)
    runEnded = Signal(object)
    runsChanged = Signal()
    watchFinished = Signal(list, dict)
    stateChanged = Signal(str)
    statusMessage = Signal(str)
    errorOccurred = Signal(str, str, str)

    def __init__(self, controller: Controller, store: RunStore, parent: QObject | None = None) -> None:
        from workbench.core.training.module_stats import DEFAULT_EVERY, ModuleStatsHistory

        super().__init__(parent)
        self.controller = controller
        self.store = store
        self.records, self._load_problems = store.list(sweeps=True)  # the app's sweeps' runs too
        self._scan = StoreScan(store, self.records)  # what changes on disk from outside (reload)
        self.current: RunRecord | None = None
        self.trainer_kwargs: dict[str, Any] = {"module_stats_every": DEFAULT_EVERY}
        self.module_stats: ModuleStats | None = None
        self.module_history = ModuleStatsHistory()
        self.preflight: Callable[[TrainConfig], dict[str, Any] | None] | None = None
        self.info: dict[str, Any] = {}
        self._session: TrainingSession | None = None
        self._fingerprint: str | None = None
        self._state = "idle"
        self._watch = False
        controller.planChanged.connect(self._plan_changed)

    # ------------------------------------------------------------ state
    @property
    def load_problems(self) -> list[str]:
        """Runs in the store that could not be read."""
        return list(self._load_problems)

    @property
    def state(self) -> str:
        """``idle``, ``starting``, ``running``, ``paused`` or ``stopping``."""
        return self._state

    @property
    def running(self) -> bool:
        """A run is in progress (its thread has not ended)."""
        return self._session is not None

    @property
    def session(self) -> TrainingSession | None:
        """The session of the run in progress."""
        return self._session

    def _set_state(self, state: str) -> None:
        if state != self._state:
            self._state = state
            self.stateChanged.emit(state)

    def next_name(self, what: str) -> str:
        """``#N what`` with N one more than the highest run number so far."""
        nums = [int(m.group(1)) for r in self.records if (m := _NUMBER.match(r.name))]
        return f"#{max(nums, default=0) + 1} {what}".strip()

    # ------------------------------------------------------------ control
    def start(self, config: TrainConfig, *, watch_steps: int | None = None) -> bool:
        """Start a run of the loaded model with the current plan.

        Args:
            config: training settings (its ``model`` and ``plan`` fields are not used: the
                window's model and plan are).
            watch_steps: run the freeze doctor's watch over this many steps too (the result
                arrives in :attr:`watchFinished`).

        Returns:
            False when it could not start (a run in progress, no model, the plan does not
            fit the model); the reason goes to :attr:`errorOccurred` or :attr:`statusMessage`.
        """
        c = self.controller
        if self._session is not None:
            self.statusMessage.emit("A run is in progress; stop it first.")
            return False
        if c.model is None or c.tree is None or c.loaded is None:
            self.statusMessage.emit("The model is still loading; start once it is there." if c.busy or c.waiting
                                    else "Load a model first.")
            return False
        if c.loaded.meta:
            self.errorOccurred.emit(
                "Cannot start training",
                f"{c.loaded.label} is open structure only (on the meta device): it has shapes but no weights "
                "to train. Plan it here, or open it again without 'Structure only' to train it.",
                "",
            )
            return False
        state = c.state
        if state is not None and state.problems:
            self.errorOccurred.emit(
                "Cannot start training",
                f"The plan does not fit the model: {sentence(str(state.problems[0]))} Fix or remove the rule "
                "(Edit ▸ Remove Rules That Match Nothing) and start again.",
                "",
            )
            return False
        extra: dict[str, Any] = {}
        if self.preflight is not None:
            answer = self.preflight(config)
            if answer is None:
                self.statusMessage.emit("Start cancelled.")
                return False
            extra = answer
        plan = c.plan.copy()
        what = c.loaded.label + (" · doctor watch" if watch_steps else "")
        record = self.store.new_record(
            self.next_name(what),
            config=config.to_dict(),
            plan=plan.to_dict(),
            model={"label": c.loaded.label, "spec": dict(c.loaded.spec), "note": c.loaded.note},
        )
        if config.tensorboard_dir == TENSORBOARD_IN_RUN and record.folder is not None:
            config = dataclasses.replace(config, tensorboard_dir=str(record.folder / "tensorboard"))
            record.config["tensorboard_dir"] = config.tensorboard_dir
        job = TrainingJob(
            config, c.model, plan, spec=run_spec(c.spec), model_lock=c.model_lock,
            trainer_kwargs=dict(self.trainer_kwargs), watch_steps=watch_steps,
        )
        session = TrainingSession(job, self)
        session.prepared.connect(self._on_prepared)
        session.metricsBatch.connect(self._on_batch)
        session.moduleStats.connect(self._on_module_stats)
        session.ended.connect(self._on_ended)
        self._session = session
        self._fingerprint = c.tree.fingerprint
        self._watch = bool(watch_steps)
        self._release_metrics()
        self.current = record
        record.summary.update(extra)
        self.info = {}
        self.records.append(record)
        self._save(record, metrics=False)
        self._set_state("starting")
        self.module_stats = None
        self.module_history.clear()
        self.moduleStatsReceived.emit(None)
        self.runStarted.emit(record)
        self.runsChanged.emit()
        session.start()
        return True

    def stop(self) -> None:
        """End the run in progress after its current step."""
        if self._session is not None and not self._session.stop_requested:
            self._session.stop()
            self._set_state("stopping")

    def pause(self) -> None:
        """Hold the run in progress at the next step boundary."""
        if self._session is not None and self._state == "running":
            self._session.pause()
            self._set_state("paused")

    def resume(self) -> None:
        """Continue a paused run."""
        if self._session is not None and self._state == "paused":
            self._session.resume()
            self._set_state("running")

    def shutdown(self) -> None:
        """Stop the run in progress and wait for its thread (the window is closing).

        The run ends within one step, is recorded and saved; no thread is left running.
        """
        session = self._session
        if session is None:
            return
        session.stop()
        session.wait()  # emits `ended` before returning

    # ------------------------------------------------------------ live plan changes
    @Slot(str)
    def _plan_changed(self, kind: str) -> None:
        session = self._session
        if session is None or kind not in LIVE_PLAN_KINDS or session.stop_requested:
            return
        c = self.controller
        if self._watch:
            self.statusMessage.emit("Plan changes are not sent to a doctor-watch run (it would report them as faults).")
            return
        if c.tree is None or c.tree.fingerprint != self._fingerprint:
            self.statusMessage.emit("Another model is loaded; the running training keeps its plan.")
            return
        try:
            sent = session.request_plan(c.plan)
        except PlanError as e:
            self.statusMessage.emit(f"Not applied to the running training: {str(e).splitlines()[0]}")
            return
        if sent:
            self.statusMessage.emit("Plan sent to the running training; it applies at the next step.")
        else:
            self.statusMessage.emit("The run is still starting; the plan change was not sent. Edit again once it trains.")

    # ------------------------------------------------------------ session signals
    @Slot(dict)
    def _on_prepared(self, info: dict) -> None:
        self.info = dict(info)
        if self.current is not None:
            self.current.summary.update(
                {k: info.get(k) for k in ("total_steps", "device", "num_classes") if info.get(k) is not None}
            )
        if self._state == "starting":
            self._set_state("paused" if self._session is not None and self._session.paused else "running")
        self.prepared.emit(self.info)

    @Slot(list)
    def _on_batch(self, batch: list) -> None:
        record = self.current
        if record is None:
            return
        record.metrics.extend(batch)
        said = ""
        for m in batch:
            for label in m.get("events") or []:
                record.events.append({"step": m.get("step"), "wall_time": m.get("wall_time"), "label": label})
                said = label if label.startswith(EVALUATION_HEAD) else said
        self.metricsReceived.emit(batch)
        if said:  # the latest auto-freeze evaluation, in the status line
            self.statusMessage.emit(sentence(said[:1].upper() + said[1:]))

    @Slot(object)
    def _on_module_stats(self, stats: ModuleStats) -> None:
        tree = self.controller.tree
        if tree is None or tree.fingerprint != self._fingerprint:
            return  # another model is shown: its rows are not the trained model's
        self.module_stats = stats
        self.module_history.add(stats)
        self.moduleStatsReceived.emit(stats)

    @Slot(dict)
    def _on_ended(self, outcome: dict) -> None:
        session, self._session = self._session, None
        record, self.current = self.current, None
        if session is not None:
            session.deleteLater()
        self._set_state("idle")
        if record is None:
            return
        from datetime import datetime

        record.finished = datetime.now().astimezone().isoformat(timespec="seconds")
        result = outcome.get("result")
        error = outcome.get("error") or ""
        if result is not None:
            record.status = str(result.get("status") or "failed")
            record.message = str(result.get("message") or "")
            record.summary.update(result.get("summary") or {})
            record.verify = result.get("verify")
            record.final_plan = result.get("plan")
            record.error = result.get("error")
        else:
            record.status = "failed"
            record.message = error or "the run could not start"
            record.error = outcome.get("details") or None
        refused = result is None and not outcome.get("details") and not record.metrics
        if refused:  # bad input found by the setup: nothing ran, nothing to keep
            record.status = "refused"
            self._forget(record)
        else:
            self._save(record, metrics=True)
        watch = outcome.get("watch")
        if watch is not None:
            self.watchFinished.emit(list(watch.get("findings") or []), dict(watch.get("summary") or {}))
        self.runEnded.emit(record)
        self.runsChanged.emit()
        if result is None:
            self.errorOccurred.emit("Cannot start training", record.message, outcome.get("details") or "")
        elif record.status in ("failed", "nonfinite"):
            title = "Training failed" if record.status == "failed" else "Loss is not finite"
            self.errorOccurred.emit(title, record.message, record.error or "")
        else:
            val = validation_text(record.validation())
            self.statusMessage.emit(f"{record.name}: {record.message}" + (f"; {val}" if val else ""))

    # ------------------------------------------------------------ the store
    def _release_metrics(self) -> None:
        """Forget the in-memory metrics of finished runs saved to disk (read again when needed)."""
        for r in self.records:
            if r.metrics_loaded and not r.running and r.folder is not None and (r.folder / "metrics.csv").is_file():
                r.metrics = []
                r.metrics_loaded = False

    def _forget(self, record: RunRecord) -> None:
        """Drop a run that never trained from the list and the store."""
        if record in self.records:
            self.records.remove(record)
        try:
            self.store.delete(record)
        except RunStoreError as e:
            self.statusMessage.emit(f"Could not remove the refused run: {e}")

    def _save(self, record: RunRecord, metrics: bool) -> None:
        try:
            self.store.save(record, metrics=metrics)
        except RunStoreError as e:
            self.statusMessage.emit(f"Run not saved: {e}")

    def rename(self, record: RunRecord, name: str) -> bool:
        """Give a run a new name (kept in its ``run.json``; also the run in progress).

        Args:
            record: the run.
            name: the new name (one line; an empty name is refused).

        Returns:
            True when the name changed and was saved; False when refused (the reason goes
            to :attr:`statusMessage`) or unchanged.
        """
        new = clean_name(name)
        if not new:
            self.statusMessage.emit(f"A run needs a name; {record.name} keeps its name.")
            return False
        if new == record.name or record not in self.records:
            return False
        record.name = new
        self._save(record, metrics=False)
        self.runsChanged.emit()
        return True

    def annotate(self, record: RunRecord, *, notes: str | None = None, tags: str | list[str] | None = None) -> bool:
        """Set a run's notes and/or tags (kept in its ``run.json``).

        Args:
            record: the run.
            notes: free text, or None to keep the notes.
            tags: comma-separated text or a list, or None to keep the tags.

        Returns:
            True when something changed and was saved.
        """
        if record not in self.records:
            return False
        new_notes = record.notes if notes is None else str(notes).strip()
        new_tags = record.tags if tags is None else clean_tags(tags)
        if (new_notes, new_tags) == (record.notes, record.tags):
            return False
        record.notes, record.tags = new_notes, new_tags
        self._save(record, metrics=False)
        self.runsChanged.emit()
        return True

    def load_metrics(self, record: RunRecord) -> list[dict[str, Any]]:
        """A run's metrics (read from the store the first time).

        Args:
            record: the run.

        Returns:
            Its records; empty when unreadable (the reason goes to :attr:`statusMessage`).
        """
        try:
            return self.store.load_metrics(record)
        except RunStoreError as e:
            self.statusMessage.emit(f"Cannot read the metrics of {record.name}: {e}")
            record.metrics_loaded = True
            return []

    def watched(self) -> tuple[list[str], list[str]]:
        """The folders and files to watch for runs arriving or changing (:meth:`StoreScan.watched`).

        Returns:
            ``(folders, files)``.
        """
        return self._scan.watched()

    def reload(self) -> None:
        """Read again the runs of the store and of the app's sweeps that changed on disk (a candidate or
        a sweep finished, ``workbench train --save`` or ``workbench sweep`` wrote into them): new runs
        are listed, those gone dropped, only changed run files are read, and a run whose file did not
        change stays as it is (:class:`~workbench.core.runs.rescan.StoreScan`); the run in progress
        is never replaced."""
        records, problems = self._scan.merge(self.records, keep=self.current)
        if problems:
            self.statusMessage.emit(f"{len(problems)} run(s) unreadable: {problems[0]}")
        if [id(r) for r in records] != [id(r) for r in self.records]:
            self.records[:] = records
            self.runsChanged.emit()

    def delete(self, records: list[RunRecord]) -> int:
        """Delete runs from the list and the store (never the one in progress).

        Args:
            records: the runs.

        Returns:
            How many were deleted.
        """
        n = 0
        for r in records:
            if r is self.current or r not in self.records:
                continue
            try:
                self.store.delete(r)
            except RunStoreError as e:
                self.errorOccurred.emit("Cannot delete run", str(e), "")
                continue
            self.records.remove(r)
            n += 1
        if n:
            self.runsChanged.emit()
        return n
