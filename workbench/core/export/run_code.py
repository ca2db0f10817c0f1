"""Source text of the exported script's run: its data, schedule, optimizer and training loop.

The pieces whose numbers must be the workbench's are the workbench's own source, copied into
the script at export time with :func:`inspect.getsource` (the synthetic datasets, the image
transforms, the learning-rate factor, the optimizer sync of a plan change), so the script
and the engine cannot drift apart; the differential test in ``tests/core/export`` runs both
and compares their losses step for step. The loop itself follows
:class:`~workbench.core.training.engine.Trainer` in the order it draws random numbers: seed,
model, data, head, plan, optimizer, loader.
"""

from __future__ import annotations

import inspect
from typing import Any

from workbench.core.training import data as wdata
from workbench.core.training import optim as woptim
from workbench.core.training import schedule as wschedule
from workbench.core.training import validation as wvalidation

__all__ = [
    "FILE_DATA_CODE",
    "FILE_OPEN_CODE",
    "holdout_code",
    "LOOP_CODE",
    "loss_code",
    "SYNTHETIC_IMAGE_CODE",
    "SYNTHETIC_SHAPED_CODE",
    "SYNTHETIC_TEXT_CODE",
    "schedule_code",
    "sync_code",
]


def _source(*objs: Any) -> str:
    return "\n\n" + "\n\n".join(inspect.getsource(o).rstrip("\n") for o in objs) + "\n"


def schedule_code() -> str:
    """The workbench's learning-rate factor (:func:`workbench.core.training.schedule.lr_factor`).

    Returns:
        Its constants and functions, as source.
    """
    consts = (f"SCHEDULERS = {wschedule.SCHEDULERS!r}\n_ONECYCLE_DIV = {wschedule._ONECYCLE_DIV!r}\n"
              f"_ONECYCLE_FINAL_DIV = {wschedule._ONECYCLE_FINAL_DIV!r}\n_ONECYCLE_PCT_START = {wschedule._ONECYCLE_PCT_START!r}\n")
    return "\n\n" + consts + _source(wschedule._cos_anneal, wschedule.lr_factor)


def sync_code() -> str:
    """The workbench's optimizer sync at a plan change (:func:`workbench.core.training.optim.sync_optimizer`).

    Returns:
        Its functions, as source.
    """
    return _source(woptim._group_signature, woptim._hashable, woptim.sync_optimizer)


def loss_code(name: str) -> str:
    """``LOSS_FN``: the run's loss of (inputs, targets) batches, the workbench's own code for it.

    Args:
        name: a built-in loss of :data:`workbench.core.training.losses.LOSSES`.

    Returns:
        Source defining ``LOSS_FN`` (None for cross-entropy: ``batch_loss`` has it).
    """
    if name == "cross_entropy":
        return "\n\nLOSS_FN = None  # cross-entropy (see batch_loss)\n"
    from workbench.core.training import loss_functions as wlosses

    fn = {"bce": "F.binary_cross_entropy_with_logits", "mse": "F.mse_loss", "l1": "F.l1_loss"}[name]
    return (_source(wlosses._logits, wlosses._same_shape, wlosses._ElementLoss)
            + f"\n\nLOSS_FN = _ElementLoss({name!r}, {fn})  # the run's loss: {name}\n")


def holdout_code() -> str:
    """The workbench's held-out split (``holdout_split``) and ``paired_validation`` (none), as source.

    Returns:
        Their source.
    """
    return _source(wvalidation.holdout_split).replace("ValidationError", "ValueError") + _NO_PAIR


_NO_PAIR = '''

def paired_validation() -> Dataset | None:
    """The validation set the data came with: none (VAL, or a held-out share, validates)."""
    return None
'''

