"""One candidate of a sweep trained for the sweep's budget: a normal run folder, and what it measured.

:func:`train_candidate` runs the engine (:class:`~workbench.core.training.engine.Trainer`)
with the candidate's plan and learning rate, the sweep's seed, data and budget, and
``val_every`` set to the sweep's evaluation interval; the run is saved like
``workbench train --save`` (its folder is what the Runs tab and ``workbench runs`` read). At
each validation the objective goes to ``report(step, value)``; when that answers True (the
pruner's decision) the run stops at the step boundary. After the run the metric on the
retention data is measured, when the sweep has some.

What every candidate starts from is built once per process (:class:`SweepInputs`): the model
as the engine builds it, the training data and the retention data. Each candidate trains a
deep copy of that model and reads the same datasets, from the random state the build left, so
it trains exactly as ``workbench train`` with its plan and the sweep's seed would, without
building the model and the data again.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from workbench.core.errors import WorkbenchError, first_line
from workbench.core.plan import FreezePlan
from workbench.core.training import setup as build
from workbench.core.training.config import TrainConfig
from workbench.core.training.data import stop_loader_workers
from workbench.core.training.data_common import DataError
from workbench.core.training.data_sources import make_dataset
from workbench.core.training.engine import Trainer
from workbench.core.training.metrics import StepMetrics
from workbench.core.training.run_folder import check_save_folder
from workbench.core.training.validation import Validation, evaluate

__all__ = ["SweepInputs", "TrialOutcome", "metric_of", "open_retain", "train_candidate"]

#: Steps of a run whose budget is in seconds (it stops when the time is up).
_UNBOUNDED_STEPS = 10**9


@dataclass
class TrialOutcome:
    """What training one candidate measured.

    Attributes:
        status: ``completed`` (the whole budget), ``pruned``, ``stopped`` (cancelled) or ``failed``.
        steps: steps run.
        metric: the objective at the last validation, or None.
        val_loss: validation loss at the last validation, or None.
        curve: ``(step, objective)`` per validation.
        time_s: training time: wall time less validation.
        peak_bytes / memory_source: the run's peak memory and what it measures.
        trainable: trainable parameters.
        retention: the metric on the retention data after training, or None.
        message: the engine's message (why it failed, when it did).
        run_dir: the run folder.
    """

    status: str
    steps: int = 0
    metric: float | None = None
    val_loss: float | None = None
    curve: list[tuple[int, float]] = field(default_factory=list)
    time_s: float | None = None
    peak_bytes: int | None = None
    memory_source: str = ""
    trainable: int | None = None
    retention: float | None = None
    message: str = ""
    run_dir: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data (kept in the trial's attributes)."""
        d = dict(self.__dict__)
        d["curve"] = [list(p) for p in self.curve]
        return d


def metric_of(values: Validation | StepMetrics, loss_objective: bool) -> float | None:
    """The objective of a validation: the metric (the config's, else accuracy), or the loss.

    Args:
        values: a validation pass or a reported step with validation.
        loss_objective: the sweep compares validation losses.

    Returns:
        The value, or None when the validation has none (no metric for these outputs).
    """
    if loss_objective:
        v = values.val_loss if isinstance(values, StepMetrics) else values.loss
    else:
        named = getattr(values, "val_metric" if isinstance(values, StepMetrics) else "metric", None)
        v = named if named is not None else (values.val_acc if isinstance(values, StepMetrics) else values.acc)
    return float(v) if v is not None and math.isfinite(float(v)) else None


def open_retain(spec: str, config: TrainConfig, *, image_size: int = 224, num_classes: int = 10,
                model: Any = None) -> Dataset[Any]:
    """Open a ``--retain`` dataset spec and read its first sample, so a broken one fails before training.

    Args:
        spec: a dataset spec (as ``--data``).
        config: the sweep's base config (seed, sequence length).
        image_size / num_classes / model: as the run has them.

    Returns:
        The dataset (its validation/test split).

    Raises:
        WorkbenchError: it cannot be opened, is empty, or its first sample cannot be read.
    """
    try:
        ds = make_dataset(spec, image_size=image_size, num_classes=num_classes, train=False, seed=config.seed,
                          model=model, seq_len=config.seq_len, input_shape=config.input_shape)
        n = len(ds)  # type: ignore[arg-type]
        if n < 1:
            raise WorkbenchError(f"--retain {spec}: the dataset is empty; give one with samples of the original task")
        ds[0]
    except WorkbenchError as e:
        raise WorkbenchError(f"--retain {spec}: {first_line(e)}") from None
    except (DataError, OSError, ValueError, TypeError, IndexError, RuntimeError) as e:
        raise WorkbenchError(f"--retain {spec}: cannot read its first sample ({type(e).__name__}: {first_line(e)}); "
                             "check the dataset") from None
    return ds


