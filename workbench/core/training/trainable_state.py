"""``trainable.safetensors``: what a run trained, as a saved run folder holds it.

The file holds every parameter with ``requires_grad`` and the running statistics of each
BatchNorm the plan left in train mode; its metadata names which keys are parameters and which
are buffers (``format: workbench-trainable``, ``version: 1``), with the run's status and steps.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

from workbench.core.atomic import atomic_path
from workbench.core.freezing.apply import AppliedPlan

__all__ = ["FORMAT", "write_trainable_state"]

#: The ``format`` metadata value of the file.
FORMAT = "workbench-trainable"


def write_trainable_state(
    folder: Path,
    model: nn.Module,
    applied: AppliedPlan,
    full_state: Mapping[str, torch.Tensor] | None = None,
    *,
    status: str,
    steps: int,
) -> Path:
    """Write ``folder/trainable.safetensors`` atomically (the folder is made if missing).

    Args:
        folder: the run folder being written (its staging copy).
        model: the trained model, plan still applied.
        applied: the plan applied to ``model``: which BatchNorms ran in train mode.
        full_state: under FSDP, the gathered full state dict to read values from (the model's
            own tensors are shards); None otherwise.
        status: the run's status, kept in the metadata.
        steps: the run's steps, kept in the metadata.

    Returns:
        The file's path.
    """
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, torch.Tensor] = {}
    params: list[str] = []
    buffers: list[str] = []

    def value(key: str, t: torch.Tensor) -> torch.Tensor:
        return (full_state[key] if full_state is not None else t.detach()).to("cpu").contiguous().clone()

    for name, p in model.named_parameters():
        if p.requires_grad:
            tensors[name] = value(name, p)
            params.append(name)
    eff = applied.effective
    for path, node in applied.tree.nodes.items():
        if node.is_bn and not eff[path].bn_eval:  # running statistics moved in training
            for bname, buf in model.get_submodule(path).named_buffers(recurse=False):
                if buf is not None:
                    key = f"{path}.{bname}" if path else bname
                    tensors[key] = value(key, buf)
                    buffers.append(key)
    meta = {
        "format": FORMAT,
        "version": "1",
        "params": json.dumps(params),
        "buffers": json.dumps(buffers),
        "status": status,
        "steps": str(steps),
    }
    out = folder / "trainable.safetensors"
    with atomic_path(out) as tmp:
        save_file(tensors, str(tmp), metadata=meta)
    return out
