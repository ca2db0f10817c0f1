"""Activation memory and output shapes per module, from one forward pass on the ``meta`` device.

What a training step of a batch will hold is known before it runs: :func:`profile_activations`
runs a shape-only copy of the model once for a batch size and image size, or for a text model a
batch size and sequence length (a token batch, as ``advise --seq-len`` profiles it; nothing real
is computed or allocated) and keeps

- the advisor's :class:`~workbench.core.advisor.profile.ModelProfile` (ops, the tensors
  autograd saves for backward), from which :func:`predict_step` gives the activations kept for
  backward under any plan (a frozen prefix keeps none) and the step's predicted peak;
- each module's output shapes and bytes (recorded in the same pass).

A model of 50,000 modules takes seconds of Python work to profile. Run on a worker thread,
that work would hold the interpreter lock against the thread that drives a user interface;
a :class:`Pacer` passed as ``checkpoint`` makes the pass run in short slices and pause
between them until the other thread says it may go on (or stop it altogether).

:func:`device_memory` says how much the training device has (CUDA: the GPU's total memory;
CPU: the RAM available now, from psutil) and :func:`fit_verdict` whether the predicted step
fits it.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten

from workbench.core.advisor.memory import MemoryEstimate, estimate_memory, first_trainable_op
from workbench.core.advisor.profile import (
    AdvisorError,
    Checkpoint,
    DictBatch,
    InputShape,
    ModelProfile,
    batch_text,
    meta_batch,
    meta_copy,
    paced_train,
    profile_model,
)
from workbench.core.models.meta_copy import no_checkpoint

__all__ = [
    "ActivationProfile",
    "DeviceMemory",
    "Pacer",
    "ProfileCancelledError",
    "StepPrediction",
    "device_memory",
    "fit_verdict",
    "largest_batch",
    "module_activation_bytes",
    "output_shapes",
    "predict_step",
    "profile_activations",
    "shape_text",
    "unfrozen_param_names",
]


@dataclass(frozen=True)
class ActivationProfile:
    """One shape-only forward pass of a model for a batch.

    Attributes:
        batch_size: samples in the batch.
        image_size: input side in pixels (0 for a token batch).
        profile: what the pass computed and saved for backward (the advisor's profile).
        shapes: ``{module path: output shapes}`` (one shape per output tensor, in order).
        out_bytes: ``{module path: bytes of its output tensors}``.
        seq_len: tokens per sample of a text model's batch (None: an image batch).
        input_shape: one sample's shape when it is not an image of ``image_size`` (audio
            frames ``(1024,)``, features), the batch of a dict input (:class:`DictBatch`), else None.
    """

    batch_size: int
    image_size: int
    profile: ModelProfile
    shapes: dict[str, tuple[tuple[int, ...], ...]] = field(default_factory=dict)
    out_bytes: dict[str, int] = field(default_factory=dict)
    seq_len: int | None = None
    input_shape: tuple[int, ...] | DictBatch | None = None

    @property
    def input_text(self) -> str:
        """``64 px``, ``128 tokens``, ``input 1024`` or a dict input's keys and shapes: what the batch is."""
        return _input_text(self.seq_len, self.image_size, self.input_shape)


@dataclass(frozen=True)
class StepPrediction:
    """Predicted memory of one training step under a plan.

    Attributes:
        estimate: the advisor's breakdown (weights, gradients, optimizer state,
            activations kept for backward, temporaries, peak).
        batch_size / image_size: the batch it is for.
        seq_len: tokens per sample of a text model's batch (None: images).
        input_shape: one sample's shape when it is not an image (see :class:`ActivationProfile`).
    """

    estimate: MemoryEstimate
    batch_size: int
    image_size: int
    seq_len: int | None = None
    input_shape: tuple[int, ...] | DictBatch | None = None

    @property
    def input_text(self) -> str:
        """``64 px``, ``128 tokens``, ``input 1024`` or a dict input's keys and shapes: what the batch is."""
        return _input_text(self.seq_len, self.image_size, self.input_shape)

    @property
    def peak(self) -> int:
        """Predicted peak bytes of the step."""
        return self.estimate.peak

    @property
    def activations(self) -> int:
        """Bytes of the activations kept for backward."""
        return self.estimate.activations

    @property
    def without_activations(self) -> int:
        """Bytes the step needs even with a batch of one: weights, buffers, gradients, state."""
        e = self.estimate
        return e.weights + e.buffers + e.gradients + e.optimizer_state


