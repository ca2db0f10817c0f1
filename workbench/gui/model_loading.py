"""Loading a model for the window: what to load, and everything the window needs from it.

Qt-free: :func:`load_model` runs on a worker thread and returns a :class:`LoadedModel`
(the model, its :class:`~workbench.core.models.tree.ModelTree`, bytes per module and a one-line
note), so the GUI thread never walks a large model. Weights missing from the local cache are
never downloaded unless the request says so (the window asks first).

A request names any model source of :mod:`workbench.core.models.sources` (torchvision, timm,
Hugging Face, your own code) and may ask for the structure only (the ``meta`` device); the
model is built with :meth:`ModelSpec.build <workbench.core.models.spec.ModelSpec.build>`.
:func:`path_kind` and :func:`factory_candidates` tell the window what a dropped or opened
path is, and which functions of a ``.py`` file may build the model (read without running it).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from workbench.core.models import zoo
from workbench.core.models.sources import DEFAULT_SOURCE, SOURCES, is_structure_only, parse_model_spec, source_of
from workbench.core.models.spec import ModelSpec
from workbench.core.plan.rules import FreezePlan
from workbench.core.plan.tree import ModelTree, visible_path

if TYPE_CHECKING:  # pragma: no cover - typing only
    from torch import nn

__all__ = [
    "DEFAULT_MODEL",
    "diagnose",
    "LoadRequest",
    "LoadedModel",
    "PathKind",
    "default_request",
    "factory_candidates",
    "load_model",
    "loaded_from_model",
    "module_bytes",
    "path_kind",
    "request_for_plan",
    "source_for_path",
]

#: The model the window opens with: small, and buildable without any download.
DEFAULT_MODEL = "resnet18"
_DEFAULT_WEIGHTS = "IMAGENET1K_V1"

#: What a path given to the window is: a plan, a checkpoint, a folder, model code (a source whose
#: code runs), or a file another model source opens.
PathKind = Literal["plan", "checkpoint", "folder", "code", "model"]


@dataclass(frozen=True)
class LoadRequest:
    """What to load.

    A torchvision ``name`` written as a prefixed spec (``"timm:resnet10t"``, ``"hf:./bert"``,
    ``"py:net.py:build"``) moves to its source.

    Attributes:
        name: architecture within the source: a torchvision or timm name, a Hugging Face
            folder or cached repo id, ``MODULE:FACTORY`` or ``file.py:FACTORY`` (for a
            checkpoint: the torchvision architecture to build when the file names none).
        weights: torchvision weights name, a timm tag (``DEFAULT``: the default pretrained
            tag), or None for random initialisation (Hugging Face folders bring their own).
        num_classes: classes of a new head, or None to keep the model's head.
        checkpoint: a ``.pt/.pth/.safetensors`` file to load, or None.
        allow_download: weights missing from the cache may be downloaded.
        note: extra text for the status bar (e.g. why weights are random).
        source: ``"torchvision"``, ``"timm"``, ``"hf"`` or ``"py"`` (the source table's keys).
        meta: build the structure only, on the ``meta`` device (no weights read or allocated);
            a Hugging Face folder without weights is always built so.
        origin: None when the user named the model and, for code (``py:``), confirmed it
            (the command line, a Python call, the window's confirmation dialog); otherwise
            what named it (``"plan file x.json"``, ``"the model bar"``). Code is never run
            with an origin: :func:`load_model` refuses it with the same one line as the
            command line (:func:`~workbench.core.models.sources.check_code_origin`).
    """

    name: str | None = DEFAULT_MODEL
    weights: str | None = None
    num_classes: int | None = None
    checkpoint: str | None = None
    allow_download: bool = False
    note: str = ""
    source: str = DEFAULT_SOURCE
    meta: bool = False
    origin: str | None = None

    def __post_init__(self) -> None:
        if self.source == DEFAULT_SOURCE and self.name and ":" in self.name:
            source, name = parse_model_spec(self.name)
            object.__setattr__(self, "source", source)
            object.__setattr__(self, "name", name)
        source_of(self.source)  # an unknown source fails here, with the known ones named

    @property
    def spec_text(self) -> str:
        """The command-line spec: ``resnet18``, ``timm:resnet10t``, ``hf:/data/bert``."""
        name = self.name or "?"
        return name if self.source == DEFAULT_SOURCE else f"{self.source}:{name}"

    def describe(self) -> str:
        """``resnet18``, ``resnet18 · IMAGENET1K_V1 · 10 classes``, ``hf:bert · structure only``, ``ckpt.pt``."""
        if self.checkpoint:
            return Path(self.checkpoint).name
        parts = [self.spec_text]
        if self.weights:
            parts.append(self.weights)
        if self.num_classes:
            parts.append(f"{self.num_classes} classes")
        if self.meta:
            parts.append("structure only")
        return " · ".join(parts)

    def needs_download(self) -> bool:
        """Whether pretrained weights are named and missing from the local cache.

        Only sources with a ``downloads`` check in the source table (torchvision, timm) ever
        download; a structure-only request reads no weights. An unknown timm name answers
        False (loading then says what is wrong).

        Raises:
            ModelSourceError: unknown torchvision model or weights name, or a missing extra.
        """
        if self.checkpoint or not self.weights or not self.name or self.meta:
            return False
        downloads = source_of(self.source).downloads
        return downloads is not None and downloads(self.name, self.weights)


@dataclass
class LoadedModel:
    """A loaded model and what the window shows about it.

    Attributes:
        model: the model, on CPU.
        tree: its module tree.
        own_bytes: bytes of each module's own parameters (``{path: bytes}``).
        spec: the plan's ``model`` block for it (source, name, weights, checkpoint,
            num_classes, fingerprint).
        label: short name for the status bar and the title (``resnet18``).
        note: one line on the weights (``random init (weights not cached)``).
        messages: further information (missing/unexpected checkpoint keys).
        param_shapes: ``{parameter name: shape}`` in the plain model's names.
        meta: the model is on the ``meta`` device (structure only: no weights to train or verify).
    """

    model: nn.Module
    tree: ModelTree
    own_bytes: dict[str, int]
    spec: dict[str, Any]
    label: str
    note: str
    messages: list[str] = field(default_factory=list)
    param_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    meta: bool = False


def module_bytes(model: nn.Module, tree: ModelTree) -> dict[str, int]:
    """Bytes of each tree module's own parameters, each tensor counted once.

    Parameters inside workbench internals (parametrizations) count for the module that owns
    them, as in the tree.

    Args:
        model: the model.
        tree: its tree.

    Returns:
        ``{path: bytes}`` for modules that own parameters.
    """
    out: dict[str, int] = {}
    for name, p in model.named_parameters():  # named_parameters() yields shared tensors once
        owner = visible_path(name.rpartition(".")[0])
        while owner and owner not in tree.nodes:
            owner = owner.rpartition(".")[0]
        out[owner] = out.get(owner, 0) + p.numel() * p.element_size()
    return out


def default_request() -> LoadRequest:
    """The start-up model: resnet18 with ImageNet weights if cached, else random init.

    Returns:
        A request that never downloads.
    """
    try:
        cached = zoo.weights_cached(DEFAULT_MODEL, _DEFAULT_WEIGHTS)
    except zoo.ModelSourceError:
        cached = False
    if cached:
        return LoadRequest(DEFAULT_MODEL, _DEFAULT_WEIGHTS)
    return LoadRequest(DEFAULT_MODEL, None, note="random init (weights not cached)")


def loaded_from_model(
    model: nn.Module,
    label: str = "model",
    note: str = "",
    spec: Mapping[str, Any] | None = None,
    messages: list[str] | None = None,
) -> LoadedModel:
    """Wrap a model built elsewhere (a script, a test) for the window.

    Args:
        model: the model (on any device, ``meta`` included).
        label: short name for the status bar.
        note: one line on its weights.
        spec: the plan ``model`` block (None values are dropped; the fingerprint is added).
        messages: further information.

    Returns:
        The loaded model with its tree, bytes per module and parameter shapes.
    """
    from workbench.core.plan.tree_from_model import canonical_parameters

    tree = ModelTree.from_model(model)
    clean = {k: v for k, v in (spec or {}).items() if v is not None}
    clean["fingerprint"] = tree.fingerprint
    shapes = dict(canonical_parameters(model))
    meta = any(p.is_meta for p in model.parameters())
    return LoadedModel(
        model, tree, module_bytes(model, tree), clean, label, note, list(messages or []), shapes, meta=meta
    )


def _note(request: LoadRequest, meta: bool) -> str:
    """One line on the weights of a built model."""
    if meta:
        return "structure only (meta device: no weights read or allocated)"
    if request.note:
        return request.note
    own = source_of(request.source).own_weights
    if own is not None:
        return own.note  # a folder without weights is built structure-only
    return f"{request.weights} weights" if request.weights else "random init"


def load_model(request: LoadRequest) -> LoadedModel:
    """Build or read the model a request describes (slow: run it off the GUI thread).

    A checkpoint is loaded with its own architecture when the file names one, otherwise
    with ``request.name``. Any other request is built by :meth:`ModelSpec.build`, on the
    ``meta`` device when it asks for the structure only or names a Hugging Face folder
    without weights.

    Args:
        request: what to load.

    Returns:
        The model with its tree and byte counts.

    Raises:
        ModelSourceError: unknown model or weights (with close matches), weights not
            cached and no download allowed, a folder without ``config.json``, a factory that
            raises or returns no module, an unreadable or mismatching checkpoint (the
            message says what to do).
    """
    if request.checkpoint:
        return _load_checkpoint(request)
    if not request.name:
        raise zoo.ModelSourceError("choose a model architecture (for example resnet18)")
    spec = ModelSpec(
        source=request.source,
        name=request.name,
        weights=request.weights,
        num_classes=request.num_classes,
        origin=request.origin,  # code named by a plan and not confirmed is refused by build()
    )
    meta = request.meta or is_structure_only(request.source, request.name)
    model = spec.build(allow_download=request.allow_download, meta=meta)
    block = {
        "source": request.source,
        "name": request.name,
        "weights": request.weights,
        "num_classes": request.num_classes,
    }
    label = source_of(request.source).short_name(request.name)
    return loaded_from_model(model, label, _note(request, meta), block)


def _load_checkpoint(request: LoadRequest) -> LoadedModel:
    path = Path(request.checkpoint or "")
    try:
        result = zoo.load_checkpoint(path, num_classes=request.num_classes)
        assumed = False
    except zoo.ModelSourceError as first:
        if not request.name:
            raise
        try:  # the file may not name its architecture: use the one chosen in the window
            result = zoo.load_checkpoint(path, arch=request.name, num_classes=request.num_classes)
        except zoo.ModelSourceError:
            raise first from None
        assumed = True
    arch = result.arch or request.name
    model = result.model
    messages: list[str] = []
    if assumed:
        messages.append(f"{path.name} does not name its architecture; loaded as {arch}")
    if result.missing_keys:
        messages.append(
            f"{len(result.missing_keys)} weights not in the checkpoint kept their initial values "
            f"({', '.join(result.missing_keys[:3])}{'…' if len(result.missing_keys) > 3 else ''})"
        )
    if result.unexpected_keys:
        messages.append(f"{len(result.unexpected_keys)} checkpoint entries the model has no place for were ignored")
    spec = {
        "source": "checkpoint",
        "name": arch,
        "checkpoint": str(path),
        "num_classes": zoo.current_num_classes(model),
    }
    note = f"checkpoint {path.name}" + (" (partial match)" if result.missing_keys else "")
    return loaded_from_model(model, arch or path.stem, note, spec, messages)


def request_for_plan(
    plan: FreezePlan, current: Mapping[str, Any] | None, plan_dir: str | Path | None = None
) -> LoadRequest | None:
    """The model a plan names, when it is not the one loaded now.

    Args:
        plan: the plan just opened.
        current: the loaded model's spec (:attr:`LoadedModel.spec`), or None.
        plan_dir: folder of the plan file (a relative checkpoint path is relative to it).

    Returns:
        A request for the plan's model, or None when the loaded model fits (same
        fingerprint, or the plan names no model).
    """
    info = plan.model or {}
    current = current or {}
    fp = info.get("fingerprint")
    if fp and fp == current.get("fingerprint"):
        return None
    name = info.get("name") or info.get("arch")
    checkpoint = info.get("checkpoint")
    if checkpoint and plan_dir is not None and not Path(checkpoint).is_absolute():
        checkpoint = str(Path(plan_dir) / checkpoint)
    if not name and not checkpoint:
        return None
    source = info.get("source")
    source = source if source in SOURCES and not checkpoint else DEFAULT_SOURCE
    wanted = (name, info.get("weights"), info.get("num_classes"), checkpoint)
    have = (current.get("name"), current.get("weights"), current.get("num_classes"), current.get("checkpoint"))
    have_source = current.get("source") if current.get("source") in SOURCES and not checkpoint else DEFAULT_SOURCE
    if not fp and wanted == have and source == have_source:
        return None
    num_classes = info.get("num_classes")
    return LoadRequest(
        name=name,
        weights=None if checkpoint else info.get("weights"),
        num_classes=num_classes if isinstance(num_classes, int) and not isinstance(num_classes, bool) else None,
        checkpoint=checkpoint,
        source=source,
        origin="the plan's model block",
    )


def path_kind(path: str | Path) -> PathKind | None:
    """What a file or folder given to the window (File ▸ Open, a drop, a recent file) is.

    Args:
        path: the path.

    Returns:
        ``"plan"`` (``.json`` file), ``"checkpoint"`` (``.pt``, ``.pth``, ``.safetensors``...),
        ``"folder"`` (a folder: a Hugging Face model when it holds ``config.json``),
        ``"code"`` (a file of a source that runs code: ``.py``, a model factory), ``"model"``
        (a file another source of the table opens, see :func:`source_for_path`), or None
        for anything else.
    """
    p = Path(path)
    if p.is_dir():
        return "folder"
    suffix = p.suffix.lower()
    if suffix == ".json":
        return "plan"
    if suffix in zoo.CHECKPOINT_SUFFIXES:
        return "checkpoint"
    source = source_for_path(p)
    if source is None:
        return None
    return "code" if source_of(source).runs_code else "model"


def source_for_path(path: str | Path) -> str | None:
    """The model source that opens a path given to the window (a drop, a recent file, File ▸ Open).

    Args:
        path: the file or folder.

    Returns:
        The first row of the source table whose ``browse`` takes the path (a folder: the
        source that browses folders, ``"hf"``; ``x.py``: ``"py"``), or None.
    """
    for key, row in SOURCES.items():
        if row.browse is not None and row.browse.takes(path):
            return key
    return None


def factory_candidates(path: str | Path) -> list[str]:
    """Top-level functions and classes of a ``.py`` file that may build the model.

    The file is parsed, not run. Names starting with ``_`` are left out; functions come
    before classes, each in file order.

    Args:
        path: the ``.py`` file.

    Returns:
        The names (possibly empty).

    Raises:
        ModelSourceError: the file cannot be read or is not valid Python.
    """
    p = Path(path)
    try:
        tree = ast.parse(p.read_text(encoding="utf-8"), filename=str(p))
    except (OSError, UnicodeDecodeError) as e:
        raise zoo.ModelSourceError(f"cannot read {p}: {e}; check the path and that it is a UTF-8 text file") from None
    except SyntaxError as e:
        raise zoo.ModelSourceError(f"{p.name} is not valid Python (line {e.lineno}: {e.msg}); fix the file") from None
    funcs = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    classes = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
    return [n for n in funcs + classes if not n.startswith("_")]


def diagnose(model: nn.Module, plan: FreezePlan) -> list[Any]:
    """The freeze doctor's findings for ``model`` with ``plan`` applied (slow: off the GUI thread).

    The plan is applied, the model put in train mode (as a training loop would) and checked
    with :func:`workbench.core.checks.doctor.check`; then the plan is removed, so the model is left
    as it was.

    Args:
        model: the model.
        plan: the plan.

    Returns:
        :class:`~workbench.core.checks.findings.Finding` list, errors first.

    Raises:
        PlanError: the plan does not fit the model.
    """
    from workbench.core.checks import doctor
    from workbench.core.freezing.apply import apply_plan

    applied = apply_plan(model, plan)
    try:
        model.train()
        return doctor.check(model, None, plan)
    finally:
        applied.remove(merge=False)
