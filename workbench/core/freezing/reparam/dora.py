"""DoRA (weight-decomposed low-rank adaptation) as a low-rank variant.

``W = m * (A + s U V) / ||A + s U V||``, the norm taken per output channel and treated as a
constant in the backward pass (DoRA, section 4.3; as PEFT's ``use_dora``). ``m`` starts at the
norms of ``A``, so the model starts exactly at ``A``; ``U``, ``V`` and ``m`` train. A plan
switches it on with ``"reparam": {"rank": 8, "alpha": 16, "dora": true}``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from workbench.core.freezing.reparam.variants import LowRankDelta, LowRankVariant, low_rank_output

__all__ = ["MAGNITUDE", "DoRA", "magnitude"]

#: Name of the magnitude parameter on the delta module (PEFT: ``lora_magnitude_vector``).
MAGNITUDE = "M"


def _norm(a: Tensor, d: LowRankDelta) -> Tensor:
    """``||A + s U V||`` per output channel, without a graph (out,)."""
    with torch.no_grad():
        w = torch.addmm(d.geometry.from_weight(a), d.U, d.V, alpha=d.scale)
        norm: Tensor = torch.linalg.vector_norm(w, dim=1)
        return norm


def magnitude(d: LowRankDelta) -> nn.Parameter:
    """DoRA's magnitude parameter on a delta module (one entry per output channel).

    Args:
        d: a delta module DoRA initialized.

    Returns:
        The parameter.

    Raises:
        KeyError: ``d`` has no magnitude (not a DoRA delta).
    """
    p = d._parameters[MAGNITUDE]
    if p is None:
        raise KeyError(MAGNITUDE)
    return p


class DoRA(LowRankVariant):
    """DoRA: a trained magnitude ``M`` per output channel times the direction of ``A + s U V``."""

    name = "dora"
    kinds = ("linear", "conv", "conv1d_hf")
    peft_keys = {MAGNITUDE: "lora_magnitude_vector"}

    def peft_shape(self, name: str, kind: str, d: LowRankDelta) -> tuple[int, ...]:
        """PEFT's magnitude shape: ``(out,)``, ``(1, out, 1, ...)`` for convolutions."""
        g = d.geometry
        return (1, g.out, *([1] * (len(g.shape) - 2))) if kind == "conv" else (g.out,)

    def init(self, d: LowRankDelta, a: Tensor) -> None:
        """``M = ||A + s U V||`` per output channel (``U`` is zero: the norms of A)."""
        d.register_parameter(MAGNITUDE, nn.Parameter(_norm(a, d)))

    def extra(self, d: LowRankDelta) -> list[tuple[str, nn.Parameter]]:
        """``[("M", magnitude)]``."""
        return [(MAGNITUDE, magnitude(d))]

    def _scale(self, a: Tensor, d: LowRankDelta) -> Tensor:
        return magnitude(d) / _norm(a, d)

    def weight(self, a: Tensor, d: LowRankDelta) -> Tensor:
        """``(M / ||A + s U V||) (A + s U V)`` with the graph to U, V and M (the norm is a constant)."""
        g = d.geometry
        w = torch.addmm(g.from_weight(a), d.U, d.V, alpha=d.scale)
        return g.to_weight(w * self._scale(a, d).unsqueeze(1))

    def output(self, module: Any, kind: str, d: LowRankDelta, x: Tensor, out: Tensor, drop: float) -> Tensor:
        """PEFT's DoRA forward: ``out + (k - 1) (A x) + k s U (V x)`` with ``k = M / ||A + s U V||``."""
        a = module.weight
        k = self._scale(a, d)
        shape = [1] * out.dim()
        shape[-1 if kind in ("linear", "conv1d_hf") else 1] = -1
        k = k.view(shape)
        bias = getattr(module, "bias", None)
        if drop and module.training:
            x = torch.nn.functional.dropout(x, drop, training=True)
            plain = module._conv_forward(x, a, None) if kind == "conv" else (
                torch.nn.functional.linear(x, a if kind == "linear" else a.t()))
            low = low_rank_output(module, kind, d, x, 0.0)
        else:
            plain = out if bias is None else out - bias.view(shape)
            low = low_rank_output(module, kind, d, x, 0.0)
        return out + (k - 1) * plain + k * d.scale * low

    def merge(self, a: Tensor, d: LowRankDelta) -> Tensor:
        """``(M / ||A + s U V||) (A + s U V)`` as a plain tensor (the norm is kept for :meth:`unmerge`)."""
        with torch.no_grad():
            d.merged_norm = _norm(a, d)
            return self.weight(a, d)

    def unmerge(self, w: Tensor, d: LowRankDelta) -> Tensor:
        """A from a weight :meth:`merge` made: ``A = W ||A + s U V|| / M - s U V``, with the norm
        :meth:`merge` kept (the rows of ``W`` have norm ``M``, so ``W`` alone cannot tell it)."""
        with torch.no_grad():
            g = d.geometry
            n = d.merged_norm if d.merged_norm is not None else magnitude(d)
            base = g.from_weight(w) * (n / magnitude(d)).unsqueeze(1)
            return g.to_weight(base - d.scale * (d.U @ d.V))

    def after_set(self, a: Tensor, d: LowRankDelta) -> None:
        """``M = ||A + s U V||``: the weight is then ``A + s U V`` exactly."""
        with torch.no_grad():
            m = magnitude(d)
            m.copy_(_norm(a, d).to(m.dtype))