@dataclass(frozen=True)
class DeviceMemory:
    """How much memory a training device offers.

    Attributes:
        device: the device (``cuda:0``, ``cpu`` ...).
        total: bytes the device has in all.
        available: bytes a run can use now (CUDA: the total; CPU: RAM available now).
        what: what the figure is, for the user (``"GPU memory"``, ``"available RAM"``).
    """

    device: str
    total: int
    available: int
    what: str


class ProfileCancelledError(AdvisorError):
    """A profile was stopped before it finished (:meth:`Pacer.cancel`)."""


class Pacer:
    """Runs a long pass in short slices: between slices the pass waits until it is resumed.

    The pass (on a worker thread) calls the pacer (it is a ``checkpoint``) between small
    steps. Once a slice of ``slice_s`` seconds is used up it calls ``on_pause`` and waits
    until another thread calls :meth:`resume` (or ``max_pause_s`` passes), so that thread
    holds the interpreter lock alone meanwhile: a user interface resumes the pass from its
    event loop when it has nothing else to do, and a click never queues behind the pass.

    Args:
        slice_s: seconds the pass may run before it pauses.
        on_pause: called on the pass's thread when it pauses (asks for :meth:`resume`).
        max_pause_s: the longest pause without a resume (a thread that never resumes the
            pass, e.g. one blocked on a lock the pass holds, only slows it down).

    Attributes:
        steps: checkpoints passed.
        pauses: pauses made.
    """

    def __init__(self, slice_s: float = 0.005, on_pause: Callable[[], None] | None = None,
                 max_pause_s: float = 0.1) -> None:
        self.slice_s = slice_s
        self.max_pause_s = max_pause_s
        self._on_pause = on_pause
        self._go = threading.Event()
        self._deadline: float | None = None
        self._free = False
        self._cancelled = False
        self.steps = 0
        self.pauses = 0

    def __call__(self) -> None:
        """A checkpoint of the pass: returns at once, pauses, or raises.

        Raises:
            ProfileCancelledError: :meth:`cancel` was called.
        """
        self.steps += 1
        if self._cancelled:
            raise ProfileCancelledError("the profile was cancelled")
        if self._free:
            return
        now = time.perf_counter()
        if self._deadline is None:
            self._deadline = now + self.slice_s
        if now < self._deadline:
            return
        self._go.clear()
        self.pauses += 1
        if self._on_pause is not None:
            self._on_pause()
        self._go.wait(self.max_pause_s)
        if self._cancelled:
            raise ProfileCancelledError("the profile was cancelled")
        self._deadline = time.perf_counter() + self.slice_s

    @property
    def cancelled(self) -> bool:
        """:meth:`cancel` was called."""
        return self._cancelled

    @property
    def waiting(self) -> bool:
        """The pass has paused and no :meth:`resume` has come since: :attr:`steps` holds still."""
        return self.pauses > 0 and not self._go.is_set()

    def resume(self) -> None:
        """Let the paused pass run its next slice."""
        self._go.set()

    def release(self) -> None:
        """Let the pass run to its end without pausing again (someone waits for it)."""
        self._free = True
        self._go.set()

    def cancel(self) -> None:
        """Stop the pass at its next checkpoint (it raises :class:`ProfileCancelledError`)."""
        self._cancelled = True
        self._go.set()


def _input_text(seq_len: int | None, image_size: int, input_shape: tuple[int, ...] | DictBatch | None) -> str:
    if seq_len is not None:
        return f"{seq_len} tokens"
    if isinstance(input_shape, DictBatch):
        return "input " + batch_text(input_shape)
    if input_shape is not None:
        return "input " + "×".join(str(d) for d in input_shape)
    return f"{image_size} px"


def shape_text(shape: tuple[int, ...]) -> str:
    """``16×64×56×56`` (``scalar`` for a 0-d tensor)."""
    return "×".join(str(d) for d in shape) if shape else "scalar"


class _Outputs:
    """Each module's output shapes and bytes, from its first call."""

    def __init__(self) -> None:
        self.shapes: dict[str, tuple[tuple[int, ...], ...]] = {}
        self.nbytes: dict[str, int] = {}

    def __call__(self, path: str, out: Any) -> None:
        if path in self.shapes:  # a module called twice: its first call
            return
        tensors = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        self.shapes[path] = tuple(tuple(t.shape) for t in tensors)
        self.nbytes[path] = sum(t.numel() * t.element_size() for t in tensors)


