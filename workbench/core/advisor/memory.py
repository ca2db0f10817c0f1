"""Predicted peak memory of a training step, from a :class:`~workbench.core.advisor.profile.ModelProfile`.

A step holds, at its peak:

- the weights and buffers of the whole model (frozen ones too), the input batch, and the
  optimizer state of the trainable parameters (SGD: none; SGD with momentum: one buffer;
  Adam/AdamW: two), all in the parameters' dtype;
- then either the activation phase: the tensors autograd saved for backward (only ops from
  the first trainable parameter on save any: a frozen prefix keeps none), freed op by op as
  backward walks back while the gradients of the trainable parameters appear, plus the
  gradient flowing through the op being differentiated (the largest temporary);
- or the forward phase: the storages the forward pass has made and still needs at each op
  (inputs of later ops, a residual branch waiting to be added, what autograd saved) — what
  a frozen forward keeps alive although it saves nothing for backward;
- or the optimizer phase: every gradient plus the optimizer's temporaries (the
  multi-tensor ``foreach`` path on accelerators makes one temporary the size of all trainable
  parameters; the per-parameter path on CPU one the size of the largest parameter, twice).

Gradients are freed before the forward pass (``zero_grad(set_to_none=True)``, as the
training engine does), so the two phases never overlap.
"""

from __future__ import annotations

import weakref
from collections.abc import Collection
from dataclasses import asdict, dataclass

import numpy as np

from workbench.core.advisor.profile import AdvisorError, ModelProfile
from workbench.core.optimizers import CHOICES, OPTIMIZER_TABLE

__all__ = ["OPTIMIZER_STATE_COPIES", "MemoryEstimate", "estimate_memory"]

#: Copies of the trainable parameters each optimizer keeps as state.
OPTIMIZER_STATE_COPIES = {name: OPTIMIZER_TABLE[name].state_copies for name in CHOICES}
#: Gradient buffers alive around the op being differentiated, in units of its output:
#: the gradient of its output, of its input, and of a residual branch waiting to be summed.
_BACKWARD_TEMP_OUTPUTS = 2
#: Autocast keeps activations in 16 bits: bytes saved relative to float32.
_AMP_ACTIVATION_SCALE = 0.5


@dataclass(frozen=True)
class MemoryEstimate:
    """Predicted bytes of one training step.

    Attributes:
        weights: parameters, frozen and trainable.
        buffers: buffers (BatchNorm running statistics ...).
        gradients: gradients of the trainable parameters.
        optimizer_state: optimizer state of the trainable parameters.
        activations: tensors saved for backward, at the end of the forward pass.
        temporary: the largest transient (backward gradients in flight, optimizer temporaries).
        batch: the input batch.
        peak: the predicted peak of the step.
    """

    weights: int
    buffers: int
    gradients: int
    optimizer_state: int
    activations: int
    temporary: int
    batch: int
    peak: int

    def to_dict(self) -> dict[str, int]:
        """The fields as a JSON-able dict."""
        return asdict(self)


class _Arrays:
    """A profile's records as numpy arrays, made once per profile: a prediction for any set of
    trainable parameters is then a few array operations (a 50,000-module model's profile has
    200,000 ops; walking them in Python took half a second per plan)."""

    def __init__(self, profile: ModelProfile) -> None:
        self.n = n = len(profile.ops)
        self.out_bytes = np.fromiter((op.out_bytes for op in profile.ops), dtype=np.int64, count=n)
        params = profile.params
        self.names = [p.name for p in params]
        self.p_nbytes = np.fromiter((p.nbytes for p in params), dtype=np.int64, count=len(params))
        self.p_numel = np.fromiter((p.numel for p in params), dtype=np.int64, count=len(params))
        self.p_first = np.fromiter((-1 if p.first_use is None else p.first_use for p in params), dtype=np.int64,
                                   count=len(params))
        self.p_last = np.fromiter((-1 if p.last_use is None else p.last_use for p in params), dtype=np.int64,
                                  count=len(params))
        saved = profile.saved
        self.s_nbytes = np.fromiter((st.nbytes for st in saved), dtype=np.int64, count=len(saved))
        counts = np.fromiter((len(st.saves) for st in saved), dtype=np.int64, count=len(saved))
        self.s_owner = np.repeat(np.arange(len(saved), dtype=np.int64), counts)
        self.s_saves = np.fromiter((s for st in saved for s in st.saves), dtype=np.int64, count=int(counts.sum()))
        tr = profile.transients
        self.t_created = np.fromiter((t[0] for t in tr), dtype=np.int64, count=len(tr))
        self.t_last = np.fromiter((t[1] for t in tr), dtype=np.int64, count=len(tr))
        self.t_nbytes = np.fromiter((t[2] for t in tr), dtype=np.int64, count=len(tr))
        self.t_last_save = np.fromiter((max(t[3], default=-1) for t in tr), dtype=np.int64, count=len(tr))
        self._last: tuple[Collection[str], np.ndarray] | None = None

    def trainable(self, trainable: Collection[str]) -> np.ndarray:
        """A flag per parameter: its name is in ``trainable`` (the last collection asked is remembered:
        one prediction asks for the same set several times; it is not changed meanwhile)."""
        last = self._last
        if last is not None and last[0] is trainable:
            return last[1]
        mask = np.fromiter((name in trainable for name in self.names), dtype=bool, count=len(self.names))
        self._last = (trainable, mask)
        return mask


