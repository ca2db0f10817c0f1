"""Measured cost of the front candidates: a few real training steps each, one after another.

Full fine-tuning (the reference of the step ratio) runs first, then every front candidate,
each with its own :class:`~workbench.core.training.engine.Trainer`, the same config and
synthetic data, as ``workbench bench`` runs them. A candidate's result is handed to
``on_result`` as soon as it is measured, so a caller can show rows as they finish; ``stop`` is
checked between steps and ends the measurement early.

The measured peak is the one definition of :mod:`workbench.core.training.metrics` (never the
prediction): CUDA ``max_memory_allocated`` over the candidate's model build and memory steps
minus what was allocated before; on the CPU the run's **peak tensor bytes**, the live tensor
storages of its memory steps (weights, buffers, gradients and optimizer state included), as
the run itself reports it (``mem_peak``): the quantity the prediction is for. :class:`PeakMeter`
still reads the process's **RSS growth** (the kernel's high-water mark ``VmHWM``, reset through
``/proc/self/clear_refs``, or the RSS sampled every millisecond by a thread, after memory freed
by the previous candidate is handed back with ``malloc_trim``), which a caller may want under
that name; it is not the measured peak. The step time is
the median of the timed steps; :attr:`~workbench.core.advisor.advice.Measured.step_ratio_range`
keeps their spread, which :func:`step_ratio_noise` compares with the difference between rows.
"""

from __future__ import annotations

import functools
import gc
import statistics
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch

from workbench.core.advisor.advice import Advice, Measured, step_ratio_noise
from workbench.core.advisor.sweep_trial import SweepInputs
from workbench.core.advisor.tracking import LiveTensorBytes, storage_bytes
from workbench.core.errors import WorkbenchError
from workbench.core.models.spec import ModelSpec
from workbench.core.training.config import TrainConfig
from workbench.core.training.data import synthetic_for_model
from workbench.core.training.engine import Trainer
from workbench.core.training.memory_probe import process_rss, release_freed_heap, training_tensors
from workbench.core.training.metrics import MEMORY_SOURCES, RSS_GROWTH_SOURCE, StepMetrics

__all__ = ["PeakMeter", "measure_front", "measure_peak", "step_ratio_noise"]


def _next(label: str, trainer: Trainer, gen: Iterator[StepMetrics], step: int) -> StepMetrics:
    m = next(gen, None)
    if m is None:
        result = trainer.result
        msg = result.message if result is not None else "ended early"
        raise WorkbenchError(f"candidate {label!r} stopped at step {step}: {msg}")
    return m


def measure_peak(trainer: Trainer, gen: Iterator[StepMetrics], steps: int, label: str = "run") -> int:
    """Run ``steps`` steps of a set-up trainer and return the bytes of tensors they kept live.

    This is the tensor accounting the advisor's prediction is checked against (the live
    tensor storages of the steps, weights and buffers included), not the device's memory
    reading: :func:`measure_front` reports the latter.

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
    own = storage_bytes(training_tensors(trainer.model, None, trainer.applied))  # weights, buffers, a fused A
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


def _trim() -> None:
    """Collect garbage and hand freed heap memory back to the system (glibc), so RSS falls."""
    gc.collect()
    release_freed_heap()


def _status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _reset_high_water_mark() -> bool:
    """Set the kernel's peak RSS (``VmHWM``) to the RSS now (Linux 4.0+); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
    except OSError:
        return False
    hwm, rss = _status_kb("VmHWM"), _status_kb("VmRSS")
    return hwm is not None and rss is not None and hwm <= rss + (1 << 20)


