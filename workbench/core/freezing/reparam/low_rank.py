"""Low-rank A+B (the LoRA family): ``W = A + (alpha / r) U V`` with ``A`` fixed, ``U`` and ``V`` trained.

A rule ``{"reparam": {"rank": 8, "alpha": 16}}`` installs this on every supported layer it
reaches: ``Linear``, ``Conv1d``, ``Conv2d`` (``groups=1``), Hugging Face ``Conv1D`` and
``Embedding``; other modules in its reach keep plain parameters. ``U`` (out x r) starts at zero
(for embeddings ``V`` does, as in PEFT), so the model starts exactly at ``A``.

- ``mode: "exact"``: a :mod:`torch.nn.utils.parametrize` parametrization :class:`LowRankAPlusB`
  computes the weight on access; ``A`` is the parametrization's ``original`` (the module's own
  weight object, frozen), ``U`` and ``V`` are its parameters.
- ``mode: "fused"``: the weight stays a plain frozen parameter ``A``; a forward hook adds the
  low-rank path to the layer's output, never building the full-size ``B`` (the LoRA fast
  path). ``U`` and ``V`` live in a ``wb_lowrank`` child that the tree folds into the layer.

What differs between variants (LoRA, DoRA with ``"dora": true``, any row of
:data:`workbench.core.plan.lora_variants.VARIANTS`) is a
:class:`~workbench.core.freezing.reparam.variants.LowRankVariant`: see :data:`VARIANTS`.
The module's other parameters (the bias) are held fixed, as a LoRA layer holds its base layer.
:func:`install_a_plus_b` is the installer of the ``reparam`` key: full rank goes to
:func:`workbench.core.freezing.reparam.full.install`, rank r comes here.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize
from torch.utils.hooks import RemovableHandle

from workbench.core.freezing.reparam.base import DeltaHandle, derived_seed, record_order, shared_names
from workbench.core.freezing.reparam.full import install as install_full
from workbench.core.freezing.reparam.sources import Sources
from workbench.core.freezing.reparam.variants import (
    VARIANTS,
    Geometry,
    Lora,
    LowRankDelta,
    LowRankVariant,
    geometry,
    low_rank_output,
)
from workbench.core.plan.reparam_spec import LOW_RANK_LAYERS, LowRank, ReparamError, ReparamSpec, SpecInput, parse_spec

__all__ = [
    "CHILD",
    "LAYER_KINDS",
    "VARIANTS",
    "Geometry",
    "LowRankAPlusB",
    "LowRankDelta",
    "LowRankHandle",
    "add_fused",
    "geometry",
    "install",
    "install_a_plus_b",
    "layer_kind",
    "low_rank_output",
]

#: Name of the child module that holds U and V in fused mode (folded into the layer by the tree).
CHILD = "wb_lowrank"
#: Layer kinds low-rank A+B supports, by the class name the tree shows.
LAYER_KINDS = LOW_RANK_LAYERS


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


class LowRankAPlusB(LowRankDelta):
    """Parametrization of the weight: the variant's weight from ``A`` (the frozen ``original``)."""

    def forward(self, a: Tensor) -> Tensor:
        """The weight the layer uses (LoRA: ``A + s U V`` in one ``addmm``)."""
        return self.variant.weight(a, self)


def add_fused(module: nn.Module, kind: str, d: LowRankDelta, dropout: float, name: str = "weight") -> RemovableHandle:
    """Put ``d`` on ``module`` in fused mode: the ``wb_lowrank`` child and the forward hook.

    Args:
        module: a supported layer.
        kind: its kind.
        d: the delta module.
        dropout: dropout probability on the low-rank path's input.
        name: the weight's short name.

    Returns:
        The hook's handle (remove it to take the low-rank path off).
    """
    child: Any = module._modules.get(CHILD)
    if child is None:
        child = nn.ModuleDict()
        child._workbench_internal = True
        module.add_module(CHILD, child)
    child[name] = d
    variant = d.variant

    def hook(mod: nn.Module, args: tuple[Any, ...], output: Tensor) -> Tensor:
        return variant.output(mod, kind, d, args[0], output, dropout)

    return module.register_forward_hook(hook)


