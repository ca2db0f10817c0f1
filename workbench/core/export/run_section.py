"""The run part of the exported script: the run's data, sizes, seed, length, optimizer and schedule.

:func:`run_section` turns a :class:`~workbench.core.training.config.TrainConfig` and the
model's structure into the script's constants and data code, with the values the engine
computes for the same run (image size, synthetic classes, tokens per sample, the head's
classes). What the script cannot reproduce is refused in one line naming the setting.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from torch import nn

from workbench.core.errors import WorkbenchError
from workbench.core.export.common import ExportError
from workbench.core.export.run_code import (
    FILE_DATA_CODE,
    FILE_OPEN_CODE,
    PY_DATA_CODE,
    SYNTHETIC_IMAGE_CODE,
    SYNTHETIC_SHAPED_CODE,
    SYNTHETIC_TEXT_CODE,
    holdout_code,
)
from workbench.core.export.text_data_code import HF_IMAGE_CODE, TEXT_DATA_CODE
from workbench.core.models.spec import ModelSpec
from workbench.core.models.zoo import current_num_classes
from workbench.core.optimizers import optimizer_kind
from workbench.core.training.config import DEFAULT_STEPS, TrainConfig
from workbench.core.training.data import (
    SYNTHETIC_DEFAULT_CLASSES,
    SYNTHETIC_DEFAULT_LENGTH,
    DataError,
    run_seq_len,
    text_task_of,
)
from workbench.core.training.setup import run_image_size

__all__ = ["DATA_KINDS", "EXPORTED_LOSSES", "RunSection", "run_section"]

#: Data spec kinds the script opens as the workbench does.
DATA_KINDS: tuple[str, ...] = ("synthetic", "imagefolder", "cifar10", "cifar100", "mnist", "fashionmnist", "svhn", "stl10",
                               "text", "hf-dataset", "py")
#: Data kinds of a text model's real text (tokenized with its folder's tokenizer).
TEXT_KINDS: tuple[str, ...] = ("text", "hf-dataset")


#: Losses the script computes with the workbench's own code (``TrainConfig.loss``).
EXPORTED_LOSSES: tuple[str, ...] = ("cross_entropy", "bce", "mse", "l1")


@dataclass
class RunSection:
    """The script's run: constants and the data code.

    Attributes:
        constants: lines of ``NAME = value``.
        data_code: ``make_dataset`` (and what it needs) for the run's data.
        optimizer_call: the optimizer's constructor call, every hyperparameter written out.
        head_classes: classes the script gives the head after building the model (None: kept).
        fit_to_data: the head takes the data's class count (file data without ``num_classes``).
        needs: extra libraries (``torchvision`` for image files).
        summary: lines for the script's docstring (what it trains).
        loss: the run's loss (a name of :data:`EXPORTED_LOSSES`, or a ``py:`` spec).
        loss_ref: ``(file or module, function)`` of a ``py:`` loss, else None.
        metric: the run's validation metric (``accuracy``, ``top5`` or a ``py:`` spec).
        metric_ref: ``(file or module, function)`` of a ``py:`` metric, else None.
        py_data: the script loads ``py:`` data (it has ``load_py``).
    """

    constants: list[str] = field(default_factory=list)
    data_code: str = ""
    optimizer_call: str = ""
    head_classes: int | None = None
    fit_to_data: bool = False
    needs: list[str] = field(default_factory=list)
    summary: list[str] = field(default_factory=list)
    loss: str = "cross_entropy"
    loss_ref: tuple[str, str] | None = None
    metric: str = "accuracy"
    metric_ref: tuple[str, str] | None = None
    py_data: bool = False


def _py_ref(config: TrainConfig, name: str, spec: str) -> tuple[str, str]:
    """``(file or module, function)`` of a ``py:`` spec the caller typed; refused when a file named it."""
    from workbench.core.models.sources import check_code_origin

    target, sep, func = spec.strip()[3:].strip().rpartition(":")
    target = target.strip()
    if not sep or not target or not func.isidentifier():
        raise ExportError(f"config field '{name}' = {spec[:200]!r}: must be py:FILE.py:FUNC or py:MODULE:FUNC")
    try:
        check_code_origin("py", f"{target}:{func}", config.origin_of(name), flag=f"--{name}", what=f"{name} code")
    except WorkbenchError as e:
        raise ExportError(str(e)) from None
    if target.endswith(".py"):
        target = str(Path(target).expanduser().resolve())  # the file the workbench ran, wherever the script runs
    return target, func


def _needs(ref: tuple[str, str]) -> str:
    target = ref[0]
    return f"your {Path(target).name}" if target.endswith(".py") else f"your module {target}"


def _kind(spec: str) -> str:
    return spec.strip().partition(":")[0].strip().lower()


def _weights_code(config: TrainConfig, spec: ModelSpec) -> str:
    """``weights_transforms(image_size)``: the weights' preset transforms, or None."""
    member = spec.weights_preset()
    if member is None:
        return '''

def weights_transforms(image_size: int):
    """No pretrained weights' preset: the default transforms."""
    return None
'''
    sized = config.image_size is not None
    return f'''

def weights_transforms(image_size: int):
    """The preset transforms of the weights the run used ({member})."""
    import torchvision

    member = torchvision.models.get_weight({str(member)!r})
    if not {sized!r}:
        return member.transforms()
    try:
        return member.transforms(crop_size=image_size, resize_size=max(image_size, round(image_size / 0.875)))
    except TypeError:  # a preset without size arguments
        return member.transforms()
'''