class PeakMeter:
    """The peak memory growth of what runs inside ``with``: CUDA peak allocated as
    :mod:`~workbench.core.training.metrics` defines it; on the CPU the process's RSS growth
    (named so: the CPU peak a run reports is its tensor bytes, which only the run sees).

    Args:
        device: the device the work runs on.

    Attributes:
        peak: bytes, once the block ended: CUDA peak allocated growth, CPU peak RSS growth
            (None where the device offers no reading).
        source: what ``peak`` measures (a value of ``MEMORY_SOURCES``).
    """

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self.source = RSS_GROWTH_SOURCE if self.device.type == "cpu" else MEMORY_SOURCES.get(self.device.type, "")
        self.peak: int | None = None
        self._base = 0
        self._kernel = False
        self._sampled = 0
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> PeakMeter:
        _trim()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            return self
        self._base = process_rss() or 0
        self._kernel = self.device.type == "cpu" and _reset_high_water_mark()
        if not self._kernel:
            self._sampled = self._base
            self._thread = threading.Thread(target=self._sample, name="peak-rss", daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._done.wait(0.001):
            self._sampled = max(self._sampled, process_rss() or 0)

    def __exit__(self, *exc: object) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak = int(torch.cuda.max_memory_allocated(self.device) - self._base)
            return
        if self._kernel:
            top = _status_kb("VmHWM")
        else:
            self._done.set()
            if self._thread is not None:
                self._thread.join()
            top = max(self._sampled, process_rss() or 0) or None
        self.peak = max(top - self._base, 0) if top is not None and self._base else None


def _young_objects_only(fn: Callable[..., int]) -> Callable[..., int]:
    """Run ``fn`` with the objects alive at its start left out of every garbage collection.

    A process with torch (and more) imported holds millions of long-lived objects; a full
    collection walks them all (0.1-0.3 s). Frozen after one last collection, they stay out of
    the collection before each candidate, which then walks only what was made since: the
    previous candidates' trainers, which is what it is there to free. Thawed when ``fn`` ends,
    however it ends. Where something else froze objects already (the app freezes a loaded
    model's objects), the collector is left as it is: thawing would hand that freeze back, and
    every later collection (a sweep's after each candidate) would walk the whole process again.
    """

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> int:
        if gc.get_freeze_count():
            return fn(*args, **kwargs)
        gc.collect()
        gc.freeze()
        try:
            return fn(*args, **kwargs)
        finally:
            gc.unfreeze()

    return run


def _candidate_inputs(config: TrainConfig, seq_len: int | None, param_dtype: torch.dtype | None,
                      length: int, shared: SweepInputs | None = None) -> dict[str, Any]:
    """Trainer arguments for one candidate: its own model (in ``param_dtype``) and token data.

    With ``shared`` (image models), a deep copy of the model built once, and the data and random
    state that build left, as a sweep's candidates get them: each run trains what building them
    itself would give, without building resnet18 again for every candidate.
    """
    if seq_len is None and param_dtype is None:
        if shared is None or not shared.build_once:
            return {}
        out: dict[str, Any] = {"model": shared.model()}
        if shared.dataset is not None:
            out["dataset"] = shared.dataset
        return out
    spec = config.model if isinstance(config.model, dict) else {"name": config.model}
    model = ModelSpec.from_dict(spec, origin=config.model_origin).build(allow_download=config.allow_download)
    if param_dtype is not None:
        model.to(param_dtype)
    out = {"model": model}
    if seq_len is not None:
        out["dataset"] = synthetic_for_model(model, length, seq_len=seq_len, seed=config.seed)
    return out


#: Untimed, unmetered steps of the reference before any candidate is measured.
_WARM_STEPS = 2


@_young_objects_only
def measure_front(advice: Advice, config: TrainConfig, steps: int = 5, *, memory_steps: int = 2,
                  warmup: int = 1, seq_len: int | None = None, param_dtype: torch.dtype | None = None,
                  progress: Callable[[int, int], None] | None = None,
                  on_result: Callable[[int, Measured], None] | None = None,
                  stop: Callable[[], bool] | None = None, reference: bool = True) -> int:
    """Measure the front candidates of ``advice`` one after another; each result goes in its ``measured``.

    A warm-up run of full fine-tuning comes first (libraries load and kernels initialize once,
    outside every candidate's peak), then full fine-tuning (the step ratio's reference; measured
    once even when it is on the front), then the front in order.

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
        progress: called as ``progress(done, total)`` after every training step.
        on_result: called as ``on_result(index, measured)`` (index into ``advice.assessed``)
            as soon as a front candidate is measured, on the calling thread.
        stop: checked before every model build and every step; when it returns True the
            measurement ends there (the candidate in progress is dropped, the finished ones keep
            their results): a stop asked during a build ends the measurement once that build is done.
        reference: measure full fine-tuning first as the step ratio's reference; False (e.g.
            full fine-tuning would not fit the memory) makes the first front candidate the reference.

    Returns:
        How many front candidates were measured (``len(advice.front)`` unless stopped).

    Raises:
        WorkbenchError: a candidate's run failed, or bad settings.
    """
    if steps < 1:
        raise WorkbenchError(f"--measure needs at least 1 step, got {steps}")
    memory_steps = max(2, memory_steps)
    total = memory_steps + warmup + steps
    full = next((i for i, a in enumerate(advice.assessed) if a.candidate.kind == "full" and not a.candidate.bn_eval),
                None) if reference else None
    order = ([full] if full is not None else []) + [i for i in advice.front if i != full]
    work, done = len(order) * total + _WARM_STEPS, 0
    base: float | None = None
    measured = 0
    stopped = stop if stop is not None else (lambda: False)

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, work)

    shared = SweepInputs(config) if SweepInputs.applies(config) else None
    if order and not stopped():  # libraries load and kernels initialize once: not in the first candidate's peak
        cfg = config.replace(plan=advice.assessed[order[0]].candidate.plan.to_dict(), steps=_WARM_STEPS).validate()
        warm = Trainer(cfg, **_candidate_inputs(cfg, seq_len, param_dtype, _WARM_STEPS * cfg.batch_size, shared))
        warm.setup()
        warm_gen = warm.steps()
        try:
            for s in range(_WARM_STEPS):
                if stopped():
                    return 0
                _next("warm-up", warm, warm_gen, s)
                tick()
            for _ in warm_gen:
                pass
        finally:
            warm_gen.close()
            del warm, warm_gen
    for i in order:
        if stopped():
            return measured
        label = advice.assessed[i].candidate.name
        cfg = config.replace(plan=advice.assessed[i].candidate.plan.to_dict(), steps=total).validate()
        times: list[float] = []
        meter = PeakMeter(cfg.device if cfg.device not in (None, "auto") else
                          ("cuda" if torch.cuda.is_available() else "cpu"))
        trainer: Trainer | None = None
        gen: Iterator[StepMetrics] | None = None
        try:
            with meter:
                trainer = Trainer(cfg, **_candidate_inputs(cfg, seq_len, param_dtype, total * cfg.batch_size, shared))
                trainer.setup()
                gen = trainer.steps()
                for s in range(memory_steps):
                    if stopped():
                        return measured
                    last = _next(label, trainer, gen, s)
                    tick()
            cpu_peak = last.mem_peak if meter.device.type == "cpu" else None  # the run's peak tensor bytes
            for s in range(warmup + steps):
                if stopped():
                    return measured
                m = _next(label, trainer, gen, memory_steps + s)
                if s >= warmup:
                    times.append(m.step_time_s)
                tick()
            for _ in gen:  # let the run finish (verify, summary)
                pass
        finally:
            if gen is not None:
                gen.close()  # type: ignore[attr-defined]  # a generator: ends a run left midway
            del trainer, gen
        median = statistics.median(times)
        if base is None:
            base = median  # full fine-tuning (or, without it, the first candidate) is the reference
        peak = cpu_peak if meter.device.type == "cpu" else meter.peak
        result = Measured(peak if peak is not None else 0, median / base, median * 1e3,
                          memory_source=MEMORY_SOURCES["cpu"] if meter.device.type == "cpu" else meter.source, step_ratio_range=(min(times) / base, max(times) / base),
                          steps=len(times))
        if i in advice.front:
            advice.assessed[i].measured = result
            measured += 1
            if on_result is not None:
                on_result(i, result)
    return measured
