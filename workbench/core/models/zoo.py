"""Model sources: the torchvision registry, checkpoint files and safetensors.

Everything here is Qt-free and safe by default:

* pretrained weights are only downloaded when ``allow_download`` is true, with a
  timeout on the connection, and a failed download names the URL and the cache file where the
  user can place the weights by hand;
* checkpoints are read with ``torch.load(..., weights_only=True)``; a pickled
  ``nn.Module`` (or anything else that needs code to run when unpickled) is refused
  unless the caller explicitly passes ``trust_pickle=True``;
* every user-facing failure is a :class:`ModelSourceError` with a message saying what
  went wrong and what to do about it.

Typical use::

    from workbench.core.models.zoo import build_model, replace_head, load_checkpoint

    model = build_model("resnet18", "IMAGENET1K_V1", allow_download=False)
    replace_head(model, 10)                       # -> ["fc"]
    result = load_checkpoint("finetuned.safetensors", arch="resnet18")
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import re
import urllib.error
import urllib.request
import warnings
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.client import HTTPException
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

import torch
import torchvision
from torch import nn

from workbench.core.atomic import atomic_path
from workbench.core.errors import WorkbenchError, first_line
from workbench.core.models.weights_cache import WeightsCacheError, safe_torchvision_loading
from workbench.core.suggest import close_matches
from workbench.core.version import __version__

__all__ = [
    "CHECKPOINT_SUFFIXES",
    "CheckpointKeyMismatch",
    "DOWNLOAD_TIMEOUT_S",
    "LoadResult",
    "ModelInfo",
    "ModelSourceError",
    "build_model",
    "crop_size",
    "current_num_classes",
    "find_head",
    "list_models",
    "load_checkpoint",
    "load_weights_into",
    "model_input_size",
    "replace_head",
    "save_checkpoint",
    "weights_cache_path",
    "weights_cached",
    "weights_member",
]

#: Seconds a stalled weights download may stay silent before it is abandoned.
DOWNLOAD_TIMEOUT_S: float = 15.0

#: File suffixes read with ``torch.load`` (the rest of the supported set is ``.safetensors``).
TORCH_SUFFIXES: tuple[str, ...] = (".pt", ".pth", ".bin", ".ckpt")
#: Every checkpoint suffix :func:`load_checkpoint` understands.
CHECKPOINT_SUFFIXES: tuple[str, ...] = (".safetensors", *TORCH_SUFFIXES)

#: Keys under which training scripts commonly nest the state dict, in lookup order.
_NESTED_KEYS: tuple[str, ...] = ("state_dict", "model_state_dict", "model", "module", "net")
#: Checkpoint metadata keys that may name the architecture.
_ARCH_KEYS: tuple[str, ...] = ("arch", "model", "architecture", "model_name")
#: Input sizes for families whose weights do not say (everything else is 224).
_FAMILY_INPUT_SIZE: dict[str, int] = {"inception_v3": 299}
_DEFAULT_INPUT_SIZE = 224
_MAX_LISTED_KEYS = 10


class ModelSourceError(WorkbenchError):
    """A model, its weights or a checkpoint could not be provided.

    The message is meant for the user as-is (CLI output, GUI dialog): it says what went
    wrong and what to do about it.
    """


class CheckpointKeyMismatch(ModelSourceError, UserWarning):  # noqa: N818 - a warning, named for what it reports
    """A checkpoint loaded with missing or unexpected keys (a warning; an error when strict).

    Issued with :func:`warnings.warn` by a non-strict load; the CLI prints it as one line,
    and ``--strict`` turns it into an error (``warnings.simplefilter("error", ...)``).
    """


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


# --------------------------------------------------------------------------------------
# torchvision registry
# --------------------------------------------------------------------------------------


@dataclass
class ModelInfo:
    """What the GUI and CLI show about one torchvision classification model.

    Attributes:
        name: Registry name, e.g. ``"resnet18"``.
        weights: Names of the pretrained weights (enum members), e.g. ``["IMAGENET1K_V1"]``.
        default_weights: The member ``DEFAULT`` resolves to, or ``None``.
        num_params: Parameter count from the weights metadata, or ``None`` if unknown.
        cached: For each entry of ``weights``, whether its file is in the torch hub cache.
        input_size: Square input side the model was trained at (e.g. 224, 299).
        num_classes: Number of classes of the pretrained head (1000 for ImageNet).
    """

    name: str
    weights: list[str]
    default_weights: str | None
    num_params: int | None
    cached: dict[str, bool]
    input_size: int
    num_classes: int = 1000


def _classification_names() -> list[str]:
    return sorted(torchvision.models.list_models(module=torchvision.models))


def _check_model_name(name: str) -> str:
    """Return the registry spelling of ``name`` or raise with close matches."""
    names = _classification_names()
    if name in names:
        return name
    lowered = name.strip().lower()
    if lowered in names:
        return lowered
    close = close_matches(lowered, names, n=3, cutoff=0.5)
    hint = (
        f"did you mean {', '.join(close)}?" if close else "see list_models() for the valid names."
    )
    raise ModelSourceError(f"unknown torchvision classification model {name!r}; {hint}")


def _weights_enum(name: str) -> Any:
    return torchvision.models.get_model_weights(name)


def _weights_names(enum: Any) -> list[str]:
    # Iterating an Enum skips aliases such as DEFAULT.
    return [member.name for member in enum]


def _resolve_weights(name: str, weights: str | None) -> Any | None:
    """Map a weights name (or ``"DEFAULT"``, or ``"ResNet18_Weights.X"``) to its enum member."""
    if weights is None:
        return None
    enum = _weights_enum(name)
    key = str(weights).strip()
    key = key.split(".", 1)[1] if key.startswith(enum.__name__ + ".") else key
    members = dict(enum.__members__)  # includes the DEFAULT alias
    if key in members:
        return members[key]
    by_upper = {k.upper(): v for k, v in members.items()}
    if key.upper() in by_upper:
        return by_upper[key.upper()]
    valid = ", ".join([*_weights_names(enum), "DEFAULT"])
    raise ModelSourceError(
        f"unknown weights {weights!r} for {name}; valid weights: {valid} "
        "(or None for a randomly initialised model)"
    )


def _default_member(enum: Any) -> Any | None:
    return enum.__members__.get("DEFAULT")


def weights_member(name: str | None, weights: str | None) -> Any | None:
    """The torchvision weights enum member for a model name and weights name, if there is one.

    Args:
        name: torchvision model name, e.g. ``"resnet18"``.
        weights: weights name, any case, e.g. ``"imagenet1k_v1"``, ``"DEFAULT"`` or
            ``"ResNet18_Weights.IMAGENET1K_V1"``.

    Returns:
        The member, or None when either is missing or not a torchvision registry entry.
    """
    if not name or not weights:
        return None
    try:
        return _resolve_weights(name, weights)
    except (ModelSourceError, ValueError, KeyError):
        return None


def crop_size(member: Any | None) -> int | None:
    """Crop size of a weights member's preset transform, without building models.

    Args:
        member: a torchvision weights enum member, or None.

    Returns:
        The square side, or None when ``member`` is None or its preset does not say.
    """
    if member is None:
        return None
    preset = member.transforms
    keywords = getattr(preset, "keywords", None) or {}
    size = keywords.get("crop_size")
    if size is None:
        try:
            size = getattr(preset(), "crop_size", None)
        except Exception:  # a preset we do not know how to instantiate
            return None
    if isinstance(size, (list, tuple)):
        size = size[0] if size else None
    return int(size) if size is not None else None


def weights_cache_path(name: str, weights: str) -> Path:
    """Where torch hub keeps (or would keep) the file of a weights entry.

    Args:
        name: torchvision model name, e.g. ``"resnet18"``.
        weights: Weights name, e.g. ``"IMAGENET1K_V1"`` or ``"DEFAULT"``.

    Returns:
        ``torch.hub.get_dir()/checkpoints/<file name of the weights URL>``.

    Raises:
        ModelSourceError: Unknown model or weights name.
    """
    member = _resolve_weights(_check_model_name(name), weights)
    assert member is not None
    return _member_cache_path(member)


def _member_cache_path(member: Any) -> Path:
    filename = os.path.basename(urlparse(member.url).path)
    return Path(torch.hub.get_dir()) / "checkpoints" / filename


def weights_cached(name: str, weights: str) -> bool:
    """Whether a weights file is already in the torch hub cache (no network needed).

    Args:
        name: torchvision model name.
        weights: Weights name (``"DEFAULT"`` is resolved).

    Returns:
        True if the file exists in the cache.

    Raises:
        ModelSourceError: Unknown model or weights name.
    """
    return weights_cache_path(name, weights).is_file()


def list_models() -> list[ModelInfo]:
    """List torchvision classification models with their weights and cache state.

    Fast (no model is instantiated, nothing is downloaded).

    Returns:
        One :class:`ModelInfo` per model, sorted by name.
    """
    cache_dir = Path(torch.hub.get_dir()) / "checkpoints"
    try:
        cached_files = {p.name for p in cache_dir.iterdir()} if cache_dir.is_dir() else set()
    except OSError:
        cached_files = set()
    infos: list[ModelInfo] = []
    for name in _classification_names():
        enum = _weights_enum(name)
        members = list(enum)
        default = _default_member(enum)
        reference = default if default is not None else (members[0] if members else None)
        num_params = None
        num_classes = 1000
        input_size = _FAMILY_INPUT_SIZE.get(name, _DEFAULT_INPUT_SIZE)
        if reference is not None:
            meta = reference.meta
            num_params = meta.get("num_params")
            if meta.get("categories"):
                num_classes = len(meta["categories"])
            input_size = crop_size(reference) or input_size
        infos.append(
            ModelInfo(
                name=name,
                weights=[m.name for m in members],
                default_weights=default.name if default is not None else None,
                num_params=int(num_params) if num_params is not None else None,
                cached={
                    m.name: os.path.basename(urlparse(m.url).path) in cached_files for m in members
                },
                input_size=input_size,
                num_classes=num_classes,
            )
        )
    return infos


def model_input_size(name: str) -> int:
    """Square input side a torchvision model expects (from its default weights' preset).

    Args:
        name: torchvision model name.

    Returns:
        e.g. 224 for resnet18, 299 for inception_v3.

    Raises:
        ModelSourceError: Unknown model name.
    """
    name = _check_model_name(name)
    default = _default_member(_weights_enum(name))
    size = crop_size(default)
    return size or _FAMILY_INPUT_SIZE.get(name, _DEFAULT_INPUT_SIZE)


def _download_weights(member: Any, dest: Path, *, progress: bool, timeout: float) -> None:
    """Download a weights file into the torch hub cache, as ``torch.hub`` names it.

    ``torch.hub.download_url_to_file`` has no timeout, and a process-wide
    ``socket.setdefaulttimeout`` would also change every other thread's sockets (the desktop
    app downloads on a worker thread). So this reads the URL with its own timeout, into a
    temporary file next to ``dest``, checks the SHA-256 prefix in the file name, and moves
    the file into place only when it is complete.
    """
    url = member.url
    dest.parent.mkdir(parents=True, exist_ok=True)
    match = torch.hub.HASH_REGEX.search(dest.name)
    hash_prefix = match.group(1) if match else None
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.partial")
    try:
        request = urllib.request.Request(url, headers={"User-Agent": f"freeze-workbench/{__version__}"})
        with urllib.request.urlopen(request, timeout=timeout) as response, open(tmp, "wb") as out:
            total = int(response.headers.get("Content-Length") or 0) or None
            digest = hashlib.sha256()
            bar = None
            if progress:
                from tqdm import tqdm

                bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=dest.name)
            try:
                while chunk := response.read(1 << 20):
                    out.write(chunk)
                    digest.update(chunk)
                    if bar is not None:
                        bar.update(len(chunk))
            finally:
                if bar is not None:
                    bar.close()
        if hash_prefix and not digest.hexdigest().startswith(hash_prefix):
            raise ModelSourceError(
                f"downloaded weights from {url} failed the integrity check (SHA-256 "
                f"{digest.hexdigest()[:len(hash_prefix)]}…, expected {hash_prefix}…); retry, or place a "
                f"good copy of the file at {dest}"
            )
        os.replace(tmp, dest)
    except (urllib.error.URLError, OSError, HTTPException) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise ModelSourceError(
            f"could not download weights from {url} ({type(exc).__name__}: {reason}); "
            f"check the network, or download the file elsewhere and place it at {dest}, "
            "or pass weights=None for a randomly initialised model"
        ) from exc
    finally:
        tmp.unlink(missing_ok=True)


def build_model(
    name: str,
    weights: str | None = None,
    num_classes: int | None = None,
    *,
    allow_download: bool = True,
    progress: bool = False,
    download_timeout: float = DOWNLOAD_TIMEOUT_S,
) -> nn.Module:
    """Build a torchvision classification model, optionally pretrained.

    Args:
        name: torchvision model name, e.g. ``"resnet18"`` (close misspellings are suggested).
        weights: Weights name (``"IMAGENET1K_V1"``, ``"DEFAULT"``) or ``None`` for random init.
        num_classes: Output classes. With ``weights=None`` the model is built with this many;
            with pretrained weights the head is replaced (see :func:`replace_head`).
        allow_download: If false, weights missing from the torch hub cache are an error
            instead of a download.
        progress: Show a download progress bar on stderr.
        download_timeout: Socket timeout in seconds for the download.

    Returns:
        The model, on CPU, in train mode.

    Raises:
        ModelSourceError: Unknown model or weights; weights not cached and downloads not
            allowed; download failed; cached file unreadable.
    """
    name = _check_model_name(name)
    member = _resolve_weights(name, weights)
    if num_classes is not None and (not isinstance(num_classes, int) or num_classes < 1):
        raise ModelSourceError(f"num_classes must be a positive integer, got {num_classes!r}")
    if member is None:
        kwargs: dict[str, Any] = {}
        if num_classes is not None:
            kwargs["num_classes"] = num_classes
        try:
            return torchvision.models.get_model(name, weights=None, **kwargs)
        except (TypeError, ValueError) as exc:
            raise ModelSourceError(f"could not build {name}: {exc}") from exc

    path = _member_cache_path(member)
    if not path.is_file():
        if not allow_download:
            raise ModelSourceError(
                f"weights {member.name} of {name} not in cache at {path}; "
                "run once online to download it (its SHA-256 is checked), or pass weights=None"
            )
        _download_weights(member, path, progress=progress, timeout=download_timeout)
    try:  # from the cache file (downloaded above when missing), never unpickling code
        with safe_torchvision_loading():
            model = torchvision.models.get_model(name, weights=member, progress=progress)
    except WeightsCacheError as exc:
        raise ModelSourceError(str(exc)) from exc
    except (urllib.error.URLError, OSError, HTTPException) as exc:
        raise ModelSourceError(
            f"could not get weights {member.name} of {name} from {member.url}: {exc}; "
            f"place the file at {path} or pass weights=None"
        ) from exc
    except Exception as exc:  # corrupt / truncated cache file, incompatible state dict
        raise ModelSourceError(
            f"cached weights file {path} for {name}/{member.name} could not be loaded "
            f"({type(exc).__name__}: {first_line(exc)}); delete it and build again to "
            "re-download it"
        ) from exc
    if num_classes is not None:
        replace_head(model, num_classes)
    return model


# --------------------------------------------------------------------------------------
# classification heads
# --------------------------------------------------------------------------------------


def _get(model: nn.Module, path: str) -> nn.Module | None:
    try:
        return model.get_submodule(path)
    except AttributeError:
        return None


def _last_linear_in(module: nn.Module, prefix: str) -> str | None:
    found = None
    for sub_name, sub in module.named_modules(prefix=prefix):
        if isinstance(sub, nn.Linear):
            found = sub_name
    return found


def _head_out(module: nn.Module) -> int:
    if isinstance(module, nn.Linear):
        return module.out_features
    if isinstance(module, nn.Conv2d):
        return module.out_channels
    raise TypeError(type(module).__name__)


def find_head(model: nn.Module) -> list[str]:
    """Find the classification head(s) of a model by dotted path.

    The main head comes first; auxiliary heads (inception ``AuxLogits.fc``, googlenet
    ``aux1.fc2``/``aux2.fc2``) follow.

    Args:
        model: A torchvision-style classifier.

    Returns:
        Dotted module paths; empty if no head was recognised.
    """
    tv = torchvision.models
    if isinstance(model, tv.SqueezeNet):
        return ["classifier.1"] if isinstance(_get(model, "classifier.1"), nn.Conv2d) else []
    paths: list[str] = []
    main: str | None = None
    if isinstance(model, tv.VisionTransformer) and isinstance(_get(model, "heads.head"), nn.Linear):
        main = "heads.head"
    else:
        for attr in ("fc", "head", "classifier", "heads"):
            sub = _get(model, attr)
            if isinstance(sub, nn.Linear):
                main = attr
                break
            if isinstance(sub, nn.Sequential):
                main = _last_linear_in(sub, attr)
                if main is not None:
                    break
    if main is None:
        # Generic fallback: the last Linear in module order, which for a classifier
        # is the one producing the class logits.
        main = _last_linear_in(model, "")
    if main is None:
        return []
    paths.append(main)
    for aux in ("AuxLogits.fc", "aux1.fc2", "aux2.fc2"):
        if isinstance(_get(model, aux), nn.Linear):
            paths.append(aux)
    return paths


def current_num_classes(model: nn.Module) -> int | None:
    """Number of outputs of the model's classification head, or ``None`` if none found.

    Args:
        model: A classifier.

    Returns:
        ``out_features`` (or ``out_channels`` for squeezenet's conv head).
    """
    heads = find_head(model)
    return _head_out(model.get_submodule(heads[0])) if heads else None


def _new_head(old: nn.Module, num_classes: int) -> nn.Module:
    if isinstance(old, nn.Linear):
        return nn.Linear(
            old.in_features,
            num_classes,
            bias=old.bias is not None,
            device=old.weight.device,
            dtype=old.weight.dtype,
        )
    assert isinstance(old, nn.Conv2d)
    padding = old.padding if isinstance(old.padding, str) else (old.padding[0], old.padding[1])
    return nn.Conv2d(
        old.in_channels,
        num_classes,
        kernel_size=(old.kernel_size[0], old.kernel_size[1]),
        stride=(old.stride[0], old.stride[1]),
        padding=padding,
        bias=old.bias is not None,
        device=old.weight.device,
        dtype=old.weight.dtype,
    )


def _set_submodule(model: nn.Module, path: str, module: nn.Module) -> None:
    parent_path, _, leaf = path.rpartition(".")
    parent = model.get_submodule(parent_path) if parent_path else model
    setattr(parent, leaf, module)


def replace_head(model: nn.Module, num_classes: int) -> list[str]:
    """Replace the classification head(s) with fresh ones for ``num_classes`` classes.

    Handles torchvision families: ``fc`` (resnet, resnext, regnet, shufflenet, googlenet,
    inception incl. ``AuxLogits.fc``), the last Linear of a ``classifier`` Sequential (vgg,
    alexnet, mobilenet, efficientnet, mnasnet, convnext, maxvit), squeezenet's
    ``classifier.1`` conv, vit ``heads.head``, swin ``head``, densenet ``classifier``; else
    the last ``nn.Linear`` of the model. New modules are created on the old head's device
    and dtype and are trainable.

    Args:
        model: The model, modified in place.
        num_classes: New number of classes.

    Returns:
        Dotted paths of the new modules; empty if the head already had ``num_classes``
        outputs (nothing changed).

    Raises:
        ModelSourceError: ``num_classes`` invalid, or no head could be found.
    """
    if not isinstance(num_classes, int) or num_classes < 1:
        raise ModelSourceError(f"num_classes must be a positive integer, got {num_classes!r}")
    heads = find_head(model)
    if not heads:
        raise ModelSourceError(
            f"no classification head (a final nn.Linear, or squeezenet's conv) found in "
            f"{type(model).__name__}; replace the head by hand before training"
        )
    if _head_out(model.get_submodule(heads[0])) == num_classes:
        return []
    replaced: list[str] = []
    for path in heads:
        old = model.get_submodule(path)
        _set_submodule(model, path, _new_head(old, num_classes))
        replaced.append(path)
    if isinstance(getattr(model, "num_classes", None), int):
        # squeezenet uses it in forward; vit keeps it too
        setattr(model, "num_classes", num_classes)  # noqa: B010
    for owner in (model, getattr(model, "config", None)):  # transformers: its loss reads num_labels
        if isinstance(getattr(owner, "num_labels", None), int):
            setattr(owner, "num_labels", num_classes)  # noqa: B010
    return replaced


# --------------------------------------------------------------------------------------
# checkpoints
# --------------------------------------------------------------------------------------


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
