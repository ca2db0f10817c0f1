"""The Hugging Face ``transformers`` model source: ``hf:PATH_OR_REPO_ID``.

A local folder with ``config.json`` (and optionally its weights), or a repo id already in
the local Hugging Face cache; nothing is downloaded unless allowed (``local_files_only``).
The Auto class comes from ``config.architectures`` (sequence or image classification,
causal LM, masked LM, else the base model). Weights are read from safetensors; a folder
whose weights are only pickled ``.bin`` files is refused unless pickles are trusted. A
folder without weights builds the architecture alone (random init, or shapes only on the
``meta`` device).

Nothing from the folder runs: every ``transformers`` call passes ``trust_remote_code=False``,
and a folder whose ``config.json`` has an ``auto_map`` (custom model code shipped with the
weights) is refused before ``transformers`` reads it. ``config.json`` and the shard indexes
are read with the bounded JSON reader (:mod:`workbench.core.safe_json`); a shard index that
names files the folder lacks is refused, instead of building the model from random weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.core.models.build_request import (
    BuildRequest,
    device_context,
    first_line,
    require_extra,
)
from workbench.core.models.source_errors import ModelSourceError

if TYPE_CHECKING:  # pragma: no cover - typing only
    from torch import nn

__all__ = [
    "auto_class_name",
    "build_hf",
    "check_hf_folder",
    "hf_cached",
    "hf_cached_repos",
    "hf_empty_cache_text",
    "hf_local_folder",
    "hf_weight_files",
]

#: Shard indexes of a sharded checkpoint: ``{"weight_map": {tensor name: shard file}}``.
_SHARD_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")

#: Suffix of an architecture name -> the Auto class that builds it.
_TASKS: tuple[tuple[str, str], ...] = (
    ("ForSequenceClassification", "AutoModelForSequenceClassification"),
    ("ForImageClassification", "AutoModelForImageClassification"),
    ("ForCausalLM", "AutoModelForCausalLM"),
    ("LMHeadModel", "AutoModelForCausalLM"),
    ("ForMaskedLM", "AutoModelForMaskedLM"),
)
_CLASSIFIERS = ("AutoModelForSequenceClassification", "AutoModelForImageClassification")


def _transformers() -> Any:
    return require_extra("transformers", "hf")


def _is_local(name: str) -> bool:
    p = Path(name).expanduser()
    return p.exists() or name.startswith((".", "/", "~")) or "\\" in name or name.count("/") > 1


def hf_local_folder(name: str) -> Path | None:
    """The folder ``hf:NAME`` names, or ``None`` when it is a repo id of the Hugging Face cache.

    Args:
        name: Folder path or repo id.

    Returns:
        The folder (``~`` expanded), or ``None``.
    """
    return Path(name).expanduser() if _is_local(name) else None


def hf_empty_cache_text() -> str:
    """What ``workbench models --source hf`` says while the Hugging Face cache holds no model.

    Returns:
        One line naming the cache folder and how a folder opens instead.
    """
    from huggingface_hub import constants

    return (f"the Hugging Face cache ({constants.HF_HUB_CACHE}) holds no model yet; models from folders open as "
            "--model hf:./FOLDER")


def _cache_lookup(repo: str, filename: str) -> Path | None:
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo, filename)
    return Path(found) if isinstance(found, str) else None


def hf_weight_files(name: str) -> tuple[list[Path], list[Path]]:
    """The weight files a folder or a cached repo holds.

    Args:
        name: Folder path or repo id.

    Returns:
        ``(safetensors files, pickled .bin files)``; both empty for config-only models.
    """
    if _is_local(name):
        folder = Path(name).expanduser()
        return sorted(folder.glob("*.safetensors")), sorted(folder.glob("pytorch_model*.bin"))
    safe = [p for f in ("model.safetensors", "model.safetensors.index.json") if (p := _cache_lookup(name, f))]
    pickled = [p for f in ("pytorch_model.bin", "pytorch_model.bin.index.json") if (p := _cache_lookup(name, f))]
    return safe, pickled


def hf_cached(name: str) -> bool:
    """Whether ``hf:NAME`` opens without the network (a local folder, or a cached repo id)."""
    if _is_local(name):
        return (Path(name).expanduser() / "config.json").is_file()
    try:
        return _cache_lookup(name, "config.json") is not None
    except ValueError:  # an invalid repo id (HFValidationError)
        return False


def hf_cached_repos(pattern: str = "*") -> list[str]:
    """Model repo ids in the local Hugging Face cache that match a glob.

    Args:
        pattern: fnmatch pattern on the repo id.

    Returns:
        Sorted repo ids (empty when there is no cache).
    """
    import fnmatch

    from huggingface_hub import constants, scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:  # the cache folder as huggingface_hub says now (HF_HOME / HF_HUB_CACHE), not at its import
        info = scan_cache_dir(constants.HF_HUB_CACHE)
    except (CacheNotFound, OSError):  # no cache folder yet
        return []
    return sorted(r.repo_id for r in info.repos if r.repo_type == "model" and fnmatch.fnmatch(r.repo_id, pattern or "*"))


def auto_class_name(config: Any, num_classes: int | None = None) -> str:
    """The ``transformers`` Auto class for a config.

    Args:
        config: A ``PretrainedConfig``.
        num_classes: When given and the architecture has no classification head, a
            classification Auto class (image when the config has an ``image_size``).

    Returns:
        The Auto class name, e.g. ``"AutoModelForCausalLM"``.
    """
    arch = (getattr(config, "architectures", None) or [""])[0]
    auto = next((a for suffix, a in _TASKS if arch.endswith(suffix)), "AutoModel")
    if num_classes is not None and auto not in _CLASSIFIERS:
        image = getattr(config, "image_size", None) is not None and getattr(config, "vocab_size", None) is None
        auto = "AutoModelForImageClassification" if image else "AutoModelForSequenceClassification"
    return auto


def _read_json(path: Path, what: str) -> Any:
    import json

    from workbench.core import safe_json

    try:
        return safe_json.load(path, what=what)
    except safe_json.JsonInputError as e:
        raise ModelSourceError(str(e)) from None
    except json.JSONDecodeError as e:
        raise ModelSourceError(f"{what} {path} is not valid JSON ({e.msg} at line {e.lineno}); fix or replace the file") from None
    except OSError as e:
        raise ModelSourceError(f"cannot read {what} {path} ({e.strerror or e}); check the folder") from None


def check_hf_folder(folder: str | Path, name: str | None = None) -> None:
    """Refuse a model folder that would run its own code or silently lose its weights.

    Args:
        folder: The folder (or cached snapshot folder) holding ``config.json``.
        name: How the user named it, for the message (default: the folder).

    Raises:
        ModelSourceError: ``config.json`` unreadable, too large, too deep or not an object;
            it has an ``auto_map`` (custom code); or a shard index names files that are not
            in the folder (or is not a ``{"weight_map": {...}}`` object).
    """
    folder = Path(folder)
    label = name or str(folder)
    config = _read_json(folder / "config.json", "config.json of")
    if not isinstance(config, dict):
        raise ModelSourceError(f"config.json of {label!r} is not a JSON object; save the model with save_pretrained()")
    if "auto_map" in config:
        raise ModelSourceError(
            f"{label!r} ships its own model code (config.json has auto_map), which the workbench never runs; "
            "use a model whose architecture transformers includes, or build it yourself with py:FILE.py:FACTORY"
        )
    for index_name in _SHARD_INDEXES:
        index_path = folder / index_name
        if not index_path.exists():
            continue
        index = _read_json(index_path, "shard index")
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise ModelSourceError(f"shard index {index_path} has no weight_map of file names; fix or remove it")
        missing = sorted({f for f in weight_map.values() if not (folder / f).is_file() or Path(f).name != f})
        if missing:
            raise ModelSourceError(
                f"shard index {index_path.name} of {label!r} names {len(missing)} file(s) the folder lacks "
                f"({', '.join(missing[:3])}{', …' if len(missing) > 3 else ''}); copy the missing shards or remove the index"
            )


def _where(req: BuildRequest) -> str:
    """What to load from: the folder, the cached snapshot folder of a repo id (so nothing
    can reach the network), or the repo id itself when downloads are allowed.

    Raises:
        ModelSourceError: No such folder, no config.json, or a repo that is not cached
            while downloads are off.
    """
    name = req.name
    if _is_local(name):
        folder = Path(name).expanduser()
        if not folder.is_dir():
            raise ModelSourceError(f"Hugging Face model folder {name!r} does not exist; give a folder with config.json or a cached repo id")
        if not (folder / "config.json").is_file():
            raise ModelSourceError(
                f"{name!r} has no config.json, so it is not a Hugging Face model folder; "
                "save the model with save_pretrained() or point at the folder that holds config.json"
            )
        check_hf_folder(folder, name)
        return str(folder)
    config = _cache_lookup(name, "config.json") if hf_cached(name) else None
    if config is not None:
        check_hf_folder(config.parent, name)
        return str(config.parent)  # the snapshot folder
    if req.allow_download:
        return name
    raise ModelSourceError(
        f"Hugging Face repo {name!r} is not in the local cache and downloads are off; "
        "download it once (huggingface-cli download) or give a local folder"
    )


def _load_config(where: str, req: BuildRequest) -> Any:
    try:
        return _transformers().AutoConfig.from_pretrained(
            where, local_files_only=not req.allow_download, trust_remote_code=False
        )
    except Exception as exc:
        raise ModelSourceError(f"could not read the config of {req.name!r} ({type(exc).__name__}: {first_line(exc)})") from exc


def build_hf(req: BuildRequest) -> nn.Module:
    """Build a transformers model from a folder or a cached repo id.

    Args:
        req: ``req.name`` the folder or repo id; ``req.num_classes`` sets ``num_labels``
            (a new head when the weights have another size); ``req.meta`` builds on the
            meta device from the config alone; ``req.weights`` is unused (the folder's own
            weights are loaded when present).

    Returns:
        The model, in train mode.

    Raises:
        ModelSourceError: transformers missing, no folder/config, not cached, pickled-only
            weights without ``trust_pickle``, or a failed build.
    """
    transformers = _transformers()
    where = _where(req)
    config = _load_config(where, req)
    auto = getattr(transformers, auto_class_name(config, req.num_classes))
    if req.num_classes is not None:
        config.num_labels = req.num_classes
    safe, pickled = hf_weight_files(where) if not req.meta else ([], [])
    try:
        if req.meta or not (safe or pickled):
            with device_context(req.meta):
                model = auto.from_config(config, trust_remote_code=False)
        else:
            if not safe and not req.trust_pickle:
                raise ModelSourceError(
                    f"{req.name!r} holds only pickled weights ({pickled[0].name}), which can run code when loaded; "
                    "convert them to safetensors, or pass --trust-pickle for a model you trust"
                )
            hf_logging = transformers.utils.logging
            bar = hf_logging.is_progress_bar_enabled()
            hf_logging.disable_progress_bar()  # one line per command, not a progress bar per load
            try:
                model = auto.from_pretrained(
                    where,
                    config=config,
                    local_files_only=not req.allow_download,
                    use_safetensors=bool(safe),
                    ignore_mismatched_sizes=req.num_classes is not None,
                    trust_remote_code=False,
                )
            finally:
                if bar:
                    hf_logging.enable_progress_bar()
    except ModelSourceError:
        raise
    except Exception as exc:
        raise ModelSourceError(
            f"transformers could not build {req.name!r} with {auto.__name__} ({type(exc).__name__}: {first_line(exc)})"
        ) from exc
    model.train()
    return model
