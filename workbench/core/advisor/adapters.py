"""Low-rank A+B adapters on a ``meta`` copy, for profiling a low-rank candidate quickly; what a
full-rank A+B candidate trains and keeps fixed.

Applying a low-rank plan through the plan machinery draws initial ``U``/``V`` values and
checks every layer for tied weights: right for training, but on a 7B model with hundreds of
adapted layers it takes longer than the whole prediction. Profiling only needs the shapes and
the operations, so :func:`adapted_meta_copy` installs the same fused adapter the plan installs
(:class:`~workbench.core.freezing.reparam.low_rank.LowRankDelta` put on the layer by
:func:`~workbench.core.freezing.reparam.low_rank.add_fused`, as
:func:`~workbench.core.freezing.reparam.low_rank.install` does in ``fused`` mode) with meta tensors, so
the parameter names and the recorded operations are those of the applied plan
(``tests/core/advisor/test_low_rank.py`` checks both against a real application).
"""

from __future__ import annotations

import fnmatch

import torch
from torch import Tensor, nn

from workbench.core.advisor.candidates import Candidate
from workbench.core.advisor.profile import AdvisorError, meta_copy, storage_key
from workbench.core.freezing.plan_handle import AppliedPlan
from workbench.core.freezing.reparam.low_rank import CHILD, VARIANTS, LowRankDelta, add_fused, geometry, layer_kind

__all__ = ["adapted_meta_copy", "fixed_beside_bytes", "full_rank_names"]


def _selected(paths: list[str], select: str) -> list[str]:
    return [p for p in paths if p == select or fnmatch.fnmatchcase(p, select)]


def adapted_meta_copy(model: nn.Module, candidate: Candidate) -> tuple[nn.Module, set[str]]:
    """A meta copy of ``model`` with ``candidate``'s low-rank adapters and its trainable names.

    Args:
        model: the model (any device; not changed).
        candidate: a ``low_rank`` candidate (its rules: freeze all, adapters on the targets,
            then the head trains).

    Returns:
        ``(meta copy, names of the parameters that train)``: the adapters' ``U`` and ``V``
        and the head's parameters, named as in the model with the plan applied.

    Raises:
        AdvisorError: not a low-rank candidate, or a target that is not a supported layer.
    """
    if candidate.kind != "low_rank":
        raise AdvisorError(f"candidate {candidate.name!r} has no low-rank adapters")
    meta = meta_copy(model)
    paths = [p for p, _ in meta.named_modules()]
    adapted: list[str] = []
    head: list[str] = []
    for rule in candidate.plan.rules[1:]:
        if rule.reparam is not None and rule.reparam.low_rank is not None:
            lr = rule.reparam.low_rank
            for path in _selected(paths, rule.select):
                if path in adapted:
                    continue
                module = meta.get_submodule(path)
                kind = layer_kind(module)
                variant = VARIANTS[lr.variant]
                if kind not in ("linear", "conv1d_hf", "conv") or kind not in variant.kinds:
                    raise AdvisorError(f"low-rank target {path} is a {type(module).__name__}, "
                                       "not a linear or convolution layer")
                w = module.weight
                assert isinstance(w, Tensor)
                g = geometry(module, kind, w, f"{path}.weight")
                u = torch.empty(g.out, lr.rank, device="meta", dtype=w.dtype)
                v = torch.empty(lr.rank, g.inp, device="meta", dtype=w.dtype)
                delta = LowRankDelta(u, v, lr.scale, g, variant)
                variant.init(delta, w)
                add_fused(module, kind, delta, 0.0)
                adapted.append(path)
        elif rule.frozen is False:
            head += _selected(paths, rule.select)
    names = set()
    for n, _ in meta.named_parameters():
        owner = n.rpartition(".")[0]
        if any(owner == f"{a}.{CHILD}.weight" for a in adapted) or any(
                owner == h or owner.startswith(h + ".") for h in head):
            names.add(n)
    return meta, names


def full_rank_names(model: nn.Module, candidate: Candidate) -> tuple[set[str], set[str]]:
    """What a full-rank A+B candidate trains, and which weights it keeps a fixed copy ``A`` of.

    Fused full-rank A+B leaves the model as it is (the layers train ``W``; ``A`` lives beside
    it), so the model's own profile holds its ops; the plan is applied to a meta copy for the names.

    Args:
        model: the model (any device; not changed).
        candidate: a ``full_rank`` candidate.

    Returns:
        ``(names of the parameters that train, names of the parameters with a copy A)``.

    Raises:
        AdvisorError: not a full-rank candidate.
    """
    if candidate.kind != "full_rank":
        raise AdvisorError(f"candidate {candidate.name!r} has no full-rank A+B")
    meta = meta_copy(model)
    applied = candidate.plan.apply(meta)
    trains = {n for n, p in meta.named_parameters() if p.requires_grad}
    anchored = {n.removesuffix(".A") for h in applied.installed("reparam").values() for n, _ in h.fixed()}
    return trains, anchored


def fixed_beside_bytes(meta: nn.Module, applied: AppliedPlan) -> int:
    """Bytes of the fixed tensors an applied plan keeps beside the model: fused A+B's copies ``A``, held by the
    plan's handles rather than by a parameter or buffer of the model (exact mode's ``A`` is a buffer of its
    parametrization, counted with the model's buffers).

    Args:
        meta: the model the plan was applied to (meta tensors are fine).
        applied: what :meth:`~workbench.core.plan.rules.FreezePlan.apply` returned for it.

    Returns:
        The bytes, each storage once.
    """
    held = {storage_key(t) for t in (*meta.parameters(), *meta.buffers())}
    extra: dict[int, int] = {}
    for handle in applied.installed("reparam").values():
        for _, t in handle.fixed():
            key = storage_key(t)
            if key not in held:
                extra[key] = t.untyped_storage().nbytes()
    return sum(extra.values())

