"""The model-source table: one row per place a model can come from.

=============  =========================================  ============================
source         spec on the command line                   plan ``model`` block
=============  =========================================  ============================
torchvision    ``resnet18``, ``torchvision:resnet18``      ``{"source": "torchvision", "name": "resnet18"}``
timm           ``timm:vit_tiny_patch16_224``              ``{"source": "timm", "name": ...}``
hf             ``hf:./my-bert``, ``hf:org/repo``          ``{"source": "hf", "name": ...}``
py             ``py:my_models:build``, ``py:net.py:make``  ``{"source": "py", "name": "net.py:make"}``
=============  =========================================  ============================

Each :class:`ModelSource` row says how to build a model (``build``), how to list or search
its names (``names``), whether a model opens offline (``cached``), which optional extra
installs it, how the app offers it (``label``, ``placeholder``, ``browse``, ``own_weights``)
and how an exported script rebuilds it (``script``, from
:mod:`workbench.core.models.script_code`). The model bar, the window's loading and the
exporter iterate the table and never switch on source names: a new source is a new row (and
its build and script functions). ``py`` specs **run your code**: they import the module (or
execute the file) and call the factory. :func:`check_code_origin` is the one rule for that:
such a spec runs only when the user named it (command line, Python call, a confirmed dialog),
never because a plan, config or run record names it.

Typical use::

    from workbench.core.models.sources import parse_model_spec, build_from_source

    source, name = parse_model_spec("timm:resnet18")
    model = build_from_source(source, name, num_classes=10, meta=False)
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from workbench.core.models import hf_models, py_models, timm_models
from workbench.core.models.build_request import (
    BuildRequest,
    device_context,
    missing_extra_message,
)
from workbench.core.models.script_code import (
    ScriptModel,
    ScriptRequest,
    hf_script,
    py_script,
    timm_script,
    torchvision_script,
)
from workbench.core.models.source_errors import ModelSourceError
from workbench.core.models.torchvision_models import (
    build_model,
    check_model_name,
    classification_names,
    model_input_size,
    weights_cached,
    weights_member,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    from torch import nn

#: The source of a spec without a prefix (``resnet18``).
DEFAULT_SOURCE = "torchvision"
#: The :class:`~workbench.core.models.spec.ModelSpec` source of a checkpoint file (the
#: architecture from the spec's name or the file's own ``arch`` entry, the weights from the
#: file): built by the spec from its ``checkpoint`` path, so not a row of :data:`SOURCES`,
#: which the app offers and command-line prefixes name.
CHECKPOINT_SOURCE = "checkpoint"

__all__ = [
    "CHECKPOINT_SOURCE",
    "DEFAULT_SOURCE",
    "SOURCES",
    "Browse",
    "CodeFromFileError",
    "ModelSource",
    "OwnWeights",
    "architecture_source",
    "build_from_source",
    "check_code_origin",
    "is_structure_only",
    "missing_extra_message",
    "model_block",
    "parse_model_spec",
    "search_models",
    "source_of",
]


@dataclass(frozen=True)
class Browse:
    """How the app picks a model of a source from disk (the model bar's ``…`` button).

    Attributes:
        kind: ``"folder"`` (the name is the chosen folder), ``"file"`` (the name is the
            chosen file) or ``"code"`` (a ``.py`` file read without running it: the user
            chooses one of its functions, the name is ``FILE:FUNCTION``, and the code is
            shown and confirmed before it runs; the kind of every source that runs code).
        title: The file dialog's title.
        tip: The ``…`` button's tooltip.
        action: The File menu's entry (``"Open Model &Folder…"``).
        action_tip: The entry's status tip.
        file_filter: The file dialog's name filter (``"file"`` and ``"code"``), Qt's
            ``"Python files (*.py);;All files (*)"`` form; its patterns other than ``*`` also
            say which dropped or recent files the source opens (:meth:`takes`).
    """

    kind: Literal["folder", "file", "code"]
    title: str
    tip: str
    action: str
    action_tip: str
    file_filter: str = ""

    def takes(self, path: str | os.PathLike[str]) -> bool:
        """Whether a path given to the app (a drop, a recent file) is a model of this source.

        Args:
            path: the file or folder.

        Returns:
            For ``"folder"``: the path is a folder; otherwise its name matches a pattern of
            ``file_filter`` other than ``*``.
        """
        p = Path(path)
        if self.kind == "folder":
            return p.is_dir()
        patterns = [g for part in re.findall(r"\(([^)]*)\)", self.file_filter) for g in part.split() if g != "*"]
        return not p.is_dir() and any(fnmatch.fnmatch(p.name.lower(), g.lower()) for g in patterns)


@dataclass(frozen=True)
class OwnWeights:
    """Weights that come with the model (a folder's files, your code): nothing to choose or download.

    Attributes:
        entry: The model bar's one weights entry (``"From the folder"``).
        note: The status line after loading (``"weights from the folder"``).
    """

    entry: str
    note: str


@dataclass(frozen=True)
class ModelSource:
    """One row of the model-source table.

    Attributes:
        key: The spec prefix and the plan's ``model.source`` value.
        description: What the source is, for help texts and the model bar.
        label: What the model bar's source selector shows (``"Hugging Face"``).
        placeholder: What the model box says it wants while empty.
        extra: The ``pip install 'freeze-workbench[EXTRA]'`` extra it needs, or ``None``.
        build: Builds a model from a :class:`BuildRequest`.
        names: Names matching a glob (registry names, cached repo ids; empty for ``py``).
        cached: ``cached(name, weights)``: whether the model opens without the network.
        script: How an exported script rebuilds the model (see
            :mod:`workbench.core.models.script_code`); raises ``ModelSourceError`` with
            one line when it cannot.
        runs_code: Whether opening a spec runs code named by the spec.
        browse: How the app picks a model from disk, or ``None`` (names are typed or chosen).
        own_weights: Set when the weights come with the model (nothing to choose); ``None``
            when the model bar offers random initialisation or pretrained weights.
        downloads: ``downloads(name, weights)``: whether those pretrained weights must be
            downloaded first (the app asks); ``None`` for a source that never downloads.
        searchable: Whether ``names`` lists models (each marked ● when it opens offline).
        cache_where: Where ``cached`` looks, for the list's tooltips.
        input_size: ``input_size(name)``: the square input side the name's weights expect,
            or ``None`` to read it from the built model (see
            :func:`workbench.core.training.setup.run_image_size`).
        short_name: ``short_name(name)``: the model's name in the title and status bar.
        structure_only: ``structure_only(name)``: whether the model has no weights to read
            (it then opens on the meta device); ``None``: always has weights.
        export_on_meta: The exporter reads the model's structure from a build on the meta
            device (nothing allocated or downloaded) when no checkpoint is given.
        empty_names: ``empty_names()``: what ``workbench models`` says when the source lists
            no model at all (an empty cache: not a bad pattern); ``None``: "no model matches".
        local_folder: ``local_folder(name)``: the folder a name points to, which must exist
            (the app checks it at start-up), or ``None`` for a name that is not a folder;
            ``None``: names are never folders.
        weights_preset: ``weights_preset(name, weights)``: the registry entry a weights name
            stands for (torchvision's weights enum member, whose preset gives the transforms
            and crop size), or ``None`` when it names none; ``None``: the source's weights
            are not registry entries.
        safetensors_folder: ``safetensors_folder(name)``: the folder of the model's
            safetensors weight files (a sharded run builds on the meta device and reads its
            shards from there), or ``None`` when it has none; ``None``: never such a folder.
    """

    key: str
    description: str
    label: str
    placeholder: str
    extra: str | None
    build: Callable[[BuildRequest], nn.Module]
    names: Callable[[str], list[str]]
    cached: Callable[[str, str | None], bool]
    script: Callable[[ScriptRequest], ScriptModel]
    runs_code: bool = False
    browse: Browse | None = None
    own_weights: OwnWeights | None = None
    downloads: Callable[[str, str], bool] | None = None
    searchable: bool = True
    cache_where: str = "local cache"
    input_size: Callable[[str], int] | None = None
    short_name: Callable[[str], str] = str
    structure_only: Callable[[str], bool] | None = None
    export_on_meta: bool = False
    empty_names: Callable[[], str] | None = None
    local_folder: Callable[[str], Path | None] | None = None
    weights_preset: Callable[[str | None, str | None], Any | None] | None = None
    safetensors_folder: Callable[[str], Path | None] | None = None

    def __post_init__(self) -> None:
        if self.runs_code and self.browse is not None and self.browse.kind != "code":
            raise ValueError(
                f"model source {self.key!r} runs code, so its browse kind must be 'code' (the code is shown and "
                f"confirmed before it runs), not {self.browse.kind!r}"
            )


def _build_torchvision(req: BuildRequest) -> nn.Module:
    import torchvision

    if not req.meta:
        return build_model(req.name, req.weights, req.num_classes, allow_download=req.allow_download)
    name = check_model_name(req.name)
    kwargs = {"num_classes": req.num_classes} if req.num_classes is not None else {}
    with device_context(True):
        return torchvision.models.get_model(name, weights=None, **kwargs)


def _torchvision_names(pattern: str) -> list[str]:
    return [n for n in classification_names() if fnmatch.fnmatch(n, pattern or "*")]


def _torchvision_cached(name: str, weights: str | None) -> bool:
    return weights is None or weights_cached(name, weights)


def _timm_downloads(name: str, weights: str) -> bool:
    if not timm_models.timm_names(name.split(".", 1)[0]):
        return False  # an unknown name: loading says what is wrong
    return not timm_models.timm_cached(name, weights)


def _hf_structure_only(name: str) -> bool:
    if not hf_models.hf_cached(name):
        return False
    safe, pickled = hf_models.hf_weight_files(name)
    return not (safe or pickled)


def _hf_safetensors_folder(name: str) -> Path | None:
    safe, _pickled = hf_models.hf_weight_files(name)
    return safe[0].parent if safe else None


def _folder_name(name: str) -> str:
    return Path(name).name or name


def _factory_name(name: str) -> str:
    target, _sep, factory = name.rpartition(":")
    return f"{factory} ({Path(target).name if target.endswith('.py') else target})"


SOURCES: dict[str, ModelSource] = {
    s.key: s
    for s in (
        ModelSource(
            key="torchvision", description="torchvision classification models",
            label="torchvision", placeholder="resnet18", extra=None,
            build=_build_torchvision, names=_torchvision_names, cached=_torchvision_cached,
            script=torchvision_script,
            downloads=lambda name, weights: not weights_cached(name, weights),
            input_size=model_input_size, weights_preset=weights_member,
        ),
        ModelSource(
            key="timm", description="timm (PyTorch Image Models) registry",
            label="timm", placeholder="type to search timm, e.g. vit_tiny", extra="timm",
            build=timm_models.build_timm, names=timm_models.timm_names,
            cached=lambda name, weights: weights is None or timm_models.timm_cached(name, weights),
            script=timm_script,
            downloads=_timm_downloads, export_on_meta=True,
        ),
        ModelSource(
            key="hf", description="Hugging Face transformers: a local folder or a cached repo id",
            label="Hugging Face", placeholder="folder with config.json, or a cached repo id", extra="hf",
            build=hf_models.build_hf, names=hf_models.hf_cached_repos,
            cached=lambda name, weights: hf_models.hf_cached(name),
            script=hf_script,
            browse=Browse("folder", "Open model folder (config.json)", "Choose a folder with config.json",
                          "Open Model &Folder…", "Open a Hugging Face model folder (config.json, with or without weights)"),
            own_weights=OwnWeights("From the folder", "weights from the folder"),
            cache_where="local Hugging Face cache", short_name=_folder_name, structure_only=_hf_structure_only,
            export_on_meta=True, empty_names=hf_models.hf_empty_cache_text, local_folder=hf_models.hf_local_folder,
            safetensors_folder=_hf_safetensors_folder,
        ),
        ModelSource(
            key="py", description="your own code: py:MODULE:FACTORY or py:path/file.py:FACTORY (runs that code)",
            label="Your code", placeholder="path/to/file.py:FACTORY or module:FACTORY", extra=None,
            build=py_models.build_py, names=lambda pattern: [], cached=lambda name, weights: True,
            script=py_script, runs_code=True,
            browse=Browse("code", "Open model code", "Choose a .py file and its factory function",
                          "Open Model C&ode…", "Build the model with a function of your .py file (runs that code)",
                          "Python files (*.py);;All files (*)"),
            own_weights=OwnWeights("From your code", "built by your code"),
            searchable=False, short_name=_factory_name,
        ),
    )
}


class CodeFromFileError(ModelSourceError):
    """A file (plan, config, run record) names model code; it is not run from there."""


def check_code_origin(source: str, name: str | None, origin: str | None, *, flag: str = "--model",
                      what: str = "model code") -> None:
    """The one rule for specs that run code: only when the user named them.

    A spec of a source that runs code (``py:``) is built only when the user typed it (a
    command-line argument, a Python call, a dialog in the app that showed the code and was
    confirmed). Named by a file (a plan's or a config's ``model``, a run record), it is
    refused with one line saying how to run it deliberately. Every entry point (the
    commands, the app, the Trainer, the Lightning callback) reaches it through
    :meth:`ModelSpec.build <workbench.core.models.spec.ModelSpec.build>`.

    Args:
        source: Source key.
        name: Name within the source.
        origin: ``None`` when the user named the spec; otherwise what named it, e.g.
            ``"plan file team.plan.json"``.
        flag: The command-line flag that names such a spec (``--data`` for a data source).
        what: What the code is, for the message (``"data code"``).

    Raises:
        CodeFromFileError: A spec that runs code, named by a file.
        ModelSourceError: Unknown source.
    """
    if origin is None or not source_of(source).runs_code:
        return
    spec = f"{source}:{name}"
    raise CodeFromFileError(
        f"{origin} names {what} ({spec}), which is never run because a file names it; "
        f"to run it deliberately, name it yourself on the command line (e.g. {flag} {spec})"
    )


def architecture_source(source: str) -> str:
    """The row that builds a spec source's architecture: the default row (torchvision) for a
    checkpoint spec, whose architecture is a torchvision name (the spec's or the file's
    ``arch``); the source itself otherwise.

    Args:
        source: A spec's source (a row's key or :data:`CHECKPOINT_SOURCE`).

    Returns:
        The row's key (unchecked for any other source).
    """
    return DEFAULT_SOURCE if source == CHECKPOINT_SOURCE else source


def source_of(key: str) -> ModelSource:
    """The table row of a source.

    Args:
        key: ``"torchvision"``, ``"timm"``, ``"hf"`` or ``"py"``.

    Returns:
        The row.

    Raises:
        ModelSourceError: Unknown source.
    """
    try:
        return SOURCES[key]
    except KeyError:
        raise ModelSourceError(f"model source {key!r} is unknown; use one of {', '.join(SOURCES)}") from None


def parse_model_spec(text: str) -> tuple[str, str]:
    """Split a command-line model spec into ``(source, name)``.

    ``resnet18`` and ``torchvision:resnet18`` are torchvision; ``timm:NAME``,
    ``hf:PATH_OR_REPO_ID``, ``py:MODULE:FACTORY`` and ``py:path/file.py:FACTORY`` name the
    other sources.

    Args:
        text: The spec.

    Returns:
        ``(source key, name within the source)``.

    Raises:
        ModelSourceError: Empty spec, or a source prefix with no name.
    """
    spec = (text or "").strip()
    if not spec:
        raise ModelSourceError("empty model spec; give e.g. resnet18, timm:NAME, hf:FOLDER or py:MODULE:FACTORY")
    prefix, sep, rest = spec.partition(":")
    if sep and prefix in SOURCES:
        if not rest.strip():
            raise ModelSourceError(f"model spec {spec!r} names no model after '{prefix}:'")
        return prefix, rest.strip()
    return DEFAULT_SOURCE, spec


def model_block(source: str, name: str) -> dict[str, str]:
    """The plan file's ``model`` block for a source and name.

    Args:
        source: Source key.
        name: Name within the source.

    Returns:
        ``{"source": source, "name": name}``.

    Raises:
        ModelSourceError: Unknown source.
    """
    return {"source": source_of(source).key, "name": name}


def search_models(source: str, pattern: str = "*") -> list[tuple[str, bool]]:
    """Names of a source matching a glob, each with whether its default weights are cached.

    Args:
        source: Source key.
        pattern: fnmatch pattern.

    Returns:
        ``[(name, cached)]``; ``cached`` is about pretrained weights for registries
        (torchvision: the ``DEFAULT`` weights; timm: the default tag).

    Raises:
        ModelSourceError: Unknown source, or its extra is not installed.
    """
    row = source_of(source)
    weights = None if row.own_weights is not None else "DEFAULT"
    out = []
    for name in row.names(pattern):
        try:
            cached = row.cached(name, weights)
        except ModelSourceError:  # a torchvision model without pretrained weights
            cached = False
        out.append((name, cached))
    return out


def is_structure_only(source: str, name: str) -> bool:
    """Whether a model has no weights to read, so it opens on the meta device by default.

    True for a Hugging Face folder (or cached repo) that holds only ``config.json``.

    Args:
        source: Source key.
        name: Name within the source.

    Returns:
        True when the model has no weight files.
    """
    row = SOURCES.get(source)
    return row is not None and row.structure_only is not None and row.structure_only(name)


def build_from_source(
    source: str,
    name: str,
    weights: str | None = None,
    num_classes: int | None = None,
    *,
    meta: bool = False,
    allow_download: bool = False,
    trust_pickle: bool = False,
) -> nn.Module:
    """Build a model from any source of the table.

    Args:
        source: Source key.
        name: Name within the source.
        weights: Pretrained weights (torchvision weights name; timm ``DEFAULT`` or a tag;
            ignored by ``hf``, refused by ``py``), or ``None``.
        num_classes: Output classes of the head, or ``None`` to keep the model's.
        meta: Build on the ``meta`` device (shapes only; no weights read, no memory used).
        allow_download: Whether missing weights may be downloaded.
        trust_pickle: Whether pickled weight files may be read.

    Returns:
        The model.

    Raises:
        ModelSourceError: Anything the source cannot provide (one-line message).
    """
    req = BuildRequest(name=name, weights=weights, num_classes=num_classes, meta=meta,
                       allow_download=allow_download, trust_pickle=trust_pickle)
    return source_of(source).build(req)
