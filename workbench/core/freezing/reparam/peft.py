"""Low-rank A+B as a Hugging Face PEFT LoRA adapter, and back.

:func:`to_peft` writes ``adapter_config.json`` and ``adapter_model.safetensors`` that
``peft.PeftModel.from_pretrained(base, folder)`` loads with the same outputs: PEFT's
``lora_A`` is ``V`` (r x in), ``lora_B`` is ``U`` (out x r) and its scaling is ``alpha / r``,
keyed ``base_model.model.<path>.lora_A.weight`` / ``lora_B.weight`` (``lora_embedding_A`` /
``lora_embedding_B`` for embeddings; a variant's own tensors by its ``peft_keys``, such as DoRA's
magnitude ``lora_magnitude_vector``, and its switch by its row's ``peft_field``). Modules
that train without A+B are written as ``modules_to_save``. :func:`load_peft` reads such a
folder into handles made from :meth:`FreezePlan.from_peft`. PEFT itself is not needed for either.
Every function takes the handles and the model, never the plan.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import Tensor, nn

from workbench.core.atomic import atomic_path, atomic_write
from workbench.core.freezing.reparam.base import DeltaHandle
from workbench.core.freezing.reparam.low_rank import LowRankHandle
from workbench.core.plan import lora_variants
from workbench.core.plan.peft_config import CONFIG_FILE
from workbench.core.plan.reparam_spec import ReparamError

__all__ = ["MAGNITUDE_KEY", "PREFIX", "WEIGHTS_FILE", "load_peft", "low_rank_handles", "peft_tensors", "to_peft"]

#: The adapter weights file of a PEFT adapter folder.
WEIGHTS_FILE = "adapter_model.safetensors"
#: Key prefix of every tensor in a PEFT adapter file (the PeftModel's wrapping).
PREFIX = "base_model.model."
#: Key suffix of DoRA's magnitude in a PEFT adapter file (each variant names its own in ``peft_keys``).
MAGNITUDE_KEY = "lora_magnitude_vector"


def low_rank_handles(handles: Iterable[DeltaHandle]) -> list[LowRankHandle]:
    """The low-rank handles, checked to have a PEFT form.

    Args:
        handles: installed A+B handles.

    Returns:
        The low-rank ones that reparametrize something.

    Raises:
        ReparamError: full-rank A+B, no low-rank A+B, an A that is not the loaded weights, or
            variants mixed (PEFT's ``use_dora`` is one switch), or a variant without a PEFT form.
    """
    hs = [h for h in handles if h.names]
    full = [h.path or "(root)" for h in hs if not isinstance(h, LowRankHandle)]
    if full:
        raise ReparamError(
            f"full-rank A+B on {', '.join(full[:3])} has no PEFT form; give those rules a reparam.rank, "
            "or ship full-rank B with applied.export_deltas()"
        )
    low = [h for h in hs if isinstance(h, LowRankHandle)]
    if not low:
        raise ReparamError('the plan has no low-rank A+B; add a rule like {"select": "*.query", "reparam": {"rank": 8}}')
    moved = [h.path for h in low if h.spec.a.kind != "current"]
    if moved:
        raise ReparamError(
            f"A on {', '.join(moved[:3])} is not the loaded weights (reparam.a is not \"current\"); a PEFT "
            "adapter applies to the base model's own weights: use a: \"current\""
        )
    used = sorted({h.low_rank.variant for h in low})
    if len(used) > 1:
        rows = [lora_variants.info(v) for v in used]
        names = [r.label if r else "plain LoRA" for r in rows]
        flags = " / ".join(f'"{r.name}"' for r in rows if r)
        fields = " / ".join(r.peft_field for r in rows if r and r.peft_field)
        raise ReparamError(
            f"some A+B rules use {' and some '.join(names)}; a PEFT adapter has one {fields or 'variant'}: "
            f"give every low-rank rule the same {flags}"
        )
    row = lora_variants.info(used[0])
    if row is not None and row.peft_field is None:
        raise ReparamError(f"{row.label} ({row.name!r}) has no PEFT form; use plain LoRA or a variant PEFT knows")
    return low


def _extra_keys(h: LowRankHandle) -> list[tuple[str, str, tuple[int, ...]]]:
    """``(short name, PEFT key, PEFT shape)`` of the variant's own tensors of ``h``."""
    d = h.delta_module("weight")
    v = h.variant
    return [(n, f"{PREFIX}{h.path}.{v.peft_keys[n]}", v.peft_shape(n, h.kind or "", d)) for n, _ in h.extra("weight") if n in v.peft_keys]


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


def _saved_modules(handles: list[LowRankHandle], model: nn.Module, owner_of: Callable[[str], str]) -> list[str]:
    lora = {id(p) for h in handles for _, p in h.trainable()}
    owners: list[str] = []
    for name, p in model.named_parameters():
        if p.requires_grad and id(p) not in lora:
            owner = owner_of(name)
            if not owner:
                raise ReparamError(
                    f"parameter {name!r} of the root module trains; PEFT's modules_to_save needs a submodule: "
                    "freeze it or move it into a submodule"
                )
            if owner not in owners:
                owners.append(owner)
    return owners


def peft_tensors(handles: Iterable[DeltaHandle], model: nn.Module, owner_of: Callable[[str], str]) -> dict[str, Tensor]:
    """The tensors of the PEFT adapter file, by PEFT's keys.

    Args:
        handles: installed A+B handles (all low rank).
        model: the model they are installed on.
        owner_of: module path of a parameter name (for ``modules_to_save``).

    Returns:
        ``{key: tensor}`` on the CPU, contiguous.

    Raises:
        ReparamError: see :func:`low_rank_handles`.
    """
    low = low_rank_handles(handles)
    out: dict[str, Tensor] = {}
    with torch.no_grad():
        for h in low:
            ka, kb = _keys(h)
            sa, sb = _peft_shapes(h)
            out[ka] = h.v("weight").detach().reshape(sa).to("cpu").contiguous()
            out[kb] = h.u("weight").detach().reshape(sb).to("cpu").contiguous()
            own = dict(h.extra("weight"))
            for name, key, shape in _extra_keys(h):
                out[key] = own[name].detach().reshape(shape).to("cpu").contiguous()
        for path in _saved_modules(low, model, owner_of):
            for k, t in model.get_submodule(path).state_dict().items():
                out[f"{PREFIX}{path}.{k}"] = t.detach().to("cpu").contiguous()
    return out


def _number(x: float) -> float | int:
    return int(x) if float(x).is_integer() else x


def to_peft(
    handles: Iterable[DeltaHandle],
    model: nn.Module,
    owner_of: Callable[[str], str],
    folder: str | os.PathLike[str],
    *,
    base_model_name: str | None = None,
) -> Path:
    """Write low-rank A+B as a PEFT LoRA (or DoRA) adapter folder.

    ``peft.PeftModel.from_pretrained(base_model, folder)`` then gives the same outputs as the
    model with the plan applied (``base_model``: the same pretrained weights, no plan).

    Args:
        handles: installed A+B handles (all low rank).
        model: the model.
        owner_of: module path of a parameter name.
        folder: the adapter folder (created; files written atomically).
        base_model_name: ``base_model_name_or_path`` of the config.

    Returns:
        The folder.

    Raises:
        ReparamError: see :func:`low_rank_handles`; different dropouts (PEFT has one).
        OSError: the folder is not writable.
    """
    hs = list(handles)
    low = low_rank_handles(hs)
    tensors = peft_tensors(hs, model, owner_of)
    rank, alpha = Counter((h.low_rank.rank, h.low_rank.alpha) for h in low).most_common(1)[0][0]
    dropouts = sorted({h.low_rank.dropout for h in low})
    if len(dropouts) > 1:
        raise ReparamError(
            f"A+B rules use different reparam.dropout values ({', '.join(f'{d:g}' for d in dropouts)}); "
            "a PEFT adapter has one lora_dropout: give every rule the same dropout"
        )
    inits = {h.low_rank.init for h in low}
    config: dict[str, Any] = {
        "peft_type": "LORA",
        "task_type": None,
        "base_model_name_or_path": base_model_name,
        "inference_mode": True,
        "r": rank,
        "lora_alpha": _number(alpha),
        "lora_dropout": dropouts[0],
        "target_modules": [h.path for h in low],
        "modules_to_save": _saved_modules(low, model, owner_of) or None,
        "bias": "none",
        "fan_in_fan_out": any(h.kind == "conv1d_hf" for h in low),
        "init_lora_weights": "gaussian" if inits == {"gaussian"} else True,
        "rank_pattern": {h.path: h.low_rank.rank for h in low if h.low_rank.rank != rank},
        "alpha_pattern": {h.path: _number(h.low_rank.alpha) for h in low if h.low_rank.alpha != alpha},
        "use_rslora": False,
    }
    for row in lora_variants.VARIANTS.values():
        if row.peft_field:
            config[row.peft_field] = low[0].low_rank.variant == row.name
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(out / WEIGHTS_FILE) as tmp:
        save_file(tensors, str(tmp), metadata={"format": "pt"})
    atomic_write(out / CONFIG_FILE, json.dumps(config, indent=2) + "\n")
    return out


def load_peft(handles: Iterable[DeltaHandle], model: nn.Module, folder: str | os.PathLike[str]) -> None:
    """Load a PEFT LoRA adapter's weights (U, V, DoRA's magnitude, modules_to_save); all checked first.

    Args:
        handles: installed A+B handles from :meth:`FreezePlan.from_peft` (or the same low-rank A+B).
        model: the base model they are installed on.
        folder: the adapter folder (``adapter_model.safetensors``) or the file.

    Raises:
        ReparamError: the file is missing, unreadable, empty or corrupt, lacks a tensor the plan needs (named),
            or holds one of another shape (named), e.g. a different rank.
    """
    low = low_rank_handles(handles)
    path = Path(folder)
    path = path / WEIGHTS_FILE if path.is_dir() else path
    if not path.is_file():
        raise ReparamError(f"no {WEIGHTS_FILE} at {str(path)!r}; give the folder PEFT's save_pretrained wrote")
    try:  # an empty, truncated or corrupt file: the documented error, not SafetensorError
        with safe_open(str(path), framework="pt", device="cpu") as f:
            f.keys()
    except (SafetensorError, OSError) as e:
        raise ReparamError(f"adapter file {str(path)!r} is not a readable safetensors file ({e}); save the adapter again") from None
    uv: list[tuple[LowRankHandle, Tensor, Tensor, dict[str, Tensor]]] = []
    plain: list[tuple[Tensor, Tensor]] = []
    with safe_open(str(path), framework="pt", device="cpu") as f:
        keys = set(f.keys())

        def read(key: str, shape: tuple[int, ...]) -> Tensor:
            if key not in keys:
                raise ReparamError(f"adapter file {str(path)!r} has no tensor {key!r}; was it saved for this model and plan?")
            t: Tensor = f.get_tensor(key)
            if tuple(t.shape) != tuple(shape):
                raise ReparamError(
                    f"tensor {key!r} in {str(path)!r} has shape {tuple(t.shape)}, the plan needs {tuple(shape)}; "
                    "the adapter's rank or the model differs from the plan's"
                )
            return t

        used: set[str] = set()
        for h in low:
            ka, kb = _keys(h)
            sa, sb = _peft_shapes(h)
            extra = {name: read(key, shape) for name, key, shape in _extra_keys(h)}
            uv.append((h, read(kb, sb), read(ka, sa), extra))
            used |= {ka, kb} | {key for _, key, _ in _extra_keys(h)}
        params = dict(model.named_parameters())
        buffers = dict(model.named_buffers())
        for key in sorted(keys - used):
            name = key[len(PREFIX):] if key.startswith(PREFIX) else key
            target: Tensor | None = params.get(name)
            if target is None:
                target = buffers.get(name)
            if target is None:
                raise ReparamError(f"adapter file {str(path)!r} holds {key!r}, which is no parameter of the model")
            plain.append((target, read(key, tuple(target.shape))))
    with torch.no_grad():
        for h, u, v, extra in uv:
            h.set_uv("weight", u.reshape(h.u("weight").shape), v.reshape(h.v("weight").shape))
            for name, p in h.extra("weight"):
                if name in extra:
                    p.copy_(extra[name].reshape(p.shape).to(device=p.device, dtype=p.dtype))
        for target, value in plain:
            target.copy_(value.to(device=target.device, dtype=target.dtype))