#: Your code, loaded as the workbench loads it: a ``.py`` file run once, or a module imported.
PY_LOADER_CODE = '''

_PY_MODULES: dict[str, Any] = {}


def load_py(target: str, func: str) -> Any:
    """FUNC of your code: TARGET is a .py file (run once, with importlib) or a module name (imported)."""
    import importlib
    import importlib.util
    import os
    import sys

    module = _PY_MODULES.get(target)
    if module is None:
        if target.endswith(".py"):
            path = Path(target).expanduser().resolve()
            name = f"user_code_{abs(hash(str(path)))}"
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot load {path}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module  # dataclasses and pickling look the module up
            spec.loader.exec_module(module)
        else:
            if os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            module = importlib.import_module(target)
        _PY_MODULES[target] = module
    fn = getattr(module, func, None)
    if not callable(fn):
        raise AttributeError(f"{target!r} has no function {func!r}")
    return fn

'''


_DATA_PRELUDE = f'''

class DataError(ValueError):
    """The data cannot be opened."""


SYNTHETIC_DEFAULT_LENGTH = {wdata.SYNTHETIC_DEFAULT_LENGTH!r}
SYNTHETIC_SEQ_LEN = {wdata.SYNTHETIC_SEQ_LEN!r}
TEXT_TASKS = {wdata.TEXT_TASKS!r}
_PATTERN_CELLS = {wdata._PATTERN_CELLS!r}
_VAL_INDEX_OFFSET = {wdata._VAL_INDEX_OFFSET!r}
'''

#: The workbench's generated images (``synthetic`` data of an image model).
SYNTHETIC_IMAGE_CODE = _DATA_PRELUDE + _source(wdata.SyntheticImageDataset) + '''

def make_dataset(model: nn.Module, train: bool, image_size: int, seq_len: int | None) -> Dataset:
    """The run's generated images: the training split, or the validation split (other samples)."""
    return SyntheticImageDataset(DATA_LENGTH, image_size, DATA_CLASSES, channels=3, seed=SEED,
                                 index_offset=0 if train else _VAL_INDEX_OFFSET)
''' + holdout_code()

#: The workbench's generated samples of the run's ``input_shape`` (audio frames, features, images of that shape).
SYNTHETIC_SHAPED_CODE = _DATA_PRELUDE + _source(wdata.SyntheticImageDataset, wdata.SyntheticTensorDataset) + '''

def make_dataset(model: nn.Module, train: bool, image_size: int, seq_len: int | None) -> Dataset:
    """The run's generated samples of INPUT_SHAPE: tensors, or images when it has 3 dimensions (other samples
    for validation)."""
    offset = 0 if train else _VAL_INDEX_OFFSET
    if len(INPUT_SHAPE) != 3:
        return SyntheticTensorDataset(DATA_LENGTH, INPUT_SHAPE, DATA_CLASSES, seed=SEED, index_offset=offset)
    return SyntheticImageDataset(DATA_LENGTH, (INPUT_SHAPE[1], INPUT_SHAPE[2]), DATA_CLASSES, channels=INPUT_SHAPE[0],
                                 seed=SEED, index_offset=offset)
''' + holdout_code()

#: The workbench's generated token sequences (``synthetic`` data of a text model).
SYNTHETIC_TEXT_CODE = _DATA_PRELUDE + _source(wdata.SyntheticTextDataset) + '''

def make_dataset(model: nn.Module, train: bool, image_size: int, seq_len: int | None) -> Dataset:
    """The run's generated token ids within the model's vocabulary (the validation split: other samples)."""
    config = model.config
    classes = int(getattr(config, "num_labels", 2) or 2)
    return SyntheticTextDataset(DATA_LENGTH, config.vocab_size, seq_len or SYNTHETIC_SEQ_LEN, TASK, classes, seed=SEED,
                                index_offset=0 if train else _VAL_INDEX_OFFSET)
''' + holdout_code()