def _task_of(config: TrainConfig, kind: str, model: nn.Module) -> str | None:
    """The text task of the model, once the run's data and validation kinds are known to export."""
    if kind not in DATA_KINDS:
        raise ExportError(
            f"config field 'data' = {config.data!r}: the exported script opens {', '.join(DATA_KINDS)} data; "
            f"{kind!r} data is not exported yet (train with the workbench, or export with synthetic data and replace make_dataset)"
        )
    if config.input_column is not None and kind != "hf-dataset":
        raise ExportError(f"config field 'input_column' = {config.input_column!r}: a column of hf-dataset: data; "
                          f"{kind} data has none (leave it unset to export)")
    val = _kind(config.val) if config.val is not None else None
    for group in (("py",), ("synthetic",), TEXT_KINDS):
        if val is not None and (val in group) != (kind in group):
            raise ExportError(f"config field 'val' = {config.val!r}: the exported script validates on data of the "
                              "training data's kind")
    try:
        task = text_task_of(model)
    except DataError as e:
        raise ExportError(f"{e}; the script's training loop needs a task head") from None
    if task is not None and kind not in ("synthetic", *TEXT_KINDS):
        raise ExportError(f"config field 'data' = {config.data!r}: a text model's data is exported as synthetic tokens, "
                          "text:PATH.jsonl or hf-dataset:PATH")
    if task is None and kind == "text":
        raise ExportError(f"config field 'data' = {config.data!r}: the exported script tokenizes text for a Hugging Face "
                          "text model only")
    return task


