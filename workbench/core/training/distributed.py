"""DistributedDataParallel helpers for ``torchrun --nproc_per_node N -m workbench train``.

The engine uses these when ``WORLD_SIZE > 1`` (set by torchrun): the process group is
initialised from the environment (gloo on CPU, nccl on CUDA), the model is wrapped *after*
the plan is applied (DDP registers only parameters with ``requires_grad``, so frozen
parameters are not in its gradient buckets), and a small flag vector is all-reduced once per
step so every rank takes the same decisions at the same step (stop, a pending plan change,
a non-finite loss on any rank).
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import Dataset
from torch.utils.data.distributed import DistributedSampler

__all__ = [
    "DistContext",
    "DistInfo",
    "all_reduce_flags",
    "all_reduce_min",
    "broadcast_model_state",
    "broadcast_text",
    "ddp_parameter_count",
    "env_info",
    "init_distributed",
    "make_sampler",
    "wrap_ddp",
]


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits in a (possibly single-process) job.

    Attributes:
        world_size: number of processes.
        rank: this process's global rank.
        local_rank: rank on this machine (the CUDA device index under torchrun).
    """

    world_size: int = 1
    rank: int = 0
    local_rank: int = 0

    @property
    def distributed(self) -> bool:
        """More than one process."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that writes files and shows progress."""
        return self.rank == 0


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer; launch with torchrun") from None


def env_info() -> DistInfo:
    """Read ``WORLD_SIZE``, ``RANK`` and ``LOCAL_RANK`` (as torchrun sets them).

    Returns:
        The info; ``DistInfo()`` (1 process) when the variables are absent.
    """
    world = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    return DistInfo(world_size=world, rank=rank, local_rank=_env_int("LOCAL_RANK", rank))


@dataclass
class DistContext:
    """A process group the engine trains in.

    Attributes:
        info: world size and ranks.
        backend: ``gloo`` or ``nccl``.
        owns_group: the engine created the group (and destroys it in :meth:`close`).
    """

    info: DistInfo
    backend: str
    owns_group: bool

    def close(self) -> None:
        """Destroy the process group if this context created it."""
        if self.owns_group and dist.is_initialized():
            dist.destroy_process_group()
            self.owns_group = False


def init_distributed(device_type: str, *, timeout_s: float = 1800.0) -> DistContext | None:
    """Join the job torchrun started, if any.

    Uses an existing process group when one is initialised; else, with ``WORLD_SIZE > 1``,
    initialises one from the environment (``env://``): ``nccl`` for CUDA, ``gloo`` otherwise.
    On CUDA call it after ``torch.cuda.set_device(local_rank)``.

    Args:
        device_type: ``cuda``, ``cpu`` or ``mps`` (mps and cpu use gloo).
        timeout_s: collective timeout.

    Returns:
        The context, or None for a single-process run.

    Raises:
        RuntimeError: the environment is incomplete (e.g. ``MASTER_ADDR`` missing) or the
            backend is unavailable; the message says to launch with torchrun.
    """
    if dist.is_available() and dist.is_initialized():
        if dist.get_world_size() <= 1:
            return None
        info = DistInfo(dist.get_world_size(), dist.get_rank(), env_info().local_rank)
        return DistContext(info, str(dist.get_backend()), owns_group=False)
    info = env_info()
    if not info.distributed:
        return None
    if not dist.is_available():
        raise RuntimeError("WORLD_SIZE > 1 but this torch build has no torch.distributed; run a single process")
    backend = "nccl" if device_type == "cuda" else "gloo"
    missing = [v for v in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(v)]
    if missing:
        raise RuntimeError(
            f"WORLD_SIZE={info.world_size} but {', '.join(missing)} is not set; launch with "
            "`torchrun --nproc_per_node N -m workbench train ...`"
        )
    dist.init_process_group(
        backend=backend,
        init_method="env://",
        world_size=info.world_size,
        rank=info.rank,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    return DistContext(info, backend, owns_group=True)


def wrap_ddp(model: nn.Module, device: torch.device) -> nn.parallel.DistributedDataParallel:
    """Wrap a model (with its plan already applied) in DDP.

    Only parameters with ``requires_grad`` are registered in DDP's gradient buckets, so
    wrap after applying the plan, and wrap again after a plan change.

    Args:
        model: the model, already on ``device``.
        device: its device.

    Returns:
        The DDP module (its ``.module`` is ``model``).
    """
    ids = [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(model, device_ids=ids)


def broadcast_model_state(model: nn.Module, src: int = 0) -> None:
    """Copy rank ``src``'s parameters and buffers into every rank's model, in place.

    DDP does the same when it is constructed; doing it *before* a plan is applied makes the
    plan's verification baseline (hashes of frozen tensors) the weights every rank trains from.

    Args:
        model: the model, on its training device.
        src: the rank whose values win.
    """
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            dist.broadcast(t.data, src=src)


def ddp_parameter_count(ddp: nn.parallel.DistributedDataParallel) -> int:
    """How many parameter tensors DDP registered for gradient reduction.

    Args:
        ddp: a DDP module.

    Returns:
        The number of parameter tensors in DDP's buckets (frozen ones are not).
    """
    data = ddp._get_ddp_logging_data()
    return int(data["num_parameter_tensors"])


def _flag_device(device: torch.device) -> torch.device:
    backend = dist.get_backend()
    return device if backend == "nccl" else torch.device("cpu")


def all_reduce_flags(flags: Sequence[int], device: torch.device) -> list[int]:
    """Element-wise maximum of small integer flags over all ranks (one tiny collective).

    Args:
        flags: this rank's flags (0/1).
        device: the training device (nccl needs the tensor there; gloo uses the CPU).

    Returns:
        The maxima, the same on every rank.
    """
    t = torch.tensor(list(flags), dtype=torch.int32, device=_flag_device(device))
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [int(v) for v in t.tolist()]


def all_reduce_min(value: int, device: torch.device) -> int:
    """The smallest of an integer over all ranks (the steps every rank can run).

    Args:
        value: this rank's value.
        device: the training device (nccl needs the tensor there; gloo uses the CPU).

    Returns:
        The minimum, the same on every rank.
    """
    t = torch.tensor([value], dtype=torch.int64, device=_flag_device(device))
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return int(t.item())


def broadcast_text(text: str | None, src: int = 0) -> str | None:
    """Send a string from rank ``src`` to every rank.

    Args:
        text: the string on ``src`` (ignored elsewhere).
        src: the sending rank.

    Returns:
        ``src``'s string on every rank.
    """
    box: list[Any] = [text if dist.get_rank() == src else None]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def make_sampler(dataset: Dataset[Any], info: DistInfo, *, seed: int, shuffle: bool = True) -> DistributedSampler[Any]:
    """A :class:`DistributedSampler` giving each rank its own shard.

    ``drop_last=True`` so every rank runs the same number of steps.

    Args:
        dataset: the (map-style) dataset, synthetic ones included.
        info: world size and rank.
        seed: shuffling seed (the same on every rank).
        shuffle: shuffle each epoch (call ``set_epoch``).

    Returns:
        The sampler.
    """
    return DistributedSampler(
        dataset, num_replicas=info.world_size, rank=info.rank, shuffle=shuffle, seed=seed, drop_last=True
    )
