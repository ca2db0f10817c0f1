"""Big models under FSDP2: build on ``meta``, shard, then read each rank's slice from safetensors.

No rank ever holds the full model: the model is built on the meta device (shapes only), the
plan is applied (``requires_grad`` and eval locks need no values), the model is sharded
(:func:`~workbench.core.training.fsdp.shard_model`), and then :func:`materialize` allocates
only this rank's shards (``to_empty``) and fills each from the checkpoint with
``safe_open(...).get_slice(name)[start:stop]``, which reads just those rows from the file.
Sharded checkpoints (``model-00001-of-00004.safetensors`` as ``save_pretrained`` writes them)
are read file by file; a tensor saved once for tied weights fills every name it has.

Example (every rank, under torchrun)::

    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    applied = apply_plan(model, plan)
    shard_model(model, device, resolve_blocks(model, None))
    materialize(model, "/models/llama-7b", device, buffers=rotary_buffers)

Tensors that already hold values before ``materialize`` (a new head built on the CPU,
buffers that are not on meta) keep them. What is neither that nor in the files (non-persistent
buffers such as rotary ``inv_freq`` of a model built on meta) is taken from ``buffers``;
anything else missing is a one-line error.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from workbench.core.training.fsdp import FsdpError, local

__all__ = ["checkpoint_files", "materialize"]


def checkpoint_files(path: str | os.PathLike[str]) -> list[Path]:
    """The safetensors files of a checkpoint: one file, or every ``*.safetensors`` of a folder.

    Args:
        path: a ``.safetensors`` file or a folder (a ``save_pretrained`` folder).

    Returns:
        The files, sorted.

    Raises:
        FsdpError: no safetensors file there.
    """
    p = Path(path)
    files = sorted(p.glob("*.safetensors")) if p.is_dir() else [p] if p.suffix == ".safetensors" and p.is_file() else []
    if not files:
        raise FsdpError(f"{p} holds no .safetensors file; give a safetensors file or a save_pretrained folder")
    return files


def _rows(t: torch.Tensor, dst: torch.Tensor) -> tuple[int, int] | None:
    """Rows ``[start, stop)`` of dim 0 this rank holds of a tensor FSDP sharded, or None (not sharded)."""
    spec = getattr(t, "placements", None)
    if not spec:
        return None
    from torch.distributed.tensor import Shard

    placement = spec[0]
    if not isinstance(placement, Shard):
        return None
    if placement.dim != 0:
        raise FsdpError(f"a parameter is sharded on dim {placement.dim}; materialize reads dim-0 shards only")
    mesh = t.device_mesh  # type: ignore[attr-defined]
    world, rank = mesh.size(), mesh.get_local_rank()
    n = t.shape[0]
    per = -(-n // world)  # torch.chunk: ceil(n / world) rows per rank, the last ranks fewer or none
    start = min(rank * per, n)
    stop = min(start + per, n)
    if dst.shape[0] != stop - start:
        raise FsdpError(f"unexpected shard of {tuple(t.shape)}: {tuple(dst.shape)} on rank {rank}")
    return start, stop


def _retie(model: nn.Module, groups: list[list[str]]) -> None:
    """Share one tensor again under every name of a tied group (``to_empty`` gives each its own)."""
    for names in groups:
        first = model.get_parameter(names[0]) if names[0] in dict(model.named_parameters()) else None
        if first is None:
            continue
        for name in names[1:]:
            owner, _, short = name.rpartition(".")
            module = model.get_submodule(owner) if owner else model
            if module._parameters.get(short) is not first:
                module._parameters[short] = first


def materialize(
    model: nn.Module,
    path: str | os.PathLike[str],
    device: torch.device,
    *,
    buffers: Mapping[str, torch.Tensor] | None = None,
) -> list[str]:
    """Allocate this rank's shards of a model built on meta and sharded, and read them from safetensors.

    Args:
        model: the sharded model (parameters on meta).
        path: a safetensors file or a folder of them.
        device: this rank's device.
        buffers: values for tensors the files do not hold (non-persistent buffers), by name.

    Returns:
        The names read from the files (tensors that held values already are not read).

    Raises:
        FsdpError: a tensor is in neither the files nor ``buffers`` (named), or a shape differs.
    """
    from safetensors import safe_open

    files = checkpoint_files(path)
    where: dict[str, Path] = {}
    for f in files:
        with safe_open(str(f), framework="pt") as h:
            for k in h.keys():  # noqa: SIM118 - safe_open is not iterable
                where[k] = f
    state = model.state_dict(keep_vars=True)
    # tensors that already hold values (a new head, buffers built on the CPU): kept as they are
    real = {n: local(t).detach().clone() for n, t in state.items() if not local(t).is_meta}
    extra = dict(buffers or {})
    by_id: dict[int, list[str]] = {}
    for k, t in state.items():
        by_id.setdefault(id(t), []).append(k)
    missing = []
    for names in by_id.values():
        if not any(n in where or n in real or n in extra for n in names):
            missing.append(names[0])
    if missing:
        raise FsdpError(
            f"{len(missing)} tensor(s) of the model are not in {path} ({', '.join(missing[:3])}"
            f"{' ...' if len(missing) > 3 else ''}); pass their values as buffers=... or use the model's own checkpoint"
        )
    model.to_empty(device=device)
    _retie(model, [names for names in by_id.values() if len(names) > 1])
    state = model.state_dict(keep_vars=True)  # to_empty put new tensors in place
    read: list[str] = []
    handles: dict[Path, Any] = {}
    try:
        with torch.no_grad():
            for names in by_id.values():
                t = state[names[0]]
                dst = local(t)
                kept = next((n for n in names if n in real), None)
                if kept is not None:
                    dst.copy_(real[kept])
                    continue
                src_name = next((n for n in names if n in where), None)
                if src_name is None:
                    name = next(n for n in names if n in extra)
                    dst.copy_(extra[name].to(dst.device, dst.dtype))
                    continue
                f = where[src_name]
                h = handles.get(f)
                if h is None:
                    h = handles[f] = safe_open(str(f), framework="pt").__enter__()
                sl = h.get_slice(src_name)
                shape = tuple(sl.get_shape())
                if shape != tuple(t.shape):
                    raise FsdpError(f"{src_name}: the file holds {shape}, the model {tuple(t.shape)}")
                rows = _rows(t, dst)
                src = sl[rows[0]:rows[1]] if rows is not None else h.get_tensor(src_name)
                dst.copy_(src.to(dst.device, dst.dtype))
                read.append(src_name)
    finally:
        for h in handles.values():
            h.__exit__(None, None, None)
    return read