#: Image folders and the torchvision sets, with the transforms the workbench gives them (``open_data``).
FILE_OPEN_CODE = _DATA_PRELUDE + f'''
IMAGENET_MEAN = {wdata.IMAGENET_MEAN!r}
IMAGENET_STD = {wdata.IMAGENET_STD!r}
_IMAGEFOLDER_TRAIN = {wdata._IMAGEFOLDER_TRAIN!r}
_IMAGEFOLDER_VAL = {wdata._IMAGEFOLDER_VAL!r}
_TV_DATASETS = {wdata._TV_DATASETS!r}
''' + _source(wdata.default_transform, wdata._with_channels, wdata._imagefolder, wdata._torchvision_dataset) + '''

def open_data(spec: str, train: bool, image_size: int) -> Dataset:
    """An image folder or a torchvision set on disk (nothing is downloaded), with the run's transforms."""
    kind, _, arg = spec.partition(":")
    root = Path(arg).expanduser()
    base = weights_transforms(image_size) or default_transform(image_size)
    if kind == "imagefolder":
        return _imagefolder(root, train=train, transform=base)
    grayscale = _TV_DATASETS[kind][2]
    return _torchvision_dataset(kind, root, train=train, transform=_with_channels(base, source_channels=1 if grayscale else 3,
                                                                                  channels=3))
'''

#: Image folders and the torchvision sets: ``make_dataset`` of the run's image files.
FILE_DATA_CODE = FILE_OPEN_CODE + '''

def make_dataset(model: nn.Module, train: bool, image_size: int, seq_len: int | None) -> Dataset:
    """The run's training data, or its validation data (VAL: that spec's validation/test split)."""
    return open_data(DATA if train else VAL, train, image_size)
''' + holdout_code()

#: ``py:`` data: your function's dataset, or its (train, val) pair, as the workbench takes them.
PY_DATA_CODE = PY_LOADER_CODE + '''

class DataError(ValueError):
    """The data cannot be opened."""


_PAIRED: list[Dataset] = []


def _is_pair(out: Any) -> bool:
    return isinstance(out, tuple) and len(out) == 2 and all(hasattr(d, "__getitem__") and isinstance(d, Sized) for d in out)


def make_dataset(model: nn.Module, train: bool, image_size: int, seq_len: int | None) -> Dataset:
    """Your data function's training set (its validation set, when it returned a pair, is kept for
    paired_validation), or the validation set VAL names."""
    target, func = PY_DATA[DATA if train else VAL]
    out = load_py(target, func)()
    if _is_pair(out):
        if not train:
            return out[1]
        _PAIRED[:] = [out[1]]
        out = out[0]
    if train:
        out[0]  # the workbench reads the first sample (its shape) before the head and the split
    return out


def paired_validation() -> Dataset | None:
    """The validation set your data function returned with the training set, or None."""
    return _PAIRED[0] if _PAIRED and VAL is None else None


def data_classes(dataset: Dataset) -> int | None:
    """The data's class count, when it says so (.classes or an int .num_classes); None otherwise."""
    while isinstance(dataset, Subset):
        dataset = dataset.dataset
    classes = getattr(dataset, "classes", None)
    if classes is not None:
        try:
            return len(classes) or None
        except TypeError:
            pass
    n = getattr(dataset, "num_classes", None)
    return n or None if isinstance(n, int) and not isinstance(n, bool) else None
''' + _source(wvalidation.holdout_split).replace("ValidationError", "ValueError")


