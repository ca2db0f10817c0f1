"""The ``timm`` model source: ``timm:NAME`` (optionally ``NAME.TAG`` for a weights tag).

Pretrained weights are read only from the local caches (the Hugging Face hub cache or the
torch hub cache) unless downloads are allowed; a cached file is read with safetensors or
``torch.load(weights_only=True)`` by the workbench itself and handed to timm as a state
dict, so nothing in a weights file can run code.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from workbench.core.models.build_request import (
    BuildRequest,
    device_context,
    did_you_mean,
    first_line,
    require_extra,
)
from workbench.core.models.source_errors import ModelSourceError

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch
    from torch import nn

__all__ = ["build_timm", "timm_cached", "timm_model_name", "timm_names"]

#: Weights names that mean "the model's default pretrained tag".
DEFAULT_WEIGHTS: frozenset[str] = frozenset({"default", "pretrained", "true"})


def _timm() -> Any:
    return require_extra("timm", "timm")


def timm_names(pattern: str = "*") -> list[str]:
    """timm architecture names matching a glob.

    Args:
        pattern: fnmatch pattern, e.g. ``"vit_*"``.

    Returns:
        Sorted names.

    Raises:
        ModelSourceError: timm is not installed.
    """
    return sorted(_timm().list_models(pattern or "*"))


def _check_name(name: str) -> str:
    timm = _timm()
    if timm.is_model(name):
        return name
    base = name.split(".", 1)[0]
    hint = did_you_mean(base, timm.list_models()) or "list the names with `workbench models --source timm PATTERN`"
    raise ModelSourceError(f"unknown timm model {name!r}; {hint}")


def timm_model_name(name: str, weights: str | None) -> str:
    """The name ``timm.create_model`` takes for a spec's name and weights.

    Args:
        name: ``NAME`` or ``NAME.TAG``.
        weights: ``None`` or ``"DEFAULT"`` (the default tag), or a weights tag.

    Returns:
        ``NAME`` or ``NAME.TAG``.
    """
    if weights is None or weights.strip().lower() in DEFAULT_WEIGHTS or "." in name:
        return name
    return f"{name}.{weights.strip()}"


def _cached_file(model_name: str) -> Path | None:
    """The cached weights file of a timm model (safetensors preferred), or ``None``."""
    import torch

    cfg = _timm().models.get_pretrained_cfg(model_name)
    if cfg is None:
        return None
    if cfg.hf_hub_id:
        from huggingface_hub import try_to_load_from_cache

        for filename in ("model.safetensors", "open_clip_model.safetensors", "pytorch_model.bin"):
            found = try_to_load_from_cache(cfg.hf_hub_id, filename)
            if isinstance(found, str) and Path(found).is_file():
                return Path(found)
    if cfg.url:
        path = Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(urlparse(cfg.url).path)
        if path.is_file():
            return path
    if cfg.file and Path(cfg.file).is_file():
        return Path(cfg.file)
    return None


def timm_cached(name: str, weights: str | None = None) -> bool:
    """Whether a timm model's pretrained weights are in a local cache (no network needed).

    Args:
        name: timm model name (``NAME`` or ``NAME.TAG``).
        weights: A weights tag, or ``None``/``"DEFAULT"`` for the default tag.

    Returns:
        True when the weights file is cached.

    Raises:
        ModelSourceError: timm is not installed.
    """
    try:
        return _cached_file(timm_model_name(name, weights)) is not None
    except (RuntimeError, ValueError):
        return False


def _read_state(path: Path) -> dict[str, torch.Tensor]:
    import torch

    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(path))
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ModelSourceError(
            f"cached timm weights {path} could not be read safely ({type(exc).__name__}: {first_line(exc)}); "
            "delete the file and fetch it again"
        ) from exc
    for key in ("state_dict", "model"):
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
    return state


def _pretrained_overlay(model_name: str, allow_download: bool) -> dict[str, Any] | None:
    """``pretrained_cfg_overlay`` that feeds timm a locally read state dict, or ``None`` to
    let timm download (only when allowed)."""
    path = _cached_file(model_name)
    if path is not None:
        return {"state_dict": _read_state(path)}
    if allow_download:
        return None
    raise ModelSourceError(
        f"pretrained weights of timm model {model_name!r} are not in the local cache; "
        "allow downloads (run once online) or build it without weights"
    )


def build_timm(req: BuildRequest) -> nn.Module:
    """Build ``timm.create_model(name, pretrained=...)``, then fit the head.

    Args:
        req: ``req.weights`` ``None`` builds random weights; ``"DEFAULT"`` the default
            pretrained tag; any other value is a tag (``NAME.TAG``). ``req.num_classes``
            resets the classifier (``reset_classifier``). ``req.meta`` builds on the meta
            device and reads no weights.

    Returns:
        The model.

    Raises:
        ModelSourceError: timm missing, unknown name (with close matches), weights not
            cached and downloads off, unreadable weights, a failed build.
    """
    timm = _timm()
    model_name = _check_name(timm_model_name(req.name, req.weights))
    pretrained = req.weights is not None and not req.meta
    kwargs: dict[str, Any] = {}
    if pretrained:
        overlay = _pretrained_overlay(model_name, req.allow_download)
        if overlay is not None:
            kwargs["pretrained_cfg_overlay"] = overlay
    try:
        with device_context(req.meta):
            model = timm.create_model(model_name, pretrained=pretrained, **kwargs)
            if req.num_classes is not None and getattr(model, "num_classes", None) != req.num_classes:
                model.reset_classifier(req.num_classes)
    except ModelSourceError:
        raise
    except Exception as exc:
        raise ModelSourceError(
            f"timm could not build {model_name!r} ({type(exc).__name__}: {first_line(exc)})"
        ) from exc
    return model
