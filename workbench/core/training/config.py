"""``TrainConfig``: everything a training run needs, as plain JSON-serializable data.

The CLI (``workbench train``), the GUI and scripts all build one and hand it to
:class:`workbench.core.training.engine.Trainer`. ``--config cfg.json`` loads one; command-line flags
override its fields.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

from workbench.core.atomic import atomic_write
from workbench.core.errors import WorkbenchError
from workbench.core.optimizers import CHOICES
from workbench.core.suggest import did_you_mean
from workbench.core.training.schedule import SCHEDULERS

__all__ = [
    "AMP_MODES",
    "CACHE_MODES",
    "CODE_FIELDS",
    "DEFAULT_STEPS",
    "FIELD_EXPORT",
    "MAX_EPOCHS",
    "MAX_SEED",
    "MAX_STEPS",
    "NONFINITE_MODES",
    "OPTIMIZER_NAMES",
    "SCHEDULERS",
    "STRATEGIES",
    "ConfigError",
    "TrainConfig",
    "field_export",
]

#: Optimizer names: plain SGD, SGD with momentum, Adam, AdamW.
OPTIMIZER_NAMES: tuple[str, ...] = tuple(reversed(CHOICES))  # from the simplest: sgd, sgd_momentum, adam, adamw
#: Mixed precision: off, bfloat16 autocast (CPU, CUDA, MPS), float16 autocast + GradScaler.
AMP_MODES: tuple[str, ...] = ("off", "bf16", "fp16")
#: What a non-finite loss does: end the run, or skip that step and count it.
NONFINITE_MODES: tuple[str, ...] = ("stop", "skip")
#: How the model is spread over the ranks under torchrun (see docs/scaling.md): a full replica
#: per rank with gradients all-reduced (DDP), or parameters, gradients and optimizer state
#: sharded over the ranks (FSDP2, ``torch.distributed.fsdp.fully_shard``).
STRATEGIES: tuple[str, ...] = ("ddp", "fsdp")
#: Largest ``seed`` (torch seeds are 64-bit integers).
MAX_SEED = 2**63 - 1
#: Frozen-prefix cache settings (see :mod:`workbench.core.training.frozen_cache`).
CACHE_MODES: tuple[str, ...] = ("auto", "on", "off")
#: Steps run when neither ``steps`` nor ``epochs`` is given.
DEFAULT_STEPS = 200
#: Most optimizer steps and most epochs a run may ask for (a billion steps is decades of
#: training; ``--steps 10**26`` is a typo, refused in one line).
MAX_STEPS = 10**9
MAX_EPOCHS = 10**6

_DEVICE_RE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")
_METRICS_SUFFIXES = (".jsonl", ".json", ".csv")


class ConfigError(WorkbenchError, ValueError):
    """A training configuration is invalid; the message names the field and the fix."""


#: Fields whose ``py:`` value runs code: run only when the caller named them (:meth:`TrainConfig.origin_of`).
CODE_FIELDS: tuple[str, ...] = ("model", "data", "val", "loss", "metric")
#: Most dimensions, and most elements, of one sample's ``input_shape``.
_MAX_INPUT_DIMS = 8
_MAX_INPUT_ELEMENTS = 1 << 31

#: Longest ``seq_len`` a config accepts (tokens per sample; a model's positions cap it further).
MAX_SEQ_LEN = 1 << 20

@dataclass
class TrainConfig:
    """A training run, as plain data.

    Attributes:
        model: torchvision model name (``"resnet18"``), or a model spec dict
            (``{"source", "name", "weights", "checkpoint", "num_classes"}``, the ``model``
            block of a plan file works too). None: use the plan file's ``model`` block.
        weights: torchvision weights name (``"IMAGENET1K_V1"``, ``"DEFAULT"``) or None for
            random initialisation.
        checkpoint: checkpoint file loaded on top (``.safetensors``/``.pt``), or None.
        num_classes: classes of the task: the head is replaced when it differs. None: the
            dataset's class count for file datasets, the model's head for synthetic data.
        plan: a freeze plan: path of a plan file, the plan as a dict, or None (everything
            trains: full fine-tuning).
        data: dataset spec: ``synthetic`` (default), ``synthetic:N``, ``imagefolder:PATH``,
            ``cifar10:PATH`` ... (see :mod:`workbench.core.training.data`).
        image_size: square input side; None: the crop size of the weights' preset (224 for
            most models). Smaller values (64) make quick runs.
        seq_len: tokens per sample for a text model's data (synthetic tokens, ``text:`` and
            ``hf-dataset:`` data), 2 to :data:`MAX_SEQ_LEN`, capped at the model's position
            embeddings; None: 32 for synthetic tokens, 128 for text files. Image models
            ignore it.
        batch_size: samples per step (per process under torchrun).
        optimizer: ``sgd``, ``sgd_momentum``, ``adam`` or ``adamw``.
        lr: base learning rate (each param group gets ``lr * lr_scale``).
        weight_decay: weight decay of every group.
        no_decay: ``auto``: no weight decay for biases, 1-D parameters and the model's
            ``no_weight_decay()`` names (as timm); None: ``weight_decay`` everywhere.
        momentum: momentum of ``sgd_momentum``.
        scheduler: learning-rate schedule: ``constant`` (default), ``cosine``, ``linear`` or
            ``onecycle`` (see :func:`workbench.core.training.schedule.lr_factor`); it
            continues for param groups added by stages and live plan changes.
        warmup_steps: steps of linear warm-up (``onecycle``: the rising phase; 0 = 30 %).
        steps: optimizer steps to run. With ``epochs`` too, whichever ends first.
        epochs: passes over the dataset. Neither given: :data:`DEFAULT_STEPS` steps.
        device: ``auto`` (cuda > mps > cpu), ``cpu``, ``cuda``, ``cuda:N`` or ``mps``.
        amp: ``off``, ``bf16`` (autocast; works on CPU too) or ``fp16`` (autocast with
            ``torch.amp.GradScaler``).
        channels_last: model and inputs in channels-last memory format.
        compile: ``torch.compile`` the model: False, True (inductor) or a backend name.
        num_workers: DataLoader worker processes.
        pin_memory: pin host batches; None: on when training on CUDA.
        seed: seed of model init, data order and synthetic data.
        on_nonfinite: ``stop`` (end the run, status ``nonfinite``) or ``skip`` (skip the
            optimizer step, count it, go on).
        torch_threads: ``torch.set_num_threads`` for the run (process-wide), or None.
        log_every: report metrics every N steps (N>1 reports means over the window; steps
            with a plan change and the last step are always reported).
        save_dir: folder for the end-of-run checkpoint of the trainable state, or None.
        metrics_path: ``*.jsonl`` or ``*.csv`` file for the per-step metrics, or None.
        val: validation dataset spec (same forms as ``data``; its validation/test split), or
            None: a held-out split of the training data (``val_fraction`` of it, never
            trained on) when validation is on.
        val_every: validate every N steps and at the end. None: only at the end when ``val``
            is given, no validation otherwise.
        val_fraction: share of the training data held out for validation when ``val`` is
            None and ``val_every`` is set (0 < f < 1).
        allow_download: allow downloading pretrained weights missing from the cache.
        tensorboard_dir: folder for TensorBoard event files (rank 0), or None.
        strategy: under torchrun, ``ddp`` (a full replica per rank) or ``fsdp`` (FSDP2:
            parameters, gradients and optimizer state sharded; needs torchrun, no stages).
        fsdp_blocks: with ``fsdp``, the module paths sharded as units of their own (fnmatch
            patterns such as ``"layer*.*"``); None: the model's repeated blocks (see
            :func:`workbench.core.training.fsdp.block_paths`).
        text_column / label_column / image_column: columns of ``hf-dataset:PATH`` data;
            None: ``text``, ``label``, ``image``.
        cache_frozen: the frozen-prefix activation cache: ``auto`` (on when provably exact:
            frozen, eval-mode front layers and data known to give the same input per sample;
            one line says why not otherwise), ``on`` (also when the data is not known to be
            deterministic: you vouch for it), ``off``.
        cache_budget: memory the cache may hold (bytes, or ``"512M"``, ``"2G"``); beyond it
            rows spill to a memory-mapped file in the run folder. None: a quarter of the free
            device memory (RAM on the CPU).
        auto_freeze: freeze the front blocks whose gradient norm has flattened, while
            training (each decision a plan stage; see :mod:`workbench.core.training.auto_freeze`).
        auto_freeze_every: decide every N steps; None (the default): 5 % of the run's steps, at
            least 10 (:func:`workbench.core.training.auto_freeze.auto_interval`).
        auto_freeze_threshold: a block has flattened when its mean gradient norm changed by
            less than this share between the last two windows of N steps.
        auto_freeze_max: freeze at most this share of the model's blocks (0 < f <= 1).
        loss: the training loss: ``cross_entropy`` (class labels; auxiliary heads included),
            ``bce`` (multi-label binary cross-entropy on logits), ``mse``, ``l1``, or
            ``py:FILE.py:FUNC`` / ``py:MODULE:FUNC`` (``FUNC(output, target)`` returns a scalar
            tensor; see :mod:`workbench.core.training.losses`).
        metric: what validation measures besides the loss: ``accuracy`` (top-1), ``top5``, or
            ``py:FILE.py:FUNC`` (``FUNC(output, target)`` returns a number for a batch; see
            :mod:`workbench.core.training.task_metrics`).
        input_shape: the shape of one input sample, e.g. ``(1024,)`` for audio frames or
            ``(3, 224, 224)``; synthetic data is made of that shape. None: images of
            ``image_size`` (or tokens for text models), or the shape the data gives.
        input_column: the ``hf-dataset:`` column of arrays (audio, features) fed to the model
            as a float tensor, instead of an image or text column; None: not used.
        val_at_start: validate once before the first step too (the pretrained model's score).

    A ``py:`` spec (``model``, ``data``, ``val``, ``loss``, ``metric``) runs code: it runs
    when the caller named it, never because a config file or a run record does
    (:meth:`origin_of`).
    """

    model: str | dict[str, Any] | None = None
    weights: str | None = None
    checkpoint: str | None = None
    num_classes: int | None = None
    plan: str | dict[str, Any] | None = None
    data: str = "synthetic"
    image_size: int | None = None
    seq_len: int | None = None
    batch_size: int = 32
    optimizer: str = "adamw"
    lr: float = 1e-3
    weight_decay: float = 0.0
    no_decay: str | None = None
    momentum: float = 0.9
    scheduler: str = "constant"
    warmup_steps: int = 0
    steps: int | None = None
    epochs: int | None = None
    device: str = "auto"
    amp: str = "off"
    channels_last: bool = False
    compile: bool | str = False
    num_workers: int = 0
    pin_memory: bool | None = None
    seed: int = 0
    on_nonfinite: str = "stop"
    torch_threads: int | None = None
    log_every: int = 1
    save_dir: str | None = None
    metrics_path: str | None = None
    allow_download: bool = True
    val: str | None = None
    val_every: int | None = None
    val_fraction: float = 0.1

    #: What named ``model`` when a file did (set by :meth:`from_json`/:meth:`load`, kept by
    #: :meth:`replace` unless ``model`` changes); None: the caller named it. Not a field, so
    #: no file can set it. A model that runs code (``py:``) is built only when it is None.
    _model_origin: ClassVar[str | None] = None

    @property
    def model_origin(self) -> str | None:
        """What named :attr:`model` when a file did (``"config file cfg.json"``), else None."""
        return self._model_origin

    def origin_of(self, name: str) -> str | None:
        """What named field ``name`` when a file did (``"config file cfg.json"``), else None.

        Args:
            name: one of :data:`CODE_FIELDS`.

        Returns:
            The file that named it, or None when the caller did (then ``py:`` code runs).
        """
        if name == "model":
            return self._model_origin
        origins: dict[str, str] = self.__dict__.get("_code_origins", {})
        return origins.get(name)

    @property
    def validates(self) -> bool:
        """Validation is on (``val`` or ``val_every`` given)."""
        return self.val is not None or self.val_every is not None
    # ---- TensorBoard event files of every metric
    tensorboard_dir: str | None = None
    # ---- how the model is spread over the ranks under torchrun
    strategy: str = "ddp"
    fsdp_blocks: list[str] | None = None
    # ---- columns of hf-dataset:PATH data (None: text, label, image)
    text_column: str | None = None
    label_column: str | None = None
    image_column: str | None = None
    # ---- the frozen-prefix activation cache (see workbench.core.training.frozen_cache)
    cache_frozen: str = "auto"
    cache_budget: str | int | None = None
    # ---- auto-freeze (see workbench.core.training.auto_freeze)
    auto_freeze: bool = False
    auto_freeze_every: int | None = None
    auto_freeze_threshold: float = 0.1
    auto_freeze_max: float = 0.75
    # ---- your own task: loss, metric, input shape (see losses.py, task_metrics.py, data_sources.py)
    loss: str = "cross_entropy"
    metric: str = "accuracy"
    input_shape: tuple[int, ...] | None = None
    input_column: str | None = None
    val_at_start: bool = False

    # ------------------------------------------------------------ validation
    def validate(self) -> TrainConfig:  # noqa: C901 - one check per field, in the order of the fields
        """Check every field; normalizes spellings (``AdamW`` -> ``adamw``).

        Returns:
            self, for chaining.

        Raises:
            ConfigError: the first invalid field, named, with the fix.
        """
        def bad(name: str, msg: str) -> ConfigError:
            return ConfigError(f"config field '{name}': {msg}")

        if self.model is not None and not isinstance(self.model, (str, dict)):
            raise bad("model", f"must be a model name like 'resnet18' or a model spec object, got {type(self.model).__name__}")
        if isinstance(self.model, str) and not self.model.strip():
            raise bad("model", "is empty; give a torchvision model name like 'resnet18'")
        for name in ("weights", "checkpoint", "save_dir", "metrics_path", "tensorboard_dir"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, (str, os.PathLike)):
                raise bad(name, f"must be a string or null, got {type(v).__name__}")
            if isinstance(v, os.PathLike):
                setattr(self, name, os.fspath(v))
        if self.plan is not None and not isinstance(self.plan, (str, dict, os.PathLike)):
            from workbench.core.plan.rules import FreezePlan

            if isinstance(self.plan, FreezePlan):
                self.plan = self.plan.to_dict()
            else:
                raise bad("plan", f"must be a plan file path, a plan object or null, got {type(self.plan).__name__}")
        if isinstance(self.plan, os.PathLike):
            self.plan = os.fspath(self.plan)
        if not isinstance(self.data, str) or not self.data.strip():
            raise bad("data", "must be a dataset spec such as 'synthetic' or 'imagefolder:PATH'")
        _positive_int(self, "num_classes", optional=True, bad=bad)
        _positive_int(self, "image_size", optional=True, bad=bad)
        v = self.seq_len
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 2 <= v <= MAX_SEQ_LEN):
            shown = f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) and abs(v) < 10**30 else repr(v)[:40]
            raise bad("seq_len", f"must be an integer between 2 and {MAX_SEQ_LEN:,} tokens per sample, or null, "
                      f"got {shown} (the model's position embeddings cap it further)")
        _positive_int(self, "batch_size", optional=False, bad=bad)
        _positive_int(self, "steps", optional=True, bad=bad)
        _positive_int(self, "epochs", optional=True, bad=bad)
        for name, cap in (("steps", MAX_STEPS), ("epochs", MAX_EPOCHS)):
            n = getattr(self, name)
            if n is not None and n > cap:
                raise bad(name, f"must be at most {cap:,}, got {n:,}" if n < 10**30 else f"must be at most {cap:,}")
        _positive_int(self, "log_every", optional=False, bad=bad)
        _positive_int(self, "torch_threads", optional=True, bad=bad)
        _positive_int(self, "val_every", optional=True, bad=bad)
        if self.val is not None and (not isinstance(self.val, str) or not self.val.strip()):
            raise bad("val", "must be a dataset spec such as 'imagefolder:PATH', or null for a held-out split of the training data")
        v = self.val_fraction
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1:
            raise bad("val_fraction", f"must be a number between 0 and 1 (exclusive), got {v!r}")
        self.val_fraction = float(v)
        self.scheduler = _choice(self, "scheduler", SCHEDULERS, bad, aliases={"one_cycle": "onecycle", "cos": "cosine", "none": "constant"})
        for name in ("num_workers", "seed", "warmup_steps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise bad(name, f"must be an integer >= 0, got {v!r}")
        if self.seed > MAX_SEED:  # torch.manual_seed takes a 64-bit integer
            raise bad("seed", f"must be at most {MAX_SEED} (2**63 - 1), got {self.seed}")
        self.optimizer = _choice(self, "optimizer", OPTIMIZER_NAMES, bad, aliases={"sgdm": "sgd_momentum", "momentum": "sgd_momentum"})
        self.amp = _choice(self, "amp", AMP_MODES, bad, aliases={"none": "off", "no": "off", "bfloat16": "bf16", "float16": "fp16", "half": "fp16"})
        self.on_nonfinite = _choice(self, "on_nonfinite", NONFINITE_MODES, bad, aliases={})
        self.strategy = _choice(self, "strategy", STRATEGIES, bad, aliases={"fsdp2": "fsdp"})
        if self.fsdp_blocks is not None:
            if isinstance(self.fsdp_blocks, str):
                self.fsdp_blocks = [b.strip() for b in self.fsdp_blocks.split(",") if b.strip()]
            if not isinstance(self.fsdp_blocks, list) or not self.fsdp_blocks or not all(
                isinstance(b, str) and b.strip() for b in self.fsdp_blocks
            ):
                raise bad("fsdp_blocks", f"must be a list of module path patterns such as [\"layer*.*\"], got {self.fsdp_blocks!r}")
        for name in ("text_column", "label_column", "image_column"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, str) or not v.strip()):
                raise bad(name, f"must be a column name of the hf-dataset: data, or null, got {v!r}")
        self.cache_frozen = _choice(self, "cache_frozen", CACHE_MODES, bad, aliases={"true": "on", "false": "off", "yes": "on", "no": "off"})
        from workbench.core.training.cache_store import CacheBudgetError, parse_budget

        try:
            parse_budget(self.cache_budget)
        except CacheBudgetError as e:
            raise bad("cache_budget", str(e)) from None
        if not isinstance(self.auto_freeze, bool):
            raise bad("auto_freeze", f"must be true or false, got {self.auto_freeze!r}")
        _positive_int(self, "auto_freeze_every", optional=True, bad=bad)
        v = self.auto_freeze_threshold
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf"):
            raise bad("auto_freeze_threshold", f"must be a number > 0 (a share such as 0.1), got {v!r}")
        self.auto_freeze_threshold = float(v)
        v = self.auto_freeze_max
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
            raise bad("auto_freeze_max", f"must be a share of the blocks, 0 < f <= 1, got {v!r}")
        self.auto_freeze_max = float(v)
        _validate_task(self, bad)
        if self.no_decay in ("none", ""):
            self.no_decay = None
        if self.no_decay not in (None, "auto"):
            raise bad("no_decay", f"must be \"auto\" or null, got {self.no_decay!r}")
        for name in ("lr", "weight_decay", "momentum"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v >= 0 and v < float("inf")):
                raise bad(name, f"must be a finite number >= 0, got {v!r}")
            setattr(self, name, float(v))
        if not isinstance(self.device, str) or not _DEVICE_RE.match(self.device.strip().lower()):
            raise bad("device", f"must be auto, cpu, cuda, cuda:N or mps, got {self.device!r}")
        self.device = self.device.strip().lower()
        for name in ("channels_last", "allow_download"):
            if not isinstance(getattr(self, name), bool):
                raise bad(name, f"must be true or false, got {getattr(self, name)!r}")
        if self.pin_memory is not None and not isinstance(self.pin_memory, bool):
            raise bad("pin_memory", f"must be true, false or null (automatic), got {self.pin_memory!r}")
        if not isinstance(self.compile, (bool, str)) or (isinstance(self.compile, str) and not self.compile.strip()):
            raise bad("compile", "must be true, false, or a torch.compile backend name such as 'inductor'")
        if self.metrics_path is not None and Path(self.metrics_path).suffix.lower() not in _METRICS_SUFFIXES:
            raise bad("metrics_path", f"{self.metrics_path!r} must end in .jsonl or .csv")
        return self

    @property
    def compile_backend(self) -> str | None:
        """The torch.compile backend, or None when compiling is off."""
        if self.compile is False:
            return None
        return "inductor" if self.compile is True else str(self.compile)

    # ------------------------------------------------------------ (de)serialization
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict of every field."""
        return json.loads(json.dumps(dataclasses.asdict(self), default=os.fspath))

    def to_json(self) -> str:
        """Indented JSON text."""
        return json.dumps(self.to_dict(), indent=2) + "\n"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainConfig:
        """Build and validate a config from a dict (a ``cfg.json``).

        Args:
            data: field values; missing fields take their defaults.

        Returns:
            The validated config.

        Raises:
            ConfigError: not a mapping, an unknown key (close names suggested), a bad value.
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"a training config must be a JSON object, got {type(data).__name__}")
        names = [f.name for f in fields(cls)]
        for k in data:
            if k not in names:
                hint = did_you_mean(str(k), names) or f"known keys: {', '.join(names)}"
                raise ConfigError(f"unknown config key {k!r}; {hint}")
        return cls(**dict(data)).validate()

    @classmethod
    def from_json(cls, text: str, source: str | None = None) -> TrainConfig:
        """Parse JSON text (see :meth:`from_dict`).

        Raises:
            ConfigError: invalid JSON or an invalid config.
        """
        from workbench.core import safe_json

        where = f"{source}: " if source else ""
        try:
            data = safe_json.loads(text, what="the config")
        except json.JSONDecodeError as e:
            raise ConfigError(f"{where}not valid JSON ({e.msg} at line {e.lineno}); fix the file's syntax") from None
        except safe_json.JsonInputError as e:
            raise ConfigError(f"{where}{e}") from None
        except ValueError as e:  # a number of thousands of digits, and the like
            raise ConfigError(f"{where}not a usable JSON config ({str(e).split(';')[0][:100]}); fix the file") from None
        cfg = cls.from_dict(data)
        where = f"config file {source}" if source else "a config file"
        if cfg.model is not None:
            cfg.__dict__["_model_origin"] = where
        cfg.__dict__["_code_origins"] = {name: where for name in CODE_FIELDS[1:] if isinstance(data.get(name), str)}
        return cfg

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> TrainConfig:
        """Read a config file.

        Args:
            path: a ``.json`` file.

        Returns:
            The validated config.

        Raises:
            ConfigError: missing/unreadable file or an invalid config.
        """
        from workbench.core import safe_json

        p = Path(path)
        try:
            text = safe_json.read_text(p, what="config file")
        except safe_json.JsonInputError as e:
            raise ConfigError(str(e)) from None
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"cannot read config file {p} ({e}); check the path") from None
        return cls.from_json(text, str(p))

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the config as JSON, atomically.

        Args:
            path: destination file.
        """
        atomic_write(path, self.to_json())

    def replace(self, **changes: Any) -> TrainConfig:
        """A validated copy with some fields changed.

        Args:
            **changes: field values.

        Returns:
            The new config.

        Raises:
            ConfigError: unknown field or invalid value.
        """
        names = {f.name for f in fields(self)}
        for k in changes:
            if k not in names:
                raise ConfigError(f"unknown config key {k!r}")
        new = dataclasses.replace(self, **changes).validate()
        if "model" not in changes and self._model_origin is not None:
            new.__dict__["_model_origin"] = self._model_origin
        origins = {k: v for k, v in self.__dict__.get("_code_origins", {}).items() if k not in changes}
        if origins:
            new.__dict__["_code_origins"] = origins
        return new


def parse_input_shape(value: Any) -> tuple[int, ...]:
    """One sample's input shape from ``"1024"``, ``"3,224,224"``, ``"3x224x224"`` or a list of ints.

    Args:
        value: the text or sequence.

    Returns:
        The shape as a tuple of positive integers.

    Raises:
        ConfigError: not a shape of 1 to 8 positive integers of at most 2**31 elements in all.
    """
    items: list[Any]
    if isinstance(value, str):
        items = [t.strip() for t in re.split(r"[,x×]", value.strip()) if t.strip()]
        try:
            dims = [int(t) for t in items]
        except ValueError:
            raise ConfigError(f"input shape {value[:60]!r} must be positive integers such as 1024 or 3,224,224") from None
    elif isinstance(value, (list, tuple)):
        dims = list(value)
    else:
        raise ConfigError(f"input shape must be a list of positive integers such as [3, 224, 224], got {type(value).__name__}")
    if not 1 <= len(dims) <= _MAX_INPUT_DIMS or not all(
        isinstance(d, int) and not isinstance(d, bool) and 0 < d < _MAX_INPUT_ELEMENTS for d in dims
    ):
        raise ConfigError(f"input shape {str(value)[:60]!r} must be 1 to {_MAX_INPUT_DIMS} positive integers "
                          "(one sample, without the batch), such as 1024 or 3,224,224")
    total = 1
    for d in dims:
        total *= d
    if total > _MAX_INPUT_ELEMENTS:
        raise ConfigError(f"input shape {tuple(dims)} has {total:,} elements per sample, more than {_MAX_INPUT_ELEMENTS:,}")
    return tuple(dims)


def _validate_task(cfg: TrainConfig, bad: Any) -> None:
    """``loss``, ``metric``, ``input_shape``, ``input_column``, ``val_at_start``."""
    from workbench.core.training.losses import LossSpecError, loss_name
    from workbench.core.training.task_metrics import MetricSpecError, metric_name

    try:
        cfg.loss = loss_name(cfg.loss)
    except LossSpecError as e:
        raise bad("loss", str(e)) from None
    try:
        cfg.metric = metric_name(cfg.metric)
    except MetricSpecError as e:
        raise bad("metric", str(e)) from None
    if cfg.input_shape is not None:
        try:
            cfg.input_shape = parse_input_shape(cfg.input_shape)
        except ConfigError as e:
            raise bad("input_shape", str(e)) from None
    v = cfg.input_column
    if v is not None and (not isinstance(v, str) or not v.strip()):
        raise bad("input_column", f"must be a column name of the hf-dataset: data, or null, got {v!r}")
    if not isinstance(cfg.val_at_start, bool):
        raise bad("val_at_start", f"must be true or false, got {cfg.val_at_start!r}")


def _positive_int(cfg: TrainConfig, name: str, *, optional: bool, bad: Any) -> None:
    v = getattr(cfg, name)
    if v is None and optional:
        return
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise bad(name, f"must be a positive integer{' or null' if optional else ''}, got {v!r}")


def _choice(cfg: TrainConfig, name: str, choices: tuple[str, ...], bad: Any, aliases: dict[str, str]) -> str:
    v = getattr(cfg, name)
    if not isinstance(v, str):
        raise bad(name, f"must be one of {', '.join(choices)}, got {v!r}")
    key = v.strip().lower().replace("-", "_")
    key = aliases.get(key, key)
    if key not in choices:
        question = did_you_mean(key, choices)
        hint = f"; {question}" if question else ""
        raise bad(name, f"{v!r} is not one of {', '.join(choices)}{hint}")
    return key


# ---- how the exported plain-PyTorch script carries each field (see docs/export.md)
#: Export rules of the fields: ``script`` (the script reproduces it), ``ignored`` (it does not
#: change what is trained: where files go, how fast, what is logged; the script's docstring
#: lists them), ``refuse`` (a value other than the default is not exported; the message names
#: the field). A field missing here is ``refuse``.
FIELD_EXPORT: dict[str, str] = {
    **dict.fromkeys(("model", "weights", "checkpoint", "num_classes", "plan", "data", "image_size", "seq_len",
                     "batch_size", "optimizer", "lr", "weight_decay", "no_decay", "momentum", "scheduler",
                     "warmup_steps", "steps", "epochs", "device", "amp", "channels_last", "compile", "num_workers",
                     "pin_memory", "seed", "on_nonfinite", "torch_threads", "log_every", "val", "val_every",
                     "val_fraction", "text_column", "label_column", "image_column", "loss", "metric", "input_shape",
                     "val_at_start", "input_column"), "script"),
    **dict.fromkeys(("save_dir", "metrics_path", "tensorboard_dir", "allow_download", "cache_frozen", "cache_budget",
                     "auto_freeze_every", "auto_freeze_threshold", "auto_freeze_max"), "ignored"),
    **dict.fromkeys(("strategy", "fsdp_blocks", "auto_freeze"), "refuse"),
}


def field_export(name: str) -> str:
    """How the exported script carries a config field (:data:`FIELD_EXPORT`; ``refuse`` when absent).

    Args:
        name: a :class:`TrainConfig` field.

    Returns:
        ``script``, ``ignored`` or ``refuse``.
    """
    return FIELD_EXPORT.get(name, "refuse")
