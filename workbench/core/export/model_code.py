"""The exported script's model and data: how it builds the model (per model source) and what it
trains it on (images for vision models, token ids for text models).

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

A checkpoint on top of any of them is read with safetensors or ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from torch import nn

from workbench.core.export.common import ExportError, script_path
from workbench.core.models.hf_models import auto_class_name, hf_local_folder, hf_weight_files
from workbench.core.models.py_models import split_py_name
from workbench.core.models.sources import default_input_size
from workbench.core.models.spec import ModelSpec
from workbench.core.models.timm_models import timm_model_name
from workbench.core.models.zoo import ModelSourceError, current_num_classes, find_head, model_input_size
from workbench.core.training.data import SYNTHETIC_SEQ_LEN, DataError, text_task_of

__all__ = ["ModelSection", "model_section"]


@dataclass
class ModelSection:
    """The parts of the script that depend on the model.

    Attributes:
        imports: import lines of the model's library (``import timm``...).
        needs: the libraries, for the script's docstring ("torch and timm").
        constants: lines of the model block (``ARCH = ...``).
        code: the functions ending in ``build_model()``.
        data_constants: lines of the data block (sizes, classes, vocabulary).
        data_code: ``make_batches`` and the loss of one batch (``batch_loss``).
        size_arg: the command-line option of the input size (``--image-size`` / ``--seq-len``).
        size_default: its default's constant name.
    """

    imports: list[str]
    needs: str
    constants: list[str]
    code: str
    data_constants: list[str] = field(default_factory=list)
    data_code: str = ""
    size_arg: str = "--image-size"
    size_default: str = "IMAGE_SIZE"


_HEAD_CODE = '''

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

_IMAGE_DATA = '''

def make_batches(steps: int, batch_size: int, image_size: int, device: torch.device):
    """Random images and labels. Replace with your DataLoader."""
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        x = torch.randn(batch_size, 3, image_size, image_size, generator=g)
        y = torch.randint(0, OUTPUTS, (batch_size,), generator=g)
        yield x.to(device), y.to(device)


def batch_loss(model: nn.Module, batch) -> torch.Tensor:
    """Cross-entropy of the model's logits on one (images, labels) batch."""
    x, y = batch
    out = model(x)
    if not isinstance(out, torch.Tensor):  # googlenet / inception (logits, aux...), transformers .logits
        out = out.logits if hasattr(out, "logits") else out[0]
    return nn.functional.cross_entropy(out, y)
'''

_TEXT_DATA = '''