def run_section(
    config: TrainConfig, spec: ModelSpec, model: nn.Module, *, provided: bool = False, fit_always: bool = False,
    arch: str | None = None,
) -> RunSection:
    """The run's constants and data code for the script.

    Args:
        config: the run's settings (validated).
        spec: where the model comes from (its ``num_classes`` is the head the script builds).
        model: the model's structure (meta tensors are fine).
        provided: the run trains a model handed to it (the app's): synthetic data keeps its
            head, as :func:`workbench.core.training.setup.fit_head` does.
        fit_always: the script builds the model without ``spec.num_classes`` (as the engine
            does) and gives the head the run's classes after it (a no-op when they agree).
        arch: the architecture's name when it is not the spec's (a checkpoint's ``arch``), as
            the engine's ``BuiltModel.name``.

    Returns:
        The section.

    Raises:
        ExportError: data the script cannot open as the workbench does (named), a text model
            without a task head.
    """
    out = RunSection()
    kind = _kind(config.data)
    task = _task_of(config, kind, model)
    image_size = run_image_size(config.image_size, spec, model, arch)  # the engine's
    seq_len = run_seq_len(model, config.seq_len, config.data)
    head_now = spec.num_classes or current_num_classes(model)
    if kind == "synthetic":
        arg = config.data.strip().partition(":")[2].strip()
        length = int(arg) if arg else SYNTHETIC_DEFAULT_LENGTH
        given = config.num_classes or spec.num_classes
        if given:
            classes = given
        elif provided and head_now:
            classes = min(head_now, SYNTHETIC_DEFAULT_CLASSES)
        else:
            classes = SYNTHETIC_DEFAULT_CLASSES
        target = given if task is not None or provided else classes
        shaped = task is None and config.input_shape is not None
        out.data_code = SYNTHETIC_TEXT_CODE if task is not None else SYNTHETIC_SHAPED_CODE if shaped else SYNTHETIC_IMAGE_CODE
        out.constants += [f"DATA = {config.data!r}  # the workbench's generated data (see make_dataset)",
                          f"DATA_LENGTH = {length!r}  # samples", f"DATA_CLASSES = {classes!r}"]
        if shaped:
            out.constants.append(f"INPUT_SHAPE = {tuple(config.input_shape)!r}  # one sample's shape")  # type: ignore[arg-type]
        what = "tokens" if task else f"samples of shape {tuple(config.input_shape)}" if shaped else "images"  # type: ignore[arg-type]
        out.summary.append(f"data: {config.data} (the workbench's generated {what}, same samples)")
    elif kind == "py":
        target = config.num_classes or spec.num_classes
        out.fit_to_data = target is None
        refs = {config.data: _py_ref(config, "data", config.data)}
        if config.val is not None:
            refs[config.val] = _py_ref(config, "val", config.val)
        out.py_data = True
        out.needs += [_needs(r) for r in refs.values()]
        out.data_code = PY_DATA_CODE
        out.constants += [f"DATA = {config.data!r}  # your data function (code: the script runs it)",
                          "# spec -> (file or module, function) the script loads with importlib and calls",
                          f"PY_DATA = {refs!r}"]
        out.summary.append(f"data: {config.data} (runs that code: your function's dataset, or its (train, val) pair)")
    elif kind == "hf-dataset" and task is None:  # an image column, or a column of arrays
        target = config.num_classes or spec.num_classes
        out.fit_to_data = target is None
        out.data_code = FILE_OPEN_CODE + _weights_code(config, spec) + HF_IMAGE_CODE + holdout_code()
        out.constants += [f"DATA = {config.data!r}  # a save_to_disk folder: its image column, or its arrays",
                          f"IMAGE_COLUMN = {config.image_column or 'image'!r}",
                          f"INPUT_COLUMN = {config.input_column!r}  # a column of arrays given as float tensors (None: images)",
                          f"LABEL_COLUMN = {config.label_column or 'label'!r}"]
        out.needs += ["torchvision", "datasets"]
        what = (f"its column {config.input_column!r} as float tensors" if config.input_column
                else "its image column as RGB, with the run's transforms")
        out.summary.append(f"data: {config.data} ({what})")
    elif kind in TEXT_KINDS:
        target = config.num_classes or spec.num_classes
        out.fit_to_data = target is None and task == "classification"
        out.data_code = TEXT_DATA_CODE + holdout_code()
        out.constants += [f"DATA = {config.data!r}  # tokenized with the tokenizer of the model's folder",
                          f"TEXT_COLUMN = {config.text_column or 'text'!r}  # hf-dataset: the column of texts",
                          f"LABEL_COLUMN = {config.label_column or 'label'!r}  # hf-dataset: the column of classes"]
        out.needs.append("transformers")
        if "hf-dataset" in (kind, _kind(config.val or "")):
            out.needs.append("datasets")
        what = "its text column" if kind == "hf-dataset" else "one JSON object per line"
        out.summary.append(f"data: {config.data} ({what}, tokenized with the model folder's tokenizer, "
                           f"{seq_len} tokens per sample)")
    else:
        target = config.num_classes or spec.num_classes
        out.fit_to_data = target is None
        out.data_code = FILE_DATA_CODE + _weights_code(config, spec)
        out.constants.append(f"DATA = {config.data!r}  # {kind}: opened from disk, nothing downloaded")
        out.needs.append("torchvision")
        out.summary.append(f"data: {config.data}, with the run's transforms")
    if target is not None and (fit_always or target != head_now):
        out.head_classes = target
    loss = config.loss
    if loss.startswith("py:"):
        out.loss_ref = _py_ref(config, "loss", loss)
        out.needs.append(_needs(out.loss_ref))
        out.summary.append(f"loss: {loss} (runs that code: loss(output, target))")
    elif loss not in EXPORTED_LOSSES:
        raise ExportError(f"config field 'loss' = {loss!r}: the exported script writes the built-in losses "
                          f"({', '.join(EXPORTED_LOSSES)}) and py: losses")
    elif loss != "cross_entropy":
        out.summary.append(f"loss: {loss}")
    out.loss = loss
    metric = config.metric
    if metric.startswith("py:"):
        out.metric_ref = _py_ref(config, "metric", metric)
        out.needs.append(_needs(out.metric_ref))
    elif metric not in ("accuracy", "top5"):
        raise ExportError(f"config field 'metric' = {metric!r}: the exported script measures accuracy, top5 and py: metrics")
    out.metric = metric
    if metric != "accuracy":
        out.summary.append(f"validation metric: {metric}" + (" (runs that code: metric(output, target))" if out.metric_ref else ""))
    if config.input_shape is not None and kind not in ("py", "synthetic"):
        raise ExportError(f"config field 'input_shape' = {config.input_shape!r}: the shape of generated data; {kind} data "
                          "has its own shape (leave input_shape unset to export)")
    kind_row = optimizer_kind(config.optimizer)
    out.optimizer_call = kind_row.source(config, expressions={"lr": "LR"})
    steps = config.steps if config.steps is not None or config.epochs is not None else DEFAULT_STEPS
    device = ('"cuda" if torch.cuda.is_available() else "cpu"  # the run: auto' if config.device == "auto"
              else repr(config.device))
    out.constants += [
        f"VAL = {config.val!r}  # None: a held-out share of the training data when validating",
        f"VALIDATES = {config.validates!r}",
        f"VAL_AT_START = {config.val_at_start!r}  # validate once before the first step too",
        f"VAL_EVERY = {config.val_every!r}  # validate every N steps and after the last",
        f"VAL_FRACTION = {config.val_fraction!r}",
        f"TASK = {task!r}",
        f"IMAGE_SIZE = {image_size!r}",
        f"SEQ_LEN = {seq_len!r}  # tokens per sample of a text model",
        f"HEAD_CLASSES = {out.head_classes!r}  # classes the head gets after build_model (None: kept)",
        f"SEED = {config.seed!r}",
        f"STEPS = {steps!r}",
        f"EPOCHS = {config.epochs!r}",
        f"BATCH_SIZE = {config.batch_size!r}",
        f"LR = {config.lr!r}",
        f"WEIGHT_DECAY = {config.weight_decay!r}  # of the parameters no rule sets",
        f"SCHEDULER = {config.scheduler!r}",
        f"WARMUP_STEPS = {config.warmup_steps!r}",
        f"AMP = {config.amp!r}  # off, bf16 (autocast) or fp16 (autocast + GradScaler)",
        f"CHANNELS_LAST = {config.channels_last and task is None!r}",
        f"COMPILE = {config.compile_backend!r}  # torch.compile backend, or None",
        f"DEVICE = {device}",
        f"NUM_WORKERS = {config.num_workers!r}",
        "PIN_MEMORY = " + (repr(config.pin_memory) if config.pin_memory is not None else 'str(DEVICE).startswith("cuda")'),
        f"TORCH_THREADS = {config.torch_threads!r}",
        f"ON_NONFINITE = {config.on_nonfinite!r}  # stop, or skip the step",
        f"LOG_EVERY = {config.log_every!r}",
    ]
    length_text = f"{config.epochs} epochs" + (f" (at most {config.steps} steps)" if config.steps else "") if config.epochs else f"{steps} steps"
    out.summary += [
        f"{length_text} of batch {config.batch_size}, seed {config.seed}",
        f"optimizer: {kind_row.source(config, groups='param groups')}",
        f"schedule: {config.scheduler}" + (f" after {config.warmup_steps} warm-up steps" if config.warmup_steps else ""),
        f"mixed precision: {config.amp}; gradient clipping: none (the workbench does not clip)",
    ]
    if out.py_data and config.val is None:
        out.summary.append("validation on the data function's validation set when it returns (train, val)"
                           + (f", else {config.val_fraction:g} of the training data held out" if config.validates else "")
                           + (f", every {config.val_every} steps and" if config.val_every else ",") + " after the last step")
    elif config.validates:
        where = config.val if config.val is not None else f"{config.val_fraction:g} of the training data held out"
        every = f"every {config.val_every} steps and " if config.val_every else ""
        out.summary.append(f"validation on {where}, {every}after the last step")
    return out