class SweepInputs:
    """What every candidate of a sweep starts from, built once per process.

    The model is built as the engine builds it (before its head is fitted to the data) and the
    training data opened from the config, under the config's seed; each candidate gets a deep
    copy of the model (:meth:`model`), the same dataset object and the random state the build
    left, so it trains as a run that built them itself. Synthetic data is opened by each run
    (it is generated, not read); a sweep with a ``model_factory`` or a dataset of its own, a
    model named only by its plan files, or ``strategy="fsdp"`` builds per candidate as before.

    Args:
        config: the sweep's base config.
        trust_pickle: allow pickled checkpoints.
        build_once: build the model and data here (else only the retention data is kept).
    """

    def __init__(self, config: TrainConfig, *, trust_pickle: bool = False, build_once: bool = True) -> None:
        self.config = config
        self.trust_pickle = trust_pickle
        self.build_once = build_once and self.applies(config)
        self._built: build.BuiltModel | None = None
        self.dataset: Dataset[Any] | None = None
        self._retain: Dataset[Any] | None = None

    @staticmethod
    def applies(config: TrainConfig) -> bool:
        """Whether a sweep of ``config`` builds its model and data once (see the class)."""
        return config.model is not None and config.strategy != "fsdp"

    def model(self) -> build.BuiltModel:
        """A fresh copy of the model, built at the first call.

        Returns:
            The model for one candidate's run (hand it to the engine as ``model``). A model that
            cannot be deep-copied is handed over itself, and :attr:`build_once` turns off.

        Raises:
            WorkbenchError: the model or the data cannot be built (each call tries again).
        """
        if self._built is None:
            cfg = self.config
            torch.manual_seed(cfg.seed)  # as the engine's setup: seed, model, data
            random.seed(cfg.seed)
            built = build.build_model(cfg, FreezePlan(), trust_pickle=self.trust_pickle)
            if not cfg.data.strip().lower().startswith("synthetic"):
                self.dataset = build.build_dataset(cfg, built)[0]
            self._built = dataclasses.replace(built, rng_state=(torch.get_rng_state(), random.getstate()))
        try:
            return dataclasses.replace(self._built, model=copy.deepcopy(self._built.model))
        except Exception:  # a model that cannot be copied: this run takes it, the next ones build their own
            self.build_once = False
            built, self._built = self._built, None
            return built

    def retain(self, spec: str | Dataset[Any], trainer: Trainer) -> Dataset[Any]:
        """The retention data, opened at the first call (as the run opens ``--retain``)."""
        if not isinstance(spec, str):
            return spec
        if self._retain is None:
            self._retain = _open_retain_for(trainer, spec)
        return self._retain


def _open_retain_for(trainer: Trainer, spec: str) -> Dataset[Any]:
    """The retention data ``spec`` opened for the run ``trainer`` set up (its size and classes)."""
    return open_retain(spec, trainer.config, image_size=trainer.image_size or 224,
                       num_classes=trainer.num_classes or 10, model=trainer.model)


def _retention(trainer: Trainer, retain: str | Dataset[Any], loss_objective: bool,
               inputs: SweepInputs | None) -> float | None:
    assert trainer.model is not None
    cfg = trainer.config
    if inputs is not None:
        ds = inputs.retain(retain, trainer)
    else:
        ds = retain if not isinstance(retain, str) else _open_retain_for(trainer, retain)
    loader: DataLoader[Any] = DataLoader(ds, batch_size=cfg.batch_size, shuffle=False)
    v = evaluate(trainer.model, loader, trainer.loss_fn, trainer.device, metric=trainer.metric)
    return metric_of(v, loss_objective)


