"""Model sources' shared names in one import (the torchvision registry, classification heads,
checkpoints): ``from workbench.core.models.zoo import build_model, replace_head, load_checkpoint``.

Each part lives in a module of its own, beside ``timm_models.py`` and ``hf_models.py``:
:mod:`~workbench.core.models.torchvision_models` (the registry, weights, downloads),
:mod:`~workbench.core.models.heads` (finding and replacing a classification head),
:mod:`~workbench.core.models.checkpoints` (reading, loading and saving checkpoint files) and
:mod:`~workbench.core.models.source_errors` (what they report).

Typical use::

    from workbench.core.models.zoo import build_model, replace_head, load_checkpoint

    model = build_model("resnet18", "IMAGENET1K_V1", allow_download=False)
    replace_head(model, 10)                       # -> ["fc"]
    result = load_checkpoint("finetuned.safetensors", arch="resnet18")
"""

from __future__ import annotations

from workbench.core.models.checkpoints import (
    CHECKPOINT_SUFFIXES,
    LoadResult,
    load_checkpoint,
    load_weights_into,
    save_checkpoint,
)
from workbench.core.models.heads import current_num_classes, find_head, replace_head
from workbench.core.models.source_errors import CheckpointKeyMismatch, ModelSourceError
from workbench.core.models.torchvision_models import (
    DOWNLOAD_TIMEOUT_S,
    ModelInfo,
    build_model,
    crop_size,
    list_models,
    model_input_size,
    weights_cache_path,
    weights_cached,
    weights_member,
)

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
