"""Plan sweeps: which candidate plan learns best for what it costs (``workbench sweep``, Suggest ▸ Train each).

Every candidate (the advisor's plans within a memory budget, or plan files, optionally crossed
with a few learning rates) trains for the same budget, in steps or seconds, with the same
seed and data order, as a normal run folder under ``<sweep folder>/runs/``. Each validation
(every ``eval_every`` steps) reports the objective to an Optuna study; its successive-halving
pruner (ASHA-style: ``optuna.pruners.SuccessiveHalvingPruner``) stops a candidate at a rung
when it is not among the best ``1/eta`` that reached that rung, so a sweep costs a fraction of
training every candidate to the end; candidates train last first (:attr:`Sweep.queue_order`
says why). The report (:mod:`~workbench.core.advisor.sweep_report`)
marks the Pareto fronts of the objective against time and against peak memory, and recommends
the cheapest plan within a share of the best objective whose retention (the metric on a second
dataset standing for the original task) is at least a floor.

The study and its storage are :mod:`~workbench.core.advisor.sweep_study`'s: a killed sweep
resumes when it runs again, and several processes (``--workers``, or machines sharing a
database) take candidates from one queue. One candidate's run is
:func:`~workbench.core.advisor.sweep_trial.train_candidate`.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import math
import os
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn
from torch.utils.data import Dataset

from workbench.core.advisor.sweep_report import COSTS, SweepReport, SweepRow
from workbench.core.advisor.sweep_study import (
    FAILED_ATTR,
    SPARE_ATTR,
    SweepError,
    candidate_of,
    enqueue_missing,
    fail_orphans,
    import_optuna,
    open_study,
    storage_url,
    waiting_count,
)
from workbench.core.advisor.sweep_trial import SweepInputs, TrialOutcome, train_candidate
from workbench.core.errors import WorkbenchError
from workbench.core.plan import FreezePlan
from workbench.core.runs.sweeps import LOCK_FILE, REPORT_FILE, SWEEP_RUNS
from workbench.core.training.config import TrainConfig

__all__ = ["OBJECTIVES", "Sweep", "SweepCandidate", "SweepError", "SweepSettings", "cross_learning_rates", "opened"]

#: What the sweep compares: the validation metric (larger is better) or the validation loss.
OBJECTIVES: tuple[str, ...] = ("metric", "loss")
#: Most candidates one sweep takes (a study is a queue of them, each a full run).
MAX_CANDIDATES = 256


@dataclass(frozen=True)
class SweepCandidate:
    """One plan (and learning rate) of a sweep.

    Attributes:
        id: its id in the sweep (``c00``, ``c01`` ...), the study's parameter value.
        name: what it trains, for people.
        plan: the freeze plan as a dict.
        lr: the learning rate.
        overrides: other :class:`TrainConfig` fields it sets (auto-freeze: ``{"auto_freeze": True}``).
    """

    id: str
    name: str
    plan: dict[str, Any]
    lr: float
    overrides: dict[str, Any] = field(default_factory=dict)

    @property
    def folder_name(self) -> str:
        """Its run folder's name: id and a slug of its name."""
        slug = re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-")[:48]
        return f"{self.id}-{slug}" if slug else self.id


def cross_learning_rates(plans: Sequence[tuple[str, FreezePlan | dict[str, Any], dict[str, Any]]],
                         lrs: Sequence[float]) -> list[SweepCandidate]:
    """Every plan with every learning rate, as numbered candidates.

    Args:
        plans: ``(name, plan, config overrides)`` per plan.
        lrs: learning rates (at least one).

    Returns:
        The candidates, plan-major (every rate of the first plan first).

    Raises:
        SweepError: no plan, no learning rate, a rate that is not a positive finite number,
            or more than :data:`MAX_CANDIDATES` candidates.
    """
    if not plans:
        raise SweepError("the sweep has no candidate plan; give --plans FILE ... or a --memory budget some plan fits")
    if not lrs:
        raise SweepError("the sweep has no learning rate; give --lr LR [LR ...]")
    for lr in lrs:
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 < lr < math.inf:
            raise SweepError(f"--lr must be a positive finite number, got {lr!r}")
    if len(plans) * len(lrs) > MAX_CANDIDATES:
        raise SweepError(f"{len(plans)} plans x {len(lrs)} learning rates is {len(plans) * len(lrs)} candidates, "
                         f"more than {MAX_CANDIDATES}; give fewer")
    out: list[SweepCandidate] = []
    for name, plan, overrides in plans:
        d = plan.to_dict() if isinstance(plan, FreezePlan) else dict(plan)
        for lr in lrs:
            label = name if len(lrs) == 1 else f"{name} · lr {lr:g}"
            out.append(SweepCandidate(f"c{len(out):02d}", label, d, float(lr), dict(overrides)))
    return out


