"""How a standalone script rebuilds a model of each source: the export hook of the source table.

=============  ==============================================================  =============
source         the script builds the model with                                it imports
=============  ==============================================================  =============
torchvision    ``torchvision.models.get_model(ARCH, weights=WEIGHTS)``           torchvision
timm           ``timm.create_model(ARCH, pretrained=PRETRAINED)``, then          timm
               ``reset_classifier(NUM_CLASSES)``
hf             ``transformers.AUTO_CLASS.from_pretrained(MODEL_DIR)`` (or         transformers
               ``from_config`` for a folder with only ``config.json``)
py             your factory: ``from MODULE import FACTORY`` or the file loaded    your module
               with ``importlib``
=============  ==============================================================  =============

Each row of :data:`workbench.core.models.sources.SOURCES` names its builder here (its
``script`` field): a function from a :class:`ScriptRequest` to a :class:`ScriptModel` (import
lines, constants, and code ending in ``build_model()``). A checkpoint on top of any of them is
read with safetensors or ``torch.load(weights_only=True)`` (:func:`checkpoint_parts`). The
exporter (:mod:`workbench.core.export.model_code`) adds the data and the training loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from workbench.core.models.heads import find_head
from workbench.core.models.hf_models import auto_class_name, hf_local_folder, hf_weight_files
from workbench.core.models.py_models import split_py_name
from workbench.core.models.source_errors import ModelSourceError
from workbench.core.models.timm_models import timm_model_name

if TYPE_CHECKING:  # pragma: no cover - typing only
    from torch import nn

__all__ = [
    "ScriptModel",
    "ScriptRequest",
    "checkpoint_parts",
    "heads_line",
    "hf_script",
    "library_script",
    "py_script",
    "script_path",
    "timm_script",
    "torchvision_script",
]


def script_path(path: Path, script_dir: Path | None) -> str:
    """How the script names a file: relative to the script's folder when inside it, else absolute.

    Args:
        path: an absolute path.
        script_dir: the folder the script is written to, or None.

    Returns:
        The path as the script writes it.
    """
    if script_dir is not None:
        try:
            return path.relative_to(script_dir.resolve()).as_posix()
        except ValueError:
            pass
    return str(path)


@dataclass(frozen=True)
class ScriptRequest:
    """What a source's script builder is asked to rebuild.

    Attributes:
        name: the name within the source (torchvision: the architecture; empty when a
            checkpoint names none).
        weights: the weights name or tag, or None (random initialisation).
        num_classes: classes of a new head, or None to keep the model's.
        checkpoint: a checkpoint file loaded on top, or None.
        model: the model's structure (meta tensors are fine).
        script_dir: the script's folder (files inside it are named relative to it).
    """

    name: str
    weights: str | None
    num_classes: int | None
    checkpoint: str | None
    model: nn.Module
    script_dir: Path | None = None

    def path(self, path: Path) -> str:
        """How the script names ``path`` (see :func:`script_path`)."""
        return script_path(path, self.script_dir)


@dataclass
class ScriptModel:
    """The part of the script that builds the model.

    Attributes:
        imports: import lines of the model's library (``import timm``...).
        needs: the libraries, for the script's docstring ("torch and timm").
        constants: lines of the model block (``ARCH = ...``).
        code: the functions ending in ``build_model()``.
    """

    imports: list[str]
    needs: str
    constants: list[str]
    code: str


HEAD_CODE = '''

def set_module(model: nn.Module, path: str, module: nn.Module) -> None:
    """Replace the submodule at dotted ``path``."""
    parent, _, leaf = path.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, leaf, module)


def replace_head(model: nn.Module, num_classes: int) -> None:
    """New, trainable classification head(s) with ``num_classes`` outputs (no-op when equal)."""
    first = model.get_submodule(HEADS[0])
    out = first.out_features if isinstance(first, nn.Linear) else first.out_channels
    if out == num_classes:
        return
    for path in HEADS:
        try:
            old = model.get_submodule(path)
        except AttributeError:  # e.g. googlenet's auxiliary heads, absent with pretrained weights
            continue
        if isinstance(old, nn.Linear):
            new = nn.Linear(old.in_features, num_classes, bias=old.bias is not None,
                            device=old.weight.device, dtype=old.weight.dtype)
        else:  # squeezenet's 1x1 convolution
            new = nn.Conv2d(old.in_channels, num_classes, kernel_size=old.kernel_size, stride=old.stride,
                            padding=old.padding, bias=old.bias is not None,
                            device=old.weight.device, dtype=old.weight.dtype)
        set_module(model, path, new)
    if isinstance(getattr(model, "num_classes", None), int):
        model.num_classes = num_classes
    for owner in (model, getattr(model, "config", None)):  # transformers: its loss reads num_labels
        if isinstance(getattr(owner, "num_labels", None), int):
            owner.num_labels = num_classes
'''


_CHECKPOINT_CODE = '''

def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """Tensors of a checkpoint (.safetensors, or .pt/.pth read with weights_only=True)."""
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        state = load_file(str(path))
    else:
        state = torch.load(path, map_location="cpu", weights_only=True)
        for key in ("state_dict", "model_state_dict", "model", "module", "net"):
            if isinstance(state, dict) and isinstance(state.get(key), dict):
                state = state[key]
                break
    state = {k.replace("_orig_mod.", ""): v for k, v in state.items() if isinstance(v, torch.Tensor)}
    for prefix in ("module.", "model."):  # DDP / Lightning wrappers
        if state and all(k.startswith(prefix) for k in state):
            state = {k[len(prefix):]: v for k, v in state.items()}
    return state
'''


_BUILD_TORCHVISION = '''

def build_model() -> nn.Module:
    """The model the plan was made for."""
    if WEIGHTS is None and NUM_CLASSES is not None:
        return torchvision.models.get_model(ARCH, weights=None, num_classes=NUM_CLASSES)
    model = torchvision.models.get_model(ARCH, weights=WEIGHTS)
    if NUM_CLASSES is not None:
        replace_head(model, NUM_CLASSES)
    return model
'''

_BASE_TORCHVISION = '''

def base_model() -> nn.Module:
    """The architecture, before the checkpoint."""
    return torchvision.models.get_model(ARCH, weights=WEIGHTS)
'''

_BUILD_FROM_CHECKPOINT = '''

def build_model() -> nn.Module:
    """The model the plan was made for: architecture, checkpoint weights, then the final head."""
    model = base_model()
    path = Path(CHECKPOINT)
    state = read_state_dict(path if path.is_absolute() else HERE / path)
    head = state.get(HEADS[0] + ".weight")
    if head is not None:
        replace_head(model, int(head.shape[0]))  # the checkpoint's own number of classes
    model.load_state_dict(state, strict=False)
    if NUM_CLASSES is not None:
        replace_head(model, NUM_CLASSES)
    return model
'''

_BASE_TIMM = '''

def base_model() -> nn.Module:
    """The timm model (pretrained weights through timm's own loader when PRETRAINED)."""
    return timm.create_model(ARCH, pretrained=PRETRAINED)
'''

_BUILD_TIMM = '''

def build_model() -> nn.Module:
    """The model the plan was made for: the timm model, then its classifier for NUM_CLASSES."""
    model = base_model()
    if NUM_CLASSES is not None and getattr(model, "num_classes", None) != NUM_CLASSES:
        model.reset_classifier(NUM_CLASSES)
    return model
'''

_BASE_HF = '''

def base_model(num_labels: int | None = None) -> nn.Module:
    """The transformers model: the folder's weights (safetensors), or its config alone."""
    path = Path(MODEL_DIR).expanduser()
    where = str(path if path.is_absolute() or not (HERE / path).is_dir() else HERE / path)
    config = transformers.AutoConfig.from_pretrained(where, local_files_only=True, trust_remote_code=False)
    if num_labels is not None:
        config.num_labels = num_labels
    auto = getattr(transformers, AUTO_CLASS)
    if not LOAD_WEIGHTS:
        return auto.from_config(config, trust_remote_code=False).train()
    model = auto.from_pretrained(where, config=config, local_files_only=True, use_safetensors=True, trust_remote_code=False,
                                 ignore_mismatched_sizes=num_labels is not None)
    return model.train()
'''

_BUILD_HF = '''

def build_model() -> nn.Module:
    """The model the plan was made for (NUM_CLASSES: a classification head of that size)."""
    return base_model(NUM_CLASSES)
'''

_FILE_FACTORY = '''

def model_factory() -> nn.Module:
    """Your model code: runs MODEL_FILE and calls its FACTORY()."""
    path = Path(MODEL_FILE)
    path = path if path.is_absolute() else HERE / path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, FACTORY)()
