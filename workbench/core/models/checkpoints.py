"""Checkpoint files: reading ``.safetensors`` and ``torch.save`` files safely, loading them into a
model (building it from the architecture the file records), and saving one.

Checkpoints are read with ``torch.load(..., weights_only=True)``; a pickled ``nn.Module`` (or
anything else that needs code to run when unpickled) is refused unless the caller explicitly
passes ``trust_pickle=True``. Every user-facing failure is a
:class:`~workbench.core.models.source_errors.ModelSourceError` saying what to do.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import re
import warnings
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from workbench.core.atomic import atomic_path
from workbench.core.errors import first_line
from workbench.core.models.heads import current_num_classes, find_head, replace_head
from workbench.core.models.source_errors import CheckpointKeyMismatch, ModelSourceError
from workbench.core.models.torchvision_models import build_model

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch
    from torch import nn

__all__ = [
    "CHECKPOINT_SUFFIXES",
    "LoadResult",
    "TORCH_SUFFIXES",
    "load_checkpoint",
    "load_weights_into",
    "save_checkpoint",
    "warn_key_mismatch",
]

#: File suffixes read with ``torch.load`` (the rest of the supported set is ``.safetensors``).
TORCH_SUFFIXES: tuple[str, ...] = (".pt", ".pth", ".bin", ".ckpt")
#: Every checkpoint suffix :func:`load_checkpoint` understands.
CHECKPOINT_SUFFIXES: tuple[str, ...] = (".safetensors", *TORCH_SUFFIXES)

#: Keys under which training scripts commonly nest the state dict, in lookup order.
_NESTED_KEYS: tuple[str, ...] = ("state_dict", "model_state_dict", "model", "module", "net")
#: Checkpoint metadata keys that may name the architecture.
_ARCH_KEYS: tuple[str, ...] = ("arch", "model", "architecture", "model_name")
_MAX_LISTED_KEYS = 10


def warn_key_mismatch(path: Path, missing: list[str], unexpected: list[str]) -> None:
    """Warn that a checkpoint matched the model only in part, with counts and examples.

    Args:
        path: the checkpoint.
        missing: model keys the checkpoint lacks (they keep their initial values).
        unexpected: checkpoint keys the model lacks (ignored).
    """
    parts = []
    if missing:
        parts.append(f"{len(missing)} missing keys ({_list_keys(missing)}) keep their initial values")
    if unexpected:
        parts.append(f"{len(unexpected)} unexpected keys ({_list_keys(unexpected)}) were ignored")
    warnings.warn(
        CheckpointKeyMismatch(f"{path} matched the model in part: {'; '.join(parts)}; strict=True (CLI: --strict) refuses it"),
        stacklevel=3,
    )


@dataclass
class LoadResult:
    """Outcome of :func:`load_checkpoint`.

    Attributes:
        model: The model with the checkpoint loaded.
        missing_keys: Model keys the checkpoint did not provide (they keep their values).
        unexpected_keys: Checkpoint keys the model has no place for (ignored).
        source: The checkpoint file.
        format: ``"pt"`` (torch.load) or ``"safetensors"``.
        metadata: Non-tensor information stored with the weights (``arch``, ``epoch``...).
        arch: Architecture name used to build the model, when it was built here.
    """

    model: nn.Module
    missing_keys: list[str]
    unexpected_keys: list[str]
    source: Path
    format: Literal["pt", "safetensors"]
    metadata: dict[str, Any] = field(default_factory=dict)
    arch: str | None = None


@dataclass
class _RawCheckpoint:
    state: dict[str, torch.Tensor]
    metadata: dict[str, Any]
    format: Literal["pt", "safetensors"]
    module: nn.Module | None = None


def _list_keys(keys: list[str]) -> str:
    shown = ", ".join(keys[:_MAX_LISTED_KEYS])
    extra = len(keys) - _MAX_LISTED_KEYS
    return shown + (f" ... and {extra} more" if extra > 0 else "")


def _sniff_format(path: Path) -> Literal["pt", "safetensors"] | None:
    with path.open("rb") as f:
        head = f.read(9)
    if head[:2] == b"PK" or head[:1] == b"\x80":
        return "pt"
    if len(head) == 9 and head[8:9] == b"{":
        return "safetensors"
    return None


def _is_primitive(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _primitives(mapping: Mapping[Any, Any]) -> dict[str, Any]:
    return {str(k): v for k, v in mapping.items() if _is_primitive(v)}


def _refuse_pickle(path: Path, exc: BaseException) -> ModelSourceError:
    match = re.search(r"GLOBAL ([\w.]+)", str(exc))
    what = f" (it needs {match.group(1)})" if match else ""
    return ModelSourceError(
        f"refused to load {path}: it contains pickled Python objects{what}, and unpickling "
        "can run arbitrary code, so only tensors are loaded by default. If you trust the file "
        "(you made it), pass trust_pickle=True (CLI: --trust-pickle); better, re-save it as a "
        "state dict or .safetensors"
    )


def _read_checkpoint(path: Path, *, trust_pickle: bool, map_location: Any) -> _RawCheckpoint:
    """Read a checkpoint file into a flat state dict plus metadata."""
    if not path.exists():
        raise ModelSourceError(f"checkpoint file not found: {path}; check the path")
    if not path.is_file():
        raise ModelSourceError(f"checkpoint path {path} is not a file; pass the weights file")
    if path.stat().st_size == 0:
        raise ModelSourceError(f"checkpoint file {path} is empty (0 bytes); save or copy it again")
    suffix = path.suffix.lower()
    fmt: Literal["pt", "safetensors"] | None
    if suffix == ".safetensors":
        fmt = "safetensors"
    elif suffix in TORCH_SUFFIXES:  # the content decides: a safetensors file may be named .pt
        fmt = "safetensors" if _sniff_format(path) == "safetensors" else "pt"
    else:
        fmt = _sniff_format(path)
        if fmt is None:
            raise ModelSourceError(
                f"{path} is not a known checkpoint format; use one of "
                f"{', '.join(CHECKPOINT_SUFFIXES)}"
            )
    if fmt == "safetensors":
        return _read_safetensors(path, map_location)
    return _read_torch(path, trust_pickle=trust_pickle, map_location=map_location)


def _read_safetensors(path: Path, map_location: Any) -> _RawCheckpoint:
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file

    device = map_location if isinstance(map_location, (str, int)) else "cpu"
    if isinstance(map_location, torch.device):
        device = str(map_location)
    try:
        state = load_file(str(path), device=device)
        with safe_open(str(path), framework="pt") as f:
            raw_meta = f.metadata() or {}
    except Exception as exc:
        hint = ""
        with contextlib.suppress(OSError):
            if _sniff_format(path) == "pt":
                hint = " It looks like a torch.save file: rename it to .pt."
        raise ModelSourceError(
            f"{path} is not a readable safetensors file (corrupt or truncated?): "
            f"{first_line(exc)}.{hint}"
        ) from exc
    metadata: dict[str, Any] = {}
    for key, value in raw_meta.items():
        if key == "num_classes" and value.isdigit():
            metadata[key] = int(value)
        else:
            metadata[key] = value
    return _RawCheckpoint(state=dict(state), metadata=metadata, format="safetensors")


def _read_torch(path: Path, *, trust_pickle: bool, map_location: Any) -> _RawCheckpoint:
    import torch

    try:
        obj = torch.load(path, map_location=map_location, weights_only=not trust_pickle)
    except pickle.UnpicklingError as exc:
        if not trust_pickle and "Weights only load failed" in str(exc):
            raise _refuse_pickle(path, exc) from exc
        raise ModelSourceError(
            f"{path} is not a readable PyTorch checkpoint (corrupt or wrong format?): "
            f"{first_line(exc)}"
        ) from exc
    except (RuntimeError, EOFError, KeyError, ValueError, zipfile.BadZipFile, OSError) as exc:
        raise ModelSourceError(
            f"{path} is not a readable PyTorch checkpoint (corrupt, truncated or not a "
            f"torch.save file?): {type(exc).__name__}: {first_line(exc)}"
        ) from exc
    except Exception as exc:  # trusted pickles can raise anything while unpickling
        raise ModelSourceError(
            f"{path} could not be unpickled ({type(exc).__name__}: {first_line(exc)}); "
            "load it in the environment that created it and re-save its state_dict()"
        ) from exc
    return _extract(obj, path)


def _extract(obj: Any, path: Path) -> _RawCheckpoint:
    """Find the state dict (and metadata) inside whatever torch.load returned."""
    import torch
    from torch import nn

    metadata: dict[str, Any] = {}
    module: nn.Module | None = None
    current = obj
    for _ in range(4):  # nesting depth we are willing to follow
        if isinstance(current, nn.Module):
            module = current
            metadata.setdefault("arch", type(current).__name__)
            current = current.state_dict()
            break
        if not isinstance(current, Mapping):
            break
        for key, value in current.items():
            if _is_primitive(value):
                metadata.setdefault(str(key), value)
        for extra in ("hyper_parameters", "hparams", "metadata", "config", "args"):
            if isinstance(current.get(extra), Mapping):
                for k, v in _primitives(current[extra]).items():
                    metadata.setdefault(k, v)
        nested = next(
            (current[k] for k in _NESTED_KEYS if isinstance(current.get(k), (Mapping, nn.Module))),
            None,
        )
        if nested is None:
            break
        current = nested
    if not isinstance(current, Mapping):
        raise ModelSourceError(
            f"{path} holds a {type(obj).__name__}, not a state dict; save model.state_dict() "
            "(or a dict with a 'state_dict' entry)"
        )
    state = {str(k): v for k, v in current.items() if isinstance(v, torch.Tensor)}
    if not state:
        keys = ", ".join(map(str, list(current.keys())[:_MAX_LISTED_KEYS]))
        raise ModelSourceError(
            f"no tensors found in {path} (top-level keys: {keys or 'none'}); expected a state "
            f"dict, or one nested under {', '.join(repr(k) for k in _NESTED_KEYS)}"
        )
    return _RawCheckpoint(state=state, metadata=metadata, format="pt", module=module)


def _normalize_keys(state: dict[str, torch.Tensor], model: nn.Module) -> dict[str, torch.Tensor]:
    """Strip wrapper prefixes: ``_orig_mod.`` (torch.compile), ``module.`` (DDP) and
    Lightning's ``model.`` (only when every key has it and the model's own keys do not)."""
    state = {k.replace("_orig_mod.", ""): v for k, v in state.items()}
    model_keys = list(model.state_dict().keys())
    changed = True
    while changed and state:
        changed = False
        for prefix in ("module.", "model."):
            if all(k.startswith(prefix) for k in state) and not (
                model_keys and all(k.startswith(prefix) for k in model_keys)
            ):
                state = {k[len(prefix) :]: v for k, v in state.items()}
                changed = True
    return state


def _arch_from_metadata(metadata: Mapping[str, Any]) -> str | None:
    for key in _ARCH_KEYS:
        value = metadata.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _head_classes_in_state(model: nn.Module, state: Mapping[str, torch.Tensor]) -> int | None:
    heads = find_head(model)
    if not heads:
        return None
    tensor = state.get(f"{heads[0]}.weight")
    return int(tensor.shape[0]) if tensor is not None and tensor.dim() >= 1 else None


def _shape_mismatches(
    model: nn.Module, state: Mapping[str, torch.Tensor]
) -> list[tuple[str, tuple[int, ...], tuple[int, ...]]]:
    out = []
    for key, own in model.state_dict().items():  # model order: weight before bias
        tensor = state.get(key)
        if tensor is not None and tuple(own.shape) != tuple(tensor.shape):
            out.append((key, tuple(tensor.shape), tuple(own.shape)))
    return out


def _load_state(
    model: nn.Module, state: dict[str, torch.Tensor], path: Path, *, strict: bool
) -> tuple[list[str], list[str]]:
    mismatches = _shape_mismatches(model, state)
    if mismatches:
        key, theirs, ours = mismatches[0]
        shown = "; ".join(
            f"{k!r}: checkpoint {list(t)} vs model {list(o)}" for k, t, o in mismatches[:3]
        )
        more = f" (and {len(mismatches) - 3} more)" if len(mismatches) > 3 else ""
        hint = ""
        heads = find_head(model)
        head_only = bool(heads) and all(k.startswith(heads[0] + ".") for k, _, _ in mismatches)
        if head_only and theirs[1:] == ours[1:]:
            hint = (
                f"; the checkpoint's head has {theirs[0]} classes and the model's has "
                f"{ours[0]}: give the model {theirs[0]} classes before loading (e.g. "
                f"replace_head(model, {theirs[0]})), then replace_head for a new task"
            )
        else:
            hint = "; is this checkpoint for a different architecture?"
        raise ModelSourceError(f"{path}: shape mismatch for {shown}{more}{hint}")
    result = model.load_state_dict(state, strict=False)
    missing, unexpected = list(result.missing_keys), list(result.unexpected_keys)
    if state and len(unexpected) == len(state):
        raise ModelSourceError(
            f"{path} does not fit {type(model).__name__}: none of its {len(state)} keys is a key of the "
            f"model ({len(missing)} missing, {len(unexpected)} unexpected: {_list_keys(unexpected)}); "
            "is it for a different architecture? Pass the model it was saved from"
        )
    if strict and (missing or unexpected):
        parts = []
        if missing:
            parts.append(f"missing keys ({len(missing)}): {_list_keys(missing)}")
        if unexpected:
            parts.append(f"unexpected keys ({len(unexpected)}): {_list_keys(unexpected)}")
        raise ModelSourceError(
            f"{path} does not match the model exactly: {'; '.join(parts)}; "
            "pass strict=False to load the matching part"
        )
    if missing or unexpected:
        warn_key_mismatch(path, missing, unexpected)
    return missing, unexpected


def load_checkpoint(
    path: str | os.PathLike[str],
    model: nn.Module | None = None,
    *,
    arch: str | None = None,
    num_classes: int | None = None,
    trust_pickle: bool = False,
    map_location: Any = "cpu",
    strict: bool = False,
) -> LoadResult:
    """Load weights from a checkpoint file, safely by default.

    Supported: ``.safetensors``, and ``.pt/.pth/.bin/.ckpt`` read with
    ``torch.load(weights_only=True)``: a raw state dict or one nested under ``state_dict``,
    ``model_state_dict``, ``model``, ``module`` or ``net``. ``_orig_mod.`` (torch.compile),
    ``module.`` (DDP) and Lightning's ``model.`` prefixes are stripped.

    Args:
        path: The checkpoint file.
        model: Model to load into. If ``None``, ``arch`` (or the ``arch``/``model`` entry
            stored in the checkpoint) is built with random weights; its head is sized from
            the checkpoint unless ``num_classes`` is given.
        arch: torchvision architecture to build when ``model`` is ``None``.
        num_classes: Expected number of classes when building; a checkpoint head of another
            size is an error.
        trust_pickle: Allow arbitrary pickled objects (e.g. a whole ``nn.Module``). This runs
            code from the file: only for files you trust.
        map_location: Passed to ``torch.load`` (default ``"cpu"``: GPU checkpoints load on CPU).
        strict: Raise if any key is missing or unexpected.

    Returns:
        A :class:`LoadResult` with the model and the keys that did not match.

    Raises:
        ModelSourceError: Missing/empty/corrupt file, refused pickle, no state dict inside,
            no architecture known, head size or shape mismatch, or strict key mismatch.
    """
    path = Path(path)
    raw = _read_checkpoint(path, trust_pickle=trust_pickle, map_location=map_location)
    used_arch: str | None = None
    if model is None:
        if raw.module is not None and arch is None:
            # A trusted full-module pickle brings its own architecture.
            model = raw.module
            if num_classes is not None:
                have = current_num_classes(model)
                if have is not None and have != num_classes:
                    raise ModelSourceError(
                        f"{path} holds a model with {have} classes but num_classes="
                        f"{num_classes} was requested; omit num_classes, or call "
                        "replace_head(model, n) after loading"
                    )
            return LoadResult(model, [], [], path, raw.format, raw.metadata, None)
        used_arch = arch or _arch_from_metadata(raw.metadata)
        if used_arch is None:
            raise ModelSourceError(
                f"{path} does not say which architecture it is for; pass arch=... "
                "(e.g. 'resnet18') or a model to load into"
            )
        try:
            model = build_model(used_arch, weights=None)
        except ModelSourceError as exc:
            raise ModelSourceError(
                f"{path}: cannot build architecture {used_arch!r}: {exc}"
            ) from exc
        state = _normalize_keys(raw.state, model)
        ckpt_classes = _head_classes_in_state(model, state)
        if num_classes is not None and ckpt_classes is not None and ckpt_classes != num_classes:
            raise ModelSourceError(
                f"{path} has a {ckpt_classes}-class head but num_classes={num_classes} was "
                f"requested; load it with num_classes={ckpt_classes} (or omit num_classes), "
                f"then call replace_head(model, {num_classes}) to train a new head"
            )
        target = num_classes if num_classes is not None else ckpt_classes
        if target is not None:
            replace_head(model, target)
    else:
        state = _normalize_keys(raw.state, model)
    missing, unexpected = _load_state(model, state, path, strict=strict)
    return LoadResult(model, missing, unexpected, path, raw.format, raw.metadata, used_arch)


def _state_for_safetensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """CPU, contiguous tensors with no two sharing storage (safetensors refuses sharing)."""
    import torch

    out: dict[str, torch.Tensor] = {}
    seen: set[tuple[str, int]] = set()
    for key, tensor in model.state_dict().items():
        t = tensor.detach().cpu()
        ident = (str(t.device), t.untyped_storage().data_ptr())
        if ident in seen or not t.is_contiguous():
            t = t.clone(memory_format=torch.contiguous_format)
        elif t.numel() > 0:
            seen.add(ident)
        out[key] = t.contiguous()
    return out


def save_checkpoint(
    model: nn.Module,
    path: str | os.PathLike[str],
    *,
    arch: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Path:
    """Save the model's weights atomically as ``.safetensors`` or ``.pt``.

    ``.safetensors`` stores ``arch``, ``num_classes`` and ``metadata`` (as strings) in the
    header; ``.pt/.pth`` stores ``{"state_dict": ..., "arch": ..., "num_classes": ...,
    "metadata": ...}``, which loads with ``weights_only=True``. The file is written to a
    temporary name in the same directory and renamed, so a crash never leaves half a file.

    Args:
        model: Model whose ``state_dict()`` is saved.
        path: Destination; the suffix chooses the format.
        arch: Architecture name, so :func:`load_checkpoint` can rebuild the model.
        metadata: Extra JSON-able information (epoch, plan name...).

    Returns:
        The written path.

    Raises:
        ModelSourceError: Unsupported suffix or the file could not be written.
    """
    import torch

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".safetensors", ".pt", ".pth", ".ckpt", ".bin"):
        raise ModelSourceError(
            f"cannot save {path}: use a .safetensors (recommended) or .pt file name"
        )
    user_meta = dict(metadata or {})
    num_classes = current_num_classes(model)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp_name:
            if suffix == ".safetensors":
                from safetensors.torch import save_file

                header: dict[str, str] = {"format": "pt"}
                for key, value in user_meta.items():
                    header[str(key)] = (
                        value if isinstance(value, str) else json.dumps(value, default=str)
                    )
                if arch is not None:
                    header["arch"] = arch
                if num_classes is not None:
                    header["num_classes"] = str(num_classes)
                save_file(_state_for_safetensors(model), str(tmp_name), metadata=header)
            else:
                payload: dict[str, Any] = {
                    "state_dict": {k: v.detach() for k, v in model.state_dict().items()},
                    "arch": arch,
                    "num_classes": num_classes,
                    "metadata": json.loads(json.dumps(user_meta, default=str)),
                }
                torch.save(payload, tmp_name)
    except ModelSourceError:
        raise
    except OSError as exc:
        raise ModelSourceError(f"cannot write {path}: {exc}; check the folder and permissions") from exc
    except Exception as exc:
        raise ModelSourceError(f"could not save {path}: {first_line(exc)}") from exc
    return path


def load_weights_into(model: nn.Module, checkpoint: str | os.PathLike[str], *, trust_pickle: bool = False) -> nn.Module:
    """Load a checkpoint's weights into a built model, fitting its head to the checkpoint first.

    Args:
        model: The model, built without weights.
        checkpoint: Path of the checkpoint (safetensors, or ``torch.save`` output).
        trust_pickle: Allow a pickled checkpoint that needs code to load.

    Returns:
        The same model, with the checkpoint's weights.

    Raises:
        ModelSourceError: The file cannot be read, or no key of it fits the model.
    """
    raw = _read_checkpoint(Path(checkpoint), trust_pickle=trust_pickle, map_location="cpu")
    state = _normalize_keys(raw.state, model)
    ckpt_classes = _head_classes_in_state(model, state)
    if ckpt_classes is not None:
        replace_head(model, ckpt_classes)
    _load_state(model, state, Path(checkpoint), strict=False)
    return model
