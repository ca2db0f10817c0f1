"""Low-rank A+B as a Hugging Face PEFT LoRA adapter, and back.

:func:`to_peft` writes ``adapter_config.json`` and ``adapter_model.safetensors`` that
``peft.PeftModel.from_pretrained(base, folder)`` loads with the same outputs: PEFT's
``lora_A`` is ``V`` (r x in), ``lora_B`` is ``U`` (out x r) and its scaling is ``alpha / r``,
keyed ``base_model.model.<path>.lora_A.weight`` / ``lora_B.weight`` (``lora_embedding_A`` /
``lora_embedding_B`` for embeddings). Modules that train without A+B are written as
``modules_to_save``. :func:`load_peft` reads such a folder into an applied plan made by
:meth:`FreezePlan.from_peft`. PEFT itself is not needed for either.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import Tensor

from workbench.core.atomic import atomic_path, atomic_write
from workbench.core.freezing.low_rank import LowRankHandle
from workbench.core.freezing.reparam import ReparamError
from workbench.core.plan.peft_config import CONFIG_FILE

if TYPE_CHECKING:  # pragma: no cover - typing only
    from workbench.core.freezing.plan_handle import AppliedPlan

__all__ = ["PREFIX", "WEIGHTS_FILE", "load_peft", "peft_tensors", "to_peft"]

#: The adapter weights file of a PEFT adapter folder.
WEIGHTS_FILE = "adapter_model.safetensors"
#: Key prefix of every tensor in a PEFT adapter file (the PeftModel's wrapping).
PREFIX = "base_model.model."


def _low_rank_handles(applied: "AppliedPlan") -> list[LowRankHandle]:
    handles: list[Any] = [h for h in applied.installed("reparam").values() if getattr(h, "names", None)]
    full = [h.path or "(root)" for h in handles if not isinstance(h, LowRankHandle)]
    if full:
        raise ReparamError(
            f"full-rank A+B on {', '.join(full[:3])} has no PEFT form; give those rules a reparam.rank, "
            "or ship full-rank B with applied.export_deltas()"
        )
    low = [h for h in handles if isinstance(h, LowRankHandle)]
    if not low:
        raise ReparamError('the plan has no low-rank A+B; add a rule like {"select": "*.query", "reparam": {"rank": 8}}')
    moved = [h.path for h in low if h.spec.a.kind != "current"]
    if moved:
        raise ReparamError(
            f"A on {', '.join(moved[:3])} is not the loaded weights (reparam.a is not \"current\"); a PEFT "
            "adapter applies to the base model's own weights: use a: \"current\""
        )
    return low


def _keys(h: LowRankHandle) -> tuple[str, str]:
    base = PREFIX + h.path
    if h.kind == "embedding":
        return f"{base}.lora_embedding_A", f"{base}.lora_embedding_B"
    return f"{base}.lora_A.weight", f"{base}.lora_B.weight"


def _peft_shapes(h: LowRankHandle) -> tuple[tuple[int, ...], tuple[int, ...]]:
    d = h.delta_module("weight")
    r = h.low_rank.rank
    if h.kind == "conv":
        k = d.geometry.shape[1:]
        return (r, *k), (d.geometry.out, r, *([1] * (len(k) - 1)))
    return (r, d.geometry.inp), (d.geometry.out, r)


def _saved_modules(applied: "AppliedPlan", handles: list[LowRankHandle]) -> list[str]:
    lora = {id(p) for h in handles for _, p in h.trainable()}
    owners: list[str] = []
    for name, p in applied.model.named_parameters():
        if p.requires_grad and id(p) not in lora:
            owner = applied.tree.owner_of(name)
            if not owner:
                raise ReparamError(
                    f"parameter {name!r} of the root module trains; PEFT's modules_to_save needs a submodule: "
                    "freeze it or move it into a submodule"
                )
            if owner not in owners:
                owners.append(owner)
    return owners


def peft_tensors(applied: "AppliedPlan") -> dict[str, Tensor]:
    """The tensors of the PEFT adapter file, by PEFT's keys.

    Args:
        applied: an applied plan with low-rank A+B.

    Returns:
        ``{key: tensor}`` on the CPU, contiguous.

    Raises:
        ReparamError: full-rank A+B, no low-rank A+B, or an A that is not the loaded weights.
    """
    handles = _low_rank_handles(applied)
    out: dict[str, Tensor] = {}
    with torch.no_grad():
        for h in handles:
            ka, kb = _keys(h)
            sa, sb = _peft_shapes(h)
            out[ka] = h.v("weight").detach().reshape(sa).to("cpu").contiguous()
            out[kb] = h.u("weight").detach().reshape(sb).to("cpu").contiguous()
        for path in _saved_modules(applied, handles):
            for k, t in applied.model.get_submodule(path).state_dict().items():
                out[f"{PREFIX}{path}.{k}"] = t.detach().to("cpu").contiguous()
    return out


def to_peft(applied: "AppliedPlan", folder: str | os.PathLike[str]) -> Path:
    """Write the plan's low-rank A+B as a PEFT LoRA adapter folder.

    ``peft.PeftModel.from_pretrained(base_model, folder)`` then gives the same outputs as the
    model with the plan applied (``base_model``: the same pretrained weights, no plan).

    Args:
        applied: an applied plan whose A+B rules all have a ``rank``.
        folder: the adapter folder (created; files written atomically).

    Returns:
        The folder.

    Raises:
        ReparamError: full-rank A+B, no low-rank A+B, or different dropouts (PEFT has one).
        OSError: the folder is not writable.
    """
    handles = _low_rank_handles(applied)
    tensors = peft_tensors(applied)
    rank, alpha = Counter((h.low_rank.rank, h.low_rank.alpha) for h in handles).most_common(1)[0][0]
    dropouts = sorted({h.low_rank.dropout for h in handles})
    if len(dropouts) > 1:
        raise ReparamError(
            f"A+B rules use different reparam.dropout values ({', '.join(f'{d:g}' for d in dropouts)}); "
            "a PEFT adapter has one lora_dropout: give every rule the same dropout"
        )
    inits = {h.low_rank.init for h in handles}

    def number(x: float) -> float | int:
        return int(x) if float(x).is_integer() else x

    config: dict[str, Any] = {
        "peft_type": "LORA",
        "task_type": None,
        "base_model_name_or_path": applied.plan.model.get("name"),
        "inference_mode": True,
        "r": rank,
        "lora_alpha": number(alpha),
        "lora_dropout": dropouts[0],
        "target_modules": [h.path for h in handles],
        "modules_to_save": _saved_modules(applied, handles) or None,
        "bias": "none",
        "fan_in_fan_out": any(h.kind == "conv1d_hf" for h in handles),
        "init_lora_weights": "gaussian" if inits == {"gaussian"} else True,
        "rank_pattern": {h.path: h.low_rank.rank for h in handles if h.low_rank.rank != rank},
        "alpha_pattern": {h.path: number(h.low_rank.alpha) for h in handles if h.low_rank.alpha != alpha},
        "use_rslora": False,
        "use_dora": False,
    }
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(out / WEIGHTS_FILE) as tmp:
        save_file(tensors, str(tmp), metadata={"format": "pt"})
    atomic_write(out / CONFIG_FILE, json.dumps(config, indent=2) + "\n")
    return out


def load_peft(applied: "AppliedPlan", folder: str | os.PathLike[str]) -> None:
    """Load a PEFT LoRA adapter's weights into an applied plan (U, V and modules_to_save).

    Everything is read and checked before anything is written.

    Args:
        applied: a plan from :meth:`FreezePlan.from_peft` (or one with the same low-rank A+B),
            applied to the base model.
        folder: the adapter folder (``adapter_model.safetensors``).

    Raises:
        ReparamError: the file is missing or unreadable, lacks a tensor the plan needs (named),
            or holds one of another shape (named), e.g. a different rank.
    """
    handles = _low_rank_handles(applied)
    path = Path(folder)
    path = path / WEIGHTS_FILE if path.is_dir() else path
    if not path.is_file():
        raise ReparamError(f"no {WEIGHTS_FILE} at {str(path)!r}; give the folder PEFT's save_pretrained wrote")
    writes: list[tuple[Any, Any]] = []
    with safe_open(str(path), framework="pt", device="cpu") as f:
        keys = set(f.keys())

        def read(key: str, shape: tuple[int, ...]) -> Tensor:
            if key not in keys:
                raise ReparamError(f"adapter file {str(path)!r} has no tensor {key!r}; was it saved for this model and plan?")
            t = f.get_tensor(key)
            if tuple(t.shape) != tuple(shape):
                raise ReparamError(
                    f"tensor {key!r} in {str(path)!r} has shape {tuple(t.shape)}, the plan needs {tuple(shape)}; "
                    "the adapter's rank or the model differs from the plan's"
                )
            return t

        for h in handles:
            ka, kb = _keys(h)
            sa, sb = _peft_shapes(h)
            writes.append((h, (read(kb, sb), read(ka, sa))))
        lora_keys = {k for h in handles for k in _keys(h)}
        for key in sorted(keys - lora_keys):
            name = key[len(PREFIX):] if key.startswith(PREFIX) else key
            target: Tensor | None = dict(applied.model.named_parameters()).get(name)
            if target is None:
                target = dict(applied.model.named_buffers()).get(name)
            if target is None:
                raise ReparamError(f"adapter file {str(path)!r} holds {key!r}, which is no parameter of the model")
            writes.append((target, read(key, tuple(target.shape))))
    with torch.no_grad():
        for target, value in writes:
            if isinstance(target, LowRankHandle):
                u, v = value
                target.set_uv("weight", u.reshape(target.u("weight").shape), v.reshape(target.v("weight").shape))
            else:
                target.copy_(value.to(device=target.device, dtype=target.dtype))