@dataclass(frozen=True)
class SweepSettings:
    """How a sweep trains and compares its candidates.

    Attributes:
        steps: each candidate's budget in optimizer steps (or None with ``seconds``).
        seconds: each candidate's budget in seconds of training (or None with ``steps``).
        eval_every: validate (and report to the pruner) every N steps.
        prune: stop candidates early with successive halving; False: train each to the end.
        reduction_factor: the pruner's eta: the best ``1/eta`` of a rung go on (2 or more).
        objective: ``metric`` (larger is better) or ``loss`` (the validation loss).
        within: a recommended plan's objective is within this share of the best (0.01: 1 %).
        min_retention: a recommended plan's retention is at least this (None: no floor).
        by: ``time`` or ``memory``: what "cheapest" is measured in.
        study: the study's name in its storage.
        storage: a database URL shared by several machines; None: SQLite in the sweep folder.
    """

    steps: int | None = 100
    seconds: float | None = None
    eval_every: int = 10
    prune: bool = True
    reduction_factor: int = 3
    objective: str = "metric"
    within: float = 0.01
    min_retention: float | None = None
    by: str = "time"
    study: str = "sweep"
    storage: str | None = None

    def validate(self) -> SweepSettings:
        """Check every field.

        Returns:
            self.

        Raises:
            SweepError: the first bad field, named, with what to give.
        """
        if (self.steps is None) == (self.seconds is None):
            raise SweepError("give the budget of each candidate as --steps N or --seconds S (one of them)")
        if self.steps is not None and (isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 1):
            raise SweepError(f"--steps must be a positive integer, got {self.steps!r}")
        if self.seconds is not None and not (isinstance(self.seconds, (int, float)) and 0 < self.seconds < math.inf):
            raise SweepError(f"--seconds must be a positive finite number, got {self.seconds!r}")
        if isinstance(self.eval_every, bool) or not isinstance(self.eval_every, int) or self.eval_every < 1:
            raise SweepError(f"--eval-every must be a positive integer, got {self.eval_every!r}")
        if self.steps is not None and self.eval_every > self.steps:
            raise SweepError(f"--eval-every {self.eval_every} is more than the budget of {self.steps} steps; "
                             "give a smaller one")
        if isinstance(self.reduction_factor, bool) or not isinstance(self.reduction_factor, int) or self.reduction_factor < 2:
            raise SweepError(f"--reduction-factor must be an integer >= 2, got {self.reduction_factor!r}")
        if self.objective not in OBJECTIVES:
            raise SweepError(f"--objective must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}")
        if not (isinstance(self.within, (int, float)) and 0 <= self.within < math.inf):
            raise SweepError(f"--within must be a finite percentage >= 0, got {self.within!r}")
        if self.min_retention is not None and not math.isfinite(self.min_retention):
            raise SweepError(f"--min-retention must be a finite number, got {self.min_retention!r}")
        if self.by not in COSTS:
            raise SweepError(f"--by must be one of {', '.join(COSTS)}, got {self.by!r}")
        if not isinstance(self.study, str) or not self.study.strip() or len(self.study) > 200:
            raise SweepError(f"--study must be a name of 1 to 200 characters, got {self.study!r}")
        return self


#: Whether the OS locks files (flock): then the folder lock, not heartbeats, tells a killed local sweep.
_FOLDER_LOCKS = importlib.util.find_spec("fcntl") is not None