_ARRAYS: dict[int, tuple[weakref.ref[ModelProfile], _Arrays]] = {}


def _arrays(profile: ModelProfile) -> _Arrays:
    """The arrays of ``profile`` (kept for a few profiles while they live; a profile is not
    changed once made)."""
    hit = _ARRAYS.get(id(profile))
    if hit is not None and hit[0]() is profile and len(profile.ops) == hit[1].n:
        return hit[1]
    arr = _Arrays(profile)
    if len(_ARRAYS) >= 4:
        _ARRAYS.clear()
    _ARRAYS[id(profile)] = (weakref.ref(profile), arr)
    return arr


def _scaled(nbytes: np.ndarray, scale: float) -> np.ndarray:
    """``int(nbytes * scale)`` element by element."""
    return nbytes if scale == 1.0 else np.floor(nbytes * scale).astype(np.int64)


def first_trainable_op(profile: ModelProfile, trainable: Collection[str]) -> int | None:
    """Position of the first op that reads a trainable parameter (None: nothing trains).

    Args:
        profile: the model's profile.
        trainable: names of the trainable parameters.

    Returns:
        The op position, or None.
    """
    uses = [p.first_use for p in profile.params if p.name in trainable and p.first_use is not None]
    return min(uses) if uses else None


def _first_trainable(arr: _Arrays, mask: np.ndarray) -> int | None:
    uses = arr.p_first[mask & (arr.p_first >= 0)]
    return int(uses.min()) if uses.size else None


def _activation_peak(profile: ModelProfile, trainable: Collection[str], scale: float) -> tuple[int, int, int]:
    """(saved bytes at the end of forward, peak of saved + grads + temporaries, largest temporary)."""
    arr = _arrays(profile)
    mask = arr.trainable(trainable)
    start = _first_trainable(arr, mask)
    if start is None:
        return 0, 0, 0
    n = arr.n
    # a storage is kept from its first save (at or after start) until backward passes the
    # earliest op that saved it
    big = np.iinfo(np.int64).max
    first = np.full(arr.s_nbytes.size, big, dtype=np.int64)
    at = arr.s_saves >= start
    np.minimum.at(first, arr.s_owner[at], arr.s_saves[at])
    kept = first != big
    nbytes = _scaled(arr.s_nbytes[kept], scale)
    saved_total = int(nbytes.sum())
    freed_at = np.zeros(n + 1, dtype=np.int64)
    np.add.at(freed_at, np.minimum(first[kept], n), nbytes)
    grad_at = np.zeros(n + 1, dtype=np.int64)
    g = mask & (arr.p_last >= 0)
    np.add.at(grad_at, arr.p_last[g], arr.p_nbytes[g])
    if start > n - 1:
        return saved_total, 0, 0
    # backward walks from the last op to ``start``: at op s the gradients of ops >= s exist and
    # the storages first saved after s are freed
    steps = np.arange(start, n)
    grads = np.cumsum(grad_at[:n][::-1])[::-1][steps]
    freed_after = np.concatenate([np.cumsum(freed_at[:n][::-1])[::-1], [0]])[steps + 1]
    temp = _scaled(_BACKWARD_TEMP_OUTPUTS * arr.out_bytes[steps], scale)
    peak = int((saved_total - freed_after + grads + temp).max())
    return saved_total, max(peak, 0), int(temp.max())


