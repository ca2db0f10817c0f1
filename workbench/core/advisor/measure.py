"""Measured cost of the front candidates: a few real training steps each, side by side.

Every front candidate (and full fine-tuning, the reference of the step ratio) gets its own
:class:`~workbench.core.training.engine.Trainer` with the same config and synthetic data, as
``workbench bench`` runs them. First each trainer runs ``memory_steps`` steps on its own while
its peak is measured: on CUDA ``torch.cuda.max_memory_allocated`` minus what the other
trainers hold; on CPU the live tensor bytes :class:`~workbench.core.advisor.tracking.LiveTensorBytes`
counts, plus the trainer's own weights and buffers. Then all trainers run ``steps`` more steps
round-robin, untracked, so machine load affects them alike; the step time is the median.
"""

from __future__ import annotations

import statistics
from typing import Any, Callable, Iterator

import torch

from workbench.core.advisor.advice import Advice, Measured
from workbench.core.advisor.tracking import LiveTensorBytes, storage_bytes
from workbench.core.errors import WorkbenchError
from workbench.core.models.spec import ModelSpec
from workbench.core.training.config import TrainConfig
from workbench.core.training.data import synthetic_for_model
from workbench.core.training.engine import Trainer
from workbench.core.training.metrics import StepMetrics

__all__ = ["measure_front", "measure_peak"]


def _next(label: str, trainer: Trainer, gen: Iterator[StepMetrics], step: int) -> StepMetrics:
    m = next(gen, None)
    if m is None:
        result = trainer.result
        msg = result.message if result is not None else "ended early"
        raise WorkbenchError(f"candidate {label!r} stopped at step {step}: {msg}")
    return m


def measure_peak(trainer: Trainer, gen: Iterator[StepMetrics], steps: int, label: str = "run") -> int:
    """Run ``steps`` steps of a set-up trainer and return the peak bytes they needed.

    Args:
        trainer: a trainer whose :meth:`~Trainer.setup` ran and that has taken no step yet.
        gen: its :meth:`~Trainer.steps` generator.
        steps: steps to run.
        label: name used in error messages.

    Returns:
        Peak bytes of the run's tensors (weights and buffers included).

    Raises:
        WorkbenchError: the run stopped early.
    """
    assert trainer.model is not None and trainer.device is not None
    own = storage_bytes([*trainer.model.parameters(), *trainer.model.buffers()])
    if trainer.device.type == "cuda":
        torch.cuda.synchronize(trainer.device)
        others = torch.cuda.memory_allocated(trainer.device) - own
        torch.cuda.reset_peak_memory_stats(trainer.device)
        for i in range(steps):
            _next(label, trainer, gen, i)
        torch.cuda.synchronize(trainer.device)
        return int(torch.cuda.max_memory_allocated(trainer.device) - others)
    with LiveTensorBytes(baseline=own, device_type=trainer.device.type) as live:
        for i in range(steps):
            _next(label, trainer, gen, i)
    return live.peak


def _candidate_inputs(config: TrainConfig, seq_len: int | None, param_dtype: torch.dtype | None,
                      length: int) -> dict[str, Any]:
    """Trainer arguments for one candidate: its own model (in ``param_dtype``) and token data."""
    if seq_len is None and param_dtype is None:
        return {}
    spec = config.model if isinstance(config.model, dict) else {"name": config.model}
    model = ModelSpec.from_dict(spec, origin=config.model_origin).build(allow_download=config.allow_download)
    if param_dtype is not None:
        model.to(param_dtype)
    out: dict[str, Any] = {"model": model}
    if seq_len is not None:
        out["dataset"] = synthetic_for_model(model, length, seq_len=seq_len, seed=config.seed)
    return out


def measure_front(advice: Advice, config: TrainConfig, steps: int = 5, *, memory_steps: int = 2,
                  warmup: int = 1, seq_len: int | None = None, param_dtype: torch.dtype | None = None,
                  progress: Callable[[int, int], None] | None = None) -> None:
    """Measure every front candidate of ``advice`` and store the result in its ``measured``.

    Args:
        advice: the advice (its front candidates get :class:`Measured` values).
        config: the training settings shared by every candidate (model, batch size, image
            size, optimizer, amp, device); its ``plan`` and ``steps`` are replaced.
        steps: timed steps per candidate.
        memory_steps: steps per candidate whose peak memory is measured (the optimizer state
            appears after the first one, so at least 2).
        warmup: untimed steps before the timed ones.
        seq_len: tokens per sample of a text model's synthetic batches (None: image models).
        param_dtype: store each candidate's weights in this dtype (None: as built).
        progress: called as ``progress(done, total)`` after each candidate's memory run and
            each round of timed steps.

    Raises:
        WorkbenchError: a candidate's run failed, or bad settings.
    """
    if steps < 1:
        raise WorkbenchError(f"--measure needs at least 1 step, got {steps}")
    memory_steps = max(2, memory_steps)
    total = memory_steps + warmup + steps
    idx = list(advice.front)
    full = next((i for i, a in enumerate(advice.assessed) if a.candidate.kind == "full" and not a.candidate.bn_eval), None)
    if full is not None and full not in idx:
        idx.append(full)
    runs: list[tuple[int, Trainer, Iterator[StepMetrics]]] = []
    for i in idx:
        cfg = config.replace(plan=advice.assessed[i].candidate.plan.to_dict(), steps=total).validate()
        trainer = Trainer(cfg, **_candidate_inputs(cfg, seq_len, param_dtype, total * cfg.batch_size))
        trainer.setup()
        runs.append((i, trainer, trainer.steps()))
    done, work = 0, len(runs) + warmup + steps
    peaks: dict[int, int] = {}
    for i, trainer, gen in runs:
        peaks[i] = measure_peak(trainer, gen, memory_steps, advice.assessed[i].candidate.name)
        done += 1
        if progress is not None:
            progress(done, work)
    times: dict[int, list[float]] = {i: [] for i in idx}
    for s in range(warmup + steps):
        for i, trainer, gen in runs:
            m = _next(advice.assessed[i].candidate.name, trainer, gen, memory_steps + s)
            if s >= warmup:
                times[i].append(m.step_time_s)
        done += 1
        if progress is not None:
            progress(done, work)
    for _, _, gen in runs:
        for _ in gen:  # let each run finish (verify, summary)
            pass
    medians = {i: statistics.median(t) for i, t in times.items()}
    base = medians[full] if full is not None else max(medians.values())
    for i in advice.front:
        advice.assessed[i].measured = Measured(peaks[i], medians[i] / base, medians[i] * 1e3)