def task_code(loss: str, metric: str, loss_ref: tuple[str, str] | None, metric_ref: tuple[str, str] | None,
              *, has_loader: bool = False) -> str:
    """``load_task``: the run's loss (``LOSS_FN``) and validation metric (``METRIC_FN``), the workbench's code.

    Args:
        loss: a built-in loss of :data:`workbench.core.training.losses.LOSSES`, or a ``py:`` spec.
        metric: ``accuracy``, ``top5`` or a ``py:`` spec.
        loss_ref: ``(file or module, function)`` of a ``py:`` loss.
        metric_ref: ``(file or module, function)`` of a ``py:`` metric.
        has_loader: the script already has ``load_py`` (``py:`` data).

    Returns:
        Source defining ``LOSS_FN``, ``METRIC_FN``, ``METRIC_LABEL`` and ``load_task()``.
    """
    from workbench.core.training import batch_metrics as wmetrics
    from workbench.core.training import loss_functions as wlosses
    from workbench.core.training import task_metrics

    out = loss_code(loss) if loss_ref is None else "\n\nLOSS_FN = None  # your loss, set by load_task\n"
    out += f"LOSS_REF = {loss_ref!r}  # (file or module, function) of your loss, or None\n"
    out += f"METRIC_NAME = {metric!r}\nMETRIC_LABEL = {task_metrics.metric_label(metric)!r}\n"
    out += f"METRIC_REF = {metric_ref!r}  # (file or module, function) of your metric, or None\n"
    out += "METRIC_FN = None  # the validation's metric besides accuracy, set by load_task\n"
    if loss_ref is not None:
        out += _source(wlosses.UserLoss)
    if metric != "accuracy":
        metric_src = _source(wmetrics._logits, wmetrics.BatchMetric, wmetrics.TopK, wmetrics.UserMetric)
        out += metric_src.replace("_logits(", "_metric_logits(")
    if (loss_ref is not None or metric_ref is not None) and not has_loader:
        out += PY_LOADER_CODE
    body = ["    global LOSS_FN, METRIC_FN"]
    if loss_ref is not None:
        body.append("    LOSS_FN = UserLoss(\"py:\" + \":\".join(LOSS_REF), load_py(*LOSS_REF))")
    if metric_ref is not None:
        body.append("    METRIC_FN = UserMetric(METRIC_NAME, load_py(*METRIC_REF))")
    elif metric == "top5":
        body.append("    METRIC_FN = TopK(5, METRIC_NAME)")
    out += ("\n\ndef load_task() -> None:\n    \"\"\"The run's loss and metric, loaded after the model as the workbench "
            "loads them.\"\"\"\n" + "\n".join(body) + "\n")
    return out