def _init_uv(lr: LowRank, g: Geometry, like: Tensor, key: str) -> tuple[Tensor, Tensor]:
    if like.is_meta:  # structure only: nothing to draw
        return (torch.empty(g.out, lr.rank, device="meta", dtype=like.dtype),
                torch.empty(lr.rank, g.inp, device="meta", dtype=like.dtype))
    gen = torch.Generator(device="cpu").manual_seed(derived_seed(0, "lowrank", key))
    u = torch.zeros(g.out, lr.rank, dtype=torch.float32)
    v = torch.zeros(lr.rank, g.inp, dtype=torch.float32)
    if g.kind == "embedding":  # as PEFT: V (lora_embedding_A) zero, U (lora_embedding_B) normal
        u.normal_(0.0, 1.0, generator=gen)
    elif lr.init == "gaussian":
        v.normal_(0.0, 1.0 / lr.rank, generator=gen)
    else:
        nn.init.kaiming_uniform_(v, a=math.sqrt(5), generator=gen)
    return u.to(device=like.device, dtype=like.dtype), v.to(device=like.device, dtype=like.dtype)


class LowRankHandle(DeltaHandle):
    """Low-rank A+B installed on one layer's weight.

    Attributes:
        kind: the layer kind (see :func:`layer_kind`).
        low_rank: rank, alpha, dropout, init and variant.
        variant: the variant (:data:`VARIANTS`).
    """

    def __init__(self, model: nn.Module, path: str, spec: ReparamSpec, base_dir: Path | None) -> None:
        super().__init__(model, path, spec, base_dir)
        assert spec.low_rank is not None
        self.low_rank: LowRank = spec.low_rank
        self.variant: LowRankVariant = VARIANTS[spec.low_rank.variant]
        self.kind: str | None = None
        self._a: dict[str, Tensor] = {}
        self._delta: dict[str, LowRankDelta] = {}
        self._held: list[tuple[str, nn.Parameter]] = []  # the layer's other parameters, held fixed
        self._hook: RemovableHandle | None = None

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
        """``B = W - A`` in the weight's shape (LoRA: ``s U V``), built now for export and statistics."""
        d = self._delta[name]
        with torch.no_grad():
            if type(self.variant) is Lora:
                return d.delta()
            return self.variant.merge(self._a[name], d) - self._a[name]

    def weight(self, name: str) -> Tensor:
        """``W``: what the layer computes with."""
        return self.variant.merge(self._a[name], self._delta[name])

    def set_b(self, name: str, value: Tensor) -> None:
        """Make ``W = A + value`` as closely as rank r allows (truncated SVD; zeros restart U and V)."""
        d = self._delta[name]
        with torch.no_grad():
            value = value.to(device=d.U.device, dtype=torch.float32)
            if not bool(value.any()):
                u, v = _init_uv(self.low_rank, d.geometry, d.U, self.param_path(name))
                d.U.copy_(u)
                d.V.copy_(v)
            else:
                m = d.geometry.from_weight(value) / d.scale
                uu, s, vh = torch.linalg.svd(m, full_matrices=False)
                r = self.low_rank.rank
                root = s[:r].sqrt()
                d.U.copy_((uu[:, :r] * root).to(d.U.dtype))
                d.V.copy_((root[:, None] * vh[:r]).to(d.V.dtype))
            self.variant.after_set(self._a[name], d)

    def initial_b(self, name: str) -> Tensor:
        """Zeros: a low-rank B starts at zero (:meth:`set_b` then restarts U and V)."""
        return torch.zeros_like(self._a[name])

    def set_uv(self, name: str, u: Tensor, v: Tensor) -> None:
        """Overwrite U and V in place (shapes checked by the caller)."""
        d = self._delta[name]
        with torch.no_grad():
            d.U.copy_(u.to(device=d.U.device, dtype=d.U.dtype))
            d.V.copy_(v.to(device=d.V.device, dtype=d.V.dtype))

    def extra(self, name: str) -> list[tuple[str, nn.Parameter]]:
        """The variant's own trainable tensors of weight ``name`` (DoRA: ``[("M", magnitude)]``)."""
        return self.variant.extra(self._delta[name])

    # ---------------------------------------------------------- Installed protocol
    def _prefix(self, name: str) -> str:
        if self.mode == "exact":
            return f"{self.raw_prefix(name)}.0"
        return f"{self.path}.{CHILD}.{name}" if self.path else f"{CHILD}.{name}"

    def trainable(self) -> list[tuple[str, nn.Parameter]]:
        """U and V per weight (and the variant's tensors), by their names in ``model.named_parameters()``."""
        out = []
        for n in self.names:
            prefix = self._prefix(n)
            out += [(f"{prefix}.U", self.u(n)), (f"{prefix}.V", self.v(n))]
            out += [(f"{prefix}.{k}", p) for k, p in self.extra(n)]
        return out

    def fixed(self) -> list[tuple[str, Tensor]]:
        """A per weight and the layer's other parameters: they never train."""
        out: list[tuple[str, Tensor]] = []
        for n in self.names:
            key = f"{self.raw_prefix(n)}.original" if self.mode == "exact" else self.param_path(n)
            out.append((key, self._a[n]))
        return out + self._held

    def _uninstall(self, module: nn.Module, name: str, merge: bool) -> Tensor:
        w = self._a[name]
        if self.mode == "exact":
            if parametrize.is_parametrized(module, name):
                parametrize.remove_parametrizations(module, name, leave_parametrized=merge)
        else:
            if merge:
                with torch.no_grad():
                    w.copy_(self.variant.merge(w, self._delta[name]))
            child: Any = module._modules.get(CHILD)
            if child is not None and name in child:
                del child[name]
                if not len(child):
                    del module._modules[CHILD]
        return w

    def _after_remove(self, module: nn.Module) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None


