"""Shape-only kernels the advisor's pass runs in place of torch's slow ones on the ``meta`` device.

Torch computes many ops on meta tensors in Python: ``aten.native_batch_norm`` through its
decomposition (a variance, a mean, a reciprocal square root and half a dozen elementwise ops),
``add``, ``sub``, ``mul`` and ``div`` through the reference implementations (broadcasting, type
promotion and the output's memory layout, worked out in Python for every call: 1-5 ms each).
BatchNorm was about half the CPU time of profiling a ResNet, elementwise arithmetic most of a
transformer's. The pass needs only the outputs' shapes, dtypes and strides, and for the common
cases those follow directly from the inputs: :func:`batch_norm_on_meta` and
:func:`binary_on_meta` make them, the same ones torch gives
(``tests/core/advisor/test_meta_kernels.py`` checks every field, case by case). Inputs they do
not cover (real tensors, memory laid out other than row-major or not dense, integer dtypes,
Python numbers, a single value per channel, keyword arguments) are left to torch, whatever it
says about them.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["batch_norm_on_meta", "binary_on_meta", "fast_meta_kernel"]

#: The dtype torch's decomposition computes (and keeps the saved statistics) in, by input dtype.
_COMPUTATION_DTYPE = {torch.float16: torch.float32, torch.bfloat16: torch.float32}

_BATCH_NORM = torch.ops.aten.native_batch_norm.default
_BINARY = frozenset({torch.ops.aten.add.Tensor, torch.ops.aten.sub.Tensor, torch.ops.aten.mul.Tensor,
                     torch.ops.aten.div.Tensor})


def _row_major(shape: torch.Size) -> tuple[int, ...]:
    """The strides of a tensor of ``shape`` laid out row-major (``torch.empty(shape).stride()``)."""
    strides: list[int] = []
    step = 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _dense(t: torch.Tensor) -> bool:
    """The tensor's elements fill its memory exactly once, in some order of its dimensions."""
    expected = 1
    for size, stride in sorted(((s, st) for s, st in zip(t.shape, t.stride()) if s != 1), key=lambda p: p[1]):
        if stride != expected:
            return False
        expected *= size
    return True


def batch_norm_on_meta(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                       running_mean: torch.Tensor | None, running_var: torch.Tensor | None,
                       training: bool, momentum: float, eps: float) -> tuple[torch.Tensor, ...] | None:
    """``aten.native_batch_norm``'s outputs on meta tensors, made without computing anything.

    The arguments are the op's own. The output keeps the input's shape, dtype and strides; the
    saved mean and inverse standard deviation are one value per channel in the computation
    dtype (``float32`` for 16-bit inputs). The running statistics are left as they are: a meta
    tensor has no values to update, and their version counters advance above this kernel
    (autograd's in-place bookkeeping of the op), as they do around torch's.

    Returns:
        ``(output, save_mean, save_invstd)``, or None where torch's own kernel must run: an
        input that is not a dense floating meta tensor, eval mode without running statistics,
        or training with a single value per channel (torch's own error then).
    """
    if (x.device.type != "meta" or x.dim() < 2 or not x.is_floating_point() or x.numel() == 0
            or not _dense(x)):
        return None
    channels = x.shape[1]
    if training and running_var is not None and x.numel() // channels <= 1:
        return None
    if not training and (running_mean is None or running_var is None):
        return None
    stats_dtype = _COMPUTATION_DTYPE.get(x.dtype, x.dtype)
    width = channels if training else running_mean.shape[0]  # type: ignore[union-attr]  # checked above
    out = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    save_mean = torch.empty((width,), dtype=stats_dtype, device="meta")
    save_invstd = torch.empty((width,), dtype=stats_dtype, device="meta")
    return out, save_mean, save_invstd


def binary_on_meta(a: Any, b: Any) -> torch.Tensor | None:
    """The output of ``add``, ``sub``, ``mul`` or ``div`` (no rounding mode) of two meta tensors, made directly.

    Two floating meta tensors laid out row-major give a row-major tensor of their broadcast
    shape in their promoted dtype, whichever of the four ops it is (``alpha`` changes neither).

    Returns:
        The output, or None where torch's own kernel must run: anything but two non-empty
        floating meta tensors laid out row-major, or shapes that do not broadcast (torch's own
        error then).
    """
    for t in (a, b):
        if (not isinstance(t, torch.Tensor) or t.device.type != "meta" or not t.is_floating_point()
                or t.numel() == 0 or t.stride() != _row_major(t.shape)):
            return None
    try:
        shape = torch.broadcast_shapes(a.shape, b.shape)
    except RuntimeError:
        return None
    return torch.empty(shape, dtype=torch.result_type(a, b), device="meta")


def fast_meta_kernel(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any | None:
    """The outputs of ``func(*args, **kwargs)`` where this module makes them faster than torch, else None.

    Args:
        func: the aten op overload a dispatch mode received.
        args: its positional arguments.
        kwargs: its keyword arguments.

    Returns:
        What ``func`` returns for these arguments, or None: call ``func`` itself.
    """
    if func is _BATCH_NORM and not kwargs and len(args) == 8:
        return batch_norm_on_meta(*args)
    if func in _BINARY and len(args) == 2 and (not kwargs or (func is not torch.ops.aten.mul.Tensor
                                                             and func is not torch.ops.aten.div.Tensor
                                                             and set(kwargs) == {"alpha"})):
        return binary_on_meta(*args)
    return None

