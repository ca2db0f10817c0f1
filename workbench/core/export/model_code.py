"""The exported script's model and data: how it builds the model (the model source's own
``script`` hook) and what it trains it on (images for vision models, token ids for text models).

How each source's model is rebuilt is a field of its row in the source table
(:data:`workbench.core.models.sources.SOURCES`; the builders are in
:mod:`workbench.core.models.script_code`): this module looks the row up and never switches on
source names. A ``checkpoint`` spec rebuilds a torchvision architecture.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from torch import nn

from workbench.core.export.common import ExportError
from workbench.core.models.script_code import ScriptModel, ScriptRequest
from workbench.core.models.sources import source_of
from workbench.core.models.spec import ModelSpec
from workbench.core.models.zoo import ModelSourceError, current_num_classes
from workbench.core.training.data import SYNTHETIC_SEQ_LEN, DataError, text_task_of
from workbench.core.training.setup import run_image_size

__all__ = ["ModelSection", "model_section"]


@dataclass
class ModelSection(ScriptModel):
    """The parts of the script that depend on the model: the source's :class:`ScriptModel`
    (imports, needs, constants, code) and the data that fits the model.

    Attributes:
        data_constants: lines of the data block (sizes, classes, vocabulary).
        data_code: ``make_batches`` and the loss of one batch (``batch_loss``).
        size_arg: the command-line option of the input size (``--image-size`` / ``--seq-len``).
        size_default: its default's constant name.
    """

    data_constants: list[str] = field(default_factory=list)
    data_code: str = ""
    size_arg: str = "--image-size"
    size_default: str = "IMAGE_SIZE"


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
    image_size = run_image_size(image_size, spec, model, arch or None)  # the engine's
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
    key = spec.architecture_source
    req = ScriptRequest(
        name=arch or spec.name or "",
        weights=None if spec.from_checkpoint_file else spec.weights,
        num_classes=spec.num_classes,
        checkpoint=spec.checkpoint,
        model=model,
        script_dir=script_dir,
    )
    try:
        part = source_of(key).script(req)
    except ModelSourceError as e:
        raise ExportError(str(e)) from None
    section = ModelSection(part.imports, part.needs, part.constants, part.code)
    _add_data(section, spec, arch or "", model, image_size)
    return section