def output_shapes(model: nn.Module, input_shape: InputShape, *, dtype: torch.dtype | None = None,
                  checkpoint: Checkpoint | None = None) -> tuple[
    dict[str, tuple[tuple[int, ...], ...]], dict[str, int]
]:
    """The output shapes and bytes of every module for one batch, on a meta copy.

    Args:
        model: the model (not changed; nothing real is computed).
        input_shape: shape of the input batch, e.g. ``(16, 3, 224, 224)``; ``(batch, seq_len)``
            for a text model (fed a token batch with labels, as the advisor profiles it); a
            :class:`DictBatch` for dict inputs.
        dtype: dtype of an image input (default: the first floating parameter's).
        checkpoint: called between modules (see :class:`Pacer`).

    Returns:
        ``({path: shapes}, {path: output bytes})`` for the modules that ran.

    Raises:
        AdvisorError: the model cannot run on the meta device with that input.
    """
    tick = checkpoint if checkpoint is not None else no_checkpoint
    meta = meta_copy(model, checkpoint)
    paced_train(meta, tick)
    if dtype is None:
        dtype = next((p.dtype for p in meta.parameters() if p.is_floating_point()), torch.float32)
    record = _Outputs()
    hooks = []
    for path, mod in meta.named_modules():
        tick()

        def post(_m: nn.Module, _a: Any, out: Any, path: str = path) -> None:
            tick()
            record(path, out)

        hooks.append(mod.register_forward_hook(post))
    try:
        x = meta_batch(meta, input_shape if isinstance(input_shape, DictBatch) else tuple(input_shape), dtype)
        with torch.no_grad():
            if isinstance(x, dict):
                meta(**x)
            else:
                meta(x)
    except AdvisorError:
        raise
    except Exception as e:
        raise AdvisorError(
            f"the model could not run a shape-only forward pass with input {batch_text(input_shape) if isinstance(input_shape, DictBatch) else tuple(input_shape)}: "
            f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        ) from None
    finally:
        for h in hooks:
            h.remove()
    return record.shapes, record.nbytes


def profile_activations(
    model: nn.Module, batch_size: int, image_size: int, *, channels: int = 3, bn_eval: bool = False,
    seq_len: int | None = None, checkpoint: Checkpoint | None = None, in_place: bool = False,
    input_shape: tuple[int, ...] | DictBatch | None = None,
) -> ActivationProfile:
    """Profile one training batch: activations saved for backward and output shapes.

    One meta copy, one forward pass: the advisor's record and every module's outputs.

    Args:
        model: the model (not changed; runs as a meta copy).
        batch_size: samples per step.
        image_size: input side in pixels (ignored with ``seq_len``).
        channels: input channels.
        bn_eval: BatchNorm runs on running statistics (it then saves less).
        seq_len: tokens per sample: a text model's token batch ``(batch_size, seq_len)`` with
            labels, as ``advise --seq-len`` profiles it (None: an image batch).
        checkpoint: called between small steps of the copy and the pass (a :class:`Pacer`).
        in_place: ``model`` is already a copy on the ``meta`` device (:func:`meta_copy`):
            profile it without copying it again (it is changed: train mode, hooks run).
        input_shape: one sample's shape (``(1024,)`` audio frames, ``(5,)`` features): a batch
            ``(batch_size, *input_shape)`` instead of images; or a dict input's batch
            (:func:`~workbench.core.advisor.profile.batch_template`), taken in batches of
            ``batch_size`` (ignored with ``seq_len``).

    Returns:
        The profile.

    Raises:
        AdvisorError: the model does not take such a batch (or cannot run on meta).
        ProfileCancelledError: ``checkpoint`` stopped the pass.
    """
    sample = None if seq_len is not None else input_shape
    if isinstance(sample, DictBatch):
        sample = sample.with_batch(batch_size)
    shape: InputShape = ((batch_size, seq_len) if seq_len is not None else sample if isinstance(sample, DictBatch)
                         else (batch_size, *sample) if sample is not None
                         else (batch_size, channels, image_size, image_size))
    record = _Outputs()
    profile = profile_model(model, shape, bn_eval=bn_eval, outputs=record, checkpoint=checkpoint, in_place=in_place)
    return ActivationProfile(batch_size, 0 if seq_len is not None or sample is not None else image_size, profile,
                             record.shapes, record.nbytes, seq_len=seq_len, input_shape=sample)