class _FolderLock:
    """An OS lock on the sweep folder: exclusive while the study is prepared, shared while workers train."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / LOCK_FILE
        self._fd: int | None = None

    def acquire(self, *, shared: bool) -> bool:
        try:
            import fcntl
        except ImportError:  # no flock (Windows): orphans wait for the heartbeat instead
            return False
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        try:
            fcntl.flock(self._fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except OSError:
            os.close(self._fd)
            self._fd = None
            raise SweepError(f"another sweep is running in {self.path.parent} (its lock {self.path} is held); "
                             "wait for it, or give --workers K to one command to share the work") from None
        return True

    def share(self) -> None:
        if self._fd is not None:
            import fcntl

            fcntl.flock(self._fd, fcntl.LOCK_SH)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


#: ``on_event(kind, data)``: ``"started"`` ({id, name}), ``"step"`` ({id, step, total}),
#: ``"finished"`` ({id, row: SweepRow}).
EventFn = Callable[[str, dict[str, Any]], None]


class Sweep:
    """A sweep over candidate plans, stored in ``folder``.

    Args:
        folder: the sweep folder (the study's SQLite file, ``runs/`` with one run folder per candidate).
        candidates: the candidates.
        config: the base training config (model, data, batch, optimizer, seed, device ...);
            each candidate sets its plan, lr, steps, validation and run folder on a copy.
        settings: budget, pruning, objective and recommendation.
        retain: the retention data (a dataset spec or a dataset), or None.
        model_factory: builds a fresh model per candidate instead of ``config.model`` (without it
            and ``dataset``, the config's model and data are built once in each process and every
            candidate trains a copy: :class:`~workbench.core.advisor.sweep_trial.SweepInputs`).
        dataset: training data instead of ``config.data``.
        loss_fn: the loss instead of the config's.
        trust_pickle: allow pickled checkpoints (only files the user trusts).
        inputs: the model and data built once, when the caller built them already (for the
            advisor's candidates: :func:`~workbench.core.advisor.sweep_candidates.advised_plans`);
            None: the sweep makes its own.

    Raises:
        SweepError: bad settings or no candidate.
    """

    def __init__(self, folder: str | os.PathLike[str], candidates: Sequence[SweepCandidate], config: TrainConfig,
                 settings: SweepSettings, *, retain: str | Dataset[Any] | None = None,
                 model_factory: Callable[[], nn.Module] | None = None, dataset: Dataset[Any] | None = None,
                 loss_fn: Any = None, trust_pickle: bool = False, inputs: SweepInputs | None = None) -> None:
        if not candidates:
            raise SweepError("the sweep has no candidate; give --plans FILE ... or a --memory budget some plan fits")
        self.folder = Path(folder)
        self.candidates = list(candidates)
        self.config = config
        self.settings = settings.validate()
        self.retain = retain
        self.model_factory = model_factory
        self.dataset = dataset
        self.loss_fn = loss_fn
        self.trust_pickle = trust_pickle
        self._by_id = {c.id: c for c in self.candidates}
        #: the model and data every candidate starts from, built once in this process
        self.inputs = inputs if inputs is not None else SweepInputs(
            config, trust_pickle=trust_pickle, build_once=model_factory is None and dataset is None)
        self._lock = _FolderLock(self.folder)
        self._study: Any = None

    # ------------------------------------------------------------ the study
    @property
    def maximize(self) -> bool:
        """A larger objective is better (the metric, unless it is one where lower is better; not the loss)."""
        from workbench.core.training.task_metrics import higher_is_better

        return self.settings.objective == "metric" and higher_is_better(self.config.metric)

    @property
    def study(self) -> Any:
        """The Optuna study (opened by :meth:`prepare` or :meth:`join`)."""
        if self._study is None:
            raise SweepError("the sweep's study is not open; call prepare() or join() first")
        return self._study

    def _check_folder(self) -> str:
        """The storage URL, after checking the folder and the study file (nothing is created before)."""
        if self.folder.exists() and not self.folder.is_dir():
            raise SweepError(f"the sweep folder {self.folder} is not a folder; give another path")
        url = storage_url(self.folder, self.settings.storage)
        try:
            (self.folder / SWEEP_RUNS).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise SweepError(f"cannot create the sweep folder {self.folder}: {e.strerror or e}") from None
        return url

    def _open(self, url: str) -> Any:
        s = self.settings
        return open_study(url, s.study, maximize=self.maximize, identity=self.identity(),
                          reduction_factor=s.reduction_factor, min_resource=s.eval_every, prune=s.prune,
                          heartbeat=s.storage is not None or not _FOLDER_LOCKS)

    @property
    def queue_order(self) -> list[str]:
        """The candidates' ids in the order they train: the last candidate first.

        Successive halving in one queue compares a candidate only with those trained before
        it; a candidate better than every one before it always goes on. The advisor lists its
        plans least trained first, which usually means worst first: in that order every
        candidate is the best so far and none is stopped. Trained last first, the plans that
        train the most (auto-freeze, full fine-tuning) set each rung's bar, and the ones that
        learn less stop at the first rung. Plan files train in the reverse of their order too.
        """
        return [c.id for c in reversed(self.candidates)]

    def identity(self) -> dict[str, Any]:
        """What makes a rerun the same sweep: candidates (plan, lr, overrides), budget, objective and the run's settings."""
        def digest(c: SweepCandidate) -> str:
            text = json.dumps([c.plan, c.overrides], sort_keys=True, default=str)
            return f"{c.id} {c.name} lr={c.lr:g} {hashlib.sha256(text.encode()).hexdigest()[:12]}"

        s = self.settings
        run = {k: v for k, v in self.config.to_dict().items()
               if k not in ("plan", "lr", "save_dir", "metrics_path", "steps", "val_every", "torch_threads")}
        return {"candidates": [digest(c) for c in self.candidates], "steps": s.steps, "seconds": s.seconds,
                "eval_every": s.eval_every, "objective": s.objective, "prune": s.prune,
                "reduction_factor": s.reduction_factor, "run": json.loads(json.dumps(run, default=str)),
                "retain": self.retain if isinstance(self.retain, str) or self.retain is None else "a dataset"}

    def prepare(self) -> list[str]:
        """Open (or create) the study, fail trials a killed process left running, and queue what is left.

        Takes the folder's lock (exclusive, then shared while this process trains): while it
        is held no other command starts a sweep in the folder.

        Returns:
            The ids of the candidates queued now (on a resumed sweep, those not done yet).

        Raises:
            SweepError: Optuna is missing, the storage is bad, the study is another sweep's,
                or another sweep holds the folder.
        """
        url = self._check_folder()
        alone = self._lock.acquire(shared=False)
        try:
            self._study = self._open(url)
            if alone and self.settings.storage is None:
                fail_orphans(self._study)  # nobody else holds the folder: a RUNNING trial is a killed one's
            else:
                with contextlib.suppress(Exception):
                    import_optuna().storages.fail_stale_trials(self._study)
            queued = enqueue_missing(self._study, self.queue_order)
        except BaseException:
            self._lock.release()
            raise
        self._lock.share()
        return queued

    def requeue_orphans(self) -> list[str]:
        """Fail the trials left running and queue their candidates again: call only when every other
        process of this sweep has ended (the ``--workers`` processes this one started, joined).

        Returns:
            The ids queued again.
        """
        fail_orphans(self.study)
        return enqueue_missing(self.study, self.queue_order)

    def join(self) -> None:
        """Open the study another process of this sweep prepared (a ``--workers`` process).

        Raises:
            SweepError: as :meth:`prepare`.
        """
        url = self._check_folder()
        self._lock.acquire(shared=True)
        try:
            self._study = self._open(url)
        except BaseException:
            self._lock.release()
            raise

    def close(self) -> None:
        """Let go of the folder's lock."""
        self._lock.release()

    # ------------------------------------------------------------ training
    def _prune_reason(self, number: int, step: int) -> str:
        trials = self.study.get_trials(deepcopy=False)
        me = next((t for t in trials if t.number == number), None)
        if me is None:
            return f"stopped at step {step}"
        rung = max((int(k.rpartition("_")[2]) for k in me.system_attrs if k.startswith("completed_rung_")), default=0)
        key = f"completed_rung_{rung}"
        value = me.system_attrs.get(key)
        competing = sorted((t.system_attrs[key] for t in trials if key in t.system_attrs), reverse=self.maximize)
        keep = max(1, len(competing) // self.settings.reduction_factor)
        need = competing[keep - 1] if competing else value
        word = "at least" if self.maximize else "at most"
        return (f"stopped at step {step} (rung {rung}): {value:.4g} was not among the best {keep} of the "
                f"{len(competing)} candidates that reached step {step} (it needed {word} {need:.4g})")

    def _objective(self, trial: Any, cancel: threading.Event | None, on_event: EventFn | None) -> float:
        optuna = import_optuna()
        ids = [c.id for c in self.candidates]
        cid = trial.suggest_categorical("candidate", ids)
        frozen = next((t for t in self.study.get_trials(deepcopy=False) if t.number == trial.number), None)
        if frozen is None or "fixed_params" not in frozen.system_attrs:  # the queue ran dry under us
            trial.set_user_attr(SPARE_ATTR, True)
            self.study.stop()
            raise _SpareTrialError()
        cand = self._by_id[cid]
        trial.set_user_attr("name", cand.name)
        trial.set_user_attr("lr", cand.lr)
        trial.set_user_attr("worker", os.getpid())
        if on_event is not None:
            on_event("started", {"id": cid, "name": cand.name})

        def report(step: int, value: float) -> bool:
            trial.report(value, step)
            if trial.should_prune():
                trial.set_user_attr("reason", self._prune_reason(trial.number, step))
                return True
            return False

        cfg = self.config.replace(plan=cand.plan, lr=cand.lr, save_dir=str(self.folder / SWEEP_RUNS / cand.folder_name),
                                  metrics_path=None, **cand.overrides)
        s = self.settings
        try:
            out = train_candidate(
                cfg, eval_every=s.eval_every, steps=s.steps, seconds=s.seconds, report=report,
                loss_objective=s.objective == "loss", retain=self.retain, model_factory=self.model_factory,
                dataset=self.dataset, loss_fn=self.loss_fn, cancel=cancel, trust_pickle=self.trust_pickle,
                inputs=self.inputs,
                on_step=(lambda step, total: on_event("step", {"id": cid, "step": step, "total": total}))
                if on_event is not None else None,
            )
        except WorkbenchError as e:  # bad input for this plan (it does not fit the model): it would fail again
            out = TrialOutcome(status="failed", message=str(e))
        trial.set_user_attr("outcome", out.to_dict())
        if out.status == "stopped":
            raise _CancelledError()
        if out.status == "failed" or (out.status == "completed" and out.metric is None):
            trial.set_user_attr(FAILED_ATTR, True)
            if out.status == "completed":
                what = "loss" if s.objective == "loss" else "metric"
                trial.set_user_attr("reason", f"validation gave no {what} for this model's outputs; "
                                              "give --objective loss, or a metric that fits them")
            else:
                trial.set_user_attr("reason", out.message)
            raise _CandidateFailedError()
        if out.status == "pruned":
            raise optuna.TrialPruned(trial.user_attrs.get("reason", ""))
        assert out.metric is not None
        return out.metric

    def work(self, *, cancel: threading.Event | None = None, on_event: EventFn | None = None) -> int:
        """Train queued candidates in this process until the queue is empty (or ``cancel`` is set).

        Args:
            cancel: set from another thread to stop at the next step boundary; the candidate
                then training goes back to the queue of the next run.
            on_event: progress callback (see :data:`EventFn`), called in this thread.

        Returns:
            Trials this process finished.
        """
        study = self.study
        done = 0

        def after(st: Any, frozen: Any) -> None:
            nonlocal done
            done += 1
            if on_event is not None and not frozen.user_attrs.get(SPARE_ATTR):
                cid = candidate_of(frozen)
                row = next((r for r in self.report().rows if r.id == cid), None)
                on_event("finished", {"id": cid, "row": row})
            if self.settings.storage is not None:  # a machine that went silent: its candidate back in the queue
                with contextlib.suppress(Exception):
                    import_optuna().storages.fail_stale_trials(st)
                    enqueue_missing(st, self.queue_order)
            if (cancel is not None and cancel.is_set()) or waiting_count(st) == 0:
                st.stop()

        while waiting_count(study) and not (cancel is not None and cancel.is_set()):
            try:
                study.optimize(lambda t: self._objective(t, cancel, on_event), callbacks=[after],
                               catch=(_CandidateFailedError, _SpareTrialError), gc_after_trial=True)
            except _CancelledError:
                break
        return done

    # ------------------------------------------------------------ the answer
    def report(self, *, retention_before: float | None = None) -> SweepReport:
        """The rows of every candidate as the study holds them now, with fronts and recommendation.

        Args:
            retention_before: the model's retention before training, when measured.

        Returns:
            The report.
        """
        optuna = import_optuna()
        state = optuna.trial.TrialState
        rank = {state.COMPLETE: 0, state.PRUNED: 1, state.FAIL: 2, state.RUNNING: 3, state.WAITING: 4}
        best: dict[str, Any] = {}
        for t in self.study.get_trials(deepcopy=False):
            cid = candidate_of(t)
            if cid not in self._by_id or t.user_attrs.get(SPARE_ATTR):
                continue
            if t.state == state.FAIL and not t.user_attrs.get(FAILED_ATTR):
                continue  # killed or cancelled: queued again
            if cid not in best or rank[t.state] < rank[best[cid].state]:
                best[cid] = t
        rows = []
        for c in self.candidates:
            t = best.get(c.id)
            if t is None:
                rows.append(SweepRow(c.id, c.name, c.lr, "waiting"))
                continue
            status = {state.COMPLETE: "completed", state.PRUNED: "pruned", state.FAIL: "failed",
                      state.RUNNING: "running", state.WAITING: "waiting"}[t.state]
            o = t.user_attrs.get("outcome") or {}
            rows.append(SweepRow(
                c.id, c.name, c.lr, status, steps=int(o.get("steps") or 0), metric=o.get("metric"),
                val_loss=o.get("val_loss"), curve=[(int(a), float(b)) for a, b in o.get("curve") or []],
                time_s=o.get("time_s"), peak_bytes=o.get("peak_bytes"), memory_source=o.get("memory_source") or "",
                trainable=o.get("trainable"), retention=o.get("retention"), reason=str(t.user_attrs.get("reason", "")),
                run_dir=o.get("run_dir") or "",
            ))
        from workbench.core.training.task_metrics import metric_label

        s = self.settings
        name = "validation loss" if s.objective == "loss" else metric_label(self.config.metric)
        return SweepReport.build(rows, objective=name, maximize=self.maximize, within=s.within,
                                 min_retention=s.min_retention, by=s.by, retention_before=retention_before)

    def write_report(self, report: SweepReport) -> Path:
        """Write ``report.json`` in the sweep folder (replacing the last one, atomically).

        Returns:
            Its path.
        """
        from workbench.core.atomic import atomic_write

        path = self.folder / REPORT_FILE
        atomic_write(path, json.dumps(report.to_dict(), indent=1) + "\n")
        return path


class _CandidateFailedError(Exception):
    """A candidate failed for a reason a rerun would meet again (kept FAIL, not queued again)."""


class _SpareTrialError(Exception):
    """A trial the sampler made because another worker took the last queued one."""


class _CancelledError(Exception):
    """The sweep was cancelled while a candidate trained (its trial goes back to the queue)."""


@contextlib.contextmanager
def opened(sweep: Sweep, *, join: bool = False) -> Iterator[list[str]]:
    """``with opened(sweep) as queued:`` prepare (or join) the study and let go of the lock afterwards."""
    try:
        if join:
            sweep.join()
            yield []
        else:
            yield sweep.prepare()
    finally:
        sweep.close()
