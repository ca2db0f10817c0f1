"""Live tensor bytes, tracked by torch's dispatcher: the measured peak memory on CPU.

Process RSS mixes allocator caches, libraries and Python objects; what a plan changes is the
bytes of the tensors a training step holds. :class:`LiveTensorBytes` is a
``TorchDispatchMode`` that sees every tensor an aten op creates (forward, backward and the
optimizer, which run on the same thread on CPU), counts each new storage once and subtracts
it when the storage is freed. Tensors that existed before the mode was entered are not seen:
pass their bytes as ``baseline``. It lives in :mod:`workbench.core.training.metrics`, whose
CPU peak memory it is; this module names it for the advisor.
"""

from __future__ import annotations

from workbench.core.training.memory_probe import LiveTensorBytes, storage_bytes

__all__ = ["LiveTensorBytes", "storage_bytes"]
