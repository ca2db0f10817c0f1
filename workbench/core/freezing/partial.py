"""Sub-tensor freezing that really skips the frozen gradient (plan key ``"partial"``).

Freezing part of a weight with a gradient-masking hook saves nothing (the full gradient is
computed, then zeroed), and concatenating a trainable and a frozen slice in ``forward`` is
slower than not freezing (the whole weight is copied every step and its full gradient still
computed). What works is splitting the *computation*. For a Linear layer with trainable input
columns ``T`` and frozen columns ``F``::

    y = x[..., F] @ W_F.T + b  +  x[..., T] @ W_T.T

``W_F`` does not require grad, so autograd computes the input gradient through it but never
its weight gradient. Output rows (``dim 0``) are computed as two blocks and the outputs are
put side by side (copying outputs is cheap compared with copying weights). Convolutions do
the same along channels; embeddings look up trainable rows in the trainable table only.

A spec (one rule of a plan)::

    {"select": "fc", "frozen": false,
     "partial": {"param": "weight", "dim": 1, "trainable": [[0, 10], [20, 30]]}}

Ranges are half-open ``[start, stop)`` along ``dim``: ``dim 0`` = output features/channels or
embedding rows, ``dim 1`` = input features/channels or embedding columns.

:func:`install` changes the class of the module in place (as :mod:`torch.nn.utils.parametrize`
does) to :class:`PartialLinear`, :class:`PartialConv2d`, ... which subclass the torch class,
so ``isinstance`` checks, hooks, attributes and the module's identity are kept. The weight is
stored as two parameters, ``weight_trainable`` and ``weight_frozen``; ``module.weight`` is a
read-only property that reassembles the full tensor, ``state_dict()`` has the plain keys
(``weight``, ``bias``) and a plain checkpoint loads into the transformed module.
:meth:`PartialHandle.remove` puts the original ``weight`` parameter object back, holding the
trained values.

Supported: plain ``torch.nn.Linear``, ``Conv1d``/``Conv2d``/``Conv3d`` with ``groups == 1``
and ``Embedding`` (without ``max_norm``). Sub-tensor freezing and A+B (``reparam``) on the same
module are refused when a plan is validated (see ``docs/partial.md``).

The spec itself (parsing, checks against the tree, descriptions) is
:class:`~workbench.core.plan.partial_spec.PartialSpec`; its functions are re-exported here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize

from workbench.core.plan.partial_spec import (
    SUPPORTED_TEXT,
    PartialError,
    PartialSpec,
    check,
    check_shape,
    describe,
    dim_label,
    parse_spec,
    reparam_conflict,
    trainable_fraction,
)

__all__ = [
    "PartialConv1d",
    "PartialConv2d",
    "PartialConv3d",
    "PartialEmbedding",
    "PartialError",
    "PartialHandle",
    "PartialLinear",
    "PartialSpec",
    "check",
    "check_module",
    "describe",
    "dim_label",
    "install",
    "is_partial",
    "parse_spec",
    "reparam_conflict",
    "trainable_fraction",
]

# ---------------------------------------------------------------- checks
_SUPPORTED: dict[type[nn.Module], str] = {
    nn.Linear: "Linear",
    nn.Conv1d: "Conv1d",
    nn.Conv2d: "Conv2d",
    nn.Conv3d: "Conv3d",
    nn.Embedding: "Embedding",
}


def check_module(spec: Any, module: nn.Module) -> str | None:
    """Everything :func:`install` checks on a live module, without changing it.

    Args:
        spec: a ``partial`` spec (raw or normalized).
        module: the module the spec would be installed on.

    Returns:
        A message saying what is wrong and what to do, or None when it can be installed.
    """
    try:
        spec = parse_spec(spec)
    except PartialError as e:
        return str(e)
    if is_partial(module):
        return "it is already partially frozen; remove the existing sub-tensor freezing first"
    base = _SUPPORTED.get(type(module))
    if base is None:
        kind = "a subclass with its own behaviour" if isinstance(module, tuple(_SUPPORTED)) else "not supported"
        return (
            f"sub-tensor freezing supports plain {SUPPORTED_TEXT}; this module is a "
            f"{type(module).__name__} ({kind}); freeze or unfreeze it as a whole"
        )
    if spec.param != "weight":
        return (
            f"only the 'weight' of a {base} can be partially frozen, not {spec.param!r}; "
            "set \"param\": \"weight\""
        )
    if parametrize.is_parametrized(module):
        return (
            "its weight is parametrized (A+B or another torch parametrization); sub-tensor freezing "
            "and A+B cannot be combined on one module: remove one of them"
        )
    w = module._parameters.get("weight")
    if not isinstance(w, nn.Parameter) or isinstance(w, nn.parameter.UninitializedParameter):
        return "it has no initialized 'weight' parameter; run the model once (lazy modules) or remove 'partial'"
    if isinstance(module, nn.modules.conv._ConvNd) and module.groups != 1:
        return (
            f"grouped convolution (groups={module.groups}) is not supported: slices of a grouped weight "
            "mix groups; freeze or unfreeze the whole module"
        )
    if isinstance(module, nn.Embedding) and module.max_norm is not None:
        return (
            "Embedding with max_norm renormalizes looked-up rows in place, frozen ones included; "
            "set max_norm=None or freeze/unfreeze the whole module"
        )
    return check_shape(spec, tuple(w.shape))


# ---------------------------------------------------------------- layout
@dataclass(frozen=True)
class _Layout:
    """How the full tensor is split: trainable/frozen ranges and the order of their pieces.

    ``segments`` lists the pieces of the full tensor along ``dim`` in order, each as
    ``(from_trainable, offset in that part, length)``.
    """

    param: str
    dim: int
    size: int
    trainable: tuple[tuple[int, int], ...]
    frozen: tuple[tuple[int, int], ...]
    segments: tuple[tuple[bool, int, int], ...]

    @classmethod
    def build(cls, spec: PartialSpec, size: int) -> _Layout:
        trainable = spec.trainable
        frozen: list[tuple[int, int]] = []
        segments: list[tuple[bool, int, int]] = []
        pos = t_off = f_off = 0
        for a, b in trainable:
            if a > pos:
                frozen.append((pos, a))
                segments.append((False, f_off, a - pos))
                f_off += a - pos
            segments.append((True, t_off, b - a))
            t_off += b - a
            pos = b
        if pos < size:
            frozen.append((pos, size))
            segments.append((False, f_off, size - pos))
        return cls(spec.param, spec.dim, size, trainable, tuple(frozen), tuple(segments))

    @property
    def n_trainable(self) -> int:
        return sum(b - a for a, b in self.trainable)


def _gather(t: torch.Tensor, dim: int, ranges: tuple[tuple[int, int], ...]) -> torch.Tensor:
    """The ranges of ``t`` along ``dim``, side by side (a view for a single range)."""
    if len(ranges) == 1:
        a, b = ranges[0]
        return t.narrow(dim, a, b - a)
    return torch.cat([t.narrow(dim, a, b - a) for a, b in ranges], dim)


def _assemble(t_part: torch.Tensor, f_part: torch.Tensor, dim: int, layout: _Layout) -> torch.Tensor:
    """Put trainable and frozen parts back in the order of the full tensor along ``dim``."""
    pieces = [(t_part if tr else f_part).narrow(dim, off, n) for tr, off, n in layout.segments]
    return torch.cat(pieces, dim)


def _set_param_order(module: nn.Module, order: Sequence[str]) -> None:
    params = module._parameters
    items = [(k, params[k]) for k in order if k in params] + [(k, v) for k, v in params.items() if k not in order]
    params.clear()
    params.update(items)


# ---------------------------------------------------------------- the module classes
if TYPE_CHECKING:  # the mixin is only ever combined with an nn.Module subclass
    _ModuleBase = nn.Module
else:
    _ModuleBase = object


class _PartialFreezing(_ModuleBase):
    """Mixin for a module whose weight is split into a trainable and a frozen parameter."""

    _partial: _Layout
    weight_trainable: nn.Parameter
    weight_frozen: nn.Parameter

    # ---- the full weight, state_dict, repr
    @property
    def weight(self) -> torch.Tensor:
        """The full weight, reassembled (a new tensor; writing into it changes nothing)."""
        lay = self._partial
        return _assemble(self.weight_trainable, self.weight_frozen, lay.dim, lay)

    def _partial_take(self, t: torch.Tensor, dim: int, trainable: bool) -> torch.Tensor:
        lay = self._partial
        ranges = lay.trainable if trainable else lay.frozen
        if len(ranges) == 1:
            a, b = ranges[0]
            return t.narrow(dim, a, b - a)
        index = self._buffers["_partial_tidx" if trainable else "_partial_fidx"]
        assert index is not None  # registered at install for split ranges
        return t.index_select(dim, index)

    def _partial_full_shape(self) -> tuple[int, ...]:
        shape = list(self.weight_trainable.shape)
        shape[self._partial.dim] = self._partial.size
        return tuple(shape)

    def _workbench_canonical_parameters(self) -> list[tuple[str, tuple[int, ...]]]:
        """``(name, shape)`` of the plain module's parameters (for fingerprints)."""
        out = [("weight", self._partial_full_shape())]
        bias = self._parameters.get("bias")
        if bias is not None:
            out.append(("bias", tuple(bias.shape)))
        return out

    def _save_to_state_dict(self, destination: dict[str, Any], prefix: str, keep_vars: bool) -> None:
        w = self.weight
        destination[prefix + "weight"] = w if keep_vars else w.detach()
        for name, p in self._parameters.items():
            if p is not None and name not in ("weight_trainable", "weight_frozen"):
                destination[prefix + name] = p if keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = b if keep_vars else b.detach()

    def _load_from_state_dict(
        self,
        state_dict: dict[str, Any],
        prefix: str,
        local_metadata: dict[str, Any],
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        hidden = {n: self._parameters.pop(n) for n in ("weight_trainable", "weight_frozen")}
        try:  # the base class loads bias and runs load hooks; it sees "weight" as unexpected
            super()._load_from_state_dict(
                state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
            )
        finally:
            self._parameters.update(hidden)
            _set_param_order(self, ("weight_trainable", "weight_frozen", "bias"))
        key = prefix + "weight"
        while key in unexpected_keys:
            unexpected_keys.remove(key)
        if key not in state_dict:
            if strict:
                missing_keys.append(key)
            return
        value = state_dict[key]
        shape = self._partial_full_shape()
        if not isinstance(value, torch.Tensor) or tuple(value.shape) != shape:
            got = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            error_msgs.append(
                f"size mismatch for {key}: copying a param with shape {got} from checkpoint, "
                f"the shape in current model is {shape}."
            )
            return
        lay = self._partial
        t_val, f_val = _gather(value, lay.dim, lay.trainable), _gather(value, lay.dim, lay.frozen)
        if local_metadata.get("assign_to_params_buffers", False):
            for name, val in (("weight_trainable", t_val), ("weight_frozen", f_val)):
                old = self.weight_trainable if name == "weight_trainable" else self.weight_frozen
                self._parameters[name] = nn.Parameter(val.contiguous(), requires_grad=old.requires_grad)
            return
        with torch.no_grad():
            self.weight_trainable.copy_(t_val)
            self.weight_frozen.copy_(f_val)

    def extra_repr(self) -> str:
        base = super().extra_repr()
        lay = self._partial
        spec = PartialSpec(param=lay.param, dim=lay.dim, trainable=lay.trainable)
        return f"{base}, partial={spec.describe()}"


class PartialLinear(_PartialFreezing, nn.Linear):  # type: ignore[override]  # weight: read-only property
    """``nn.Linear`` with part of its weight frozen; the frozen part gets no weight gradient."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        lay = self._partial
        wt, wf, bias = self.weight_trainable, self.weight_frozen, self.bias
        if lay.dim == 1:  # input columns: split the input, sum the two products
            # the bias goes with the trainable term: the frozen term then needs no backward
            # at all when the input needs no gradient (a first layer)
            y = F.linear(self._partial_take(input, -1, True), wt, bias)
            return y + F.linear(self._partial_take(input, -1, False), wf)
        b_t = None if bias is None else self._partial_take(bias, 0, True)
        b_f = None if bias is None else self._partial_take(bias, 0, False)
        return _assemble(F.linear(input, wt, b_t), F.linear(input, wf, b_f), -1, lay)


class _PartialConv(_PartialFreezing):
    """Shared forward of the partial Conv1d/2d/3d classes."""

    kernel_size: tuple[int, ...]
    bias: nn.Parameter | None
    if TYPE_CHECKING:

        def _conv_forward(self, input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor: ...

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        lay = self._partial
        channel = input.dim() - len(self.kernel_size) - 1  # 1 batched, 0 unbatched
        wt, wf, bias = self.weight_trainable, self.weight_frozen, self.bias
        if lay.dim == 1:  # input channels
            y = self._conv_forward(self._partial_take(input, channel, True), wt, bias)
            return y + self._conv_forward(self._partial_take(input, channel, False), wf, None)
        b_t = None if bias is None else self._partial_take(bias, 0, True)
        b_f = None if bias is None else self._partial_take(bias, 0, False)
        return _assemble(self._conv_forward(input, wt, b_t), self._conv_forward(input, wf, b_f), channel, lay)


class PartialConv1d(_PartialConv, nn.Conv1d):  # type: ignore[misc,override]  # weight: read-only property
    """``nn.Conv1d`` with part of its weight frozen (groups == 1)."""


class PartialConv2d(_PartialConv, nn.Conv2d):  # type: ignore[misc,override]  # weight: read-only property
    """``nn.Conv2d`` with part of its weight frozen (groups == 1)."""


class PartialConv3d(_PartialConv, nn.Conv3d):  # type: ignore[misc,override]  # weight: read-only property
    """``nn.Conv3d`` with part of its weight frozen (groups == 1)."""


class PartialEmbedding(_PartialFreezing, nn.Embedding):  # type: ignore[override]  # weight: read-only property
    """``nn.Embedding`` with some rows (dim 0) or columns (dim 1) frozen.

    For rows, each id is looked up in the table it lives in: only the trainable table gets a
    gradient (dense: the size of the trainable rows; ``sparse=True``: only the rows looked up).
    """

    _partial_row_pos: torch.Tensor
    _partial_row_trainable: torch.Tensor
    _partial_t_padding: int | None

    def _lookup(self, idx: torch.Tensor, table: torch.Tensor, padding_idx: int | None) -> torch.Tensor:
        return F.embedding(idx, table, padding_idx, None, self.norm_type, self.scale_grad_by_freq, self.sparse)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        lay = self._partial
        wt, wf = self.weight_trainable, self.weight_frozen
        if lay.dim == 1:
            return _assemble(self._lookup(input, wt, self.padding_idx), self._lookup(input, wf, None), -1, lay)
        pos = self._partial_row_pos[input]  # row within its own table
        is_t = self._partial_row_trainable[input]
        t_pad = self._partial_t_padding
        out = F.embedding(torch.where(is_t, 0, pos), wf)  # frozen table: no gradient work
        if not (wt.requires_grad and torch.is_grad_enabled()):
            return torch.where(is_t.unsqueeze(-1), F.embedding(torch.where(is_t, pos, 0), wt), out)
        if self.sparse or self.scale_grad_by_freq:
            # look up exactly the trainable positions, so sparse gradients and frequencies
            # count only real lookups (one host sync for the selection)
            flat = is_t.reshape(-1).nonzero().squeeze(1)
            rows = self._lookup(pos.reshape(-1).index_select(0, flat), wt, t_pad)
            full = out.reshape(-1, out.shape[-1]).index_put((flat,), rows)
            return full.reshape(out.shape)
        # dense: frozen positions look up a placeholder row and pass it a zero gradient
        dummy = 0 if t_pad is None else t_pad
        rows = self._lookup(torch.where(is_t, pos, dummy), wt, t_pad)
        return torch.where(is_t.unsqueeze(-1), rows, out)


_PARTIAL_CLASSES: dict[type[nn.Module], type[nn.Module]] = {
    nn.Linear: PartialLinear,
    nn.Conv1d: PartialConv1d,
    nn.Conv2d: PartialConv2d,
    nn.Conv3d: PartialConv3d,
    nn.Embedding: PartialEmbedding,
}
_PLAIN_CLASSES = {v: k for k, v in _PARTIAL_CLASSES.items()}


def is_partial(module: nn.Module) -> bool:
    """Whether sub-tensor freezing is installed on ``module``.

    Args:
        module: any module.

    Returns:
        True for the ``Partial*`` classes this module installs.
    """
    return isinstance(module, _PartialFreezing)


# ---------------------------------------------------------------- install / remove
class PartialHandle:
    """Sub-tensor freezing installed on one module (the ``Installed`` protocol of apply.py).

    Attributes:
        path: dotted module path.
        spec: the normalized spec.
        module: the module (its class is now ``Partial<Type>``).
    """

    def __init__(self, path: str, spec: PartialSpec, module: _PartialFreezing, original: nn.Parameter) -> None:
        self.path = path
        self.spec = spec
        self.module = module
        self._original = original
        self._initial = module.weight_trainable.detach().clone()
        self._removed = False

    def _name(self, short: str) -> str:
        return f"{self.path}.{short}" if self.path else short

    def trainable(self) -> list[tuple[str, nn.Parameter]]:
        """The trainable slice and the bias: ``requires_grad`` follows the module's frozen flag.

        Returns:
            ``(full dotted name, parameter)`` pairs, empty after :meth:`remove`.
        """
        if self._removed:
            return []
        out = [(self._name("weight_trainable"), self.module.weight_trainable)]
        bias = self.module._parameters.get("bias")
        if bias is not None:
            out.append((self._name("bias"), bias))
        return out

    def fixed(self) -> list[tuple[str, torch.Tensor]]:
        """The frozen slices: never trained, bit-identical after training.

        Returns:
            ``[(full dotted name, parameter)]``, empty after :meth:`remove`.
        """
        if self._removed:
            return []
        return [(self._name("weight_frozen"), self.module.weight_frozen)]

    def acts_in(self) -> list[str]:
        """Where the trainable slice and the bias act: the module's own forward."""
        return [self.path]

    def trainable_fraction(self) -> float:
        """Share of the weight's elements that train."""
        return self.module._partial.n_trainable / self.module._partial.size

    def remove(self, merge: bool = True) -> None:
        """Put back the plain module with its original ``weight`` parameter object.

        Args:
            merge: True keeps the trained values of the trainable slices; False restores the
                weight as it was at install time. The bias is an ordinary parameter and keeps
                its current value either way.
        """
        if self._removed:
            return
        module = self.module
        lay: _Layout = module._partial
        wt = module.weight_trainable
        t_val = wt.detach() if merge else self._initial.to(device=wt.device, dtype=wt.dtype)
        full = _assemble(t_val, module.weight_frozen.detach(), lay.dim, lay).contiguous()
        orig = self._original
        orig.data = full
        orig.requires_grad_(wt.requires_grad)
        params = module._parameters
        params["weight"] = orig
        del params["weight_trainable"], params["weight_frozen"]
        _set_param_order(module, ("weight", "bias"))
        for name in ("_partial_tidx", "_partial_fidx", "_partial_row_pos", "_partial_row_trainable"):
            module._buffers.pop(name, None)
            module._non_persistent_buffers_set.discard(name)
        for name in ("_partial", "_partial_t_padding"):
            module.__dict__.pop(name, None)
        module.__class__ = _PLAIN_CLASSES[type(module)]  # type: ignore[assignment]  # back to the plain class
        self._initial = torch.empty(0)
        self._removed = True


def _shared_with(model: nn.Module, module: nn.Module, path: str) -> list[str]:
    weight = module._parameters["weight"]
    return [
        n for n, p in model.named_parameters(remove_duplicate=False)
        if p is weight and n != (f"{path}.weight" if path else "weight")
    ]


def install(model: nn.Module, path: str, spec: Any, *, base_dir: Any = None) -> PartialHandle:
    """Install sub-tensor freezing on the module at ``path``.

    The module keeps its identity, hooks and attributes; its class becomes the matching
    ``Partial*`` class and its weight is stored as ``weight_trainable`` (requires_grad follows
    the module's frozen flag) and ``weight_frozen`` (requires_grad False). Outputs equal the
    plain layer's up to float reassociation.

    Args:
        model: the model (or the layer itself with ``path=""``).
        path: dotted path of the module.
        spec: the ``partial`` spec (raw or normalized).
        base_dir: unused (part of the extension protocol).

    Returns:
        The handle (``trainable()``, ``fixed()``, ``remove(merge)``).

    Raises:
        PartialError: no such module, unsupported module or spec, a range outside the weight,
            or a weight shared with another module (tied weights). The model is unchanged.
    """
    spec = parse_spec(spec)
    try:
        module = model.get_submodule(path)
    except AttributeError:
        raise PartialError(f"no module {path!r} in the model; check the path with `workbench inspect`") from None
    where = f"module {path or '(root)'!r}"
    msg = check_module(spec, module)
    if msg:
        raise PartialError(f"{where}: {msg}")
    shared = _shared_with(model, module, path)
    if shared:
        raise PartialError(
            f"{where}: its weight is shared with {', '.join(shared)} (tied weights); partial freezing "
            "would untie them; freeze or unfreeze the tied weight as a whole"
        )
    base = type(module)
    orig = module._parameters["weight"]
    assert orig is not None  # check_module refused modules without a weight
    lay = _Layout.build(spec, orig.shape[spec.dim])
    with torch.no_grad():
        wt = _gather(orig.detach(), lay.dim, lay.trainable).contiguous().clone()
        wf = _gather(orig.detach(), lay.dim, lay.frozen).contiguous().clone()
    params = module._parameters
    del params["weight"]
    params["weight_trainable"] = nn.Parameter(wt, requires_grad=orig.requires_grad)
    params["weight_frozen"] = nn.Parameter(wf, requires_grad=False)
    _set_param_order(module, ("weight_trainable", "weight_frozen", "bias"))
    device = orig.device
    for name, ranges in (("_partial_tidx", lay.trainable), ("_partial_fidx", lay.frozen)):
        if len(ranges) > 1:
            idx = torch.cat([torch.arange(a, b, device=device) for a, b in ranges])
            module.register_buffer(name, idx, persistent=False)
    if isinstance(module, nn.Embedding) and lay.dim == 0:
        trainable = torch.zeros(lay.size, dtype=torch.bool, device=device)
        pos = torch.empty(lay.size, dtype=torch.long, device=device)
        start = 0
        for tr, off, n in lay.segments:  # the full table's rows in order
            pos[start : start + n] = torch.arange(off, off + n, device=device)
            trainable[start : start + n] = tr
            start += n
        module.register_buffer("_partial_row_pos", pos, persistent=False)
        module.register_buffer("_partial_row_trainable", trainable, persistent=False)
        pad = module.padding_idx
        module.__dict__["_partial_t_padding"] = (
            int(pos[pad]) if pad is not None and bool(trainable[pad]) else None
        )
    module.__dict__["_partial"] = lay
    module.__class__ = _PARTIAL_CLASSES[base]
    with torch.no_grad():  # free the original storage; remove() puts the values back into it
        orig.data = torch.empty(0, dtype=orig.dtype, device=orig.device)
    return PartialHandle(path, spec, cast(_PartialFreezing, module), orig)