def _forward_peak(profile: ModelProfile, start: int | None, scale: float) -> int:
    """The most bytes of forward-made storages alive at once: each from the op that made it to
    the last op that reads it, or to the end of forward when backward keeps it."""
    arr = _arrays(profile)
    n = arr.n
    if not arr.t_created.size or not n:
        return 0
    kept = (arr.t_last_save >= start) if start is not None else np.zeros(arr.t_created.size, dtype=bool)
    end = np.where(kept, n, arr.t_last)
    b = _scaled(arr.t_nbytes, scale)
    delta = np.zeros(n + 2, dtype=np.int64)
    np.add.at(delta, arr.t_created, b)
    np.add.at(delta, np.minimum(end, n) + 1, -b)
    return max(int(np.cumsum(delta).max()), 0)


def _optimizer_temp(profile: ModelProfile, trainable: Collection[str], optimizer: str, foreach: bool) -> int:
    arr = _arrays(profile)
    sizes = arr.p_nbytes[arr.trainable(trainable)]
    if not sizes.size or optimizer not in ("adam", "adamw"):
        return 0  # SGD (with or without momentum) updates in place
    return int(sizes.sum()) if foreach else 2 * int(sizes.max())


def estimate_memory(
    profile: ModelProfile,
    trainable: Collection[str],
    *,
    optimizer: str = "adamw",
    amp: str = "off",
    device_type: str = "cpu",
) -> MemoryEstimate:
    """Predict the peak memory of a training step with ``trainable`` parameters.

    Args:
        profile: the model's profile (:func:`~workbench.core.advisor.profile.profile_model`).
        trainable: names of the parameters that train (the others are frozen).
        optimizer: ``sgd``, ``sgd_momentum``, ``adam`` or ``adamw``.
        amp: ``off``, ``bf16`` or ``fp16`` (autocast: activations in 16 bits, 16-bit copies of
            the trainable weights).
        device_type: ``cpu`` (per-parameter optimizer) or an accelerator (``cuda``: the
            multi-tensor optimizer path).

    Returns:
        The estimate.

    Raises:
        AdvisorError: an unknown optimizer or amp mode.
    """
    if optimizer not in OPTIMIZER_STATE_COPIES:
        raise AdvisorError(f"optimizer {optimizer!r} is unknown; use one of {', '.join(OPTIMIZER_STATE_COPIES)}")
    if amp not in ("off", "bf16", "fp16"):
        raise AdvisorError(f"amp mode {amp!r} is unknown; use off, bf16 or fp16")
    trainable = set(trainable)
    arr = _arrays(profile)
    mask = arr.trainable(trainable)
    # autocast halves activations and adds 16-bit weight copies only over 32-bit weights
    full_width = bool((arr.p_nbytes >= 4 * arr.p_numel).any())
    scale = 1.0 if amp == "off" or not full_width else _AMP_ACTIVATION_SCALE
    grads = int(arr.p_nbytes[mask].sum())
    state = OPTIMIZER_STATE_COPIES[optimizer] * grads
    casts = 0 if amp == "off" or not full_width else grads // 2
    saved, act_peak, bw_temp = _activation_peak(profile, trainable, scale)
    opt_temp = _optimizer_temp(profile, trainable, optimizer, foreach=device_type != "cpu")
    fwd_temp = int(_BACKWARD_TEMP_OUTPUTS * (int(arr.out_bytes.max()) if arr.n else 0) * scale)
    fwd_temp = max(fwd_temp, _forward_peak(profile, _first_trainable(arr, mask), scale))
    fixed = profile.param_bytes + profile.buffer_bytes + profile.input_bytes + state
    phase = max(act_peak + casts, grads + opt_temp, fwd_temp)
    return MemoryEstimate(
        weights=profile.param_bytes,
        buffers=profile.buffer_bytes,
        gradients=grads,
        optimizer_state=state,
        activations=saved,
        temporary=max(bw_temp, opt_temp, fwd_temp),
        batch=profile.input_bytes,
        peak=fixed + phase,
    )
