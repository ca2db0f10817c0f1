"""Low-rank A+B and sub-tensor freezing in the exported script: the checks the workbench's
installers make, the ``PARTIAL`` table and the parameter counts with them.

The script installs both in plain PyTorch (:mod:`workbench.core.export.extension_code`). What
the workbench would refuse when the run starts (a rank larger than the layer, a grouped
convolution, DoRA on an embedding, a tied weight, a layer sub-tensor freezing does not support)
is refused at export, in one line naming the module, instead of failing in the script.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torch import nn

from workbench.core.errors import WorkbenchError
from workbench.core.export.common import ExportError
from workbench.core.export.tables import table_value
from workbench.core.freezing.partial import check_module, is_partial
from workbench.core.freezing.reparam.base import shared_names
from workbench.core.freezing.reparam.low_rank import CHILD, LowRankAPlusB, layer_kind
from workbench.core.freezing.reparam.variants import VARIANTS, geometry
from workbench.core.plan.keys import Effective
from workbench.core.plan.partial_spec import PartialSpec, trainable_fraction
from workbench.core.plan.reparam_spec import LowRank
from workbench.core.plan.tree import ModelTree, visible_path

__all__ = ["EXPORTED_VARIANTS", "LowRankLayer", "check_plain", "extension_counts", "low_rank_layers", "partial_table"]

#: LoRA-family variants the script's ``LowRank`` computes (``extension_code``); another is refused.
EXPORTED_VARIANTS: tuple[str, ...] = ("lora", "dora")


@dataclass(frozen=True)
class LowRankLayer:
    """One layer low-rank A+B adapts.

    Attributes:
        path: its module path.
        low_rank: rank, alpha, dropout, init and variant.
        out / inp: rows and columns of ``U V``.
        own: canonical names of the layer's own parameters (weight first).
    """

    path: str
    low_rank: LowRank
    out: int
    inp: int
    own: tuple[str, ...]

    @property
    def added(self) -> int:
        """Elements of U, V (and DoRA's magnitude)."""
        return self.low_rank.added_elements(self.out, self.inp)


def check_plain(model: nn.Module) -> None:
    """Refuse a model that has low-rank A+B or sub-tensor freezing installed (a plan applied to it):
    the script is written from the plain model's layers.

    Args:
        model: the model the export reads.

    Raises:
        ExportError: naming the first such module.
    """
    for path, module in model.named_modules():
        if is_partial(module) or CHILD in module._modules or isinstance(module, LowRankAPlusB):
            path = visible_path(path)  # the layer, not the parametrization inside it
            raise ExportError(f"module {path or '(root)'!r} has low-rank A+B or sub-tensor freezing applied (a plan is in "
                              "force on this model); export from the model without it (remove the plan first)")


def low_rank_layers(model: nn.Module, effective: Mapping[str, Effective]) -> list[LowRankLayer]:
    """The layers low-rank A+B goes on, checked as the workbench's installer checks them.

    Args:
        model: the model's structure (meta tensors are fine).
        effective: the plan's module settings.

    Returns:
        The layers, in tree order.

    Raises:
        ExportError: a layer the workbench would refuse (named, with the reason).
    """
    out: list[LowRankLayer] = []
    for path, e in effective.items():
        if e.reparam is None or e.reparam.low_rank is None:
            continue
        module = model.get_submodule(path) if path else model
        kind = layer_kind(module)
        w = module._parameters.get("weight")
        if kind is None or w is None:
            continue  # the workbench leaves it plain too
        key = f"{path}.weight" if path else "weight"
        lr = e.reparam.low_rank
        try:
            if lr.variant not in EXPORTED_VARIANTS:
                raise ExportError(f"the exported script writes {' and '.join(EXPORTED_VARIANTS)}, not {lr.variant}")
            if kind not in VARIANTS[lr.variant].kinds:
                raise ExportError(f"{lr.variant} does not support a {type(module).__name__}")
            if not w.is_floating_point():
                raise ExportError(f"its weight has dtype {w.dtype}; A+B needs a floating-point weight")
            if id(w) in shared_names(model, module):
                raise ExportError("its weight is tied to another parameter; low-rank A+B on tied weights is not supported")
            g = geometry(module, kind, w, key)
            if lr.rank > min(g.out, g.inp):
                raise ExportError(f"reparam.rank {lr.rank} is larger than min(out, in) = {min(g.out, g.inp)}")
        except (ExportError, WorkbenchError) as err:
            raise ExportError(f"low-rank A+B on {key}: {err}; change the plan to export (the run would refuse it too)") from None
        own = tuple(f"{path}.{n}" if path else n for n in module._parameters if module._parameters[n] is not None)
        out.append(LowRankLayer(path, lr, g.out, g.inp, own))
    return out


def partial_table(model: nn.Module, effective: Mapping[str, Effective]) -> list[tuple[str, dict[str, Any]]]:
    """``PARTIAL``: ``(module path, {"dim", "trainable"})`` of every partly frozen weight.

    Args:
        model: the model's structure.
        effective: the plan's module settings.

    Returns:
        The entries, in tree order.

    Raises:
        ExportError: a module the workbench's sub-tensor freezing refuses (named, with the reason).
    """
    out: list[tuple[str, dict[str, Any]]] = []
    for path, e in effective.items():
        spec: PartialSpec | None = e.partial
        if spec is None:
            continue
        module = model.get_submodule(path) if path else model
        problem = check_module(spec, module)
        if problem is None and id(module._parameters["weight"]) in shared_names(model, module):
            problem = "its weight is tied to another parameter; freeze or unfreeze the tied weight as a whole"
        if problem is not None:
            raise ExportError(f"sub-tensor freezing ('partial') on module {path or '(root)'!r}: {problem}")
        out.append((path, {"dim": spec.dim, "trainable": [list(r) for r in spec.trainable]}))
    return out


def extension_counts(
    c: dict[str, int], tree: ModelTree, effective: Mapping[str, Effective], table: Mapping[str, Any],
    layers: list[LowRankLayer],
) -> dict[str, int]:
    """The docstring's parameter counts with low-rank A+B and sub-tensor freezing, as the script
    prints them (every tensor of ``model.named_parameters()``, U and V included).

    Args:
        c: :func:`~workbench.core.export.tables.counts` of the plain model.
        tree: the model's tree.
        effective: the plan's module settings.
        table: the plan's settings tables.
        layers: :func:`low_rank_layers`.

    Returns:
        The counts, ``total`` and ``trainable`` adjusted.
    """
    out = dict(c)
    grad = table["requires_grad"]
    for layer in layers:
        held = sum(math.prod(tree.param_shapes[n]) for n in layer.own if table_value(n, grad, True))
        out["trainable"] += (layer.added if table_value(layer.own[0], grad, True) else 0) - held
        out["total"] += layer.added
    for path, e in effective.items():
        if e.partial is None:
            continue
        name = f"{path}.{e.partial.param}" if path else e.partial.param
        shape = tree.param_shapes[name]
        numel = math.prod(shape)
        out["trainable"] -= numel if table_value(name, grad, True) else 0
        out["trainable"] += 0 if e.frozen else round(numel * trainable_fraction(e.partial, shape))
    return out
