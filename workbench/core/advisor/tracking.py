"""Live tensor bytes, tracked by torch's dispatcher: the measured peak memory on CPU.

Process RSS mixes allocator caches, libraries and Python objects; what a plan changes is the
bytes of the tensors a training step holds. :class:`LiveTensorBytes` is a
``TorchDispatchMode`` that sees every tensor an aten op creates (forward, backward and the
optimizer, which run on the same thread on CPU), counts each new storage once and subtracts
it when the storage is freed. Tensors that existed before the mode was entered are not seen:
pass their bytes as ``baseline``.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

__all__ = ["LiveTensorBytes", "storage_bytes"]


def storage_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind ``tensors`` (shared and viewed storages once).

    Args:
        tensors: tensors (parameters, buffers, gradients ...).

    Returns:
        The bytes.
    """
    seen: dict[int, int] = {}
    keep = []
    for t in tensors:
        st = t.untyped_storage()
        keep.append(st)
        seen.setdefault(id(st), st.nbytes())
    return sum(seen.values())


class LiveTensorBytes(TorchDispatchMode):
    """Count the bytes of live tensor storages created while the mode is active.

    Example:
        >>> with LiveTensorBytes(baseline=storage_bytes(model.parameters())) as live:
        ...     loss = model(x).sum(); loss.backward()
        >>> live.peak  # bytes, baseline included

    Args:
        baseline: bytes already live when the mode starts (counted in :attr:`live` and
            :attr:`peak`).
        device_type: count only storages on this device type (``"cpu"``); None: all but meta.
    """

    def __init__(self, baseline: int = 0, device_type: str | None = "cpu") -> None:
        super().__init__()
        self.live = baseline
        self.peak = baseline
        self.device_type = device_type
        self._seen: set[int] = set()

    def _free(self, key: int, nbytes: int) -> None:
        if key in self._seen:
            self._seen.discard(key)
            self.live -= nbytes

    def reset_peak(self) -> None:
        """Start a new peak from the bytes live now."""
        self.peak = self.live

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = {id(a.untyped_storage()) for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)}
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or t.device.type == "meta":
                continue
            if self.device_type is not None and t.device.type != self.device_type:
                continue
            st = t.untyped_storage()
            key = id(st)
            if key in self._seen or key in inputs:  # a view or an in-place result: not new memory
                continue
            nbytes = st.nbytes()
            self._seen.add(key)
            self.live += nbytes
            self.peak = max(self.peak, self.live)
            weakref.finalize(st, self._free, key, nbytes)
        return out
