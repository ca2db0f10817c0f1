"""Loading a model for the window: what to load, and everything the window needs from it.

Qt-free: :func:`load_model` runs on a worker thread and returns a :class:`LoadedModel`
(the model, its :class:`~workbench.core.models.tree.ModelTree`, bytes per module and a one-line
note), so the GUI thread never walks a large model. Weights missing from the local cache are
never downloaded unless the request says so (the window asks first).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from torch import nn

from workbench.core.models import zoo
from workbench.core.plan.rules import FreezePlan
from workbench.core.models.tree import ModelTree, canonical_parameters, visible_path

__all__ = [
    "DEFAULT_MODEL",
    "diagnose",
    "LoadRequest",
    "LoadedModel",
    "default_request",
    "load_model",
    "loaded_from_model",
    "module_bytes",
    "request_for_plan",
]

#: The model the window opens with: small, and buildable without any download.
DEFAULT_MODEL = "resnet18"
_DEFAULT_WEIGHTS = "IMAGENET1K_V1"


@dataclass(frozen=True)
class LoadRequest:
    """What to load.

    Attributes:
        name: torchvision architecture (for a checkpoint: the architecture to build when the
            file does not name one).
        weights: torchvision weights name, or None for random initialisation.
        num_classes: classes of a new head, or None to keep the model's head.
        checkpoint: a ``.pt/.pth/.safetensors`` file to load, or None.
        allow_download: weights missing from the cache may be downloaded.
        note: extra text for the status bar (e.g. why weights are random).
    """

    name: str | None = DEFAULT_MODEL
    weights: str | None = None
    num_classes: int | None = None
    checkpoint: str | None = None
    allow_download: bool = False
    note: str = ""

    def describe(self) -> str:
        """``resnet18``, ``resnet18 · IMAGENET1K_V1 · 10 classes``, ``ckpt.pt``."""
        if self.checkpoint:
            return Path(self.checkpoint).name
        parts = [self.name or "?"]
        if self.weights:
            parts.append(self.weights)
        if self.num_classes:
            parts.append(f"{self.num_classes} classes")
        return " · ".join(parts)

    def needs_download(self) -> bool:
        """Whether the torchvision weights are named and missing from the local cache.

        Raises:
            ModelSourceError: unknown model or weights name.
        """
        if self.checkpoint or not self.weights or not self.name:
            return False
        return not zoo.weights_cached(self.name, self.weights)


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
    """

    model: nn.Module
    tree: ModelTree
    own_bytes: dict[str, int]
    spec: dict[str, Any]
    label: str
    note: str
    messages: list[str] = field(default_factory=list)
    param_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)


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
        model: the model.
        label: short name for the status bar.
        note: one line on its weights.
        spec: the plan ``model`` block (None values are dropped; the fingerprint is added).
        messages: further information.

    Returns:
        The loaded model with its tree, bytes per module and parameter shapes.
    """
    tree = ModelTree.from_model(model)
    clean = {k: v for k, v in (spec or {}).items() if v is not None}
    clean["fingerprint"] = tree.fingerprint
    shapes = dict(canonical_parameters(model))
    return LoadedModel(model, tree, module_bytes(model, tree), clean, label, note, list(messages or []), shapes)


def _finish(model: nn.Module, spec: dict[str, Any], label: str, note: str, messages: list[str]) -> LoadedModel:
    return loaded_from_model(model, label, note, spec, messages)


def load_model(request: LoadRequest) -> LoadedModel:
    """Build or read the model a request describes (slow: run it off the GUI thread).

    A checkpoint is loaded with its own architecture when the file names one, otherwise
    with ``request.name``.

    Args:
        request: what to load.

    Returns:
        The model with its tree and byte counts.

    Raises:
        ModelSourceError: unknown model or weights, weights not cached and no download
            allowed, an unreadable or mismatching checkpoint (message says what to do).
    """
    if request.checkpoint:
        return _load_checkpoint(request)
    if not request.name:
        raise zoo.ModelSourceError("choose a model architecture (for example resnet18)")
    model = zoo.build_model(
        request.name, request.weights, request.num_classes, allow_download=request.allow_download
    )
    note = request.note or (f"{request.weights} weights" if request.weights else "random init")
    spec = {
        "source": "torchvision",
        "name": request.name,
        "weights": request.weights,
        "num_classes": request.num_classes,
    }
    return _finish(model, spec, request.name, note, [])


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
    return _finish(model, spec, arch or path.stem, note, messages)


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
    wanted = (name, info.get("weights"), info.get("num_classes"), checkpoint)
    have = (current.get("name"), current.get("weights"), current.get("num_classes"), current.get("checkpoint"))
    if not fp and wanted == have:
        return None
    num_classes = info.get("num_classes")
    return LoadRequest(
        name=name,
        weights=None if checkpoint else info.get("weights"),
        num_classes=num_classes if isinstance(num_classes, int) and not isinstance(num_classes, bool) else None,
        checkpoint=checkpoint,
    )


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