#: The training loop: the engine's order of seeds, builds and steps.
LOOP_CODE = '''

def batch_loss(model, batch) -> torch.Tensor:
    """The run's loss of one batch: a dict batch is model(**batch) and its own .loss (else the task's
    cross-entropy); (inputs, labels) is cross-entropy on the logits, plus auxiliary heads (aux_logits)."""
    if isinstance(batch, dict):
        out = model(**batch)
        loss = getattr(out, "loss", None)
        if isinstance(loss, torch.Tensor):
            return loss
        logits, labels = out.logits, batch["labels"]
        if TASK == "causal_lm":
            logits, labels = logits[:, :-1], labels[:, 1:]
        if logits.dim() > 2:
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1), ignore_index=-100)
        return F.cross_entropy(logits.float(), labels, ignore_index=-100)
    x, y = batch
    out = model(x)
    if LOSS_FN is not None:
        return LOSS_FN(out, y)
    if isinstance(out, torch.Tensor):
        return F.cross_entropy(out, y)
    loss = F.cross_entropy(out.logits if hasattr(out, "logits") else out[0], y)
    for name, w in (("aux_logits", 0.4), ("aux_logits2", 0.3), ("aux_logits1", 0.3)):
        aux = getattr(out, name, None)
        if isinstance(aux, torch.Tensor):
            loss = loss + w * F.cross_entropy(aux, y)
    return loss


def to_device(batch, device: torch.device):
    """A batch on the device: (images, labels), or a dict of token tensors."""
    if isinstance(batch, dict):
        return {k: v.to(device) for k, v in batch.items()}
    x, y = batch[0], batch[1]
    fmt = torch.channels_last if CHANNELS_LAST and x.dim() == 4 else torch.preserve_format
    return x.to(device, memory_format=fmt), y.to(device)


def make_loader(dataset: Dataset, batch_size: int, shuffle: bool, drop_last: bool) -> DataLoader:
    """A DataLoader shuffled by a generator seeded with SEED, as the workbench makes it."""
    extra = {"persistent_workers": True, "worker_init_fn": seed_worker} if NUM_WORKERS else {}
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, num_workers=NUM_WORKERS, pin_memory=PIN_MEMORY,
                      drop_last=drop_last, generator=torch.Generator().manual_seed(SEED), **extra)


def seed_worker(worker_id: int) -> None:
    """Python's and NumPy's random numbers in a loader worker, from torch's per-worker seed."""
    seed = torch.initial_seed() % 2**32
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:
        pass


def make_optimizer(model: nn.Module, settings: dict) -> torch.optim.Optimizer:
    """The run's optimizer over trainable parameters only, every hyperparameter written out."""
    groups = param_groups(model, LR, WEIGHT_DECAY, settings)
    optimizer = {optimizer_call}
{fused_hook}    return optimizer


def validate(model: nn.Module, loader: DataLoader, device: torch.device) -> tuple[float, float | None, float | None]:
    """Mean loss per sample, top-1 accuracy (None when not classification) and the run's metric
    (METRIC_FN; None when none or it does not apply) on the validation data."""
    was = model.training
    model.eval()
    total, correct, classified, n = 0.0, 0, 0, 0
    if METRIC_FN is not None:
        METRIC_FN.reset()
    try:
        with torch.no_grad(), autocast(device):
            for batch in loader:
                batch = to_device(batch, device)
                loss = batch_loss(model, batch)
                if isinstance(batch, dict):
                    bs, y, out = batch["input_ids"].shape[0], batch["labels"], None
                    if TASK == "classification":
                        out = model(**batch).logits
                else:
                    bs, y = batch[0].shape[0], batch[1]
                    out = model(batch[0])
                    if METRIC_FN is not None:
                        METRIC_FN.update(out, y, bs)
                    out = out if isinstance(out, torch.Tensor) else (out.logits if hasattr(out, "logits") else out[0])
                total += float(loss) * bs
                n += bs
                if out is not None and out.dim() == 2 and y.dim() == 1 and not y.is_floating_point():
                    correct += int((out.argmax(1) == y).sum())
                    classified += bs
    finally:
        model.train(was)
    return (total / max(n, 1), (correct / classified if classified else None),
            METRIC_FN.value() if METRIC_FN is not None else None)


VALIDATIONS: list[tuple[int, float, float | None, float | None]] = []  # (step, loss, accuracy, metric) of this run


def validation_text(step: int, val: tuple[float, float | None, float | None]) -> str:
    """One validation's line: loss, accuracy, and the run's metric under its name (kept in VALIDATIONS)."""
    val_loss, val_acc, val_metric = val
    VALIDATIONS.append((step, val_loss, val_acc, val_metric))
    return (f"step {step}: validation loss {val_loss:.6g}" + (f", accuracy {val_acc:.4f}" if val_acc is not None else "")
            + (f", {METRIC_LABEL} {val_metric:.4g}" if val_metric is not None else ""))


def autocast(device: torch.device):
    """The run's mixed precision: autocast to AMP_DTYPE, or nothing."""
    if AMP == "off":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16 if AMP == "bf16" else torch.float16)


def stage_key(step: int, epoch: int) -> tuple[int, int]:
    """How many step stages and epoch stages are reached."""
    return sum(step >= s for s in STAGE_STEPS), sum(epoch >= e for e in STAGE_EPOCHS)


def main(argv: list[str] | None = None) -> list[float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=STEPS, help="optimizer steps (default: the run's)")
    parser.add_argument("--epochs", type=int, default=EPOCHS, help="passes over the data (with --steps: whichever ends first)")
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE)
    parser.add_argument("--image-size", type=int, default=IMAGE_SIZE, help="image side of an image model")
    parser.add_argument("--seq-len", type=int, default=SEQ_LEN, help="tokens per sample of a text model")
    parser.add_argument("--device", default=DEVICE, help="cpu, cuda, cuda:N or mps")
    parser.add_argument("--describe", metavar="JSON", help="write the applied state to this file and exit")
    parser.add_argument("--losses", metavar="JSON", help="write every step's loss to this file")
    parser.add_argument("--save-trainable", metavar="FILE", help="save the trained parameters (torch.save) here")
    args = parser.parse_args(argv)

    if TORCH_THREADS:
        torch.set_num_threads(TORCH_THREADS)
    device = torch.device(args.device)
    torch.manual_seed(SEED)
    random.seed(SEED)
    model = build_model()
    load_task()  # the loss and the metric (your code, if any) load after the model, as in the workbench
    dataset = make_dataset(model, True, args.image_size, args.seq_len)
    if HEAD_CLASSES is not None:
        replace_head(model, HEAD_CLASSES)  # the run's classes (no change when the head has them)
    val_loader = None
    paired = paired_validation()
    if VALIDATES or paired is not None:
        if paired is not None:
            val_data = paired  # the validation set your data function returned
        elif VAL is None:
            dataset, val_data = holdout_split(dataset, VAL_FRACTION, SEED)
        else:
            val_data = make_dataset(model, False, args.image_size, args.seq_len)
        val_loader = make_loader(val_data, args.batch_size, shuffle=False, drop_last=False)
    model.to(device)
    if CHANNELS_LAST:
        model.to(memory_format=torch.channels_last)
    apply_freeze_plan(model)
    forward = torch.compile(model, backend=COMPILE) if COMPILE else model
    optimizer = make_optimizer(model, BASE)
    state = describe(model, optimizer.param_groups)
    print(f"trainable {state['trainable_count']:,} of {state['total_count']:,} parameters; "
          f"{len(state['eval'])} modules kept in eval; {len(optimizer.param_groups)} param groups")
    if args.describe:
        Path(args.describe).write_text(json.dumps(state, indent=1))
        return []
    scaler = torch.amp.GradScaler(device.type) if AMP == "fp16" else None
    loader = make_loader(dataset, args.batch_size, shuffle=True, drop_last=True)
    total = args.steps if args.epochs is None else min(args.epochs * len(loader), args.steps or args.epochs * len(loader))
    scheduled = SCHEDULER != "constant" or WARMUP_STEPS > 0
    model.train()  # modules kept in eval stay in eval
    losses: list[float] = []
    current, epoch, step = (0, 0), 0, 0
    batches = iter(loader)
    if VAL_AT_START and val_loader is not None:  # the starting point, before the first step
        print(validation_text(-1, validate(model, val_loader, device)))
    while step < total:
        try:
            batch = next(batches)
        except StopIteration:
            epoch += 1
            batches = iter(loader)
            batch = next(batches)
        batch = to_device(batch, device)
        key = stage_key(step, epoch)
        if key != current:  # a plan stage: new flags and eval locks, the optimizer keeps the state of what still trains
            current = key
            settings = STAGES.get(key, BASE)
            apply_settings(model, settings)
            sync_optimizer(optimizer, param_groups(model, LR, WEIGHT_DECAY, settings))
            print(f"step {step}: stage {settings.get('label', 'base')}")
        if scheduled:
            factor = lr_factor(step, total, WARMUP_STEPS, SCHEDULER)
            for group in optimizer.param_groups:
                group["lr"] = group.setdefault("base_lr", group["lr"]) * factor
        optimizer.zero_grad(set_to_none=True)
        with autocast(device):
            loss = batch_loss(forward, batch)
        if scaler is not None:
            scaler.scale(loss).backward()
        else:
            loss.backward()
        value = loss.item()
        if not math.isfinite(value):
            optimizer.zero_grad(set_to_none=True)
            if ON_NONFINITE == "stop":
                print(f"step {step}: loss {value}: not finite, stopping")
                break
            print(f"step {step}: loss {value}: not finite, step skipped")
        elif scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        losses.append(value)
        step += 1
        if step % LOG_EVERY == 0 or step == total:
            print(f"step {step - 1}: loss {value:.6g}")
        if val_loader is not None and (step >= total or (VAL_EVERY is not None and step % VAL_EVERY == 0)):
            print(validation_text(step - 1, validate(model, val_loader, device)))
    if args.losses:
        Path(args.losses).write_text(json.dumps(losses))
    if args.save_trainable:
        torch.save({n: p.detach().cpu() for n, p in model.named_parameters() if p.requires_grad}, args.save_trainable)
    return losses


if __name__ == "__main__":
    main()
'''