def make_batches(steps: int, batch_size: int, seq_len: int, device: torch.device):
    """Random token ids within the vocabulary, with {what}.

    Replace with your DataLoader of tokenized text (dicts of input_ids, attention_mask, labels).
    """
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        ids = torch.randint(0, VOCAB_SIZE, (batch_size, seq_len), generator=g)
        labels = {labels}
        batch = {{"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}}
        yield {{k: v.to(device) for k, v in batch.items()}}


def batch_loss(model: nn.Module, batch: dict) -> torch.Tensor:
    """The model's own loss on a dict batch: model(**batch).loss."""
    return model(**batch).loss
'''


def _heads(model: nn.Module) -> list[str]:
    heads = find_head(model)
    if not heads:
        raise ExportError(
            f"no classification head found in {type(model).__name__}; the script needs one to fit the "
            "checkpoint's or NUM_CLASSES' outputs"
        )
    return heads


def _heads_line(model: nn.Module) -> str:
    return f"HEADS = {_heads(model)!r}  # classification head(s), replaced for NUM_CLASSES"


def _checkpoint_parts(spec: ModelSpec, model: nn.Module, script_dir: Path | None) -> tuple[list[str], str]:
    assert spec.checkpoint is not None
    path = script_path(Path(spec.checkpoint).expanduser().resolve(), script_dir)
    lines = [f"CHECKPOINT = {path!r}", _heads_line(model)]
    return lines, _CHECKPOINT_CODE + _HEAD_CODE + _BUILD_FROM_CHECKPOINT


def _library_section(library: str, spec: ModelSpec, model: nn.Module, script_dir: Path | None,
                     lines: list[str], base: str, build: str) -> ModelSection:
    """The section of a model a library builds (``import LIBRARY``): ``build`` makes it, or with a
    checkpoint the library's architecture gets the checkpoint's weights."""
    imports, needs = [f"import {library}"], f"torch and {library}"
    if spec.checkpoint:
        more, code = _checkpoint_parts(spec, model, script_dir)
        return ModelSection(imports, needs, lines + more, base + code)
    return ModelSection(imports, needs, lines, base + build)


def _torchvision(spec: ModelSpec, arch: str, model: nn.Module, script_dir: Path | None) -> ModelSection:
    weights = None if spec.source == "checkpoint" else spec.weights
    lines = [f"ARCH = {arch!r}", f"WEIGHTS = {weights!r}  # None: random initialisation",
             f"NUM_CLASSES = {spec.num_classes!r}  # None: keep the head"]
    if spec.checkpoint:
        more, code = _checkpoint_parts(spec, model, script_dir)
        return ModelSection(["import torchvision"], "torch and torchvision", lines + more, _BASE_TORCHVISION + code)
    lines.append(_heads_line(model))
    return ModelSection(["import torchvision"], "torch and torchvision", lines, _HEAD_CODE + _BUILD_TORCHVISION)


def _timm(spec: ModelSpec, model: nn.Module, script_dir: Path | None) -> ModelSection:
    assert spec.name is not None
    lines = [f"ARCH = {timm_model_name(spec.name, spec.weights)!r}  # timm model name",
             f"PRETRAINED = {spec.weights is not None!r}  # False: random initialisation",
             f"NUM_CLASSES = {spec.num_classes!r}  # None: keep the classifier"]
    return _library_section("timm", spec, model, script_dir, lines, _BASE_TIMM, _BUILD_TIMM)


def _hf(spec: ModelSpec, model: nn.Module, script_dir: Path | None) -> ModelSection:
    assert spec.name is not None
    folder = hf_local_folder(spec.name)
    where = script_path(folder.resolve(), script_dir) if folder is not None else spec.name
    safe, pickled = hf_weight_files(spec.name)
    if pickled and not safe:
        raise ExportError(
            f"{spec.name!r} holds only pickled weights ({pickled[0].name}); the script loads safetensors only: "
            "convert them (model.save_pretrained(folder, safe_serialization=True)) and export again"
        )
    config = getattr(model, "config", None)
    if config is None:
        raise ExportError(f"{type(model).__name__} has no transformers config; the script cannot rebuild it")
    lines = [f"MODEL_DIR = {where!r}  # a folder with config.json, or a repo id in the Hugging Face cache",
             f"AUTO_CLASS = {auto_class_name(config, spec.num_classes)!r}",
             f"LOAD_WEIGHTS = {bool(safe)!r}  # False: the folder holds config.json only (random initialisation)",
             f"NUM_CLASSES = {spec.num_classes!r}  # None: keep the config's num_labels"]
    return _library_section("transformers", spec, model, script_dir, lines, _BASE_HF, _BUILD_HF)


def _py(spec: ModelSpec, model: nn.Module, script_dir: Path | None) -> ModelSection:
    assert spec.name is not None
    target, factory = split_py_name(spec.name)
    if target.endswith(".py"):
        path = script_path(Path(target).expanduser().resolve(), script_dir)
        imports = ["import importlib.util"]
        lines = [f"MODEL_FILE = {path!r}  # your model code: it runs when the script starts", f"FACTORY = {factory!r}"]
        code = _FILE_FACTORY
        needs = f"torch and your {Path(target).name}"
    else:
        imports = [f"from {target} import {factory} as model_factory  # your model code"]
        lines, code, needs = [], "", f"torch and your module {target}"
    lines.append(f"NUM_CLASSES = {spec.num_classes!r}  # None: keep the head")
    if spec.checkpoint:
        more, ck = _checkpoint_parts(spec, model, script_dir)
        return ModelSection(imports, needs, lines + more, code + _BASE_PY + ck)
    if spec.num_classes is not None:
        lines.append(_heads_line(model))
        return ModelSection(imports, needs, lines, code + _HEAD_CODE + _BASE_PY + _BUILD_PY)
    build = '''

def build_model() -> nn.Module:
    """The model the plan was made for: your factory's model."""
    return model_factory()
'''
    return ModelSection(imports, needs, lines, code + build)


def _add_data(section: ModelSection, spec: ModelSpec, arch: str, model: nn.Module, image_size: int | None) -> None:
    try:
        task = text_task_of(model)
    except DataError as e:
        raise ExportError(f"{e}; the script's training loop needs a task head") from None
    config = getattr(model, "config", None)
    if task is not None:
        assert config is not None
        max_len = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
        seq_len = min(SYNTHETIC_SEQ_LEN, max_len) if isinstance(max_len, int) and max_len > 0 else SYNTHETIC_SEQ_LEN
        section.data_constants = [f"TASK = {task!r}", f"VOCAB_SIZE = {int(config.vocab_size)!r}",
                                  f"SEQ_LEN = {seq_len!r}  # tokens per sample"]
        if task == "classification":
            section.data_constants.append(f"NUM_LABELS = {int(config.num_labels)!r}")
            labels, what = "torch.randint(0, NUM_LABELS, (batch_size,), generator=g)", "class labels"
        else:
            labels = "ids.clone()"
            what = "the tokens as labels" + (" (the model shifts them by one)" if task == "causal_lm" else "")
        section.data_code = _TEXT_DATA.format(labels=labels, what=what)
        section.size_arg, section.size_default = "--seq-len", "SEQ_LEN"
        return
    outputs = current_num_classes(model) or getattr(model, "num_classes", None) or getattr(config, "num_labels", None)
    if not isinstance(outputs, int) or outputs < 1:
        raise ExportError(f"no classification head found in {type(model).__name__}; the script's training loop needs one")
    if image_size is None:
        if spec.source in ("torchvision", "checkpoint"):
            image_size = model_input_size(arch)
        elif isinstance(side := getattr(config, "image_size", None), int):
            image_size = side
        else:
            image_size = default_input_size(spec.source, spec.name, model)
    section.data_constants = [f"OUTPUTS = {outputs!r}  # classes of the random labels", f"IMAGE_SIZE = {image_size!r}"]
    section.data_code = _IMAGE_DATA


def model_section(
    spec: ModelSpec, arch: str | None, model: nn.Module, script_dir: Path | None, image_size: int | None = None
) -> ModelSection:
    """How the script builds the model and feeds it.

    Args:
        spec: where the model comes from.
        arch: the torchvision architecture (torchvision and checkpoint sources).
        model: the model's structure (meta tensors are fine).
        script_dir: the script's folder (files inside it are named relative to it).
        image_size: the image side of a vision model (default: the model's).

    Returns:
        The section.

    Raises:
        ExportError: no head to fit, pickled-only weights, a text model without a task head.
    """
    try:
        if spec.source in ("torchvision", "checkpoint"):
            if not arch:
                raise ExportError(
                    "the checkpoint does not say which torchvision architecture it is; give the model "
                    "name (e.g. --model resnet18) so the script can build it"
                )
            section = _torchvision(spec, arch, model, script_dir)
        elif spec.source == "timm":
            section = _timm(spec, model, script_dir)
        elif spec.source == "hf":
            section = _hf(spec, model, script_dir)
        else:
            section = _py(spec, model, script_dir)
    except ModelSourceError as e:
        raise ExportError(str(e)) from None
    _add_data(section, spec, arch or "", model, image_size)
    return section
