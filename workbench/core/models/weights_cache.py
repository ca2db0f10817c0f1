"""Cached pretrained weights, loaded as safely as a checkpoint the user names.

torchvision reads its cached weights (``$TORCH_HOME/hub/checkpoints/<name>-<sha256 prefix>.pth``)
with ``torch.hub.load_state_dict_from_url``, which unpickles without ``weights_only``: a file
placed there runs its code on the next ``build_model(..., weights=...)``. Here the cache file is

* checked against the SHA-256 prefix in its name, as the download does (a file that is not
  the published one is refused before it is read);
* read as ``.safetensors`` when it is one, else with ``torch.load(weights_only=True)``, so a
  pickle that needs code is refused, never run.

:func:`safe_torchvision_loading` routes torchvision's weight loading through
:func:`load_cached_state_dict` while a model is built; model sources with their own caches
(timm, Hugging Face) call :func:`load_cached_state_dict` directly.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import re
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from workbench.core.errors import WorkbenchError

__all__ = ["WeightsCacheError", "cache_dir", "check_hash_prefix", "load_cached_state_dict", "safe_torchvision_loading"]

#: ``<name>-<hex>.<ext>``: the SHA-256 prefix torch hub puts in weight file names.
HASH_REGEX = re.compile(r"-([a-f0-9]*)\.")

_PATCH_LOCK = threading.RLock()


class WeightsCacheError(WorkbenchError):
    """A cached weights file is missing, fails its integrity check, or holds code."""


def cache_dir() -> Path:
    """The torch hub folder of downloaded weights (``torch.hub.get_dir()/checkpoints``).

    Returns:
        The folder (it may not exist yet).
    """
    import torch

    return Path(torch.hub.get_dir()) / "checkpoints"


def check_hash_prefix(path: str | os.PathLike[str]) -> None:
    """Check a cached file against the SHA-256 prefix in its name (no prefix: nothing to check).

    Args:
        path: the cached file.

    Raises:
        WeightsCacheError: the file's SHA-256 does not start with the prefix in its name.
        OSError: the file cannot be read.
    """
    p = Path(path)
    match = HASH_REGEX.search(p.name)
    prefix = match.group(1) if match else ""
    if not prefix:
        return
    digest = hashlib.sha256()
    with p.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    if not digest.hexdigest().startswith(prefix):
        raise WeightsCacheError(
            f"cached weights file {p} is not the published file (SHA-256 {digest.hexdigest()[:len(prefix)]}…, "
            f"its name says {prefix}…); delete it and build again to download a good copy"
        )


def _is_safetensors(path: Path) -> bool:
    with path.open("rb") as f:
        head = f.read(9)
    return len(head) == 9 and head[8:9] == b"{"


def load_cached_state_dict(
    path: str | os.PathLike[str], *, check_hash: bool = True, map_location: Any = "cpu"
) -> dict[str, Any]:
    """Read a cached weights file without running code from it.

    Args:
        path: the cached file.
        check_hash: check the SHA-256 prefix in the file name first.
        map_location: device the tensors are loaded to.

    Returns:
        The state dict, as the file holds it.

    Raises:
        WeightsCacheError: missing file, failed integrity check, a pickle that needs code, or
            an unreadable file; the message says to delete it and download it again.
    """
    import torch

    p = Path(path)
    if not p.is_file():
        raise WeightsCacheError(
            f"weights file {p} is not in the cache; run once online to download it, or pass weights=None"
        )
    try:
        if check_hash:
            check_hash_prefix(p)
        if _is_safetensors(p):
            from safetensors.torch import load_file

            device = map_location if isinstance(map_location, str) else "cpu"
            return dict(load_file(str(p), device=device))
        return torch.load(p, map_location=map_location, weights_only=True)
    except WeightsCacheError:
        raise
    except pickle.UnpicklingError as exc:
        raise WeightsCacheError(
            f"refused to load cached weights file {p}: it holds pickled Python objects that would run "
            "code, which published weights never do; delete it and build again to download the real file"
        ) from exc
    except Exception as exc:  # truncated zip, corrupt tensors ...
        first = (str(exc).strip() or type(exc).__name__).splitlines()[0][:300]
        raise WeightsCacheError(
            f"cached weights file {p} could not be read ({type(exc).__name__}: {first}); "
            "delete it and build again to download it"
        ) from exc


def _from_cache(
    url: str,
    model_dir: str | None = None,
    map_location: Any = None,
    progress: bool = True,
    check_hash: bool = False,
    file_name: str | None = None,
    weights_only: bool = False,
) -> dict[str, Any]:
    """Stand-in for ``torch.hub.load_state_dict_from_url`` that reads the cache safely."""
    name = file_name or os.path.basename(urllib.parse.urlparse(url).path)
    folder = Path(model_dir) if model_dir else cache_dir()
    return load_cached_state_dict(folder / name, check_hash=True, map_location=map_location or "cpu")


@contextlib.contextmanager
def safe_torchvision_loading() -> Iterator[None]:
    """While active, torchvision reads pretrained weights with :func:`load_cached_state_dict`.

    The file must already be in the cache (download it first); nothing is fetched here.

    Yields:
        Nothing.
    """
    import torchvision.models._api as tv_api

    with _PATCH_LOCK:
        original = tv_api.load_state_dict_from_url
        tv_api.load_state_dict_from_url = _from_cache
        try:
            yield
        finally:
            tv_api.load_state_dict_from_url = original
