"""What a run is built from: device, plan, model, dataset, head, optimizer, AMP and loader.

The :class:`~workbench.core.training.engine.Trainer` calls these once, from its ``setup``.
Each turns bad input into a :class:`~workbench.core.errors.WorkbenchError` whose message says
what is wrong and what to do. The model zoo (and torchvision with it) is imported when a model
is built, not with this module.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from workbench.core.errors import WorkbenchError, first_line
from workbench.core.optimizers import optimizer_kind
from workbench.core.plan.rules import FreezePlan
from workbench.core.training import distributed as wdist
from workbench.core.training.config import DEFAULT_STEPS, TrainConfig
from workbench.core.training.data import (
    SYNTHETIC_DEFAULT_CLASSES,
    DataError,
    dataset_num_classes,
    make_loader,
    text_task_of,
)
from workbench.core.training.data_sources import make_dataset
from workbench.core.training.user_data import UserDataset, sample_shape
from workbench.core.training.validation import ValidationError, holdout_split

if TYPE_CHECKING:
    from workbench.core.models.spec import ModelSpec

__all__ = [
    "BuiltModel",
    "Loader",
    "TrainError",
    "build_dataset",
    "build_loader",
    "build_validation",
    "build_model",
    "build_task",
    "first_input_shape",
    "fit_head",
    "fit_head_noted",
    "head_classes",
    "load_plan",
    "make_amp",
    "make_optimizer",
    "resolve_device",
    "run_image_size",
    "synthetic_classes",
    "weights_transform",
]


class TrainError(WorkbenchError):
    """A run cannot start: the message says what is wrong with the input and what to do."""


def resolve_device(name: str, info: wdist.DistInfo | None = None) -> torch.device:
    """Turn a device setting into a device.

    Args:
        name: ``auto`` (cuda > mps > cpu), ``cpu``, ``cuda``, ``cuda:N`` or ``mps``.
        info: under torchrun, ``cuda`` means ``cuda:LOCAL_RANK``.

    Returns:
        The device.

    Raises:
        TrainError: the device is not available here.
    """
    name = name.strip().lower()
    distributed = info is not None and info.distributed
    mps_ok = getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else ("mps" if mps_ok and not distributed else "cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise TrainError(f"device {name!r} requested but CUDA is not available here; use --device cpu (or auto)")
        if name == "cuda":
            idx = info.local_rank if distributed and info is not None else torch.cuda.current_device()
        else:
            idx = int(name.split(":", 1)[1])
        if idx >= torch.cuda.device_count():
            raise TrainError(f"device cuda:{idx} does not exist (this machine has {torch.cuda.device_count()} GPUs); pick another index")
        return torch.device("cuda", idx)
    if name == "mps":
        if not mps_ok:
            raise TrainError("device 'mps' requested but the Apple MPS backend is not available; use --device cpu (or auto)")
        return torch.device("mps")
    return torch.device("cpu")


def load_plan(raw: Any) -> tuple[FreezePlan, Path | None]:
    """A run's starting plan (a copy: the caller may go on editing its own).

    Args:
        raw: a :class:`FreezePlan`, its dict, a plan file path, or None (everything trains).

    Returns:
        The plan and the folder relative references in it are resolved from (the plan
        file's folder; None otherwise).

    Raises:
        PlanError: the dict or file is not a valid plan.
        TypeError: ``raw`` is none of the above.
    """
    if raw is None:
        return FreezePlan(), None
    if isinstance(raw, FreezePlan):
        return raw.copy(), None
    if isinstance(raw, Mapping):
        return FreezePlan.from_dict(dict(raw)), None
    if isinstance(raw, (str, os.PathLike)):
        p = Path(raw)
        return FreezePlan.load(p), p.resolve().parent
    raise TypeError(f"plan must be a FreezePlan, a dict or a path, got {type(raw).__name__}")


@dataclass
class BuiltModel:
    """A model and where it came from.

    Attributes:
        model: the model (head not fitted yet).
        name: its architecture's registry name, when it has one (a checkpoint spec without a
            name: the architecture the file names, which the exported script builds too).
        weights: its weights name, when it has one.
        spec_classes: ``num_classes`` from the model block, when it gives one.
        provided: the caller handed the model in (its head is only replaced when the run's
            ``num_classes`` or a file dataset asks for it; synthetic data adapts to it).
        materialize_from: under ``strategy="fsdp"``, a Hugging Face model with safetensors
            weights is built on the meta device; this is the folder its shards are read from
            after sharding (see :mod:`workbench.core.training.fsdp_materialize`).
        own_head: the model brings a trained head of its own (``py:`` code, a Hugging Face
            folder, named weights or a checkpoint): synthetic data keeps it, as for a model
            handed in; only data whose class count differs replaces it.
        rng_state: for a model built once for several runs (a sweep's candidates): the torch and
            Python random states right after it and the run's data were built from the seed;
            :func:`given_model` restores them, so each run draws what a run that built them draws.
        spec: the model spec it was built from (None: a model handed in).
    """

    model: nn.Module
    name: str | None = None
    weights: str | None = None
    spec_classes: int | None = None
    provided: bool = False
    materialize_from: Path | None = None
    own_head: bool = False
    rng_state: tuple[torch.Tensor, Any] | None = None
    spec: ModelSpec | None = None

    def weights_preset(self) -> Any | None:
        """The registry entry the model's weights name, as its source's row says
        (:meth:`ModelSpec.weights_preset`, which the exporter asks too): torchvision's weights enum
        member for a torchvision model, None for a source without registry weights (timm, Hugging
        Face) and for a model handed in."""
        return self.spec.weights_preset() if self.spec is not None else None


def given_model(model: nn.Module | BuiltModel) -> BuiltModel:
    """The model a caller handed to the run.

    Args:
        model: a module (then :attr:`BuiltModel.provided`), or a :class:`BuiltModel` built as
            :func:`build_model` builds it (a sweep's copy of the model it built once), used as
            it is: its ``rng_state``, when set, is restored.

    Returns:
        The model as the run takes it.
    """
    if not isinstance(model, BuiltModel):
        return BuiltModel(model, provided=True)
    if model.rng_state is not None:
        torch.set_rng_state(model.rng_state[0])
        random.setstate(model.rng_state[1])
    return model


def build_model(config: TrainConfig, plan: FreezePlan, *, trust_pickle: bool = False) -> BuiltModel:
    """Build the model a config (or else the plan's ``model`` block) names.

    Args:
        config: the run's settings (``model``, ``weights``, ``checkpoint``, ``allow_download``).
        plan: the starting plan; its ``model`` block is used when the config names no model.
        trust_pickle: allow checkpoints that need unpickling code.

    Returns:
        The model, without its head fitted (see :func:`fit_head`).

    Raises:
        TrainError: no model is named, or it cannot be built.
    """
    from workbench.core.models.sources import SOURCES
    from workbench.core.models.spec import ModelSpec
    from workbench.core.models.zoo import ModelSourceError

    origin = config.model_origin
    if isinstance(config.model, dict):
        d: dict[str, Any] = dict(config.model)
    elif isinstance(config.model, str):
        d = {"source": "torchvision", "name": config.model.strip()}
    elif plan.model.get("name") or plan.model.get("arch") or plan.model.get("checkpoint"):
        d = dict(plan.model)
        origin = f"plan file {config.plan}" if isinstance(config.plan, str) else "the plan's model block"
    elif config.checkpoint:
        d = {"source": "checkpoint"}
    else:
        raise TrainError(
            "no model given: pass --model NAME (e.g. resnet18), a config with 'model', "
            "or a plan whose 'model' block names one"
        )
    if not d.get("name") and d.get("arch"):
        d["name"] = d["arch"]
    for key in ("weights", "checkpoint"):
        if getattr(config, key) is not None:
            d[key] = getattr(config, key)
    spec_classes = d.get("num_classes") if isinstance(d.get("num_classes"), int) else None
    d["num_classes"] = None  # the head is fitted after the dataset is known
    try:
        spec = ModelSpec.from_dict(d, origin=origin)  # a py: model named by a file is refused here
        shards = _safetensors_folder(spec) if config.strategy == "fsdp" else None
        model, name = spec.build_named(allow_download=config.allow_download, trust_pickle=trust_pickle,
                                       meta=shards is not None)  # name: a checkpoint's file may give it
        if shards is not None and _unsaved_buffers(model):  # values the files do not hold: build it whole
            shards = None
            model = spec.build(allow_download=config.allow_download, trust_pickle=trust_pickle)
    except ModelSourceError as e:
        raise TrainError(str(e)) from e
    own = SOURCES[spec.architecture_source].own_weights is not None or bool(spec.weights) or bool(spec.checkpoint)
    return BuiltModel(model, name, spec.weights, spec_classes, materialize_from=shards, own_head=own, spec=spec)


def _unsaved_buffers(model: nn.Module) -> list[str]:
    """Buffers outside the state dict (rotary ``inv_freq``): a meta build has no values for them."""
    saved = set(model.state_dict())
    return [n for n, _ in model.named_buffers() if n not in saved]


def _safetensors_folder(spec: Any) -> Path | None:
    """The folder of the model's safetensors weights, when its source row has one (no checkpoint on top), or None."""
    from workbench.core.models.sources import SOURCES

    row = SOURCES.get(spec.source)
    if row is None or row.safetensors_folder is None or spec.checkpoint is not None or not spec.name:
        return None
    return row.safetensors_folder(spec.name)


def weights_transform(member: Any, image_size: int | None) -> Callable[[Any], torch.Tensor]:
    """The weights' preset transforms (resized to ``image_size`` when it is overridden).

    Args:
        member: a torchvision weights enum member.
        image_size: the run's image size, or None for the preset's own.

    Returns:
        The transform.
    """
    if image_size is None:
        return member.transforms()
    try:
        return member.transforms(crop_size=image_size, resize_size=max(image_size, round(image_size / 0.875)))
    except TypeError:  # a preset without size arguments
        return member.transforms()


def run_image_size(image_size: int | None, spec: ModelSpec | None, model: nn.Module, name: str | None = None) -> int:
    """The square side a run feeds a vision model: the engine's and its exported script's.

    The given size, else the crop size of the weights' preset (torchvision), else the side the
    model's source says the architecture takes (its row's ``input_size``), else the model's own
    configuration (a Hugging Face ``config.image_size``, timm's ``pretrained_cfg["input_size"]``),
    else 224.

    Args:
        image_size: the run's ``image_size`` (None or 0: the model's).
        spec: where the model comes from (None: a model handed in).
        model: the model (meta tensors are fine).
        name: the architecture's name when it is not the spec's (a checkpoint's ``arch``).

    Returns:
        The side in pixels.
    """
    from workbench.core.models.sources import SOURCES
    from workbench.core.models.zoo import ModelSourceError, crop_size

    if image_size:
        return image_size
    if spec is not None:
        size = crop_size(spec.weights_preset())
        if size:
            return size
        row, arch = SOURCES[spec.architecture_source], name or spec.name
        if row.input_size is not None and arch:
            try:
                return row.input_size(arch)
            except ModelSourceError:  # an architecture the source does not know the size of
                pass
    side = getattr(getattr(model, "config", None), "image_size", None)
    if isinstance(side, (list, tuple)) and len(side) == 2 and side[0] == side[1]:
        side = side[0]
    if isinstance(side, int) and not isinstance(side, bool) and side > 0:
        return side
    pretrained = getattr(model, "pretrained_cfg", None)
    shape = pretrained.get("input_size") if isinstance(pretrained, dict) else None
    if isinstance(shape, (list, tuple)) and len(shape) == 3 and shape[1] == shape[2] and isinstance(shape[2], int):
        return shape[2]
    return 224


def build_dataset(
    config: TrainConfig, built: BuiltModel, dataset: Dataset[Any] | None = None
) -> tuple[Dataset[Any], int]:
    """The run's dataset and image size.

    The image size is :func:`run_image_size`'s (the config's, else the model's, the architecture
    named by ``built.name``), as the exported script's. Real images get the weights' preset transforms.

    Args:
        config: the run's settings (``data``, ``image_size``, ``num_classes``, ``seed``).
        built: the model (:func:`build_model`).
        dataset: a dataset to use instead of ``config.data``.

    Returns:
        The dataset and the image size.

    Raises:
        TrainError: the dataset cannot be provided.
    """
    from workbench.core.models.zoo import current_num_classes

    size = run_image_size(config.image_size, built.spec, built.model, built.name)
    if dataset is not None:
        return dataset, size
    n = synthetic_classes(config, built, current_num_classes(built.model))
    return _open_dataset(config, built, config.data, size, n, train=True), size


def _open_dataset(config: TrainConfig, built: BuiltModel, spec: str, size: int, classes: int, *, train: bool) -> Dataset[Any]:
    """A dataset spec opened for the run: real images get the weights' preset transforms."""
    member = built.weights_preset()
    transform = None
    if not spec.strip().lower().startswith("synthetic") and member is not None:
        transform = weights_transform(member, config.image_size)
    try:
        columns = {"text_column": config.text_column, "label_column": config.label_column, "image_column": config.image_column}
        if config.input_column:
            columns["input_column"] = config.input_column
        return make_dataset(
            spec, image_size=size, num_classes=classes, train=train, transform=transform, seed=config.seed, model=built.model,
            columns=columns, seq_len=config.seq_len, input_shape=config.input_shape,
            origin=config.origin_of("data" if train else "val"),
        )
    except DataError as e:
        raise TrainError(str(e)) from e


def build_validation(
    config: TrainConfig, built: BuiltModel, dataset: Dataset[Any], image_size: int, device: torch.device
) -> tuple[Dataset[Any], DataLoader[Any] | None]:
    """The run's training dataset and its validation loader.

    Without validation (neither ``val`` nor ``val_every``, and no validation set from a
    ``py:`` data function) the dataset is returned as it is. With ``val`` the validation data
    is that spec's validation/test split; else the ``val`` set a ``py:`` data function returned
    with the training set; else a held-out split of ``dataset`` (``val_fraction`` of it,
    seeded) is taken out of training.

    Args:
        config: the run's settings (``val``, ``val_every``, ``val_fraction``, ``seed``,
            ``batch_size``).
        built: the model (for the weights' transforms).
        dataset: the training dataset.
        image_size: the run's image size.
        device: the device (pinned memory for CUDA).

    Returns:
        ``(training dataset, validation loader or None)``.

    Raises:
        TrainError: the validation data cannot be provided.
    """
    paired = getattr(dataset, "val", None) if isinstance(dataset, UserDataset) else None
    if not config.validates and paired is None:
        return dataset, None
    val: Dataset[Any]
    if config.val is None and paired is not None:  # the data function returned (train, val)
        val = paired
    elif config.val is None:
        try:
            dataset, val = holdout_split(dataset, config.val_fraction, config.seed)
        except ValidationError as e:
            raise TrainError(str(e)) from None
    else:
        classes = dataset_num_classes(dataset) or SYNTHETIC_DEFAULT_CLASSES
        val = _open_dataset(config, built, config.val, image_size, classes, train=False)
    try:
        loader = make_loader(
            val, config.batch_size, shuffle=False, num_workers=config.num_workers,
            pin_memory=config.pin_memory if config.pin_memory is not None else device.type == "cuda",
            seed=config.seed, drop_last=False,
        )
    except DataError as e:
        raise TrainError(f"validation data: {e}") from None
    return dataset, loader


def head_classes(model: nn.Module) -> int | None:
    """Outputs of the model's classification head, None when it has no recognisable head.

    Args:
        model: the model.

    Returns:
        The class count, or None.
    """
    from workbench.core.models.zoo import current_num_classes

    return current_num_classes(model)


def synthetic_classes(config: TrainConfig, built: BuiltModel, head_classes: int | None) -> int:
    """How many classes the run's synthetic data has.

    ``num_classes`` of the config or the model block when given. Otherwise
    :data:`~workbench.core.training.data.SYNTHETIC_DEFAULT_CLASSES` (10): a model the run
    builds gets a new head of that size (:func:`fit_head`), so the default demo learns
    instead of spreading 1024 images over ImageNet's 1000 classes; a model handed in keeps
    its head and the data takes at most that many classes, and so does a model that brings a
    trained head of its own (:attr:`BuiltModel.own_head`).

    Args:
        config: the run's settings.
        built: the model.
        head_classes: outputs of the model's head, None when unknown.

    Returns:
        The class count.
    """
    given = config.num_classes or built.spec_classes
    if given:
        return given
    if (built.provided or built.own_head) and head_classes:
        return min(head_classes, SYNTHETIC_DEFAULT_CLASSES)
    return SYNTHETIC_DEFAULT_CLASSES


def fit_head(config: TrainConfig, built: BuiltModel, dataset: Dataset[Any], *, synthetic: bool) -> list[str]:
    """Give the model's head as many outputs as the run has classes.

    Args:
        config: the run's settings (``num_classes``).
        built: the model (:func:`build_model`); changed in place.
        dataset: the run's dataset.
        synthetic: the dataset is the config's synthetic one (its class count is a target
            only for a model the run built, see :func:`synthetic_classes`).

    Returns:
        Paths of the heads that were replaced (new, trainable modules).

    Raises:
        TrainError: the head cannot be replaced, or it has fewer outputs than the dataset classes.
    """
    from workbench.core.models.zoo import ModelSourceError, current_num_classes, replace_head

    model = built.model
    if synthetic and text_task_of(model) is not None and not (config.num_classes or built.spec_classes):
        return []  # synthetic text follows the model's own head (num_labels, vocabulary)
    ds_classes = dataset_num_classes(dataset)
    keeps = built.provided or built.own_head
    target = config.num_classes or built.spec_classes or (None if synthetic and keeps else ds_classes)
    new_heads: list[str] = []
    if target is not None and current_num_classes(model) != target:
        try:
            new_heads = replace_head(model, target)
        except ModelSourceError as e:
            raise TrainError(str(e)) from e
    head = current_num_classes(model)
    if ds_classes and head and ds_classes > head:
        raise TrainError(
            f"the dataset has {ds_classes} classes but the model's head has {head} outputs; "
            f"pass num_classes={ds_classes} (--num-classes {ds_classes})"
        )
    return new_heads


def fit_head_noted(config: TrainConfig, built: BuiltModel, dataset: Dataset[Any], *,
                   synthetic: bool) -> tuple[list[str], str]:
    """:func:`fit_head`, and one line naming a head it replaced ("" when it kept the model's own).

    Args:
        config: the run's settings.
        built: the model; changed in place.
        dataset: the run's dataset.
        synthetic: the dataset is the config's synthetic one.

    Returns:
        ``(paths of the new heads, the line)``.

    Raises:
        TrainError: as :func:`fit_head`.
    """
    before = head_classes(built.model)
    heads = fit_head(config, built, dataset, synthetic=synthetic)
    if not heads:
        return heads, ""
    return heads, (f"new head {', '.join(heads)}: {before} -> {head_classes(built.model)} outputs for the data's "
                   "classes (the model's own head is kept when the counts agree)")


def make_optimizer(config: TrainConfig, groups: list[dict[str, Any]]) -> torch.optim.Optimizer:
    """The optimizer the config names, over ``groups``.

    Args:
        config: the run's settings (``optimizer``, ``lr``, ``momentum``, ``weight_decay``).
        groups: param groups (see :meth:`AppliedPlan.param_groups`).

    Returns:
        The optimizer of :data:`workbench.core.optimizers.OPTIMIZER_TABLE` with the config's
        hyperparameters (plain SGD has momentum 0).
    """
    optimizer: torch.optim.Optimizer = optimizer_kind(config.optimizer).build(groups, config)
    return optimizer


def make_amp(config: TrainConfig, device: torch.device) -> tuple[torch.dtype | None, Any]:
    """Autocast dtype and gradient scaler for ``config.amp``.

    Args:
        config: the run's settings.
        device: the device.

    Returns:
        ``(dtype or None, GradScaler or None)``; fp16 gets a scaler.

    Raises:
        TrainError: fp16 on a device type without a GradScaler.
    """
    amp = config.amp
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp)
    if amp != "fp16":
        return dtype, None
    try:
        return dtype, torch.amp.GradScaler(device.type)
    except Exception as e:  # a device type without a GradScaler
        raise TrainError(f"fp16 needs a GradScaler, not available on {device.type} ({first_line(e)}); use --amp bf16") from e


@dataclass
class Loader:
    """The run's loader and its length.

    Attributes:
        loader: the data loader.
        sampler: the distributed sampler under torchrun, else None.
        steps_per_epoch: batches per epoch, None when the dataset has no length.
        total_steps: steps the run will take.
    """

    loader: DataLoader[Any]
    sampler: Any
    steps_per_epoch: int | None
    total_steps: int


def build_loader(
    config: TrainConfig, dataset: Dataset[Any], device: torch.device, dist: wdist.DistContext | None
) -> Loader:
    """The loader over ``dataset`` and the number of steps to take.

    Args:
        config: the run's settings (``batch_size``, ``num_workers``, ``pin_memory``,
            ``seed``, ``steps``, ``epochs``).
        dataset: the dataset.
        device: the device (pinned memory defaults on for CUDA).
        dist: the torchrun context, or None.

    Returns:
        The loader.

    Raises:
        TrainError: the loader cannot be made, or epochs are asked of a dataset without a length.
    """
    sampler = wdist.make_sampler(dataset, dist.info, seed=config.seed) if dist is not None else None
    pin = config.pin_memory if config.pin_memory is not None else device.type == "cuda"
    try:
        loader = make_loader(
            dataset, config.batch_size, shuffle=True, num_workers=config.num_workers,
            pin_memory=pin, seed=config.seed, sampler=sampler,
        )
    except DataError as e:
        raise TrainError(str(e)) from e
    steps_per_epoch: int | None
    try:
        steps_per_epoch = len(loader)
    except TypeError:
        steps_per_epoch = None
    if config.epochs is not None:
        if not steps_per_epoch:
            raise TrainError("epochs need a dataset with a known, non-zero length; give steps instead")
        total = config.epochs * steps_per_epoch
        total_steps = min(total, config.steps) if config.steps else total
    else:
        total_steps = config.steps or DEFAULT_STEPS
    return Loader(loader, sampler, steps_per_epoch, total_steps)


def build_task(config: TrainConfig, loss_fn: Any = None) -> tuple[Any, Any]:
    """The run's loss function and validation metric (``config.loss``, ``config.metric``).

    Args:
        config: the run's settings.
        loss_fn: a loss handed to the Trainer (wins over ``config.loss``), or None.

    Returns:
        ``(loss function, BatchMetric)``.

    Raises:
        WorkbenchError: an unknown loss or metric, or ``py:`` code that a file named or that
            cannot be loaded (one line).
    """
    from workbench.core.training.losses import make_loss
    from workbench.core.training.task_metrics import make_metric

    loss = loss_fn if loss_fn is not None else make_loss(config.loss, origin=config.origin_of("loss"))
    return loss, make_metric(config.metric, origin=config.origin_of("metric"))


def first_input_shape(dataset: Dataset[Any]) -> tuple[int, ...] | dict[str, tuple[int, ...]] | None:
    """The shape of the first sample's input (``(1024,)``, ``(3, 224, 224)``, ``{key: shape}``).

    A ``py:`` dataset's bad first item is refused here, before anything trains; other data
    that cannot be read now says so when its batch is loaded.

    Args:
        dataset: the training dataset.

    Returns:
        The shape, or None when the sample is not ``(tensor or dict of tensors, target)``
        (text batches are dicts with their labels inside).

    Raises:
        TrainError: the first item of a ``py:`` dataset is bad (one line naming it).
    """
    try:
        item = dataset[0]
    except DataError as e:
        if isinstance(dataset, UserDataset):
            raise TrainError(str(e)) from None
        return None
    except Exception:
        return None
    if isinstance(item, Mapping) or not isinstance(item, (tuple, list)) or len(item) < 2:
        return None
    x = item[0]
    if isinstance(x, torch.Tensor) or (isinstance(x, Mapping) and all(isinstance(v, torch.Tensor) for v in x.values())):
        return sample_shape(x)
    return None
