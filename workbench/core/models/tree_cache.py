"""A small description of a model's module tree, kept on disk to show at the next start.

Importing torch and torchvision takes seconds; the app's window can show the start-up model's
tree before that, from the description written the last time that model was loaded (like an
IDE showing its cached project index while it loads). The live tree replaces it once the model
is there.

A description holds the tree as :meth:`~workbench.core.plan.tree.ModelTree.to_dict` writes it
(its modules in pre-order with their classes, parameter counts and BatchNorm flags, its
parameters' names and shapes, its fingerprint), so the start-up window edits a plan on it with
the same plan engine as on the live tree. It is keyed by the model's source and name and by the
versions of torch, torchvision, timm and the app, so a different version never shows a stale
tree; the weights it was loaded with are recorded beside them (they do not change the tree, and
which weights the start-up model gets is known only once torch is imported). Only models named by a registry name are kept (:func:`describable`: a source the window
offers no folder, file or code for, such as torchvision and timm): a folder, a file or code can
change without a version saying so.

Nothing here imports torch (the versions are read from the packages' ``version.py`` files),
so the start-up window can read a description before torch is imported. Files are written
atomically (:mod:`workbench.core.atomic`), capped at :data:`MAX_CACHED_ROWS` rows and
:data:`MAX_CACHE_BYTES` bytes, the :data:`MAX_CACHED_MODELS` most recently written kept, and read with :func:`workbench.core.safe_json.read_text` (regular
files only, bounded); a link, a broken file or another version is ignored, never an error on
screen.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.core import safe_json
from workbench.core.atomic import atomic_write
from workbench.core.errors import WorkbenchError
from workbench.core.plan.tree import ModelTree, TreeFormatError
from workbench.core.version import __version__

__all__ = [
    "CACHE_DIR_ENV",
    "MAX_CACHED_MODELS",
    "MAX_CACHED_ROWS",
    "MAX_CACHE_BYTES",
    "TREE_CACHE_FORMAT",
    "CachedTree",
    "TreeCacheError",
    "cache_file",
    "default_cache_dir",
    "description",
    "describable",
    "library_versions",
    "read_description",
    "read_tree",
    "read_tree_checked",
    "startup_model",
    "write_tree",
]

#: The ``format`` field of a tree description (with ``version`` 2).
TREE_CACHE_FORMAT = "workbench-tree-cache"
_FORMAT_VERSION = 2
#: Environment variable that overrides the cache folder (tests point it at a temporary folder).
CACHE_DIR_ENV = "WORKBENCH_CACHE_DIR"
#: Largest tree kept: a model with more modules is not described (a 49k-module MoE would take
#: longer to show from the cache than the start-up it would shorten).
MAX_CACHED_ROWS = 4000
#: Largest description file read (4,000 modules take about 600 kB).
MAX_CACHE_BYTES = 2 * 1024 * 1024
#: Descriptions kept: writing one more removes the least recently written beyond this many.
MAX_CACHED_MODELS = 32
#: The packages whose versions key a description (beside the app's); one not installed counts as such.
_LIBRARIES: tuple[str, ...] = ("torch", "torchvision", "timm")
_NOT_INSTALLED = "not installed"
_ORGANIZATION, _APPLICATION = "FreezeWorkbench", "Freeze Workbench"
_MAX_TEXT = 300  # longest start-up model spec looked up, and module path or class name shown
_VERSION_LINE = re.compile(r"""^__version__\s*=\s*['"]([^'"\n]{1,64})['"]""", re.MULTILINE)


class TreeCacheError(WorkbenchError, ValueError):
    """A tree description that cannot be used (broken, another version, not a tree)."""


@dataclass(frozen=True)
class CachedTree:
    """A model's tree as described on disk.

    Attributes:
        source: the model source (``"torchvision"``).
        name: the model's name in it (``"resnet18"``).
        weights: the weights it had when described (None: random initialisation).
        tree: the described tree (no model behind it).
        shipped: the description the app ships of its start-up model (not one written by a load).
    """

    source: str
    name: str
    weights: str | None
    tree: ModelTree
    shipped: bool = False


def default_cache_dir() -> Path:
    """The app's cache folder without Qt: ``$WORKBENCH_CACHE_DIR``, else the per-user cache folder.

    Returns:
        ``~/.cache/FreezeWorkbench/Freeze Workbench`` on Linux (``$XDG_CACHE_HOME`` when set),
        ``~/Library/Caches/...`` on macOS, ``%LOCALAPPDATA%\\...\\cache`` on Windows.
    """
    env = os.environ.get(CACHE_DIR_ENV)
    if env:
        return Path(env).expanduser()
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
        return base / _ORGANIZATION / _APPLICATION / "cache"
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / _ORGANIZATION / _APPLICATION


def startup_model(text: str) -> tuple[str, str] | None:
    """The source and name of a start-up model spec, without the source table (it imports torch).

    Args:
        text: the spec as the command line names it (``resnet18``, ``timm:resnet10t``).

    Returns:
        ``(source, name)`` (a plain name is torchvision's), or None for an empty or overlong spec.
        Only :func:`describable` sources have descriptions to find.
    """
    source, sep, name = text.partition(":")
    if not sep:
        source, name = "torchvision", text
    if not source or not name or len(text) > _MAX_TEXT:
        return None
    return source, name


def describable(source: str) -> bool:
    """A model of ``source`` is named by a registry name: its tree may be described.

    A source the window offers a folder, a file or code for (its row's ``browse``, or
    ``runs_code``: Hugging Face folders, your code) is not: those change without a version
    saying so. Imports the source table (and so torch): for the writing side only.

    Args:
        source: the model source (a key of :data:`~workbench.core.models.sources.SOURCES`).

    Returns:
        Whether :func:`write_tree` keeps its models.
    """
    from workbench.core.models.sources import SOURCES

    row = SOURCES.get(source)
    return row is not None and row.browse is None and not row.runs_code


def _package_version(package: str) -> str | None:
    """A package's ``__version__`` from its ``version.py`` in the first ``sys.path`` folder that
    has the package, without importing it or asking the import system (whose hooks may)."""
    for entry in sys.path:
        folder = Path(entry or ".") / package
        if not (folder / "__init__.py").is_file():
            continue
        try:
            text = safe_json.read_text(folder / "version.py", what="version file", max_bytes=64 * 1024)
        except (OSError, safe_json.JsonInputError):
            return None
        m = _VERSION_LINE.search(text)
        return m.group(1) if m else None
    return None


def library_versions() -> dict[str, str] | None:
    """The versions a description is valid for, read without importing the packages.

    Returns:
        ``{"app": ..., "torch": ..., "torchvision": ..., "timm": ...}`` (``"not installed"``
        for timm when it is not), or None when torch's or torchvision's version cannot be read
        (then nothing is described).
    """
    out = {"app": __version__}
    for package in _LIBRARIES:
        version = _package_version(package)
        if version is None and package != "timm":
            return None
        out[package] = version or _NOT_INSTALLED
    return out


def cache_file(source: str, name: str, folder: str | os.PathLike[str] | None = None) -> Path:
    """Where the description of a model is kept.

    Args:
        source: the model source.
        name: the model's name in it.
        folder: the cache folder (default: :func:`default_cache_dir`).

    Returns:
        ``FOLDER/trees/<hash of source and name>.json``.
    """
    digest = hashlib.sha256(f"{source}:{name}".encode()).hexdigest()[:24]
    return Path(folder if folder is not None else default_cache_dir()) / "trees" / f"{digest}.json"


def description(
    source: str, name: str, weights: str | None, tree: ModelTree, versions: dict[str, str] | None
) -> dict[str, Any]:
    """A description as its file holds it (JSON data).

    Args:
        source: the model source.
        name: the model's name in it.
        weights: its weights (None: random initialisation).
        tree: its tree.
        versions: :func:`library_versions`, or None for the description the app ships.

    Returns:
        ``{"format", "version", "model", "versions", "tree"}``.
    """
    return {"format": TREE_CACHE_FORMAT, "version": _FORMAT_VERSION,
            "model": {"source": source, "name": name, "weights": weights}, "versions": versions,
            "tree": tree.to_dict()}


def write_tree(
    source: str,
    name: str,
    weights: str | None,
    tree: ModelTree,
    *,
    folder: str | os.PathLike[str] | None = None,
) -> Path | None:
    """Describe a loaded model's tree for the next start (atomically).

    Args:
        source: the model source; only :func:`describable` ones are kept.
        name: the model's name in it.
        weights: its weights (None: random initialisation).
        tree: its tree.
        folder: the cache folder (default: :func:`default_cache_dir`).

    Returns:
        The file written, or None when the model is not kept (a source that is not
        :func:`describable`, more than :data:`MAX_CACHED_ROWS` modules, versions that cannot be read).

    Raises:
        OSError: the cache folder cannot be written.
    """
    versions = library_versions()
    if versions is None or not describable(source):
        return None
    if len(tree) > MAX_CACHED_ROWS:
        return None
    text = json.dumps(description(source, name, weights, tree, versions), separators=(",", ":"))
    if len(text.encode()) > MAX_CACHE_BYTES:
        return None
    path = cache_file(source, name, folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, text)
    _prune(path.parent)
    return path


def _prune(folder: Path) -> None:
    """Remove the least recently written descriptions beyond :data:`MAX_CACHED_MODELS` (files only)."""
    kept: list[tuple[int, Path]] = []
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.endswith(".json") and not entry.name.startswith(".") and entry.is_file(follow_symlinks=False):
                kept.append((entry.stat(follow_symlinks=False).st_mtime_ns, Path(entry.path)))
    kept.sort(reverse=True)
    for _mtime, old in kept[MAX_CACHED_MODELS:]:
        with contextlib.suppress(OSError):
            old.unlink()


def read_tree_checked(source: str, name: str, *, folder: str | os.PathLike[str] | None = None) -> CachedTree:
    """The description of a model for the installed versions.

    Args:
        source: the model source.
        name: the model's name in it.
        folder: the cache folder (default: :func:`default_cache_dir`).

    Returns:
        The described tree.

    Raises:
        TreeCacheError: no description, or one that cannot be used (one line saying why).
    """
    return read_description(cache_file(source, name, folder), source, name, library_versions())


def read_description(path: Path, source: str, name: str, versions: dict[str, str] | None) -> CachedTree:
    """Read one description file (a plain, small, regular file).

    Args:
        path: the file.
        source: the model source it must describe.
        name: the model's name in it.
        versions: the versions it must have been written with (:func:`library_versions`), or None
            for the description the app ships of its start-up model (kept with the app's files,
            written with no versions; the live tree replaces it as it replaces any description).

    Returns:
        The described tree (``shipped`` when ``versions`` is None).

    Raises:
        TreeCacheError: no such file, or one that cannot be used (one line saying why).
    """
    try:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            raise TreeCacheError(f"{path} is a link; a tree description is a plain file")
        text = safe_json.read_text(path, what="tree description", max_bytes=MAX_CACHE_BYTES)
        data = safe_json.loads(text, what=f"tree description {path}", max_depth=6)
    except FileNotFoundError:
        raise TreeCacheError(f"no tree description of {source}:{name}") from None
    except (OSError, safe_json.JsonInputError, json.JSONDecodeError) as e:
        raise TreeCacheError(f"{path} cannot be read ({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
    if not isinstance(data, dict) or data.get("format") != TREE_CACHE_FORMAT or data.get("version") != _FORMAT_VERSION:
        raise TreeCacheError(f"{path} is not a tree description of this program's format")
    model = data.get("model")
    if not isinstance(model, dict) or model.get("source") != source or model.get("name") != name:
        raise TreeCacheError(f"{path} describes another model")
    weights = model.get("weights")
    if weights is not None and not isinstance(weights, str):
        raise TreeCacheError(f"{path} names its weights with a {type(weights).__name__}")
    if versions is not None and data.get("versions") != versions:
        raise TreeCacheError(f"{path} was written with other versions of the app, torch or the model library")
    described = data.get("tree")
    modules = described.get("modules") if isinstance(described, dict) else None
    if isinstance(modules, list) and len(modules) > MAX_CACHED_ROWS:
        raise TreeCacheError(f"{path} has {len(modules):,} modules, more than the {MAX_CACHED_ROWS:,} kept")
    try:
        tree = ModelTree.from_dict(described if isinstance(described, dict) else {})
    except TreeFormatError as e:
        raise TreeCacheError(f"{path}: {e}") from None
    if any(len(n.path) > _MAX_TEXT or len(n.type_name) > _MAX_TEXT for n in tree.nodes.values()):
        raise TreeCacheError(f"{path} has a path or class name longer than {_MAX_TEXT} characters")
    return CachedTree(source, name, weights, tree, shipped=versions is None)


def read_tree(source: str, name: str, *, folder: str | os.PathLike[str] | None = None) -> CachedTree | None:
    """Like :func:`read_tree_checked`, None instead of an error: a cache never stops anything.

    Args:
        source: the model source.
        name: the model's name in it.
        folder: the cache folder (default: :func:`default_cache_dir`).

    Returns:
        The described tree, or None.
    """
    with contextlib.suppress(TreeCacheError):
        return read_tree_checked(source, name, folder=folder)
    return None
