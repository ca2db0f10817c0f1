"""The ``reparam`` plan key: A+B reparameterization ``W = A + B`` as a typed spec.

This module parses, checks and describes the spec; :mod:`workbench.core.freezing.reparam`
installs it on a live model. The JSON form::

    {"kind": "a_plus_b", "a": "current", "b_init": "zeros", "mode": "exact", "params": null}

Low rank (the LoRA family): ``{"rank": 8, "alpha": 16, "dropout": 0.05, "init": "kaiming"}``
adds ``B = (alpha / rank) * U V`` with ``U`` zero at the start (``V`` for embeddings), so the
model starts exactly at ``A``; ``rank`` absent means full rank (the keys are then not written).
A variant's flag selects it instead of plain LoRA, e.g. ``"dora": true`` for DoRA (PEFT's
``use_dora``); the flags are the rows of :data:`workbench.core.plan.lora_variants.VARIANTS`.

``a`` and ``b_init`` are tensor sources: ``"current"`` (the loaded weights, ``a`` only),
``"zeros"``, ``{"random": {"seed": 0, "dist": "uniform", "scale": 1.0}}`` or
``{"file": "tensors.safetensors"}``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Union

from workbench.core.errors import WorkbenchError
from workbench.core.plan.lora_variants import DEFAULT, VARIANTS, info
from workbench.core.plan.spec_base import ExtensionSpec
from workbench.core.suggest import did_you_mean

__all__ = [
    "DISTS", "INITS", "KIND", "LOW_RANK_LAYERS", "LowRank", "MODES", "ReparamError", "ReparamSpec", "Source",
    "SpecInput", "WEIGHT_IN_OUT", "changes_function", "describe", "parse_spec",
]

KIND = "a_plus_b"
MODES = ("exact", "fused")
DISTS = ("uniform", "normal")
INITS = ("kaiming", "gaussian")
#: Layer types low-rank A+B adapts, by the class name the tree shows (others in a rule's reach
#: keep plain parameters): the one list the plan's counts, PEFT configs, the checks and the
#: freezing layer read.
LOW_RANK_LAYERS: tuple[str, ...] = ("Linear", "Conv1d", "Conv2d", "Conv1D", "Embedding")
#: Those of :data:`LOW_RANK_LAYERS` whose weight is stored ``in x out`` (transformers' ``Conv1D``,
#: ``Embedding``: rows are inputs); the others store ``out x in``.
WEIGHT_IN_OUT: tuple[str, ...] = ("Conv1D", "Embedding")
_BASE_KEYS = ("kind", "a", "b_init", "mode", "params", "rank", "alpha", "dropout", "init")
_RANDOM_KEYS = ("seed", "dist", "scale")


#: What :func:`parse_spec` accepts: a parsed spec, its JSON object, or ``true`` for the defaults.
SpecInput = Union["ReparamSpec", Mapping[str, Any], bool]


class ReparamError(WorkbenchError, ValueError):
    """A+B cannot be set up or a delta file is unusable; the message says what to do.

    It is a ``ValueError`` too, so plan parsing and :func:`~workbench.core.freezing.apply.apply_plan`
    report it as a :class:`~workbench.core.plan.problems.PlanError` and leave the model untouched.
    """


@dataclass(frozen=True)
class Source:
    """Where A or the initial B comes from.

    Attributes:
        kind: ``"current"``, ``"zeros"``, ``"random"`` or ``"file"``.
        seed / dist / scale: the random draw (``kind == "random"``).
        file: safetensors path, relative to the plan's folder (``kind == "file"``).
    """

    kind: str
    seed: int = 0
    dist: str = "uniform"
    scale: float = 1.0
    file: str | None = None

    def to_json(self) -> str | dict[str, Any]:
        """The JSON form: ``"current"``, ``"zeros"``, ``{"random": {...}}`` or ``{"file": ...}``."""
        if self.kind == "random":
            return {"random": {"seed": self.seed, "dist": self.dist, "scale": self.scale}}
        if self.kind == "file":
            return {"file": self.file}
        return self.kind

    def text(self) -> str:
        """In words, for :meth:`ReparamSpec.describe`."""
        if self.kind == "current":
            return "the loaded weights"
        if self.kind == "zeros":
            return "zeros"
        if self.kind == "random":
            return f"{self.dist} random (seed {self.seed}, scale {self.scale:g})"
        return f"file {self.file}"


def _describe_value(v: Any) -> str:
    return repr(v) if isinstance(v, (str, int, float, bool)) or v is None else type(v).__name__


def _hint(word: str, choices: tuple[str, ...]) -> str:
    question = did_you_mean(word, choices)
    return f" ({question})" if question else ""


def _parse_random(raw: Any, field: str) -> Source:
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ReparamError(
            f"reparam.{field}.random must be an object like "
            f'{{"seed": 0, "dist": "uniform", "scale": 1.0}}, got {_describe_value(raw)}'
        )
    for k in raw:
        if k not in _RANDOM_KEYS:
            raise ReparamError(
                f"unknown key {k!r} in reparam.{field}.random{_hint(str(k), _RANDOM_KEYS)}; "
                f"allowed: {', '.join(_RANDOM_KEYS)}"
            )
    seed = raw.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ReparamError(f"reparam.{field}.random.seed must be an integer >= 0, got {_describe_value(seed)}")
    dist = raw.get("dist", "uniform")
    if dist not in DISTS:
        raise ReparamError(
            f"reparam.{field}.random.dist must be \"uniform\" (scale * U[0, 1), like torch.rand_like) "
            f"or \"normal\" (scale * N(0, 1)), got {_describe_value(dist)}"
        )
    scale = raw.get("scale", 1.0)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
        raise ReparamError(f"reparam.{field}.random.scale must be a finite number > 0, got {_describe_value(scale)}")
    return Source("random", seed=seed, dist=dist, scale=float(scale))


def _parse_source(raw: Any, field: str, *, allow_current: bool) -> Source:
    if isinstance(raw, Source):
        raw = raw.to_json()
    words = ("current", "zeros") if allow_current else ("zeros",)
    usage = (
        " or ".join(f'"{w}"' for w in words)
        + ', {"random": {"seed": 0, "dist": "uniform", "scale": 1.0}} or {"file": "tensors.safetensors"}'
    )
    if isinstance(raw, str):
        if raw in words:
            return Source(raw)
        if raw == "random":
            return _parse_random({}, field)
        if raw == "current":
            raise ReparamError(
                f'reparam.{field} cannot be "current": B is the trained part; use "zeros" to start '
                "at the loaded weights (the default)"
            )
        raise ReparamError(f"reparam.{field} must be {usage}, got {raw!r}{_hint(raw, words)}")
    if isinstance(raw, Mapping):
        if len(raw) != 1 or next(iter(raw)) not in ("random", "file"):
            keys = ", ".join(repr(k) for k in raw) or "no key"
            raise ReparamError(f"reparam.{field} object must have exactly one key, \"random\" or \"file\", got {keys}; use {usage}")
        if "random" in raw:
            return _parse_random(raw["random"], field)
        f = raw["file"]
        if not isinstance(f, str) or not f.strip():
            raise ReparamError(
                f"reparam.{field}.file must be the path of a safetensors file (relative to the plan's "
                f"folder), got {_describe_value(f)}"
            )
        return Source("file", file=f)
    raise ReparamError(f"reparam.{field} must be {usage}, got {_describe_value(raw)}")


@dataclass(frozen=True)
class LowRank:
    """The low-rank part of a spec: ``B = (alpha / rank) * U V``.

    Attributes:
        rank: r, the inner size of ``U`` (out x r) and ``V`` (r x in).
        alpha: the scale numerator; the scale is ``alpha / rank``.
        dropout: dropout probability on the input of the low-rank path (fused mode only).
        init: ``"kaiming"`` (V kaiming-uniform, as PEFT) or ``"gaussian"`` (V ~ N(0, 1/r)); U is zero.
        variant: ``"lora"`` or the name of a row of :data:`~workbench.core.plan.lora_variants.VARIANTS`
            (``"dora"``). Each variant's flag reads as a property too: ``low_rank.dora``.
    """

    rank: int
    alpha: float
    dropout: float = 0.0
    init: str = "kaiming"
    variant: str = DEFAULT

    def __getattr__(self, name: str) -> bool:
        """A variant's flag (``low_rank.dora``): whether this is that variant.

        Raises:
            AttributeError: ``name`` is no variant's flag.
        """
        if name.startswith("_") or name not in VARIANTS:
            raise AttributeError(name)
        return bool(self.__dict__.get("variant") == name)

    def added_elements(self, out: int, inp: int) -> int:
        """Trainable elements this adds to a layer whose weight is ``out`` x ``inp`` (flattened).

        Args:
            out: output channels (rows of ``U V``).
            inp: input elements per output (columns of ``U V``).

        Returns:
            ``rank * (out + inp)`` for U and V, plus the variant's own per output channel
            (DoRA's magnitude: ``out``).
        """
        row = info(self.variant)
        return self.rank * (out + inp) + (out * row.extra_per_output if row else 0)

    @property
    def label(self) -> str | None:
        """The variant's label (``"DoRA"``), None for plain LoRA."""
        row = info(self.variant)
        return row.label if row else None

    @property
    def scale(self) -> float:
        """``alpha / rank``."""
        return self.alpha / self.rank

    def to_json(self) -> dict[str, Any]:
        """``{"rank": ..., "alpha": ..., "dropout": ..., "init": ...}`` (and the variant's flag: ``"dora": true``)."""
        alpha: float | int = int(self.alpha) if float(self.alpha).is_integer() else self.alpha
        out: dict[str, Any] = {"rank": self.rank, "alpha": alpha, "dropout": self.dropout, "init": self.init}
        if self.variant != DEFAULT:
            out[self.variant] = True
        return out


def _number(raw: Any, field: str, usage: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw):
        raise ReparamError(f"reparam.{field} must be {usage}, got {_describe_value(raw)}")
    return float(raw)


def _parse_low_rank(raw: Mapping[str, Any], mode: str) -> LowRank | None:
    if raw.get("rank") is None:
        extra = [k for k in ("alpha", "dropout", "init") if raw.get(k) is not None]
        extra += [name for name in VARIANTS if raw.get(name) is True]
        if extra:
            raise ReparamError(
                f"reparam.{extra[0]} needs reparam.rank (low-rank A+B); add \"rank\": 8 or remove {extra[0]!r}"
            )
        return None
    rank = raw["rank"]
    if isinstance(rank, bool) or not isinstance(rank, int) or rank <= 0:
        raise ReparamError(
            f"reparam.rank must be an integer >= 1 (such as 8), got {_describe_value(rank)}; "
            "leave it out for full-rank A+B"
        )
    alpha = _number(raw.get("alpha", rank), "alpha", "a finite number (the scale is alpha / rank; 16 with rank 8 is usual)")
    if alpha <= 0:
        raise ReparamError(f"reparam.alpha must be > 0 (the scale is alpha / rank), got {alpha:g}")
    dropout = _number(raw.get("dropout", 0.0), "dropout", "a number in [0, 1)")
    if not 0.0 <= dropout < 1.0:
        raise ReparamError(f"reparam.dropout must be in [0, 1), got {dropout:g}")
    if dropout and mode != "fused":
        raise ReparamError(
            'reparam.dropout acts on the input of U V, which only mode "fused" computes; '
            'set "mode": "fused" or "dropout": 0'
        )
    init = raw.get("init", "kaiming")
    if init not in INITS:
        hint = _hint(init, INITS) if isinstance(init, str) else ""
        raise ReparamError(
            f'reparam.init must be "kaiming" (V kaiming-uniform, as PEFT) or "gaussian" (V ~ N(0, 1/rank)), '
            f"got {_describe_value(init)}{hint}"
        )
    chosen: list[str] = []
    for name, row in VARIANTS.items():
        flag = raw.get(name, False)
        if not isinstance(flag, bool):
            raise ReparamError(f"reparam.{name} must be true ({row.label}: {row.summary}) or false, got {_describe_value(flag)}")
        chosen += [name] if flag else []
    if len(chosen) > 1:
        raise ReparamError(f"reparam.{chosen[0]} and reparam.{chosen[1]} are both true; a rule has one variant: keep one")
    b = raw.get("b_init", "zeros")
    if b != "zeros" and b != Source("zeros"):
        raise ReparamError(
            "reparam.b_init cannot be set with reparam.rank: low-rank B = U V starts at zero; "
            "remove b_init, or remove rank for a full-rank B"
        )
    params = raw.get("params")
    if params is not None and list([params] if isinstance(params, str) else params) != ["weight"]:
        raise ReparamError(
            'reparam.params with reparam.rank can only be ["weight"]: the low-rank B adapts the weight '
            "and the module's other parameters stay as they are; remove params or rank"
        )
    return LowRank(rank=rank, alpha=alpha, dropout=dropout, init=init, variant=chosen[0] if chosen else DEFAULT)


@dataclass(frozen=True, eq=False)
class ReparamSpec(ExtensionSpec):
    """A normalized ``reparam`` value.

    Attributes:
        a: the fixed tensor A.
        b_init: the initial value of the trained B.
        mode: ``"exact"`` (parametrize, B is a parameter) or ``"fused"`` (train W, B = W - A).
        params: parameter names of the module (None: every parameter it owns).
        low_rank: rank, alpha, dropout and init of a low-rank B (None: full rank).
    """

    key = "reparam"
    conflicts_with = ("partial",)

    a: Source = Source("current")
    b_init: Source = Source("zeros")
    mode: str = "exact"
    params: tuple[str, ...] | None = None
    low_rank: LowRank | None = None

    kind = KIND

    @classmethod
    def parse(cls, raw: Any) -> ReparamSpec:
        """Validate and normalize a ``reparam`` value (see :func:`parse_spec`)."""
        return parse_spec(raw)

    def to_json(self) -> dict[str, Any]:
        """``{"kind": "a_plus_b", "a": ..., "b_init": ..., "mode": ..., "params": ...}``, plus
        ``rank``, ``alpha``, ``dropout`` and ``init`` for a low-rank B."""
        out: dict[str, Any] = {
            "kind": KIND,
            "a": self.a.to_json(),
            "b_init": self.b_init.to_json(),
            "mode": self.mode,
            "params": None if self.params is None else list(self.params),
        }
        if self.low_rank is not None:
            out.update(self.low_rank.to_json())
        return out

    @property
    def rank(self) -> int | None:
        """The rank of B (None: full rank)."""
        return None if self.low_rank is None else self.low_rank.rank

    def short(self) -> str:
        """``"full"`` or ``"r=8"``, for the A+B column."""
        if self.low_rank is None:
            return "full"
        label = self.low_rank.label
        return f"r={self.low_rank.rank}" + (f" {label}" if label else "")

    def changes_function(self) -> bool | None:
        """Whether ``W = A + B`` differs from the loaded weights when training starts.

        Returns:
            False for ``a="current"`` with ``b_init="zeros"``; True when it surely differs (a
            random or zero A or B); None when it depends on file contents.
        """
        a, b = self.a.kind, self.b_init.kind
        if a == "current" and b == "zeros":
            return False
        if "file" in (a, b) and "random" not in (a, b):
            return None
        return True

    @property
    def starts_at_loaded(self) -> bool:
        """``a="current"`` and ``b_init="zeros"``: ``W`` is the loaded weight at install."""
        return self.a.kind == "current" and self.b_init.kind == "zeros"

    def describe(self) -> str:
        """One line, e.g. ``"A+B (exact): A = the loaded weights, B starts at zeros; training
        starts at the loaded model"``."""
        head = f"A+B ({self.mode}): A = {self.a.text()}, B starts at {self.b_init.text()}"
        if self.low_rank is not None:
            lr = self.low_rank
            head += f", B = ({lr.alpha:g}/{lr.rank}) U V of rank {lr.rank} ({lr.init} init"
            if lr.label:
                head += f", {lr.label}"
            head += f", dropout {lr.dropout:g})" if lr.dropout else ")"
        if self.params:
            head += f", on {', '.join(self.params)}"
        ch = self.changes_function()
        if ch is False:
            return head + "; training starts at the loaded model"
        if ch is None:
            return head + "; the model's function changes unless the files add up to the loaded weights"
        return head + "; the model's function changes: W = A + B is not the loaded weights"


def parse_spec(raw: SpecInput) -> ReparamSpec:
    """Validate and normalize the value of a rule's ``reparam`` key.

    Defaults are filled in: ``a="current"``, ``b_init="zeros"``, ``mode="exact"``,
    ``params=None`` (every parameter the module owns). ``true`` means all defaults.

    Args:
        raw: the JSON value, e.g. ``{"kind": "a_plus_b", "a": {"random": {"seed": 1}}}`` (or a spec).

    Returns:
        The spec; it equals ``{"kind": "a_plus_b", "a": ..., "b_init": ..., "mode": ..., "params": ...}``.

    Raises:
        ReparamError: (a ``ValueError``) naming the sub-field and the fix.
    """
    if isinstance(raw, ReparamSpec):
        return raw
    if raw is True:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ReparamError(
            'reparam must be an object like {"kind": "a_plus_b", "a": "current", "b_init": "zeros", '
            f'"mode": "exact"}} (true for these defaults, false to switch A+B off), got {_describe_value(raw)}'
        )
    keys = _BASE_KEYS + tuple(VARIANTS)
    for k in raw:
        if k not in keys:
            raise ReparamError(
                f"unknown key {k!r} in reparam{_hint(str(k), keys)}; allowed: {', '.join(keys)}"
            )
    kind = raw.get("kind", KIND)
    if kind != KIND:
        raise ReparamError(f'reparam.kind must be "{KIND}" (the only kind), got {_describe_value(kind)}')
    a = _parse_source(raw.get("a", "current"), "a", allow_current=True)
    b = _parse_source(raw.get("b_init", "zeros"), "b_init", allow_current=False)
    mode = raw.get("mode", "exact")
    if mode not in MODES:
        raise ReparamError(
            f'reparam.mode must be "exact" (parametrize, B is a parameter) or "fused" (train W, '
            f"B = W - A on demand), got {_describe_value(mode)}"
        )
    params = raw.get("params")
    names: tuple[str, ...] | None = None
    if params is not None:
        if isinstance(params, str):
            params = [params]
        if not isinstance(params, (list, tuple)) or not params:
            raise ReparamError(
                'reparam.params must be a non-empty list of parameter names like ["weight"] '
                f"(or null for all), got {_describe_value(params)}"
            )
        out: list[str] = []
        for p in params:
            if not isinstance(p, str) or not p.isidentifier():
                raise ReparamError(
                    f"reparam.params entries must be parameter names of the module such as \"weight\" "
                    f"or \"bias\" (no dots), got {_describe_value(p)}"
                )
            if p not in out:
                out.append(p)
        names = tuple(out)
    low_rank = _parse_low_rank(raw, mode)
    if low_rank is not None:
        names = None
    return ReparamSpec(a=a, b_init=b, mode=mode, params=names, low_rank=low_rank)


def changes_function(spec: SpecInput) -> bool | None:
    """Whether ``W = A + B`` differs from the loaded weights when training starts.

    Args:
        spec: a ``reparam`` spec (raw or normalized).

    Returns:
        See :meth:`ReparamSpec.changes_function`.

    Raises:
        ReparamError: the spec is invalid.
    """
    return parse_spec(spec).changes_function()


def describe(spec: SpecInput) -> str:
    """One line for the GUI, the CLI and plan summaries (see :meth:`ReparamSpec.describe`).

    Raises:
        ReparamError: the spec is invalid.
    """
    return parse_spec(spec).describe()
