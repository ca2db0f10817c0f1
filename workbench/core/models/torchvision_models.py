"""The ``torchvision`` model source: the registry, its pretrained weights and building a model by name.

Pretrained weights are only downloaded when ``allow_download`` is true, with a timeout on the
connection, and a failed download names the URL and the cache file where the user can place
the weights by hand. Every user-facing failure is a
:class:`~workbench.core.models.source_errors.ModelSourceError` saying what to do.
"""

from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.client import HTTPException
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from workbench.core.errors import first_line
from workbench.core.models.heads import replace_head
from workbench.core.models.source_errors import ModelSourceError
from workbench.core.models.weights_cache import WeightsCacheError, safe_torchvision_loading
from workbench.core.suggest import close_matches
from workbench.core.version import __version__

if TYPE_CHECKING:  # pragma: no cover - typing only
    from torch import nn

__all__ = [
    "DOWNLOAD_TIMEOUT_S",
    "ModelInfo",
    "build_model",
    "check_model_name",
    "classification_names",
    "crop_size",
    "list_models",
    "model_input_size",
    "weights_cache_path",
    "weights_cached",
    "weights_member",
]

#: Seconds a stalled weights download may stay silent before it is abandoned.
DOWNLOAD_TIMEOUT_S: float = 15.0

#: Input sizes for families whose weights do not say (everything else is 224).
_FAMILY_INPUT_SIZE: dict[str, int] = {"inception_v3": 299}
_DEFAULT_INPUT_SIZE = 224


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


def classification_names() -> list[str]:
    """The torchvision classification models' registry names, sorted.

    Returns:
        Names such as ``"resnet18"``.
    """
    import torchvision

    return sorted(torchvision.models.list_models(module=torchvision.models))


def check_model_name(name: str) -> str:
    """The registry spelling of a torchvision model name.

    Args:
        name: a model name, in any case.

    Returns:
        The registry name.

    Raises:
        ModelSourceError: no such model (the message lists close names).
    """
    names = classification_names()
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
    import torchvision

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
    member = _resolve_weights(check_model_name(name), weights)
    assert member is not None
    return _member_cache_path(member)


def _member_cache_path(member: Any) -> Path:
    import torch

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
    import torch

    cache_dir = Path(torch.hub.get_dir()) / "checkpoints"
    try:
        cached_files = {p.name for p in cache_dir.iterdir()} if cache_dir.is_dir() else set()
    except OSError:
        cached_files = set()
    infos: list[ModelInfo] = []
    for name in classification_names():
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
    name = check_model_name(name)
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
    import torch

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
    import torchvision

    name = check_model_name(name)
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