def train_candidate(
    config: TrainConfig,
    *,
    eval_every: int,
    steps: int | None,
    seconds: float | None,
    report: Callable[[int, float], bool] | None = None,
    loss_objective: bool = False,
    retain: str | Dataset[Any] | None = None,
    model_factory: Callable[[], nn.Module] | None = None,
    dataset: Dataset[Any] | None = None,
    loss_fn: Any = None,
    cancel: threading.Event | None = None,
    on_step: Callable[[int, int], None] | None = None,
    trust_pickle: bool = False,
    inputs: SweepInputs | None = None,
) -> TrialOutcome:
    """Train one candidate for the budget and measure it.

    Args:
        config: the candidate's config (plan, lr, seed, data, device, ``save_dir``: its run folder).
        eval_every: validate every N steps (and after the last).
        steps: the budget in steps, or None with ``seconds``.
        seconds: the budget in seconds of training, or None.
        report: ``report(step, objective) -> prune?``, called after each validation.
        loss_objective: compare validation losses instead of the metric.
        retain: the retention data (spec or dataset), or None.
        model_factory: builds a fresh model for this candidate instead of ``config.model``.
        dataset: the training data instead of ``config.data``.
        loss_fn: the loss instead of the config's.
        cancel: set to stop this run at the next step boundary (status ``stopped``).
        on_step: ``on_step(step, total)`` after each reported step.
        trust_pickle: allow pickled checkpoints (only files the user trusts).
        inputs: the sweep's model and data built once (where ``inputs.build_once``), and its
            retention data opened once.

    Returns:
        The outcome.

    Raises:
        WorkbenchError: the model, plan or data cannot be set up (bad input: nothing ran).
    """
    cfg = config.replace(steps=steps if steps is not None else _UNBOUNDED_STEPS, epochs=None, val_every=eval_every)
    if cfg.save_dir:
        check_save_folder(cfg.save_dir, overwrite=True)  # the candidate's own folder, from an earlier try
    outcome = TrialOutcome(status="completed", run_dir=cfg.save_dir or "")
    pruned = threading.Event()
    out_of_time = threading.Event()
    trainer_box: list[Trainer] = []

    def on_metrics(m: StepMetrics) -> None:
        trainer = trainer_box[0]
        if on_step is not None:
            on_step(m.step + 1, steps or 0)
        if m.val_loss is not None:
            value = metric_of(m, loss_objective)
            outcome.val_loss = m.val_loss
            if value is not None:
                outcome.metric = value
                outcome.curve.append((m.step + 1, value))
                if report is not None and m.step + 1 < (steps or _UNBOUNDED_STEPS) and report(m.step + 1, value):
                    pruned.set()
                    trainer.stop()
        if seconds is not None and m.wall_time >= seconds:
            out_of_time.set()
            trainer.stop()
        if cancel is not None and cancel.is_set():
            trainer.stop()

    kwargs: dict[str, Any] = {"on_metrics": on_metrics, "trust_pickle": trust_pickle}
    if model_factory is not None:
        kwargs["model"] = model_factory()
    elif inputs is not None and inputs.build_once:
        kwargs["model"] = inputs.model()
        if inputs.dataset is not None:
            kwargs["dataset"] = inputs.dataset
    if dataset is not None:
        kwargs["dataset"] = dataset
    if loss_fn is not None:
        kwargs["loss_fn"] = loss_fn
    trainer = Trainer(cfg, **kwargs)
    trainer_box.append(trainer)
    trainer.setup()
    result = trainer.run()
    s = result.summary
    outcome.steps = result.steps
    outcome.time_s = max(0.0, float(s.get("wall_time_s") or 0.0) - float(s.get("val_time_s") or 0.0))
    outcome.peak_bytes = s.get("peak_memory_bytes")
    outcome.memory_source = str(s.get("memory_source") or "")
    outcome.trainable = s.get("trainable_params")
    outcome.message = result.message
    if result.status in ("failed", "nonfinite"):
        outcome.status = "failed"
        return outcome
    if pruned.is_set():
        outcome.status = "pruned"
        return outcome
    if result.status == "stopped" and not out_of_time.is_set():
        outcome.status = "stopped"
        return outcome
    if out_of_time.is_set() and trainer.val_loader is not None and trainer.model is not None:
        # the time budget ended between validations: measure where it ended
        v = evaluate(trainer.model, trainer.val_loader, trainer.loss_fn, trainer.device, metric=trainer.metric)
        stop_loader_workers(trainer.val_loader)  # the run had ended them; this pass started them again
        outcome.metric, outcome.val_loss = metric_of(v, loss_objective), v.loss
        if outcome.metric is not None:
            outcome.curve.append((result.steps, outcome.metric))
    if retain is not None:
        try:
            outcome.retention = _retention(trainer, retain, loss_objective, inputs)
        except WorkbenchError:
            raise
        except Exception as e:  # the model's output does not fit the retention data
            outcome.message += f"; retention not measured: {type(e).__name__}: {first_line(e)}"
    return outcome
