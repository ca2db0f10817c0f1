"""The exported script's model: how it builds the model (the model source's own ``script``
hook), and the refusal of a model its training loop cannot train (no head for the task).
What the script trains it on is the run section's (:mod:`workbench.core.export.run_section`).

How each source's model is rebuilt is a field of its row in the source table
(:data:`workbench.core.models.sources.SOURCES`; the builders are in
:mod:`workbench.core.models.script_code`): this module looks the row up and never switches on
source names. A ``checkpoint`` spec rebuilds a torchvision architecture.
"""

from __future__ import annotations

from pathlib import Path

from torch import nn

from workbench.core.export.common import ExportError
from workbench.core.models.script_code import ScriptModel, ScriptRequest
from workbench.core.models.sources import source_of
from workbench.core.models.spec import ModelSpec
from workbench.core.models.zoo import ModelSourceError, current_num_classes
from workbench.core.training.data import DataError, text_task_of

__all__ = ["model_section"]


def _check_head(model: nn.Module) -> None:
    """Refuse a model the script's training loop cannot train: a text model without a task head,
    or another model without a classification head."""
    try:
        task = text_task_of(model)
    except DataError as e:
        raise ExportError(f"{e}; the script's training loop needs a task head") from None
    if task is not None:
        return
    config = getattr(model, "config", None)
    outputs = current_num_classes(model) or getattr(model, "num_classes", None) or getattr(config, "num_labels", None)
    if not isinstance(outputs, int) or outputs < 1:
        raise ExportError(f"no classification head found in {type(model).__name__}; the script's training loop needs one")


def model_section(spec: ModelSpec, arch: str | None, model: nn.Module, script_dir: Path | None) -> ScriptModel:
    """How the script builds the model (what it trains it on is the run section's).

    Args:
        spec: where the model comes from.
        arch: the torchvision architecture (torchvision and checkpoint sources).
        model: the model's structure (meta tensors are fine).
        script_dir: the script's folder (files inside it are named relative to it).

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
    _check_head(model)
    return part
