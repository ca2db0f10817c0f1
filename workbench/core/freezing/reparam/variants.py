"""The variant seam of low-rank A+B: how ``U`` and ``V`` (and any extra tensor) become the weight.

Like PEFT's ``LoraVariant``, a :class:`LowRankVariant` has four steps, and the low-rank handle
(:mod:`workbench.core.freezing.reparam.low_rank`) calls nothing else that differs by variant:

- :meth:`~LowRankVariant.init`: extra trainable tensors on the delta module (DoRA: the magnitude);
- :meth:`~LowRankVariant.weight` (exact mode: the parametrization's forward) and
  :meth:`~LowRankVariant.output` (fused mode: the forward hook's output);
- :meth:`~LowRankVariant.merge` / :meth:`~LowRankVariant.unmerge`: the plain weight and back.

:class:`Lora` is ``W = A + s U V``; :class:`~workbench.core.freezing.reparam.dora.DoRA` adds a
per-output magnitude. A variant is stateless; its tensors live on the delta module.

:data:`VARIANTS` maps a name to its instance: plain LoRA, and every row of
:data:`workbench.core.plan.lora_variants.VARIANTS`, its class imported on first use. A new
variant is its class plus that row; the plan, the PEFT reader and writer, the cost counts and the
settings dialog read the row, and the handles call only the methods here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from workbench.core.plan import lora_variants
from workbench.core.plan.reparam_spec import ReparamError

__all__ = ["VARIANTS", "Geometry", "Lora", "LowRankDelta", "LowRankVariant", "geometry", "low_rank_output"]


@dataclass(frozen=True)
class Geometry:
    """How the flat product ``U V`` (out x in) maps onto a weight.

    Attributes:
        kind: the layer kind.
        out / inp: rows and columns of the flat product.
        shape: the weight's shape.
    """

    kind: str
    out: int
    inp: int
    shape: tuple[int, ...]

    def to_weight(self, m: Tensor) -> Tensor:
        """The flat (out x in) matrix in the weight's shape."""
        if self.kind in ("conv1d_hf", "embedding"):
            return m.t()
        return m.view(self.shape)

    def from_weight(self, w: Tensor) -> Tensor:
        """The weight as the flat (out x in) matrix (a view where possible)."""
        if self.kind in ("conv1d_hf", "embedding"):
            return w.t()
        return w.reshape(self.out, self.inp)


def geometry(module: nn.Module, kind: str, w: Tensor, key: str) -> Geometry:
    """The geometry of a supported layer's weight.

    Args:
        module: the layer.
        kind: its kind (see :func:`layer_kind`).
        w: its weight.
        key: the weight's parameter path, for messages.

    Returns:
        The geometry.

    Raises:
        ReparamError: a grouped convolution or one with a padding mode other than zeros.
    """
    shape = tuple(w.shape)
    if kind == "conv":
        if module.groups != 1:
            raise ReparamError(f"{key}: low-rank A+B needs a convolution with groups=1, this one has groups={module.groups}; use full rank (leave out reparam.rank)")
        if module.padding_mode != "zeros":
            raise ReparamError(f"{key}: low-rank A+B needs padding_mode='zeros', this convolution has {module.padding_mode!r}; use full rank")
        return Geometry(kind, shape[0], int(math.prod(shape[1:])), shape)
    if kind in ("conv1d_hf", "embedding"):
        return Geometry(kind, shape[1], shape[0], shape)
    return Geometry(kind, shape[0], shape[1], shape)


class LowRankDelta(nn.Module):
    """``U`` (out x r) and ``V`` (r x in) of one weight (and the variant's own tensors).

    Args:
        u / v: the initial tensors.
        scale: ``alpha / r``.
        geometry: how the flat product maps onto the weight.
        variant: the variant (default LoRA).
    """

    _workbench_internal = True

    def __init__(self, u: Tensor, v: Tensor, scale: float, geometry: Geometry, variant: LowRankVariant | None = None) -> None:
        super().__init__()
        self.U = nn.Parameter(u)
        self.V = nn.Parameter(v)
        self.scale = scale
        self.geometry = geometry
        self.variant = variant or Lora()
        self.merged_norm: Tensor | None = None

    def delta(self) -> Tensor:
        """``s U V`` shaped like the weight."""
        return self.geometry.to_weight((self.U @ self.V) * self.scale)


def low_rank_output(module: Any, kind: str, d: LowRankDelta, x: Tensor, drop: float) -> Tensor:
    """``U (V x)`` for the layer's input ``x``, without building ``U V`` (unscaled).

    Args:
        module: the layer (its stride, padding... for convolutions; its options for embeddings).
        kind: the layer kind (see :func:`~workbench.core.freezing.reparam.low_rank.layer_kind`).
        d: the delta module (``U``, ``V``, geometry).
        x: the layer's input.
        drop: dropout probability on ``x`` (in training mode).

    Returns:
        The low-rank path's output, shaped like the layer's output.
    """
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