def unfrozen_param_names(param_names: Iterable[str], frozen: Mapping[str, bool]) -> set[str]:
    """The parameters that train, given whether each module's own parameters are frozen.

    Args:
        param_names: parameter names of the model.
        frozen: ``{module path: frozen}`` (a plan's effective ``frozen``; missing = trains).

    Returns:
        The names of the parameters whose module is not frozen.
    """
    return {n for n in param_names if not frozen.get(n.rpartition(".")[0], False)}


def predict_step(
    act: ActivationProfile,
    trainable: Collection[str],
    *,
    optimizer: str = "adamw",
    amp: str = "off",
    device_type: str = "cpu",
) -> StepPrediction:
    """Predict a training step's memory under a plan (milliseconds: the profile is reused).

    Args:
        act: the batch's profile.
        trainable: names of the parameters that train.
        optimizer: ``sgd``, ``sgd_momentum``, ``adam`` or ``adamw``.
        amp: ``off``, ``bf16`` or ``fp16``.
        device_type: ``cpu``, ``cuda`` or ``mps``.

    Returns:
        The prediction.

    Raises:
        AdvisorError: an unknown optimizer or amp mode.
    """
    est = estimate_memory(act.profile, trainable, optimizer=optimizer, amp=amp, device_type=device_type)
    return StepPrediction(est, act.batch_size, act.image_size, act.seq_len, act.input_shape)


def module_activation_bytes(act: ActivationProfile, trainable: Collection[str]) -> dict[str, int]:
    """Bytes each module keeps for backward under a plan (its own ops and everything below it).

    A storage counts for the module of the first op from the first trainable parameter on
    that saves it; ops before that save nothing (a frozen prefix keeps no activations).

    Args:
        act: the batch's profile.
        trainable: names of the parameters that train.

    Returns:
        ``{module path: bytes}``, ancestors included (the root holds the total).
    """
    profile = act.profile
    start = first_trainable_op(profile, set(trainable))
    out: dict[str, int] = {}
    if start is None:
        return out
    for st in profile.saved:
        first = next((s for s in st.saves if s >= start), None)
        if first is None:
            continue
        # a save during the op being recorded last (a text model's loss) is the root's
        path = profile.ops[first].module if first < len(profile.ops) else ""
        while True:
            out[path] = out.get(path, 0) + st.nbytes
            if not path:
                break
            path = path.rpartition(".")[0]
    return out


def device_memory(device: str) -> DeviceMemory:
    """How much memory ``device`` offers a run.

    Args:
        device: ``cpu``, ``cuda``, ``cuda:N``, ``mps`` or ``auto`` (the device a run would pick).

    Returns:
        CUDA: the GPU's total memory; MPS: the recommended working set; CPU: RAM available now.
    """
    if device == "auto":
        device = "cuda:0" if torch.cuda.is_available() else ("mps" if torch.backends.mps.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and torch.cuda.is_available():
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        total = int(torch.cuda.get_device_properties(index).total_memory)
        return DeviceMemory(str(dev), total, total, "GPU memory")
    if dev.type == "mps" and torch.backends.mps.is_available():
        total = int(torch.mps.recommended_max_memory())
        return DeviceMemory("mps", total, total, "MPS working set")
    import psutil

    vm = psutil.virtual_memory()
    return DeviceMemory("cpu", int(vm.total), int(vm.available), "available RAM")


def fit_verdict(pred: StepPrediction, mem: DeviceMemory) -> str:
    """Whether a predicted step fits a device.

    Args:
        pred: the prediction.
        mem: the device's memory.

    Returns:
        ``"fits"``; ``"tight"`` (above 90 % of what is available); ``"does not fit"`` (above
        what is available: it may still run if memory is freed, or swap on CPU);
        ``"impossible"`` (even without activations the step needs more than the device has in
        all).
    """
    if pred.without_activations > mem.total:
        return "impossible"
    if pred.peak > mem.available:
        return "does not fit"
    if pred.peak > 0.9 * mem.available:
        return "tight"
    return "fits"


def largest_batch(pred: StepPrediction, mem: DeviceMemory) -> int:
    """A batch size that should fit, scaling activations linearly with the batch (0: none).

    Args:
        pred: the prediction for ``pred.batch_size``.
        mem: the device's memory.

    Returns:
        The largest batch predicted to fit in 90 % of what is available.
    """
    per_sample = max(pred.peak - pred.without_activations, 1) / max(pred.batch_size, 1)
    room = 0.9 * mem.available - pred.without_activations
    return max(int(math.floor(room / per_sample)), 0)
