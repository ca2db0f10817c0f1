"""The training loop: :class:`Trainer` yields :class:`~workbench.core.training.metrics.StepMetrics`.

One engine serves the CLI (``workbench train``), ``torchrun`` (DDP), scripts and the GUI's
worker thread::

    trainer = Trainer(TrainConfig(model="resnet18", plan="plan.json", steps=100, image_size=64))
    for m in trainer.steps():          # or: result = trainer.run()
        print(m.step, m.loss, m.step_time_s)
    result = trainer.result            # RunResult: status, summary, verify report, plan in force

Control from another thread: :meth:`Trainer.stop`, :meth:`Trainer.pause`,
:meth:`Trainer.resume` and :meth:`Trainer.request_plan`; the loop looks at them once per
step, at the step boundary. Bad input (unknown model, bad plan, missing dataset) raises a
:class:`~workbench.core.errors.WorkbenchError` from :meth:`Trainer.setup`; everything that goes
wrong while training (an exception in a step, CUDA out of memory, a non-finite loss) ends the
run with a :class:`RunResult` whose ``status`` says so, and the model is left consistent: the
optimizer step of the failing step either happened completely or not at all.

The engine holds the loop and its controls; one step is :class:`~workbench.core.training.step.TrainStep`,
building the model, data, head and optimizer is :mod:`workbench.core.training.setup`, and
whether a plan may train is :func:`~workbench.core.plan.readiness.check_plan`.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import random
import statistics
import threading
import time
import traceback
from collections.abc import Callable, Generator, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from workbench.core.atomic import atomic_write
from workbench.core.errors import WorkbenchError, first_line
from workbench.core.freezing.apply import AppliedPlan, PlanDiff, apply_plan
from workbench.core.freezing.snapshot import GradWatch
from workbench.core.plan.readiness import check_plan
from workbench.core.plan.rules import FreezePlan, PlanError
from workbench.core.plan.tree import ModelTree
from workbench.core.runs.record import RunRecord, write_run_file  # the run record of the save folder
from workbench.core.training import distributed as wdist
from workbench.core.training import fsdp as wfsdp
from workbench.core.training import setup as build
from workbench.core.training.auto_freeze import PLAN_FILE as AUTO_FREEZE_PLAN
from workbench.core.training.auto_freeze import AutoFreezer
from workbench.core.training.batches import batch_size_of, batch_to_device
from workbench.core.training.config import TrainConfig
from workbench.core.training.data import dataset_num_classes, dataset_seq_len, model_positions, stop_loader_workers
from workbench.core.training.failure_text import hint, nonfinite_stop_message, nonfinite_word
from workbench.core.training.frozen_cache import CacheRefusedError, FrozenPrefixCache, build_cache
from workbench.core.training.loop_state import LoopState
from workbench.core.training.loop_validation import record_validation, validate_model, validation_due
from workbench.core.training.memory_probe import (
    MemoryProbe,
    optimizer_state_bytes,
    process_rss,
    release_freed_heap,
    training_tensors,
)
from workbench.core.training.metrics import MetricsWriter, StepMetrics
from workbench.core.training.module_stats import ModuleStatsProbe
from workbench.core.training.optim import sync_optimizer
from workbench.core.training.run_folder import RunOutputs
from workbench.core.training.run_result import STATUSES, RunResult
from workbench.core.training.schedule import LrSchedule
from workbench.core.training.setup import TrainError, resolve_device
from workbench.core.training.step import ClassificationLoss, LossFn, StepFailure, TrainStep, clear_grads
from workbench.core.training.task_metrics import task_summary
from workbench.core.training.tensorboard import TensorBoardWriter, open_tensorboard
from workbench.core.training.trainable_state import write_trainable_state

__all__ = [
    "STATUSES",
    "RunResult",
    "TrainError",
    "Trainer",
    "resolve_device",
]


# ---------------------------------------------------------------- the trainer
class Trainer:
    """Runs training for a :class:`TrainConfig`; yields :class:`StepMetrics`.

    Args:
        config: the run's settings (defaults: ``TrainConfig()``).
        model: use this model instead of building ``config.model`` (its head is still replaced when
            ``config.num_classes`` differs); a ``setup.BuiltModel``: as built (``setup.given_model``).
        plan: a :class:`FreezePlan` (or dict, or path) overriding ``config.plan``.
        dataset: a map-style dataset of ``(input, target)`` overriding ``config.data``.
        loss_fn: ``loss_fn(model_output, targets) -> loss``; default: ``config.loss``.
        step_hook: ``step_hook(step)`` called at the start of every step, in the training
            thread, inside the step's failure handling (tests inject failures with it).
        on_metrics: called with each reported :class:`StepMetrics`, in the training thread.
        trust_pickle: allow checkpoints that need unpickling code (only for trusted files).
        module_stats_every: measure per-module gradient norms and update/weight ratios every
            N steps (``StepMetrics.module_stats``); None: not measured.

    Raises:
        ConfigError: the config is invalid.
    """

    def __init__(
        self,
        config: TrainConfig | None = None,
        *,
        model: nn.Module | build.BuiltModel | None = None,
        plan: FreezePlan | Mapping[str, Any] | str | os.PathLike[str] | None = None,
        dataset: Dataset[Any] | None = None,
        loss_fn: LossFn | None = None,
        step_hook: Callable[[int], None] | None = None,
        on_metrics: Callable[[StepMetrics], None] | None = None,
        trust_pickle: bool = False,
        module_stats_every: int | None = None,
    ) -> None:
        self.config = (config or TrainConfig()).validate()
        self._model_arg = model
        self._plan_arg = plan
        self._dataset_arg = dataset
        self._loss_arg = loss_fn
        self.loss_fn: LossFn = loss_fn or ClassificationLoss()  # config.loss, from setup
        self.metric: Any = None  # config.metric's accumulator, from setup
        self.step_hook = step_hook
        self.on_metrics = on_metrics
        self._trust_pickle = trust_pickle
        self._stats_every = module_stats_every
        self._stop = threading.Event()
        self._resume = threading.Event()
        self._resume.set()
        self._waiting = threading.Event()
        self._lock = threading.Lock()
        self._pending: FreezePlan | None = None  # the requested plan, handed over under _lock
        self._tree: ModelTree | None = None  # the model's tree, set once by setup
        self._train_step: TrainStep | None = None
        self._grads: GradWatch | None = None  # which trainable tensors got gradients, for verify
        self._ready = False
        self._started = False
        self._finished = False
        self._loop_state: LoopState | None = None
        self.plan_version = 0
        self.result: RunResult | None = None
        self.last_diff: PlanDiff | None = None
        self.model: nn.Module | None = None
        self.applied: AppliedPlan | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.dataset: Dataset[Any] | None = None
        self.loader: DataLoader[Any] | None = None
        self.device = torch.device("cpu")
        self.dist: wdist.DistContext | None = None
        self.ddp: nn.parallel.DistributedDataParallel | None = None
        #: ``strategy="fsdp"``: the verifier of this rank's shards of the frozen tensors.
        self.shards: wfsdp.ShardVerifier | None = None
        self._full_state: dict[str, torch.Tensor] | None = None  # FSDP: gathered for saving
        #: ``strategy="fsdp"``: the folder a model built on meta read its shards from, or None.
        self.materialized_from: Path | None = None
        self.total_steps = 0
        self.steps_per_epoch: int | None = None
        self.image_size: int | None = None
        self.seq_len: int | None = None  # tokens per sample of text data (then no image size)
        self.num_classes: int | None = None
        self.new_heads: list[str] = []
        self.head_note = ""  # one line naming a head the run replaced, or ""
        self.input_shape: tuple[int, ...] | dict[str, tuple[int, ...]] | None = None  # one sample's input
        self.start_validation: Any = None  # the validation before the first step (config.val_at_start)
        self.val_loader: DataLoader[Any] | None = None
        self.schedule: LrSchedule | None = None
        self.full_plan = FreezePlan()
        self._fwd: Callable[..., Any] | None = None
        self._sampler: Any = None
        self._scaler: Any = None
        self._amp_dtype: torch.dtype | None = None
        self._base_dir: Path | None = None
        self._counts = (0, 0, 0)  # trainable, frozen, grad bytes
        self._opt_bytes = 0
        self._writers: list[MetricsWriter | TensorBoardWriter] = []
        self._outputs: RunOutputs | None = None  # locked, staged save folder and metrics files
        self._probe: MemoryProbe | None = None
        self._setup_rss: int | None = None
        #: the frozen-prefix activation cache, when on (``config.cache_frozen``)
        self.cache: FrozenPrefixCache | None = None
        #: one line saying why the cache is off, or ""
        self.cache_note = ""
        #: ``config.auto_freeze``: decides which front blocks to freeze
        self.auto_freezer: AutoFreezer | None = None

    # ------------------------------------------------------------ thread-safe controls
    def stop(self) -> None:
        """Ask the run to end at the next step boundary (also ends a pause). Thread-safe."""
        self._stop.set()
        self._resume.set()

    def pause(self) -> None:
        """Hold the run at the next step boundary, without busy-waiting. Thread-safe."""
        self._resume.clear()

    def resume(self) -> None:
        """Continue a paused run. Thread-safe."""
        self._resume.set()

    @property
    def stop_requested(self) -> bool:
        """stop() was called."""
        return self._stop.is_set()

    @property
    def paused(self) -> bool:
        """The loop is held at a step boundary right now."""
        return self._waiting.is_set()

    def wait_paused(self, timeout: float | None = None) -> bool:
        """Block until the loop is actually held by :meth:`pause`.

        Args:
            timeout: seconds, or None to wait indefinitely.

        Returns:
            True when the loop is paused.
        """
        return self._waiting.wait(timeout)

    @property
    def is_main(self) -> bool:
        """Rank 0 (always True without torchrun)."""
        return self.dist is None or self.dist.info.is_main

    @property
    def plan(self) -> FreezePlan:
        """The plan in force now (base rules plus reached stages and live changes)."""
        return self.applied.plan if self.applied is not None else self.full_plan

    @property
    def step(self) -> int:
        """Steps done so far."""
        return self._loop_state.step if self._loop_state is not None else 0

    def request_plan(self, plan: FreezePlan | Mapping[str, Any] | str | os.PathLike[str]) -> None:
        """Hand a plan over to the training thread, which switches to it at the next step. Thread-safe.

        The new plan replaces the current one, stages included (the stages already reached
        at the current step/epoch are in force at once). This call only stores the plan under
        a lock; it never reads the training loop's state. At the next step boundary the
        training thread checks it for that step (:func:`~workbench.core.plan.readiness.check_plan`),
        calls ``applied.update(plan)`` and syncs the optimizer (see :func:`sync_optimizer`);
        under DDP every rank applies it at the same step and the DDP wrapper is rebuilt. The
        change shows up as an event in the next :class:`StepMetrics` and bumps
        ``plan_version``; a plan refused there shows up as a ``"plan change refused: ..."``
        event and the run goes on with its plan.

        Once the model is set up, what does not depend on the step is refused here already:
        rules that do not fit the model, and a plan without stages that leaves nothing
        trainable.

        A :class:`FreezePlan` is kept, not copied: do not change it afterwards (plans are
        replaced, never edited in place; hand over ``plan.copy()`` otherwise).

        Args:
            plan: a :class:`FreezePlan`, its dict, or a plan file path.

        Raises:
            PlanError: the plan is invalid, does not fit the model, or leaves nothing trainable.
            TrainError: under torchrun, called on a rank other than 0.
        """
        if not isinstance(plan, FreezePlan):
            plan = build.load_plan(plan)[0]
        if self.dist is not None and not self.dist.info.is_main:
            raise TrainError("under torchrun, request plan changes on rank 0; it sends them to every rank")
        tree = self._tree
        if tree is not None:
            check_plan(plan, tree).raise_if_not_ok()
        with self._lock:
            self._pending = plan

    def _take_pending(self) -> FreezePlan | None:
        if self._pending is None:
            return None
        with self._lock:
            plan, self._pending = self._pending, None
        return plan

    # ------------------------------------------------------------ setup
    def setup(self) -> None:
        """Build everything: model, head, plan, data, optimizer (called by :meth:`steps`).

        Raises:
            TrainError: the model, data or device cannot be provided (message says why).
            PlanError: the plan is invalid or does not fit the model.
        """
        if self._ready:
            return
        release_freed_heap()  # an earlier run's freed memory is not reused unseen (core.training.metrics)
        self._setup_rss = process_rss()  # the baseline of CPU peak memory: before the model is built
        cfg = self.config
        if cfg.torch_threads:
            torch.set_num_threads(cfg.torch_threads)
        info = wdist.env_info()
        try:
            self.device = resolve_device(cfg.device, info)
            if self.device.type == "cuda":
                torch.cuda.set_device(self.device)
            self.dist = wdist.init_distributed(self.device.type)
        except (RuntimeError, ValueError) as e:
            if isinstance(e, WorkbenchError):
                raise
            raise TrainError(f"cannot join the torchrun job: {first_line(e)}") from e
        if cfg.strategy == "fsdp":
            wfsdp.require_group(self.dist)
        torch.manual_seed(cfg.seed)
        random.seed(cfg.seed)
        plan, self._base_dir = build.load_plan(self._plan_arg if self._plan_arg is not None else cfg.plan)
        self.full_plan = plan
        if self._model_arg is not None:
            built = build.given_model(self._model_arg)
        else:
            built = build.build_model(cfg, plan, trust_pickle=self._trust_pickle)
        self.loss_fn, self.metric = build.build_task(cfg, self._loss_arg)
        self.dataset, self.image_size = build.build_dataset(cfg, built, self._dataset_arg)
        self.input_shape = build.first_input_shape(self.dataset)
        synthetic = self._dataset_arg is None and cfg.data.strip().lower().startswith("synthetic")
        self.new_heads, self.head_note = build.fit_head_noted(cfg, built, self.dataset, synthetic=synthetic)
        self.dataset, self.val_loader = build.build_validation(cfg, built, self.dataset, self.image_size, self.device)
        model = built.model
        self.num_classes = dataset_num_classes(self.dataset) or build.head_classes(model)
        self.seq_len = dataset_seq_len(self.dataset)
        self.materialized_from = built.materialize_from  # FSDP: built on meta, read after sharding
        if self.materialized_from is None:
            model.to(self.device)
            if cfg.channels_last:
                model.to(memory_format=torch.channels_last)
        self.model = model
        if self.dist is not None and self.materialized_from is None:  # every rank starts from rank 0's weights
            wdist.broadcast_model_state(model)
        start = plan.at(0, 0)
        self.applied = apply_plan(model, start, base_dir=self._base_dir)
        if cfg.strategy == "fsdp":  # after the plan, before the optimizer: it gets the trainable shards
            self._shard(plan)
        try:
            groups = self.applied.param_groups(cfg.lr, cfg.weight_decay, no_decay=cfg.no_decay)
        except ValueError as e:
            self.applied.remove(merge=False)
            raise TrainError(str(e)) from None
        self._wrap()
        self.optimizer = build.make_optimizer(cfg, groups)
        self.applied.attach_optimizer(self.optimizer)
        self._amp_dtype, self._scaler = build.make_amp(cfg, self.device)
        loader = build.build_loader(cfg, self.dataset, self.device, self.dist)
        self.loader, self._sampler = loader.loader, loader.sampler
        self.steps_per_epoch, self.total_steps = loader.steps_per_epoch, loader.total_steps
        if self.dist is not None:  # every rank runs the same steps, whatever its data
            self.total_steps = wdist.all_reduce_min(self.total_steps, self.device)
        self.schedule = LrSchedule(cfg.scheduler, self.total_steps, cfg.warmup_steps)
        try:
            decided = build_cache(
                cfg, model, self._fwd if self._fwd is not None else model, self.loader, self.applied, self.device,
                distributed=self.dist is not None, total_steps=self.total_steps, steps_per_epoch=self.steps_per_epoch,
                freezes_later=bool(plan.stages) or cfg.auto_freeze,
            )
        except CacheRefusedError as e:
            self.applied.remove(merge=False)
            raise TrainError(str(e)) from None
        self.cache, self.loader, self.cache_note = decided.cache, decided.loader, decided.note
        if cfg.auto_freeze:
            self.auto_freezer = self._auto_freezer(model)
        live = None if cfg.compile_backend else lambda: training_tensors(self.model, self.optimizer, self.applied)
        self._probe = MemoryProbe(self.device, baseline=self._setup_rss, live=live)
        self._recount()
        self._tree = self.applied.tree
        self._ready = True

    def _auto_freezer(self, model: nn.Module) -> AutoFreezer:
        cfg = self.config
        assert self.applied is not None
        try:
            if self.dist is not None:
                raise ValueError("auto-freeze runs in one process, not under torchrun")
            return AutoFreezer(model, wfsdp.block_paths(model), cfg.auto_freeze_every, cfg.auto_freeze_threshold,
                               cfg.auto_freeze_max, total_steps=self.total_steps)
        except ValueError as e:
            if self.cache is not None:
                self.cache.close()
            self.applied.remove(merge=False)
            raise TrainError(f"--auto-freeze: {e}") from None

    def _shard(self, plan: FreezePlan) -> None:
        assert self.model is not None and self.applied is not None
        try:
            wfsdp.check_plan_supported(plan, self.applied, self.config.amp, meta=self.materialized_from is not None)
            blocks = wfsdp.resolve_blocks(self.model, self.config.fsdp_blocks)
        except wfsdp.FsdpError:
            self.applied.remove(merge=False)
            raise
        wfsdp.shard_model(self.model, self.device, blocks, amp=self.config.amp)
        if self.materialized_from is not None:  # each rank reads its own rows of the weights
            from workbench.core.training.fsdp_materialize import materialize

            materialize(self.model, self.materialized_from, self.device)
        self.shards = wfsdp.ShardVerifier(self.applied, self.model)

    def _wrap(self) -> None:
        assert self.model is not None
        fwd: nn.Module = self.model
        if self.dist is not None and self.shards is None:
            self.ddp = wdist.wrap_ddp(self.model, self.device)
            fwd = self.ddp
        backend = self.config.compile_backend
        self._fwd = torch.compile(fwd, backend=backend) if backend else fwd
        if self._train_step is not None:
            self._train_step.forward = self._fwd

    def _recount(self) -> None:
        assert self.applied is not None and self.optimizer is not None
        c = self.applied.counts(self.optimizer)
        self._counts = (c.trainable, c.frozen, c.grad_bytes)
        self._opt_bytes = optimizer_state_bytes(self.optimizer)

    # ------------------------------------------------------------ plan changes
    def _change_plan(self, plan: FreezePlan, label: str) -> str:
        """Apply a plan in force at a step boundary; returns the event text."""
        assert self.applied is not None and self.optimizer is not None
        if self.shards is not None:
            return f"{label} refused: {wfsdp.PLAN_CHANGE_REFUSED}"
        readiness = check_plan(plan, self.applied.tree)
        if not readiness.ok:
            return f"{label} refused: {readiness.messages()[0]}"
        try:
            diff = self.applied.update(plan)
        except PlanError as e:
            return f"{label} refused: {first_line(e)}"
        self.last_diff = diff
        if diff.empty:
            return f"{label}: no change"
        cfg = self.config
        sync_optimizer(self.optimizer, self.applied.param_groups(cfg.lr, cfg.weight_decay, no_decay=cfg.no_decay))
        if self.dist is not None:
            self._wrap()
        self._recount()
        self.plan_version += 1
        if self.cache is not None:
            self.cache.plan_changed()
        return f"{label}: {diff.describe()}"

    def _plan_boundary(self, st: LoopState) -> list[str]:
        events: list[str] = []
        new_plan: FreezePlan | None = None
        if self.dist is not None:
            if st.flag_plan:
                st.flag_plan = False
                pending = self._take_pending() if self.dist.info.is_main else None
                text = wdist.broadcast_text(pending.to_json() if pending is not None else None)
                if text is not None:
                    new_plan = FreezePlan.from_json(text)
        else:
            new_plan = self._take_pending()
        if new_plan is not None:
            self.full_plan = new_plan
            st.reached = self._reached(st)
            events.append(self._change_plan(new_plan.at(st.step, st.epoch), "plan change"))
        if self.full_plan.stages:
            reached = self._reached(st)
            if reached != st.reached:
                new = sorted(reached - st.reached)
                st.reached = reached
                label = ", ".join(
                    f"stage {i}" + (f" '{self.full_plan.stages[i].label}'" if self.full_plan.stages[i].label else "")
                    for i in new
                ) or "stage change"
                events.append(self._change_plan(self.full_plan.at(st.step, st.epoch), label))
        return events

    def _reached(self, st: LoopState) -> frozenset[int]:
        return frozenset(i for i, s in enumerate(self.full_plan.stages) if s.reached(st.step, st.epoch))

    # ------------------------------------------------------------ the loop
    def run(self) -> RunResult:
        """Run to the end (or a stop/failure) and return the result.

        Returns:
            The :class:`RunResult` (also in :attr:`result`).

        Raises:
            WorkbenchError: bad input found by :meth:`setup`.
        """
        for _ in self.steps():
            pass
        assert self.result is not None
        return self.result

    def steps(self) -> Generator[StepMetrics, None, None]:
        """Train, yielding a :class:`StepMetrics` per reported step (every ``log_every``).

        Closing the generator early stops the run (status ``stopped``). When the generator
        is exhausted, :attr:`result` holds the :class:`RunResult`.

        Yields:
            The metrics of each reported step.

        Raises:
            WorkbenchError: bad input found by :meth:`setup` (nothing was trained).
            RuntimeError: the trainer already ran (a Trainer runs once).
        """
        if self._started:
            raise RuntimeError("this Trainer already ran; create a new Trainer for another run")
        self._started = True
        st = LoopState()
        self._loop_state = st
        try:
            self.setup()
        except WorkbenchError:
            self._close_dist()
            raise
        except Exception as e:  # e.g. out of memory moving the model to the device
            self._fail(st, e, f"setup failed: {type(e).__name__}: {first_line(e)}{hint(e)}")
            self.result = self._result(st, verify=None)
            self._close_dist()
            return
        try:
            self._open_writers()
        except WorkbenchError:
            self._close_dist()
            raise
        try:
            yield from self._loop(st)
        except GeneratorExit:
            if st.status == "completed":
                st.status, st.message = "stopped", f"stopped at step {st.step}: the metrics stream was closed"
            raise
        except KeyboardInterrupt:
            st.status, st.interrupted = "stopped", True
            st.message = f"interrupted at step {st.step}"
            self._clear_grads()
        except Exception as e:  # outside a step: a metrics file, a callback ...
            self._fail(st, e, f"training stopped at step {st.step}: {type(e).__name__}: {first_line(e)}")
        finally:
            self._finish(st)

    def _open_writers(self) -> None:
        cfg = self.config
        if not self.is_main:
            return
        self._outputs = RunOutputs.open(cfg.save_dir, cfg.metrics_path)
        self._writers.extend(self._outputs.writers)
        if self.cache is not None and self._outputs.staging is not None:
            self.cache.spill_dir = self._outputs.staging
        if cfg.tensorboard_dir:
            self._writers.append(open_tensorboard(cfg.tensorboard_dir, self.plan))

    def _loop(self, st: LoopState) -> Iterator[StepMetrics]:
        assert self.model is not None and self.optimizer is not None and self.loader is not None
        cfg = self.config
        cuda = self.device.type == "cuda"
        log_every = cfg.log_every
        dist = self.dist
        channels_last = cfg.channels_last
        non_blocking = self.device.type == "cuda"
        events_pool = (
            [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(log_every)]
            if cuda else []
        )
        train_step = self._train_step = TrainStep(
            self.model, self.optimizer,
            self.cache if self.cache is not None else self._fwd if self._fwd is not None else self.model,
            self.loss_fn, self.device,
            amp_dtype=self._amp_dtype, scaler=self._scaler, step_hook=self.step_hook,
            agree=(lambda bad: self._agree(st, bad)) if dist is not None else None,
            stats=ModuleStatsProbe(
                self.model, self._probe_every() or 1, modules=self.applied.tree.nodes if self.applied is not None else None,
                version=lambda: self.plan_version,
            ) if self._probe_every() else None,
        )
        win = st.window
        self._grads = GradWatch(self.model, self.optimizer) if self.shards is None else None
        schedule = self.schedule if self.schedule is not None and self.schedule.active else None
        assert self._probe is not None
        self._probe.reset()
        (self.ddp if self.ddp is not None else self.model).train()
        if self._sampler is not None:
            self._sampler.set_epoch(0)
        st.it = iter(self.loader)
        st.reached = self._reached(st)
        st.t_start = time.perf_counter()
        if cfg.val_at_start and self.val_loader is not None:
            self._validate(st, -1)
            if st.status != "completed":
                return
        while st.step < self.total_steps:
            if self._held_or_stopped(st):
                break
            step = st.step
            # ---- data
            t0 = time.perf_counter()
            try:
                x, y = self._next_batch(st, channels_last, non_blocking)
            except Exception as e:
                self._fail(st, e, f"loading the batch of step {step} failed: {type(e).__name__}: {first_line(e)}")
                break
            t1 = time.perf_counter()
            bs = batch_size_of(x)
            st.batch_size = bs
            # ---- plan boundary: requested plan, stages
            if st.flag_plan or self._pending is not None or self.full_plan.stages:
                evs = self._plan_boundary(st)
                if evs:
                    win.events.extend(evs)
                    st.state_dirty = True
                    self._probe.replan()
            if schedule is not None:
                schedule.apply(self.optimizer, step)
            # ---- the step
            with self._probe.step():  # the CPU's tensor peak, on watched steps
                out = train_step(step, x, y, events_pool[win.cuda_pairs] if cuda else None)
            if out.stepped and self._grads is not None:
                self._grads.look(step)
            if out.failure is not None:
                del x, y  # the batch too, before the cache is emptied
                self._step_failed(st, out.failure, step, bs)
                break
            te = out.t_end
            # ---- bookkeeping (cheap: no counts, no state walks unless the plan changed)
            if out.nonfinite:
                self._nonfinite(st, out.loss, step, bs)
            else:
                win.loss_sum += out.loss
                win.loss_n += 1
                st.last_loss = out.loss
            if out.stepped and st.state_dirty:
                self._opt_bytes = optimizer_state_bytes(self.optimizer)
                st.state_dirty = False
            if self.cache is not None:
                win.events.extend(self.cache.take_events())
            win.n += 1
            win.last_step = step
            win.data_time += t1 - t0
            if cuda:
                win.cuda_pairs += 1
            else:
                win.step_time += te - out.t_start
            if st.status == "completed":
                st.step += 1
            val_s = self._validate(st, step) if self._validation_due(st) else 0.0
            if (win.n >= log_every or win.events or st.step >= self.total_steps or st.status != "completed"
                    or win.val_loss is not None):
                m, waited = self._report(st, events_pool)
                self._emit(m)
                st.overhead += time.perf_counter() - te - waited - val_s
                if self.on_metrics is not None:
                    self.on_metrics(m)
                yield m
            else:
                st.overhead += time.perf_counter() - te - val_s
            if st.status != "completed":
                break
            if self.auto_freezer is not None:  # a decision is a stage, applied at the next step boundary
                self.full_plan = self.auto_freezer.decide(step, self.full_plan) or self.full_plan
                win.events.extend(self.auto_freezer.take_events())  # each evaluation, with the next report
        if win.n:
            m, _ = self._report(st, events_pool)
            self._emit(m)
            if self.on_metrics is not None:
                self.on_metrics(m)
            yield m

    def _probe_every(self) -> int | None:
        """Measure module statistics every N steps: as asked, and as often as auto-freeze needs."""
        every = [e for e in (self._stats_every, self.auto_freezer.measure_every if self.auto_freezer else None) if e]
        return min(every) if every else None

    def _validation_due(self, st: LoopState) -> bool:
        return self.val_loader is not None and validation_due(st, self.total_steps, self.config.val_every)

    def _validate(self, st: LoopState, step: int) -> float:
        """One validation pass after ``step`` (-1: before the first); returns its seconds (not metrics overhead)."""
        assert self.model is not None and self.val_loader is not None
        t0 = time.perf_counter()
        try:
            v = validate_model(
                self.model, self.val_loader, self.loss_fn, self.device, sharded=self.shards is not None,
                amp_dtype=self._amp_dtype, channels_last=self.config.channels_last, metric=self.metric,
            )
        except Exception as e:
            self._fail(st, e, f"validation after step {step} failed: {type(e).__name__}: {first_line(e)}{hint(e)}")
            return time.perf_counter() - t0
        if step < 0:  # before the first step: the starting point, apart from the run's validations
            self.start_validation = v
        else:
            record_validation(st, v, step, self.config.metric)
        return time.perf_counter() - t0

    def _held_or_stopped(self, st: LoopState) -> bool:
        """The step boundary's controls: True when the run stops here; waits out a pause."""
        dist = self.dist
        if st.flag_stop if dist is not None else self._stop.is_set():
            st.status, st.message = "stopped", f"stopped at step {st.step} of {self.total_steps}"
            return True
        if not self._resume.is_set():
            self._waiting.set()
            self._resume.wait()
            self._waiting.clear()
            if dist is None and self._stop.is_set():
                st.status, st.message = "stopped", f"stopped at step {st.step} of {self.total_steps}"
                return True
        return False

    def _agree(self, st: LoopState, bad: bool) -> bool:
        """Under torchrun: every rank learns of a requested plan, a stop, and a non-finite loss."""
        want_plan = self.is_main and self._pending is not None
        flags = wdist.all_reduce_flags([int(want_plan), int(self._stop.is_set()), int(bad)], self.device)
        st.flag_plan, st.flag_stop = bool(flags[0]), bool(flags[1])
        return bool(flags[2])

    def _step_failed(self, st: LoopState, failure: StepFailure, step: int, batch_size: int) -> None:
        """A step raised: the run ends as failed (the step dropped its gradients already)."""
        if failure.oom and self.device.type == "cuda":
            torch.cuda.empty_cache()
        st.status, st.message, st.error = "failed", failure.message, failure.traceback
        st.failed_step, st.failed_batch_size = step, batch_size

    def _nonfinite(self, st: LoopState, loss: float, step: int, batch_size: int) -> None:
        """A non-finite loss: the step was skipped; stop or go on as ``on_nonfinite`` says."""
        word = nonfinite_word(loss, self.dist is not None)
        if self.config.on_nonfinite == "stop":
            st.status = "nonfinite"
            st.message = nonfinite_stop_message(word, step)
            st.failed_step, st.failed_batch_size = step, batch_size
            st.window.events.append(f"loss {word}: run stopped")
        else:
            st.skipped += 1
            st.window.events.append(f"loss {word}: step skipped")

    def _next_batch(self, st: LoopState, channels_last: bool, non_blocking: bool) -> tuple[Any, torch.Tensor | None]:
        """The next batch on the device: ``(images, labels)``, or ``(inputs dict, None)`` for text models."""
        assert st.it is not None and self.loader is not None
        try:
            batch = next(st.it)
        except StopIteration:
            st.epoch += 1
            if self._sampler is not None:
                self._sampler.set_epoch(st.epoch)
            st.it = iter(self.loader)
            batch = next(st.it)
        return batch_to_device(batch, self.device, channels_last=channels_last, non_blocking=non_blocking)

    def _report(self, st: LoopState, events_pool: list[tuple[Any, Any]]) -> tuple[StepMetrics, float]:
        """The window's metrics, and the seconds spent waiting for the device (CUDA sync)."""
        win = st.window
        n = max(win.n, 1)
        waited = 0.0
        if win.cuda_pairs:
            t_w = time.perf_counter()
            events_pool[win.cuda_pairs - 1][1].synchronize()
            waited = time.perf_counter() - t_w
            step_time = sum(a.elapsed_time(b) for a, b in events_pool[: win.cuda_pairs]) / 1000.0 / win.cuda_pairs
        else:
            step_time = win.step_time / n
        t_m = time.perf_counter()
        data_time = win.data_time / n
        loss = win.loss_sum / win.loss_n if win.loss_n else math.nan
        alloc, peak, reserved = self._probe.sample() if self._probe is not None else (None, None, None)
        trainable, frozen, gbytes = self._counts
        total = step_time + data_time
        rate = st.batch_size / total if total > 0 else 0.0
        groups = self.optimizer.param_groups if self.optimizer is not None else []
        m = StepMetrics(
            step=win.last_step,
            epoch=st.epoch,
            loss=loss,
            step_time_s=step_time,
            data_time_s=data_time,
            samples_per_s=rate,
            wall_time=t_m - st.t_start,
            mem_allocated=alloc,
            mem_peak=peak,
            mem_reserved=reserved,
            mem_rss=self._probe.rss if self._probe is not None else None,
            trainable_params=trainable,
            frozen_params=frozen,
            grad_bytes=gbytes,
            optimizer_state_bytes=self._opt_bytes,
            lr=[g["lr"] for g in groups],
            lr_scales=[float(g.get("lr_scale", 1.0)) for g in groups],
            plan_version=self.plan_version,
            events=win.events,
            device=str(self.device),
            batch_size=st.batch_size,
            nonfinite_skipped=st.skipped,
            window=win.n,
            val_loss=win.val_loss,
            val_acc=win.val_acc,
            val_metric=win.val_metric,
            metric_name=self.config.metric,
            module_stats=self._train_step.stats.take() if self._train_step is not None and self._train_step.stats else None,
        )
        if self.auto_freezer is not None and m.module_stats is not None:
            self.auto_freezer.observe(m.module_stats)
        st.report_step_times.append(step_time)
        st.report_data_times.append(data_time)
        st.report_rates.append(rate)
        st.step_time_total += step_time * win.n
        win.clear()
        return m, waited

    def _emit(self, m: StepMetrics) -> None:
        for w in self._writers:
            w.write(m)

    def _clear_grads(self) -> None:
        clear_grads(self.model, self.optimizer)

    def _fail(self, st: LoopState, e: BaseException, message: str) -> None:
        st.status, st.message = "failed", message
        st.error = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        if st.failed_step is None:
            st.failed_step = st.step
        self._clear_grads()

    # ------------------------------------------------------------ the end
    def _finish(self, st: LoopState) -> None:
        if self._finished:
            return
        self._finished = True
        stop_loader_workers(self.loader, st.it)  # now, not when the collector finds them (10 s)
        stop_loader_workers(self.val_loader)
        if self.cache is not None:
            self.cache.close()  # the spill file leaves the run folder before it is committed
        # under FSDP verify and save are collectives: a rank whose loop failed or was interrupted
        # (perhaps alone) skips them and exits, and torchrun stops the others
        together = self.shards is not None and st.status != "failed" and not st.interrupted
        for w in self._writers:
            try:
                w.close()
            except Exception as e:  # disk full, folder gone
                if st.status == "completed":
                    self._fail(st, e, f"could not finish the metrics file {w.path}: {first_line(e)}; check the folder")
        self._writers = []
        verify = None
        if self.applied is not None:
            try:
                if together:  # every rank verifies its shards
                    assert self.shards is not None
                    wfsdp.reshard(self.shards.model)
                    wfsdp.sync_buffers(self.shards.model)
                    verify = self.shards.verify()
                elif self.shards is not None:
                    st.message += "; verify and saving skipped (under FSDP they need every rank)"
                else:
                    verify = self.applied.verify(steps=st.step, grads=self._grads.seen() if self._grads else None)
            except Exception as e:
                st.message = (st.message + "; " if st.message else "") + f"verify failed: {first_line(e)}"
        if st.status == "completed" and not st.message:
            st.message = f"completed {st.step} steps"
        result = self._result(st, verify)
        if self.config.save_dir and together:
            assert self.shards is not None
            try:
                self._full_state = wfsdp.full_state_dict(self.shards.model)  # a collective: every rank
            except Exception as e:
                result.message += f"; gathering the sharded model failed: {first_line(e)}"
        outputs, self._outputs = self._outputs, None
        if outputs is not None and outputs.recovered:
            result.message = f"{outputs.recovered}; {result.message}"
        try:  # a second Ctrl+C while saving leaves the earlier folder as it was
            if (self.config.save_dir and self.is_main and self.applied is not None and outputs is not None
                    and (self.shards is None or self._full_state is not None)):
                try:
                    assert outputs.staging is not None
                    self._save(outputs.staging, result)
                    outputs.commit()  # the folder holds this run only, swapped in whole
                    result.save_dir = str(self.config.save_dir)
                except Exception as e:
                    result.status = "failed" if result.status == "completed" else result.status
                    result.message += f"; saving to {self.config.save_dir} failed: {first_line(e)}; check the folder and free space"
                    result.error = result.error or "".join(traceback.format_exception(type(e), e, e.__traceback__))
        finally:
            if outputs is not None:
                outputs.close()
        self.result = result
        self._close_dist()

    def _close_dist(self) -> None:
        if self.dist is not None:
            # DDP's reducer holds the process group: free the wrapper first, or the group's
            # threads are torn down at interpreter exit, which gloo can abort on
            self.ddp = None
            self._fwd = None
            if self._train_step is not None and self.model is not None:
                self._train_step.forward = self.model
            gc.collect()
            with contextlib.suppress(Exception):
                self.dist.close()

    def _summary(self, st: LoopState) -> dict[str, Any]:
        trainable, frozen, gbytes = self._counts
        med = statistics.median(st.report_step_times) if st.report_step_times else None
        groups = self.optimizer.param_groups if self.optimizer is not None else []
        return {
            "steps": st.step,
            "epoch": st.epoch,
            "total_steps": self.total_steps,
            "wall_time_s": time.perf_counter() - st.t_start if st.t_start else 0.0,
            "median_step_time_s": med,
            "median_data_time_s": statistics.median(st.report_data_times) if st.report_data_times else None,
            "median_samples_per_s": statistics.median(st.report_rates) if st.report_rates else None,
            **(self._probe.summary() if self._probe is not None else MemoryProbe.no_summary()),
            "trainable_params": trainable,
            "frozen_params": frozen,
            "total_params": trainable + frozen,
            "grad_bytes": gbytes,
            "optimizer_state_bytes": self._opt_bytes,
            "final_loss": st.last_loss,
            "nonfinite_skipped": st.skipped,
            "plan_version": self.plan_version,
            "metrics_overhead_s": st.overhead,
            "metrics_overhead_fraction": st.overhead / st.step_time_total if st.step_time_total > 0 else None,
            "batch_size": st.batch_size or self.config.batch_size,
            "image_size": None if self.seq_len else self.image_size,
            "seq_len": self.seq_len,
            "max_positions": model_positions(self.model) if self.seq_len else None,
            "device": str(self.device),
            "world_size": self.dist.info.world_size if self.dist is not None else 1,
            "new_heads": list(self.new_heads),
            "num_classes": self.num_classes,
            "scheduler": self.config.scheduler,
            "warmup_steps": self.config.warmup_steps,
            "lr": [g["lr"] for g in groups],
            "lr_scales": [float(g.get("lr_scale", 1.0)) for g in groups],
            "val_loss": st.val_loss,
            "val_acc": st.val_acc,
            "val_step": st.val_step,
            "val_samples": st.val_samples,
            "val_time_s": st.val_time,
            "best_val_loss": st.best_val_loss,
            "best_val_step": st.best_val_step,
            "best_val_acc": st.best_val_acc,
            **task_summary(self.config, self._loss_arg is not None, st.val_metric, st.best_val_metric,
                           self.start_validation, self.input_shape),
            "frozen_cache": self.cache.stats.to_dict() if self.cache is not None else None,
            "frozen_cache_note": self.cache_note or None,
            "auto_freeze": self.auto_freezer.summary() if self.auto_freezer is not None else None,
        }

    def _result(self, st: LoopState, verify: Any) -> RunResult:
        return RunResult(
            status=st.status,
            message=st.message,
            steps=st.step,
            summary=self._summary(st),
            verify=verify,
            plan=self.applied.plan if self.applied is not None else None,
            error=st.error,
            failed_step=st.failed_step,
            failed_batch_size=st.failed_batch_size,
            interrupted=st.interrupted,
        )

    def _save(self, folder: Path, result: RunResult) -> None:
        """Write the trainable state, B deltas, the plan in force, the config and the summary."""
        assert self.model is not None and self.applied is not None
        full = self._full_state
        write_trainable_state(folder, self.model, self.applied, full, status=result.status, steps=result.steps)
        if full is not None:  # FSDP: the full model as its own library loads it, and B from it
            wfsdp.save_full(self.model, full, folder)
        elif self.applied.installed("reparam"):
            try:
                self.applied.export_deltas(folder / "deltas.safetensors")
            except (ImportError, AttributeError, NotImplementedError) as e:
                result.message += f"; A+B deltas not saved ({first_line(e)})"
        self.applied.plan.save(folder / "plan.json")
        if self.auto_freezer is not None:  # the run's plan with each decision as a stage: reruns it without auto-freeze
            self.full_plan.save(folder / AUTO_FREEZE_PLAN)
        self.config.save(folder / "config.json")
        summary = result.to_dict()
        name = Path(self.config.save_dir).name if self.config.save_dir else folder.name
        write_run_file(folder, RunRecord.from_result(name, summary, self.config.to_dict(), self.full_plan.to_dict()))
        atomic_write(folder / "summary.json", json.dumps(summary, indent=2) + "\n")  # last: marks a finished run