#: Variant classes by name, filled by :meth:`LowRankVariant.__init_subclass__` (the package's
#: ``__init__`` imports each variant's module).
_CLASSES: dict[str, type[LowRankVariant]] = {}


class LowRankVariant:
    """The seam: what differs between LoRA-family variants. The base class is plain LoRA.

    Attributes:
        name: the variant's name (``"lora"``, ``"dora"``).
        kinds: the layer kinds it supports.
    """

    name = "lora"
    kinds: tuple[str, ...] = ("linear", "conv", "conv1d_hf", "embedding")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass that sets its own ``name`` is the class of that variant's row."""
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            _CLASSES[cls.name] = cls
    #: PEFT adapter-file key suffix of each of the variant's own tensors, by short name
    #: (DoRA: ``{"M": "lora_magnitude_vector"}``); a tensor not named here has no PEFT form.
    peft_keys: dict[str, str] = {}

    def peft_shape(self, name: str, kind: str, d: LowRankDelta) -> tuple[int, ...]:
        """The shape of the variant's own tensor ``name`` in a PEFT adapter file.

        Args:
            name: the tensor's short name (a key of :attr:`peft_keys`).
            kind: the layer kind.
            d: the delta module.

        Returns:
            The tensor's own shape (a variant overrides this where PEFT's differs).
        """
        return tuple(d.get_parameter(name).shape)

    def init(self, d: LowRankDelta, a: Tensor) -> None:
        """Add the variant's own trainable tensors to ``d`` (LoRA has none).

        Args:
            d: the delta module, ``U`` and ``V`` set.
            a: the fixed weight A.
        """

    def extra(self, d: LowRankDelta) -> list[tuple[str, nn.Parameter]]:
        """The variant's own trainable tensors on ``d`` by short name (LoRA: none)."""
        return []

    def weight(self, a: Tensor, d: LowRankDelta) -> Tensor:
        """The weight the layer uses, with the autograd graph to ``U`` and ``V`` (exact mode).

        Args:
            a: the fixed weight A.
            d: the delta module.

        Returns:
            ``A + s U V`` in one ``addmm``.
        """
        g = d.geometry
        if g.kind in ("conv1d_hf", "embedding"):  # the weight is (U V)^T: in x out
            return torch.addmm(a, d.V.t(), d.U.t(), alpha=d.scale)
        return torch.addmm(a.reshape(g.out, g.inp), d.U, d.V, alpha=d.scale).view(g.shape)

    def output(self, module: Any, kind: str, d: LowRankDelta, x: Tensor, out: Tensor, drop: float) -> Tensor:
        """The layer's output with the low-rank path added (fused mode's forward hook).

        Args:
            module: the layer.
            kind: its kind.
            d: the delta module.
            x: the layer's input.
            out: the plain layer's output (weight A, bias included).
            drop: dropout probability on the low-rank path's input.

        Returns:
            ``out + s U (V x)``.
        """
        return torch.add(out, low_rank_output(module, kind, d, x, drop), alpha=d.scale)

    def merge(self, a: Tensor, d: LowRankDelta) -> Tensor:
        """The plain weight equal to what the layer computes (no autograd graph).

        Args:
            a: the fixed weight A.
            d: the delta module.

        Returns:
            A new tensor: ``A + s U V``.
        """
        with torch.no_grad():
            return a + d.delta()

    def unmerge(self, w: Tensor, d: LowRankDelta) -> Tensor:
        """A from a weight :meth:`merge` made with the same ``d``.

        Args:
            w: the merged weight.
            d: the delta module.

        Returns:
            A new tensor: ``W - s U V``.
        """
        with torch.no_grad():
            return w - d.delta()

    def after_set(self, a: Tensor, d: LowRankDelta) -> None:
        """Called when ``U`` and ``V`` were set so that ``merge`` should be ``A + s U V`` (LoRA: nothing)."""


class Lora(LowRankVariant):
    """Plain LoRA: ``W = A + (alpha / r) U V``."""


class _Registry(Mapping[str, LowRankVariant]):
    """Variant instances by name: plain LoRA and the plan table's rows, each made on first use."""

    def __init__(self) -> None:
        self._made: dict[type, LowRankVariant] = {}

    def __getitem__(self, name: str) -> LowRankVariant:
        if lora_variants.info(name) is None:  # KeyError: no such row
            cls: type[LowRankVariant] = Lora
        elif (found := _CLASSES.get(name)) is not None:
            cls = found
        else:
            raise KeyError(f"the A+B variant {name!r} has a row but no LowRankVariant class named so; import its module")
        made = self._made.get(cls)
        if made is None:
            made = self._made[cls] = cls()
        return made

    def __iter__(self) -> Iterator[str]:
        return iter((lora_variants.DEFAULT, *lora_variants.VARIANTS))

    def __len__(self) -> int:
        return 1 + len(lora_variants.VARIANTS)


#: The variants by name (:attr:`~workbench.core.plan.reparam_spec.LowRank.variant`).
VARIANTS: Mapping[str, LowRankVariant] = _Registry()