'''

_BASE_PY = '''

def base_model() -> nn.Module:
    """Your model, from your factory."""
    return model_factory()
'''

_BUILD_PY = '''

def build_model() -> nn.Module:
    """The model the plan was made for: your factory's model, then the head for NUM_CLASSES."""
    model = base_model()
    if NUM_CLASSES is not None:
        replace_head(model, NUM_CLASSES)
    return model
'''

_BUILD_PY_PLAIN = '''

def build_model() -> nn.Module:
    """The model the plan was made for: your factory's model."""
    return model_factory()
'''


def heads_line(model: nn.Module) -> str:
    """The script's ``HEADS = [...]`` line: the classification head(s) ``replace_head`` swaps.

    Args:
        model: the model's structure.

    Returns:
        The line.

    Raises:
        ModelSourceError: the model has no classification head.
    """
    heads = find_head(model)
    if not heads:
        raise ModelSourceError(
            f"no classification head found in {type(model).__name__}; the script needs one to fit the "
            "checkpoint's or NUM_CLASSES' outputs"
        )
    return f"HEADS = {heads!r}  # classification head(s), replaced for NUM_CLASSES"


def checkpoint_parts(req: ScriptRequest) -> tuple[list[str], str]:
    """The constants and code that read ``req.checkpoint`` into the built architecture.

    Args:
        req: the request (``checkpoint`` set).

    Returns:
        ``(constant lines, code)``; the code defines ``build_model()`` on top of the
        builder's ``base_model()``.

    Raises:
        ModelSourceError: the model has no classification head.
    """
    assert req.checkpoint is not None
    path = req.path(Path(req.checkpoint).expanduser().resolve())
    lines = [f"CHECKPOINT = {path!r}", heads_line(req.model)]
    return lines, _CHECKPOINT_CODE + HEAD_CODE + _BUILD_FROM_CHECKPOINT


def library_script(library: str, req: ScriptRequest, lines: list[str], base: str, build: str) -> ScriptModel:
    """The script part of a model a library builds (``import LIBRARY``).

    Args:
        library: the module the script imports.
        req: the request.
        lines: the constants.
        base: code defining ``base_model()``.
        build: code defining ``build_model()`` without a checkpoint.

    Returns:
        ``base + build``, or with a checkpoint the library's architecture given its weights.

    Raises:
        ModelSourceError: a checkpoint on a model without a classification head.
    """
    imports, needs = [f"import {library}"], f"torch and {library}"
    if req.checkpoint:
        more, code = checkpoint_parts(req)
        return ScriptModel(imports, needs, lines + more, base + code)
    return ScriptModel(imports, needs, lines, base + build)


def torchvision_script(req: ScriptRequest) -> ScriptModel:
    """``torchvision.models.get_model(ARCH, weights=WEIGHTS)``, then the head for ``NUM_CLASSES``.

    Args:
        req: the request (``name``: the torchvision architecture).

    Returns:
        The script part.

    Raises:
        ModelSourceError: no architecture name, or no classification head.
    """
    if not req.name:
        raise ModelSourceError(
            "the checkpoint does not say which torchvision architecture it is; give the model "
            "name (e.g. --model resnet18) so the script can build it"
        )
    lines = [f"ARCH = {req.name!r}", f"WEIGHTS = {req.weights!r}  # None: random initialisation",
             f"NUM_CLASSES = {req.num_classes!r}  # None: keep the head"]
    if req.checkpoint:
        more, code = checkpoint_parts(req)
        return ScriptModel(["import torchvision"], "torch and torchvision", lines + more, _BASE_TORCHVISION + code)
    lines.append(heads_line(req.model))
    return ScriptModel(["import torchvision"], "torch and torchvision", lines, HEAD_CODE + _BUILD_TORCHVISION)


def timm_script(req: ScriptRequest) -> ScriptModel:
    """``timm.create_model(ARCH, pretrained=PRETRAINED)``, then ``reset_classifier(NUM_CLASSES)``.

    Args:
        req: the request.

    Returns:
        The script part.

    Raises:
        ModelSourceError: a checkpoint on a model without a classification head.
    """
    lines = [f"ARCH = {timm_model_name(req.name, req.weights)!r}  # timm model name",
             f"PRETRAINED = {req.weights is not None!r}  # False: random initialisation",
             f"NUM_CLASSES = {req.num_classes!r}  # None: keep the classifier"]
    return library_script("timm", req, lines, _BASE_TIMM, _BUILD_TIMM)


def hf_script(req: ScriptRequest) -> ScriptModel:
    """``transformers.AUTO_CLASS.from_pretrained(MODEL_DIR)`` (``from_config`` without weights).

    Args:
        req: the request (``model``: a transformers model with a config).

    Returns:
        The script part.

    Raises:
        ModelSourceError: pickled-only weights (the script reads safetensors only), a model
            without a transformers config.
    """
    folder = hf_local_folder(req.name)
    where = req.path(folder.resolve()) if folder is not None else req.name
    safe, pickled = hf_weight_files(req.name)
    if pickled and not safe:
        raise ModelSourceError(
            f"{req.name!r} holds only pickled weights ({pickled[0].name}); the script loads safetensors only: "
            "convert them (model.save_pretrained(folder, safe_serialization=True)) and export again"
        )
    config = getattr(req.model, "config", None)
    if config is None:
        raise ModelSourceError(f"{type(req.model).__name__} has no transformers config; the script cannot rebuild it")
    lines = [f"MODEL_DIR = {where!r}  # a folder with config.json, or a repo id in the Hugging Face cache",
             f"AUTO_CLASS = {auto_class_name(config, req.num_classes)!r}",
             f"LOAD_WEIGHTS = {bool(safe)!r}  # False: the folder holds config.json only (random initialisation)",
             f"NUM_CLASSES = {req.num_classes!r}  # None: keep the config's num_labels"]
    return library_script("transformers", req, lines, _BASE_HF, _BUILD_HF)


def py_script(req: ScriptRequest) -> ScriptModel:
    """Your factory: ``from MODULE import FACTORY``, or the ``.py`` file loaded with ``importlib``.

    Args:
        req: the request (``name``: ``MODULE:FACTORY`` or ``file.py:FACTORY``).

    Returns:
        The script part.

    Raises:
        ModelSourceError: a bad ``py`` name, or a head to replace and none found.
    """
    target, factory = split_py_name(req.name)
    if target.endswith(".py"):
        path = req.path(Path(target).expanduser().resolve())
        imports = ["import importlib.util"]
        lines = [f"MODEL_FILE = {path!r}  # your model code: it runs when the script starts", f"FACTORY = {factory!r}"]
        code = _FILE_FACTORY
        needs = f"torch and your {Path(target).name}"
    else:
        imports = [f"from {target} import {factory} as model_factory  # your model code"]
        lines, code, needs = [], "", f"torch and your module {target}"
    lines.append(f"NUM_CLASSES = {req.num_classes!r}  # None: keep the head")
    if req.checkpoint:
        more, ck = checkpoint_parts(req)
        return ScriptModel(imports, needs, lines + more, code + _BASE_PY + ck)
    if req.num_classes is not None:
        lines.append(heads_line(req.model))
        return ScriptModel(imports, needs, lines, code + HEAD_CODE + _BASE_PY + _BUILD_PY)
    return ScriptModel(imports, needs, lines, code + _BUILD_PY_PLAIN)
