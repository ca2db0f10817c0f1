"""Low-rank A+B (the LoRA family): ``W = A + (alpha / r) U V`` with ``A`` fixed, ``U`` and ``V`` trained.

A rule ``{"reparam": {"rank": 8, "alpha": 16}}`` installs this on every supported layer it
reaches: ``Linear``, ``Conv1d``, ``Conv2d`` (``groups=1``), Hugging Face ``Conv1D`` and
``Embedding``; other modules in its reach keep plain parameters. ``U`` (out x r) starts at zero
(for embeddings ``V`` does, as in PEFT), so the model starts exactly at ``A``.

- ``mode: "exact"``: a :mod:`torch.nn.utils.parametrize` parametrization :class:`LowRankAPlusB`
  computes ``weight = A + s U V`` on access; ``A`` is the parametrization's ``original`` (the
  module's own weight object, frozen), ``U`` and ``V`` are its parameters.
- ``mode: "fused"``: the weight stays a plain frozen parameter ``A``; a forward hook adds
  ``s U (V dropout(x))`` to the layer's output, never building the full-size ``B`` (the LoRA
  fast path). ``U`` and ``V`` live in a ``wb_lowrank`` child that the tree folds into the layer.

The module's other parameters (the bias) are held fixed, as a LoRA layer holds its base layer.
:func:`install_a_plus_b` is the installer of the ``reparam`` key: full rank goes to
:func:`workbench.core.freezing.reparam.install`, rank r comes here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils import parametrize

from workbench.core.freezing import reparam
from workbench.core.freezing.reparam import (
    ORDER_ATTR,
    ReparamError,
    ReparamHandle,
    _derived_seed,
    _restore_order,
    _Sources,
)
from workbench.core.plan.reparam_spec import LowRank, ReparamSpec, parse_spec

__all__ = [
    "CHILD",
    "LAYER_KINDS",
    "LowRankAPlusB",
    "LowRankDelta",
    "LowRankHandle",
    "install",
    "install_a_plus_b",
    "layer_kind",
]

#: Name of the child module that holds U and V in fused mode (folded into the layer by the tree).
CHILD = "wb_lowrank"
#: Layer kinds low-rank A+B supports, by the class name the tree shows.
LAYER_KINDS = ("Linear", "Conv1d", "Conv2d", "Conv1D", "Embedding")


def layer_kind(module: nn.Module) -> str | None:
    """The supported layer kind of a module, or None.

    Args:
        module: any module (parametrized or not).

    Returns:
        ``"linear"``, ``"conv"``, ``"conv1d_hf"`` (transformers' ``Conv1D``: weight in x out),
        ``"embedding"``, or None for any other module.
    """
    t = parametrize.type_before_parametrizations(module)
    if issubclass(t, nn.Linear):
        return "linear"
    if issubclass(t, (nn.Conv1d, nn.Conv2d)):
        return "conv"
    if issubclass(t, nn.Embedding):
        return "embedding"
    if t.__name__ == "Conv1D" and hasattr(module, "nf"):
        return "conv1d_hf"
    return None


@dataclass(frozen=True)
class _Geometry:
    """How the flat product ``U V`` (out x in) maps onto a weight."""

    kind: str
    out: int
    inp: int
    shape: tuple[int, ...]

    def to_weight(self, m: Tensor) -> Tensor:
        if self.kind in ("conv1d_hf", "embedding"):
            return m.t()
        return m.view(self.shape)

    def from_weight(self, w: Tensor) -> Tensor:
        if self.kind in ("conv1d_hf", "embedding"):
            return w.t()
        return w.reshape(self.out, self.inp)


def _geometry(module: nn.Module, kind: str, w: Tensor, key: str) -> _Geometry:
    shape = tuple(w.shape)
    if kind == "conv":
        if module.groups != 1:
            raise ReparamError(f"{key}: low-rank A+B needs a convolution with groups=1, this one has groups={module.groups}; use full rank (leave out reparam.rank)")
        if module.padding_mode != "zeros":
            raise ReparamError(f"{key}: low-rank A+B needs padding_mode='zeros', this convolution has {module.padding_mode!r}; use full rank")
        return _Geometry(kind, shape[0], int(math.prod(shape[1:])), shape)
    if kind in ("conv1d_hf", "embedding"):
        return _Geometry(kind, shape[1], shape[0], shape)
    return _Geometry(kind, shape[0], shape[1], shape)


class LowRankDelta(nn.Module):
    """``U`` (out x r) and ``V`` (r x in) of one weight; ``delta()`` is ``s U V`` in the weight's shape.

    Args:
        u / v: the initial tensors.
        scale: ``alpha / r``.
        geometry: how the flat product maps onto the weight.
    """

    _workbench_internal = True

    def __init__(self, u: Tensor, v: Tensor, scale: float, geometry: _Geometry) -> None:
        super().__init__()
        self.U = nn.Parameter(u)
        self.V = nn.Parameter(v)
        self.scale = scale
        self.geometry = geometry

    def delta(self) -> Tensor:
        """``B = s U V`` shaped like the weight."""
        return self.geometry.to_weight((self.U @ self.V) * self.scale)


class LowRankAPlusB(LowRankDelta):
    """Parametrization ``weight = A + s U V`` (``A`` is the parametrization's frozen ``original``)."""

    def forward(self, a: Tensor) -> Tensor:
        """``A + s U V`` in one ``addmm``: the gradient flows to ``U`` and ``V`` only."""
        g = self.geometry
        if g.kind in ("conv1d_hf", "embedding"):  # the weight is (U V)^T: in x out
            return torch.addmm(a, self.V.t(), self.U.t(), alpha=self.scale)
        return torch.addmm(a.reshape(g.out, g.inp), self.U, self.V, alpha=self.scale).view(g.shape)


def _fused_output(module: Any, kind: str, d: LowRankDelta, x: Tensor, drop: float) -> Tensor:
    """``U (V x)`` for the layer's input ``x``, without building ``U V`` (the caller scales it
    while adding it to the layer's output: one pass instead of a multiply and an add)."""
    if kind == "embedding":
        h = F.embedding(x, d.V.t(), module.padding_idx, module.max_norm, module.norm_type, module.scale_grad_by_freq, module.sparse)
        return F.linear(h, d.U)
    if drop and module.training:
        x = F.dropout(x, drop, training=True)
    if kind in ("linear", "conv1d_hf"):
        return F.linear(F.linear(x, d.V), d.U)
    nd = len(d.geometry.shape) - 2
    conv: Callable[..., Tensor] = F.conv1d if nd == 1 else F.conv2d
    v = d.V.view(d.V.shape[0], *d.geometry.shape[1:])
    u = d.U.view(*d.U.shape, *([1] * nd))
    h = conv(x, v, None, module.stride, module.padding, module.dilation)
    return conv(h, u)


def _init_uv(lr: LowRank, g: _Geometry, like: Tensor, key: str) -> tuple[Tensor, Tensor]:
    gen = torch.Generator(device="cpu").manual_seed(_derived_seed(0, "lowrank", key))
    u = torch.zeros(g.out, lr.rank, dtype=torch.float32)
    v = torch.zeros(lr.rank, g.inp, dtype=torch.float32)
    if g.kind == "embedding":  # as PEFT: V (lora_embedding_A) zero, U (lora_embedding_B) normal
        u.normal_(0.0, 1.0, generator=gen)
    elif lr.init == "gaussian":
        v.normal_(0.0, 1.0 / lr.rank, generator=gen)
    else:
        nn.init.kaiming_uniform_(v, a=math.sqrt(5), generator=gen)
    return u.to(device=like.device, dtype=like.dtype), v.to(device=like.device, dtype=like.dtype)


class LowRankHandle(ReparamHandle):
    """Low-rank A+B installed on one layer's weight (same operations as :class:`ReparamHandle`).

    Attributes:
        kind: the layer kind (see :func:`layer_kind`).
        low_rank: rank, alpha, dropout and init.
    """

    def __init__(self, model: nn.Module, path: str, spec: ReparamSpec, base_dir: Path | None) -> None:
        super().__init__(model, path, spec, base_dir)
        assert spec.low_rank is not None
        self.low_rank: LowRank = spec.low_rank
        self.kind: str | None = None
        self._delta: dict[str, LowRankDelta] = {}
        self._held: list[tuple[str, nn.Parameter]] = []  # the layer's other parameters, held fixed
        self._hook: Any = None

    # ---------------------------------------------------------- tensors
    def a(self, name: str) -> Tensor:
        """A: the layer's frozen weight (exact: the parametrization's ``original``)."""
        return self._a[name]

    def delta_module(self, name: str) -> LowRankDelta:
        """The module holding ``U`` and ``V`` of weight ``name``."""
        return self._delta[name]

    def u(self, name: str) -> nn.Parameter:
        """U (out x r)."""
        return self._delta[name].U

    def v(self, name: str) -> nn.Parameter:
        """V (r x in)."""
        return self._delta[name].V

    def b(self, name: str) -> Tensor:
        """``B = s U V`` in the weight's shape (built now, for export and statistics)."""
        with torch.no_grad():
            return self._delta[name].delta()

    def weight(self, name: str) -> Tensor:
        """``W = A + B``."""
        with torch.no_grad():
            return self.a(name) + self.b(name)

    def set_b(self, name: str, value: Tensor) -> None:
        """Set ``s U V`` to ``value`` (rank-r truncated SVD; zeros restart U and V as at install)."""
        d = self._delta[name]
        with torch.no_grad():
            value = value.to(device=d.U.device, dtype=torch.float32)
            if not bool(value.any()):
                u, v = _init_uv(self.low_rank, d.geometry, d.U, self.param_path(name))
                d.U.copy_(u)
                d.V.copy_(v)
                return
            m = d.geometry.from_weight(value) / d.scale
            uu, s, vh = torch.linalg.svd(m, full_matrices=False)
            r = self.low_rank.rank
            root = s[:r].sqrt()
            d.U.copy_((uu[:, :r] * root).to(d.U.dtype))
            d.V.copy_((root[:, None] * vh[:r]).to(d.V.dtype))

    def initial_b(self, name: str) -> Tensor:
        """Zeros: a low-rank B starts at zero (:meth:`set_b` then restarts U and V)."""
        return torch.zeros_like(self._a[name])

    def set_uv(self, name: str, u: Tensor, v: Tensor) -> None:
        """Overwrite U and V in place (shapes checked by the caller)."""
        d = self._delta[name]
        with torch.no_grad():
            d.U.copy_(u.to(device=d.U.device, dtype=d.U.dtype))
            d.V.copy_(v.to(device=d.V.device, dtype=d.V.dtype))

    # ---------------------------------------------------------- Installed protocol
    def trainable(self) -> list[tuple[str, nn.Parameter]]:
        """U and V per weight, by their names in ``model.named_parameters()``."""
        out = []
        for n in self.names:
            prefix = f"{self._raw_prefix(n)}.0" if self.mode == "exact" else self._child_prefix(n)
            out += [(f"{prefix}.U", self.u(n)), (f"{prefix}.V", self.v(n))]
        return out

    def fixed(self) -> list[tuple[str, Tensor]]:
        """A per weight and the layer's other parameters: they never train."""
        out: list[tuple[str, Tensor]] = []
        for n in self.names:
            key = f"{self._raw_prefix(n)}.original" if self.mode == "exact" else self.param_path(n)
            out.append((key, self._a[n]))
        return out + self._held

    def _child_prefix(self, name: str) -> str:
        base = f"{self.path}." if self.path else ""
        return f"{base}{CHILD}.{name}"

    def remove(self, merge: bool = True) -> None:
        """Undo low-rank A+B: ``merge`` bakes ``A + s U V`` into the weight, else A (or the
        weight at install) comes back. The weight keeps its identity."""
        if self._removed:
            return
        module = self._module_ref()
        if module is not None:
            for n in self.names:
                w = self._a[n]
                if self.mode == "exact":
                    if parametrize.is_parametrized(module, n):
                        parametrize.remove_parametrizations(module, n, leave_parametrized=merge)
                else:
                    if merge:
                        with torch.no_grad():
                            w.add_(self._delta[n].delta())
                    child: Any = module._modules.get(CHILD)
                    if child is not None and n in child:
                        del child[n]
                        if not len(child):
                            del module._modules[CHILD]
                if not merge and n in self._orig:
                    with torch.no_grad():
                        w.copy_(self._orig[n])
            if self._hook is not None:
                self._hook.remove()
            _restore_order(module, self._order)
        self._removed = True
        self._orig.clear()


def _fused_hook(h: LowRankHandle) -> Callable[..., Tensor | None]:
    """The forward hook of a fused layer; it holds the handle (an applied plan may be dropped)."""

    def hook(module: nn.Module, args: tuple[Any, ...], output: Tensor) -> Tensor | None:
        if not h.names:
            return None
        d = h._delta[h.names[0]]
        return torch.add(output, _fused_output(module, str(h.kind), d, args[0], h.low_rank.dropout), alpha=d.scale)

    return hook


def install(model: nn.Module, path: str, spec: Any, *, base_dir: Path | None = None) -> LowRankHandle:
    """Install low-rank A+B on the weight of the layer at ``path`` (nothing on unsupported modules).

    Args:
        model: the model.
        path: dotted module path.
        spec: a ``reparam`` spec with ``rank``.
        base_dir: folder for a relative ``a: {"file": ...}``.

    Returns:
        The handle (with no names when the module is not a supported layer).

    Raises:
        ReparamError: rank larger than the layer allows, a grouped convolution, a tied or
            already parametrized weight; the message names the layer, ``reparam.rank`` and the fix.
    """
    spec = parse_spec(spec)
    handle = LowRankHandle(model, path, spec, base_dir)
    module = handle.module
    kind = layer_kind(module)
    if kind is None:
        return handle
    key = handle.param_path("weight")
    own = dict(module.named_parameters(recurse=False))
    if "weight" not in own:
        if parametrize.is_parametrized(module, "weight"):
            raise ReparamError(f"{key} is already parametrized (weight_norm or another tool); low-rank A+B cannot stack on it")
        return handle
    w = own["weight"]
    if not w.is_floating_point():
        raise ReparamError(f"{key} has dtype {w.dtype}; A+B needs a floating-point weight")
    shared = reparam._shared_names(model, module, path)
    if id(w) in shared:
        raise ReparamError(f"{key} is tied to {', '.join(x for x in shared[id(w)] if x != key)}; low-rank A+B on tied weights is not supported: select another module")
    g = _geometry(module, kind, w, key)
    lr = spec.low_rank
    assert lr is not None
    if lr.rank > min(g.out, g.inp):
        raise ReparamError(
            f"reparam.rank {lr.rank} is larger than this {type(module).__name__} allows "
            f"(min(out, in) = min({g.out}, {g.inp}) = {min(g.out, g.inp)}); use a rank <= {min(g.out, g.inp)}"
        )
    a = _Sources(base_dir).make(spec.a, "a", key, w)
    u, v = _init_uv(lr, g, w, key)
    if spec.a.kind != "current":
        handle._orig = {"weight": w.detach().to("cpu", copy=True)}
    handle.function_changed["weight"] = spec.a.kind != "current" and not torch.equal(a, w)
    handle.kind = kind
    with torch.no_grad():
        w.copy_(a)
    handle._a["weight"] = w
    handle._held = [(handle.param_path(n), p) for n, p in own.items() if n != "weight"]
    if spec.mode == "exact":
        handle._order = getattr(module, ORDER_ATTR, None) or tuple(module._parameters)
        object.__setattr__(module, ORDER_ATTR, handle._order)
        par = LowRankAPlusB(u, v, lr.scale, g)
        parametrize.register_parametrization(module, "weight", par, unsafe=True)
        handle._delta["weight"] = par
    else:
        d = LowRankDelta(u, v, lr.scale, g)
        child: Any = module._modules.get(CHILD)
        if child is None:
            child = nn.ModuleDict()
            child._workbench_internal = True
            module.add_module(CHILD, child)
        child["weight"] = d
        handle._delta["weight"] = d
        handle._hook = module.register_forward_hook(_fused_hook(handle))
    handle.names.append("weight")
    return handle


def install_a_plus_b(model: nn.Module, path: str, spec: Any, *, base_dir: Path | None = None) -> ReparamHandle:
    """The installer of the ``reparam`` key: low rank when the spec has ``rank``, else full rank.

    Args:
        model / path / spec / base_dir: as :func:`workbench.core.freezing.reparam.install`.

    Returns:
        The handle.

    Raises:
        ReparamError: see the two installers.
    """
    spec = parse_spec(spec)
    if spec.low_rank is not None:
        return install(model, path, spec, base_dir=base_dir)
    return reparam.install(model, path, spec, base_dir=base_dir)