def install(model: nn.Module, path: str, spec: SpecInput, *, base_dir: Path | None = None) -> LowRankHandle:
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
            already parametrized weight, a variant the layer kind lacks; the message names the
            layer, the field and the fix.
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
    variant = handle.variant
    if kind not in variant.kinds:
        raise ReparamError(
            f"{key}: {variant.name} does not support a {type(module).__name__}; "
            f"leave out reparam.{variant.name} for this module or select other layers"
        )
    w = own["weight"]
    if not w.is_floating_point():
        raise ReparamError(f"{key} has dtype {w.dtype}; A+B needs a floating-point weight")
    shared = shared_names(model, module)
    if id(w) in shared:
        raise ReparamError(f"{key} is tied to {', '.join(x for x in shared[id(w)] if x != key)}; low-rank A+B on tied weights is not supported: select another module")
    g = geometry(module, kind, w, key)
    lr = handle.low_rank
    if lr.rank > min(g.out, g.inp):
        raise ReparamError(
            f"reparam.rank {lr.rank} is larger than this {type(module).__name__} allows "
            f"(min(out, in) = min({g.out}, {g.inp}) = {min(g.out, g.inp)}); use a rank <= {min(g.out, g.inp)}"
        )
    a = Sources(base_dir).make(spec.a, "a", key, w)
    u, v = _init_uv(lr, g, w, key)
    if spec.a.kind != "current":
        handle._orig = {"weight": w.detach().to("cpu", copy=True)}
    handle.function_changed["weight"] = spec.a.kind != "current" and not torch.equal(a, w)
    handle.kind = kind
    with torch.no_grad():
        w.copy_(a)
    handle._a["weight"] = w
    handle._held = [(handle.param_path(n), p) for n, p in own.items() if n != "weight"]
    d = (LowRankAPlusB if spec.mode == "exact" else LowRankDelta)(u, v, lr.scale, g, variant)
    variant.init(d, w)
    if spec.mode == "exact":
        handle._order = record_order(module)
        parametrize.register_parametrization(module, "weight", d, unsafe=True)
    else:
        handle._hook = add_fused(module, kind, d, lr.dropout)
    handle._delta["weight"] = d
    handle.names.append("weight")
    return handle


def install_a_plus_b(model: nn.Module, path: str, spec: SpecInput, *, base_dir: Path | None = None) -> DeltaHandle:
    """The installer of the ``reparam`` key: low rank when the spec has ``rank``, else full rank.

    Args:
        model / path / spec / base_dir: as :func:`workbench.core.freezing.reparam.full.install`.

    Returns:
        The handle.

    Raises:
        ReparamError: see the two installers.
    """
    spec = parse_spec(spec)
    if spec.low_rank is not None:
        return install(model, path, spec, base_dir=base_dir)
    return install_full(model, path, spec, base_dir=base_dir)
