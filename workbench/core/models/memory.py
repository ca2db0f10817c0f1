"""Training-memory estimates by dtype and optimizer: does this plan fit on a 24 / 80 GB GPU?

The estimate covers what the parameter choice decides: the weights, one gradient per
trainable element and the optimizer state of the trainable elements. Activations depend on
the batch and sequence length and are not included.

Typical use::

    from workbench.core.models.memory import estimate_memory

    est = estimate_memory(total=6_738_415_616, trainable=202_383_360, dtype="bf16")
    est.total_bytes, est.fits(24e9)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workbench.core.errors import WorkbenchError
from workbench.core.optimizers import state_copies

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

__all__ = ["DTYPE_BYTES", "GPU_SIZES", "ParamMemory", "estimate_memory"]

#: Bytes per element of the dtypes the estimate knows.
DTYPE_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2, "fp16": 2}
#: GPU memory sizes (bytes) the estimate is checked against.
GPU_SIZES: tuple[int, ...] = (24 * 10**9, 80 * 10**9)

_ALIASES = {"float32": "fp32", "float": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16"}


def _dtype_key(dtype: str | torch.dtype) -> str:
    key = str(dtype).lower().removeprefix("torch.")
    key = _ALIASES.get(key, key)
    if key not in DTYPE_BYTES:
        raise WorkbenchError(f"unknown dtype {str(dtype)!r} for the memory estimate; use one of {', '.join(DTYPE_BYTES)}")
    return key


@dataclass(frozen=True)
class ParamMemory:
    """Bytes training needs for parameters, gradients and optimizer state (activations not counted;
    the step's whole prediction is :class:`workbench.core.advisor.memory.MemoryEstimate`).

    Attributes:
        dtype: Storage dtype of the weights and gradients (``fp32``, ``bf16``, ``fp16``).
        state_dtype: Dtype of the optimizer state.
        optimizer: Optimizer name the state was counted for.
        param_bytes: All weights (plus fixed A+B tensors).
        grad_bytes: One gradient per trainable element.
        optimizer_bytes: Optimizer state of the trainable elements.
        full_ft_bytes: The same with every parameter trainable.
    """

    dtype: str
    state_dtype: str
    optimizer: str
    param_bytes: int
    grad_bytes: int
    optimizer_bytes: int
    full_ft_bytes: int

    @property
    def total_bytes(self) -> int:
        """Weights + gradients + optimizer state."""
        return self.param_bytes + self.grad_bytes + self.optimizer_bytes

    def fits(self, gpu_bytes: float) -> bool:
        """Whether the estimate fits in ``gpu_bytes`` (activations not counted).

        Args:
            gpu_bytes: Device memory in bytes.

        Returns:
            True when :attr:`total_bytes` is at most ``gpu_bytes``.
        """
        return self.total_bytes <= gpu_bytes

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form with the total and the fit on each of :data:`GPU_SIZES`."""
        d = dict(self.__dict__)
        d["total_bytes"] = self.total_bytes
        d["fits"] = {f"{size // 10**9}GB": self.fits(size) for size in GPU_SIZES}
        return d


def estimate_memory(
    total: int,
    trainable: int,
    dtype: str | torch.dtype = "fp32",
    optimizer: str = "adamw",
    *,
    state_dtype: str | torch.dtype | None = None,
    fixed: int = 0,
) -> ParamMemory:
    """Estimate training memory for a parameter count, a dtype and an optimizer.

    Args:
        total: Parameter elements of the model.
        trainable: Trainable elements (gradients and optimizer state are kept for these).
        dtype: Weights and gradients dtype: ``"fp32"``, ``"bf16"``, ``"fp16"`` (or the torch dtype).
        optimizer: ``"sgd"``, ``"sgd_momentum"``, ``"adam"``, ``"adamw"``, ...
        state_dtype: Optimizer-state dtype; default the weights' dtype (what torch optimizers
            do); ``"fp32"`` for mixed-precision optimizers that keep fp32 state.
        fixed: Extra fixed elements the plan adds (A of A+B).

    Returns:
        The estimate.

    Raises:
        WorkbenchError: Unknown dtype or optimizer, or negative / inconsistent counts.
    """
    if total < 0 or trainable < 0 or trainable > total or fixed < 0:
        raise WorkbenchError(f"parameter counts must satisfy 0 <= trainable <= total, got trainable={trainable}, total={total}")
    key = _dtype_key(dtype)
    skey = _dtype_key(state_dtype) if state_dtype is not None else key
    try:
        factor = state_copies(optimizer)
    except ValueError as exc:
        raise WorkbenchError(str(exc)) from exc
    size, ssize = DTYPE_BYTES[key], DTYPE_BYTES[skey]
    return ParamMemory(
        dtype=key,
        state_dtype=skey,
        optimizer=optimizer,
        param_bytes=(total + fixed) * size,
        grad_bytes=trainable * size,
        optimizer_bytes=trainable * factor * ssize,
        full_ft_bytes=total * (2 * size + factor * ssize),
    )
