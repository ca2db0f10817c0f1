"""A copy of a model whose tensors live on the ``meta`` device (Qt-free).

The advisor profiles and adapts such copies, the app's activation estimate runs one, and the
exporter counts a run's parameters on one with the run's head: the shapes and the structure are
the model's, no tensor is copied, and the model itself is never changed.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from workbench.core.collector import collector_paused

if TYPE_CHECKING:  # pragma: no cover - typing only
    from torch import nn

__all__ = ["Checkpoint", "meta_copy", "no_checkpoint"]

#: Called often (between ops, modules, copied objects) by a long pass; it may pause the calling
#: thread or raise to stop the pass (see :class:`workbench.core.advisor.activations.Pacer`).
Checkpoint = Callable[[], None]


def no_checkpoint() -> None:
    """The checkpoint of a pass nobody paces: returns at once."""


class _PacedMemo(dict[int, Any]):  # copy.deepcopy's memo: {id: copy}
    """A ``copy.deepcopy`` memo that calls a checkpoint on every object the copy visits."""

    def __init__(self, checkpoint: Checkpoint) -> None:
        super().__init__()
        self._checkpoint = checkpoint

    def get(self, key: Any, default: Any = None) -> Any:
        self._checkpoint()
        return super().get(key, default)


def meta_copy(model: nn.Module, checkpoint: Checkpoint | None = None) -> nn.Module:
    """A copy of ``model`` whose parameters and buffers live on the ``meta`` device.

    Tensors are replaced before copying, so a large model is never duplicated in memory;
    shared parameters stay shared. The cyclic garbage collector is held off meanwhile
    (:func:`~workbench.core.collector.collector_paused`).

    Args:
        model: any module, on any device.
        checkpoint: called for every object copied (a long copy can pause or stop there).

    Returns:
        The copy (``model`` itself is not changed).
    """
    import torch
    from torch import nn

    tick = checkpoint if checkpoint is not None else no_checkpoint
    memo: dict[int, Any] = _PacedMemo(checkpoint) if checkpoint is not None else {}
    with collector_paused():
        for t in itertools.chain(model.parameters(), model.buffers()):
            tick()  # about 80 us a tensor: seconds on a model of 50,000 parameters
            if id(t) in memo:
                continue
            meta = torch.empty_like(t, device="meta")
            memo[id(t)] = nn.Parameter(meta, requires_grad=t.requires_grad) if isinstance(t, nn.Parameter) else meta
        return copy.deepcopy(model, memo)
