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

from collections.abc import Collection
from dataclasses import asdict, dataclass

from workbench.core.advisor.profile import AdvisorError, ModelProfile
from workbench.core.optimizers import CHOICES, OPTIMIZERS

__all__ = ["OPTIMIZER_STATE_COPIES", "MemoryEstimate", "estimate_memory"]

#: Copies of the trainable parameters each optimizer keeps as state.
OPTIMIZER_STATE_COPIES = {name: OPTIMIZERS[name].state_copies for name in CHOICES}
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


def _activation_peak(profile: ModelProfile, trainable: Collection[str], scale: float) -> tuple[int, int, int]:
    """(saved bytes at the end of forward, peak of saved + grads + temporaries, largest temporary)."""
    start = first_trainable_op(profile, trainable)
    if start is None:
        return 0, 0, 0
    n = len(profile.ops)
    # a storage is kept from its first save (at or after start) until backward passes the
    # earliest op that saved it
    freed_at = [0] * (n + 1)
    saved_total = 0
    for st in profile.saved:
        kept = [s for s in st.saves if s >= start]
        if kept:
            nbytes = int(st.nbytes * scale)
            saved_total += nbytes
            freed_at[min(kept[0], n)] += nbytes
    grad_at = [0] * (n + 1)
    for p in profile.params:
        if p.name in trainable and p.last_use is not None:
            grad_at[p.last_use] += p.nbytes
    # walk backward from the last op: the op at position s is being differentiated
    alive = saved_total
    grads = 0
    peak = 0
    largest_temp = 0
    for s in range(n - 1, start - 1, -1):
        grads += grad_at[s]
        temp = int(_BACKWARD_TEMP_OUTPUTS * profile.ops[s].out_bytes * scale)
        largest_temp = max(largest_temp, temp)
        peak = max(peak, alive + grads + temp)
        alive -= freed_at[s]
    return saved_total, peak, largest_temp


def _forward_peak(profile: ModelProfile, start: int | None, scale: float) -> int:
    """The most bytes of forward-made storages alive at once: each from the op that made it to
    the last op that reads it, or to the end of forward when backward keeps it."""
    n = len(profile.ops)
    if not profile.transients or not n:
        return 0
    delta = [0] * (n + 2)
    for created, last_use, nbytes, saves in profile.transients:
        kept = start is not None and any(s >= start for s in saves)
        end = n if kept else last_use
        b = int(nbytes * scale)
        delta[created] += b
        delta[min(end, n) + 1] -= b
    alive = peak = 0
    for d in delta:
        alive += d
        peak = max(peak, alive)
    return peak


def _optimizer_temp(profile: ModelProfile, trainable: Collection[str], optimizer: str, foreach: bool) -> int:
    sizes = [p.nbytes for p in profile.params if p.name in trainable]
    if not sizes or optimizer not in ("adam", "adamw"):
        return 0  # SGD (with or without momentum) updates in place
    return sum(sizes) if foreach else 2 * max(sizes)


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
    # autocast halves activations and adds 16-bit weight copies only over 32-bit weights
    full_width = any(p.nbytes >= 4 * p.numel for p in profile.params)
    scale = 1.0 if amp == "off" or not full_width else _AMP_ACTIVATION_SCALE
    grads = sum(p.nbytes for p in profile.params if p.name in trainable)
    state = OPTIMIZER_STATE_COPIES[optimizer] * grads
    casts = 0 if amp == "off" or not full_width else grads // 2
    saved, act_peak, bw_temp = _activation_peak(profile, trainable, scale)
    opt_temp = _optimizer_temp(profile, trainable, optimizer, foreach=device_type != "cpu")
    fwd_temp = int(_BACKWARD_TEMP_OUTPUTS * max((op.out_bytes for op in profile.ops), default=0) * scale)
    fwd_temp = max(fwd_temp, _forward_peak(profile, first_trainable_op(profile, trainable), scale))
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
