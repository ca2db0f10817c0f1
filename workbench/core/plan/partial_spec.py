"""The ``partial`` plan key: which ranges of a weight train (sub-tensor freezing), as a typed spec.

This module parses, checks and describes the spec; :mod:`workbench.core.freezing.partial`
installs it on a live model. A spec::

    {"param": "weight", "dim": 1, "trainable": [[0, 10], [20, 30]]}

Ranges are half-open ``[start, stop)`` along ``dim``: ``dim 0`` = output features/channels or
embedding rows, ``dim 1`` = input features/channels or embedding columns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from workbench.core.errors import WorkbenchError
from workbench.core.plan.spec_base import ExtensionSpec
from workbench.core.plan.tree import ModuleNode
from workbench.core.suggest import did_you_mean

__all__ = [
    "PartialError",
    "PartialSpec",
    "SUPPORTED_TEXT",
    "base_type_name",
    "check",
    "check_shape",
    "describe",
    "dim_label",
    "parse_spec",
    "reparam_conflict",
    "trainable_fraction",
]

_SPEC_KEYS = ("param", "dim", "trainable")
_EXAMPLE = '{"param": "weight", "dim": 1, "trainable": [[0, 10]]}'
#: Suffix of the trainable slice's parameter name once installed (``weight_trainable``).
TRAINABLE_SUFFIX = "_trainable"
#: The module types sub-tensor freezing supports, in words.
SUPPORTED_TEXT = "torch.nn.Linear, Conv1d, Conv2d, Conv3d and Embedding"
_DIM_LABELS = {
    "Linear": ("output features", "input features"),
    "Conv1d": ("output channels", "input channels"),
    "Conv2d": ("output channels", "input channels"),
    "Conv3d": ("output channels", "input channels"),
    "Embedding": ("rows (token ids)", "embedding columns"),
}


class PartialError(WorkbenchError, ValueError):
    """Sub-tensor freezing cannot be set up as asked; the message says why and what to do."""


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@dataclass(frozen=True, eq=False)
class PartialSpec(ExtensionSpec):
    """A normalized ``partial`` value.

    Attributes:
        param: the parameter partly frozen (``"weight"``).
        dim: 0 or 1.
        trainable: sorted, merged half-open ``(start, stop)`` ranges that train.
    """

    key = "partial"
    conflicts_with = ("reparam",)

    param: str
    dim: int
    trainable: tuple[tuple[int, int], ...]

    @classmethod
    def parse(cls, raw: Any) -> PartialSpec:
        """Validate and normalize a ``partial`` value (see :func:`parse_spec`)."""
        return parse_spec(raw)

    @property
    def n_trainable(self) -> int:
        """Number of indices along ``dim`` that train."""
        return sum(b - a for a, b in self.trainable)

    def to_json(self) -> dict[str, Any]:
        """``{"param": ..., "dim": ..., "trainable": [[start, stop], ...]}``."""
        return {"param": self.param, "dim": self.dim, "trainable": [[a, b] for a, b in self.trainable]}

    def describe(self, shape: Sequence[int] | None = None, type_name: str | None = None) -> str:
        """One line for tooltips, logs and plot markers (see :func:`describe`)."""
        where = dim_label(type_name, self.dim) if type_name else f"dim {self.dim}"
        ranges = ", ".join(f"{a}:{b}" for a, b in self.trainable)
        text = f"{self.param} {where} {ranges} trainable"
        if shape is not None and self.dim < len(shape):
            n, size = self.n_trainable, shape[self.dim]
            text += f" ({n} of {size}, {100.0 * n / size:.2f}%)" if size else ""
        return text

    def check(self, node: ModuleNode) -> str | None:
        """Refuse module types and parameters partial freezing cannot handle (see :func:`check`)."""
        base = base_type_name(node.type_name)
        if base not in _DIM_LABELS:
            return (
                f"sub-tensor freezing supports plain {SUPPORTED_TEXT}, not {node.type_name}; "
                "select one of those layers inside it, or freeze/unfreeze the whole module"
            )
        if self.param != "weight":
            return (
                f"only the 'weight' of a {base} can be partially frozen, not {self.param!r}; "
                "set \"param\": \"weight\" (the bias trains or freezes with the module)"
            )
        names = node.param_names
        if names and "weight" not in names and "weight" + TRAINABLE_SUFFIX not in names:
            return f"this {base} has no 'weight' parameter (it has {', '.join(names)}); remove 'partial' for it"
        return None

    def conflict_message(self, path: str, other: str) -> str:
        """The message for ``partial`` and A+B on one module (see :func:`reparam_conflict`)."""
        return reparam_conflict(path)


def parse_spec(raw: Any) -> PartialSpec:
    """Validate and normalize a ``partial`` spec.

    Ranges are sorted and adjacent ranges merged: ``[[20, 30], [0, 10], [10, 15]]`` becomes
    ``[[0, 15], [20, 30]]``. ``param`` defaults to ``"weight"``.

    Args:
        raw: the JSON value of the rule's ``partial`` key, e.g.
            ``{"param": "weight", "dim": 1, "trainable": [[0, 10]]}`` (or a spec).

    Returns:
        The spec; it equals ``{"param": str, "dim": 0 | 1, "trainable": [[start, stop], ...]}``.

    Raises:
        PartialError: (a ``ValueError``) naming the sub-field that is wrong and the fix:
            unknown keys, a missing or invalid ``dim``, ``trainable`` that is not a non-empty
            list of ``[start, stop]`` integer pairs, a negative start, an empty range, or
            overlapping ranges.
    """
    if isinstance(raw, PartialSpec):
        return raw
    if not isinstance(raw, Mapping):
        raise PartialError(f"'partial' must be an object like {_EXAMPLE}, got {type(raw).__name__}")
    for k in raw:
        if k not in _SPEC_KEYS:
            hint = did_you_mean(str(k), _SPEC_KEYS) or f"allowed: {', '.join(_SPEC_KEYS)}"
            raise PartialError(f"unknown sub-field '{k}' in 'partial'; {hint}")
    param = raw.get("param", "weight")
    if not isinstance(param, str) or not param:
        raise PartialError(f"sub-field 'param' must be a parameter name such as \"weight\", got {param!r}")
    if "dim" not in raw:
        raise PartialError(
            "sub-field 'dim' is missing; use 0 (output features/channels, embedding rows) "
            "or 1 (input features/channels, embedding columns)"
        )
    dim = raw["dim"]
    if not _is_int(dim) or dim not in (0, 1):
        raise PartialError(
            f"sub-field 'dim' must be 0 (output features/channels, embedding rows) or "
            f"1 (input features/channels, embedding columns), got {dim!r}"
        )
    ranges = raw.get("trainable")
    if not isinstance(ranges, (list, tuple)) or not ranges:
        raise PartialError(
            "sub-field 'trainable' must be a non-empty list of half-open [start, stop] ranges, "
            f"e.g. [[0, 10]]; got {ranges!r}"
        )
    pairs: list[tuple[int, int, int]] = []
    for i, r in enumerate(ranges):
        if not isinstance(r, (list, tuple)) or len(r) != 2 or not all(_is_int(v) for v in r):
            raise PartialError(
                f"'trainable[{i}]' must be a [start, stop] pair of integers, got {r!r}; "
                "write ranges as a list of pairs, e.g. [[0, 10], [20, 30]]"
            )
        start, stop = int(r[0]), int(r[1])
        if start < 0 or stop < 0:
            raise PartialError(f"'trainable[{i}]' = [{start}, {stop}] has a negative bound; indices start at 0")
        if stop <= start:
            raise PartialError(
                f"'trainable[{i}]' = [{start}, {stop}] is empty; ranges are half-open [start, stop), "
                f"so stop must be greater than start (e.g. [{start}, {start + 1}] for one index)"
            )
        pairs.append((start, stop, i))
    pairs.sort()
    merged: list[list[int]] = []
    prev: tuple[int, int, int] | None = None
    for start, stop, i in pairs:
        if prev is not None and start < prev[1]:
            raise PartialError(
                f"'trainable[{prev[2]}]' = [{prev[0]}, {prev[1]}] and 'trainable[{i}]' = [{start}, {stop}] "
                f"overlap; merge them into [{min(prev[0], start)}, {max(prev[1], stop)}]"
            )
        if merged and start == merged[-1][1]:
            merged[-1][1] = stop
        else:
            merged.append([start, stop])
        prev = (start, stop, i)
    return PartialSpec(param=param, dim=int(dim), trainable=tuple((a, b) for a, b in merged))


def check_shape(spec: PartialSpec, shape: tuple[int, ...]) -> str | None:
    """What is wrong with the spec's ranges on a tensor of ``shape``.

    Args:
        spec: a normalized spec.
        shape: the full tensor's shape.

    Returns:
        A message saying what is wrong and what to do, or None when the ranges fit and
        something stays frozen.
    """
    dim = spec.dim
    if dim >= len(shape):
        return f"'dim' {dim} does not exist: the {spec.param} has shape {list(shape)}; use 0 or {len(shape) - 1}"
    size = shape[dim]
    for a, b in spec.trainable:
        if b > size:
            return (
                f"'trainable' range [{a}, {b}] is outside dim {dim} of the {spec.param} "
                f"(size {size}, shape {list(shape)}); stops must be <= {size}"
            )
    if spec.n_trainable == size:
        return (
            f"'trainable' covers all {size} indices of dim {dim}: nothing is frozen; "
            "remove 'partial' and set \"frozen\": false to train the whole tensor"
        )
    return None


def trainable_fraction(spec: Any, shape: Sequence[int]) -> float:
    """Share of the tensor's elements that train.

    Args:
        spec: a ``partial`` spec (raw or normalized).
        shape: shape of the full tensor (e.g. ``(out_features, in_features)``).

    Returns:
        A number in (0, 1].

    Raises:
        PartialError: the spec is invalid or does not fit ``shape``.
    """
    parsed = parse_spec(spec)
    msg = check_shape(parsed, tuple(shape))
    if msg:
        raise PartialError(msg)
    return parsed.n_trainable / shape[parsed.dim]


def base_type_name(type_name: str) -> str:
    """The plain class name of a ``Partial*`` class name (``"PartialLinear"`` -> ``"Linear"``).

    Args:
        type_name: a class name.

    Returns:
        The name without the ``Partial`` prefix when it names a supported type; else unchanged.
    """
    if type_name.startswith("Partial") and type_name[7:] in _DIM_LABELS:
        return type_name[7:]
    return type_name


def dim_label(type_name: str, dim: int) -> str:
    """What ``dim`` means for a module type, for dialogs and messages.

    Args:
        type_name: class name (``"Linear"``, ``"Conv2d"``, ``"Embedding"``; ``"PartialX"`` works too).
        dim: 0 or 1.

    Returns:
        e.g. ``"input features"``; ``"dim 1"`` for other types.
    """
    labels = _DIM_LABELS.get(base_type_name(type_name))
    return labels[dim] if labels and dim in (0, 1) else f"dim {dim}"


def describe(spec: Any, shape: Sequence[int] | None = None, type_name: str | None = None) -> str:
    """One line for tooltips, logs and plot markers.

    Args:
        spec: a ``partial`` spec (raw or normalized).
        shape: the full tensor's shape, to add counts.
        type_name: the module's class name, to name the dimension.

    Returns:
        e.g. ``"weight input features 0:10, 20:30 trainable (20 of 4096, 0.49%)"``.

    Raises:
        PartialError: the spec is invalid.
    """
    return parse_spec(spec).describe(shape, type_name)


def check(spec: Any, node: ModuleNode) -> str | None:
    """Refuse, at plan validation, module types and parameters partial freezing cannot handle.

    Shapes, ``groups`` and ``max_norm`` need the live module:
    :func:`workbench.core.freezing.partial.install` checks those.

    Args:
        spec: a ``partial`` spec (raw or normalized).
        node: the module's tree node.

    Returns:
        A message saying what is wrong and what to do, or None when supported.

    Raises:
        PartialError: the spec is invalid.
    """
    return parse_spec(spec).check(node)


def reparam_conflict(path: str) -> str:
    """The message for a module that has both ``partial`` and A+B (``reparam``) in force.

    Args:
        path: the module's dotted path.

    Returns:
        What is wrong and what to do.
    """
    sel = path or "*"
    return (
        "sub-tensor freezing ('partial') and A+B ('reparam') cannot be combined on one module; "
        f"switch A+B off for it with a later rule {{\"select\": \"{sel}\", \"reparam\": false}}, "
        "or remove 'partial'"
    )
