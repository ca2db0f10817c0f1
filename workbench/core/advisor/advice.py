"""The advisor: candidate plans for a model, their predicted cost, the front and the choice.

:func:`advise` profiles the model once on the ``meta`` device (twice when BatchNorm-eval
variants need their own pass), generates the candidates from its structure, predicts each
one's peak memory and step time, and picks the plan that trains the most within the budget.
:meth:`Advice.to_dict` is the JSON contract of ``workbench advise --json``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import nn

from workbench.core.advisor.adapters import adapted_meta_copy, fixed_beside_bytes, full_rank_names
from workbench.core.advisor.auto_freeze_option import AutoFreezeOption, auto_freeze_option
from workbench.core.advisor.candidates import DORA_RANKS, LOW_RANKS, Candidate, generate_candidates, trainable_names
from workbench.core.advisor.front import Point, choose, pareto_front
from workbench.core.advisor.memory import MemoryEstimate, estimate_memory
from workbench.core.advisor.predict import cache_row_bytes, cached_step_flops, step_flops
from workbench.core.advisor.profile import AdvisorError, DictBatch, InputShape, ModelProfile, meta_copy, profile_model
from workbench.core.formatting import fmt_bytes
from workbench.core.plan import FreezePlan
from workbench.core.plan.tree import ModelTree

__all__ = ["Advice", "Assessment", "Measured", "advise", "front_of", "predict_plan", "step_ratio_noise"]


@dataclass(frozen=True)
class Measured:
    """What a few real training steps of a candidate cost.

    Attributes:
        peak_bytes: measured peak memory as :mod:`workbench.core.training.metrics` defines it
            (CUDA peak allocated, CPU peak tensor bytes; ``memory_source`` says which).
        step_ratio: median step time relative to full fine-tuning.
        step_ms: median step time in milliseconds.
        memory_source: what ``peak_bytes`` measures (a value of ``MEMORY_SOURCES``).
        step_ratio_range: the fastest and slowest timed step relative to full fine-tuning's
            median (None: not kept).
        steps: timed steps behind the median.
    """

    peak_bytes: int
    step_ratio: float
    step_ms: float
    memory_source: str = ""
    step_ratio_range: tuple[float, float] | None = None
    steps: int = 0


@dataclass
class Assessment:
    """A candidate with its predicted (and possibly measured) cost.

    Attributes:
        candidate: the candidate plan.
        memory: the predicted memory breakdown.
        step_ratio: predicted step time relative to full fine-tuning.
        trainable_params: parameters the plan trains.
        fits: the predicted peak is within the budget.
        measured: the measured cost, once :func:`~workbench.core.advisor.measure.measure_front` ran.
        cached_step_ratio: predicted step time relative to full fine-tuning once the
            frozen-prefix cache serves (after the first epoch; ``--cache-frozen``), None where
            nothing frozen runs first.
        cache_row_bytes: what the cache keeps per sample (None where it does not apply).
    """

    candidate: Candidate
    memory: MemoryEstimate
    step_ratio: float
    trainable_params: int
    fits: bool
    measured: Measured | None = None
    cached_step_ratio: float | None = None
    cache_row_bytes: int | None = None

    @property
    def point(self) -> Point:
        """Coordinates for the Pareto front."""
        return Point(self.memory.peak, self.trainable_params, self.step_ratio)

    def to_dict(self) -> dict[str, Any]:
        """The candidate entry of the JSON contract."""
        d: dict[str, Any] = {
            "name": self.candidate.name,
            "plan": self.candidate.plan.to_dict(),
            "predicted": {"peak_bytes": self.memory.peak, "step_ratio": round(self.step_ratio, 4)},
            "trainable_params": self.trainable_params,
            "fits": self.fits,
        }
        if self.cached_step_ratio is not None:
            d["predicted"]["cached_step_ratio"] = round(self.cached_step_ratio, 4)
            d["predicted"]["cache_bytes_per_sample"] = self.cache_row_bytes
        if self.measured is not None:
            m = self.measured
            d["measured"] = {"peak_bytes": m.peak_bytes, "memory_source": m.memory_source,
                             "step_ratio": round(m.step_ratio, 4)}
            if m.step_ratio_range is not None:
                d["measured"]["step_ratio_range"] = [round(m.step_ratio_range[0], 4), round(m.step_ratio_range[1], 4)]
        return d


@dataclass
class Advice:
    """The advisor's answer.

    Attributes:
        budget_bytes: the memory budget.
        assessed: every candidate, least trained first.
        front: indices into ``assessed`` of the Pareto front, by predicted peak (with the
            A+B variants the cost cannot rank against plain plans, see :func:`front_of`).
        chosen: index into ``assessed`` of the chosen plan (None: nothing fits).
        input_shape: the input batch shape the predictions are for (a :class:`DictBatch` for dict inputs).
        settings: the optimizer, amp, device type and weight dtype the predictions are for.
        auto_freeze: ``train --auto-freeze`` predicted (full fine-tuning's peak, the step time
            falling as front blocks freeze), or None where the model has no blocks to freeze.
        weight_bytes: the model's own weights and buffers, which any budget must hold.
    """

    budget_bytes: int
    assessed: list[Assessment]
    front: list[int]
    chosen: int | None
    input_shape: InputShape
    settings: dict[str, Any] = field(default_factory=dict)
    auto_freeze: AutoFreezeOption | None = None
    weight_bytes: int = 0

    @property
    def front_assessed(self) -> list[Assessment]:
        """The candidates on the front, by predicted peak."""
        return [self.assessed[i] for i in self.front]

    @property
    def smallest_peak(self) -> int:
        """The lowest predicted peak of any candidate: the smallest memory that could work."""
        return min(a.memory.peak for a in self.assessed)

    def for_budget(self, budget_bytes: int) -> Advice:
        """The same advice for another budget, without profiling the model again.

        The candidates, their predictions and any measurements do not depend on the budget; only
        which of them fit and the choice do, and those are redone here.

        Args:
            budget_bytes: the new memory budget.

        Returns:
            A new advice; this one is not changed (the assessments are copies, their
            :attr:`~Assessment.measured` kept).

        Raises:
            AdvisorError: the budget is below the model's own weights (as :func:`advise`).
        """
        _check_budget(budget_bytes, self.weight_bytes, self.smallest_peak)
        assessed = [replace(a, fits=a.memory.peak <= budget_bytes) for a in self.assessed]
        af = self.auto_freeze
        return replace(self, budget_bytes=budget_bytes, assessed=assessed,
                       chosen=choose([a.point for a in assessed], budget_bytes),
                       auto_freeze=replace(af, fits=af.peak_bytes <= budget_bytes) if af is not None else None)

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract: the front candidates and the index of the chosen one among them.

        Returns:
            ``{"budget_bytes", "input_shape", "candidates": [...], "chosen": i or None,
            "auto_freeze": {...} or None}``.
        """
        chosen = self.front.index(self.chosen) if self.chosen is not None else None
        return {
            "budget_bytes": self.budget_bytes,
            "input_shape": (self.input_shape.to_json() if isinstance(self.input_shape, DictBatch)
                            else list(self.input_shape)),
            "candidates": [a.to_dict() for a in self.front_assessed],
            "chosen": chosen,
            "auto_freeze": self.auto_freeze.to_dict() if self.auto_freeze is not None else None,
        }


#: Candidates profiled with their own trainable set (and plan applied): frozen blocks between
#: trained ones save nothing for weight gradients, adapters add their own ops and tensors.
_EXACT_KINDS = ("low_rank", "top_k")


def _family(candidate: Candidate) -> str | None:
    """``"full_rank"``, or a low-rank variant's name (``"dora"``); None for every other candidate."""
    if candidate.kind == "full_rank":
        return candidate.kind
    for rule in candidate.plan.rules:
        lr = rule.reparam.low_rank if rule.reparam is not None else None
        if lr is not None and lr.label is not None:
            return lr.variant
    return None


def front_of(assessed: Sequence[Assessment]) -> list[int]:
    """The Pareto front of predicted cost, by predicted peak, with DoRA and full-rank A+B kept unless one of their own kind beats them.

    The cost coordinates (peak, trainable parameters, step time) cannot rank those against plain
    plans: what they buy (a learned magnitude per output; weight decay towards the loaded weights)
    is no parameter count, and full-rank A+B mostly costs more than full fine-tuning. Only a
    sweep measures it, and a sweep trains the front.

    Args:
        assessed: the candidates with their predictions.

    Returns:
        Indices into ``assessed``, by predicted peak (then the most trainable parameters).
    """
    points = [a.point for a in assessed]
    front = set(pareto_front(points))
    families: dict[str, list[int]] = {}
    for i, a in enumerate(assessed):
        fam = _family(a.candidate)
        if fam is not None:
            families.setdefault(fam, []).append(i)
    for members in families.values():
        front |= {members[j] for j in pareto_front([points[i] for i in members])}
    return sorted(front, key=lambda i: (points[i].peak_bytes, -points[i].trainable_params, i))


def _exact_profile(model: nn.Module, tree: ModelTree, candidate: Candidate, input_shape: InputShape,
                   param_dtype: torch.dtype | None, device_type: str) -> tuple[ModelProfile, set[str]]:
    """Profile a meta copy of ``model`` with ``candidate`` applied and only its parameters training."""
    if candidate.kind == "low_rank":
        meta, names = adapted_meta_copy(model, candidate)
    else:
        meta = meta_copy(model)
        names = trainable_names(candidate, model, tree)
    prof = profile_model(meta, input_shape, bn_eval=candidate.bn_eval, param_dtype=param_dtype,
                         trainable=names, in_place=True, device_type=device_type)
    return prof, names


def advise(
    model: nn.Module,
    budget_bytes: int,
    input_shape: InputShape,
    *,
    optimizer: str = "adamw",
    amp: str = "off",
    device_type: str = "cpu",
    param_dtype: torch.dtype | None = None,
    block_order: list[str] | None = None,
    ranks: tuple[int, ...] = LOW_RANKS,
    dora_ranks: tuple[int, ...] = DORA_RANKS,
    auto_freeze_max: float = 0.75,
) -> Advice:
    """Propose the plans that fit ``budget_bytes`` and choose the one that trains the most.

    Args:
        model: the model (any device; it is not changed, nothing real is computed).
        budget_bytes: the memory budget of the device.
        input_shape: one input batch's shape, e.g. ``(32, 3, 224, 224)``; ``(batch, seq_len)``
            for text models; a :class:`~workbench.core.advisor.profile.DictBatch` for a model that
            takes dict inputs (:func:`~workbench.core.advisor.profile.batch_template` of a sample).
        optimizer: ``sgd``, ``sgd_momentum``, ``adam`` or ``adamw``.
        amp: ``off``, ``bf16`` or ``fp16``.
        device_type: ``cpu`` or the accelerator type (``cuda``): decides the optimizer path.
        param_dtype: dtype the weights are stored in (default: the model's own), e.g.
            ``torch.bfloat16`` for a large model loaded in 16 bits.
        block_order: blocks in the order to unfreeze them (the gradient-signal probe's
            :attr:`~workbench.core.advisor.grad_signal.GradSignal.order`); None: last blocks first.
        ranks: ranks of the low-rank A+B candidates.
        dora_ranks: ranks of the DoRA candidates.
        auto_freeze_max: the ``TrainConfig.auto_freeze_max`` the auto-freeze prediction is for
            (the share of the blocks a run may freeze).

    Returns:
        The advice.

    Raises:
        AdvisorError: the budget is below the model's own weights (the message gives the
            smallest memory that could work); the model cannot be profiled; bad settings.
    """
    profile = profile_model(model, input_shape, param_dtype=param_dtype, device_type=device_type)
    candidates = generate_candidates(model, profile, block_order=block_order, ranks=ranks, dora_ranks=dora_ranks)
    bn_profile = (profile_model(model, input_shape, bn_eval=True, param_dtype=param_dtype, device_type=device_type)
                  if any(c.bn_eval for c in candidates) else None)
    full_flops = step_flops(profile, [p.name for p in profile.params], optimizer)
    tree = ModelTree.from_model(model)  # one tree for every candidate's plan
    assessed: list[Assessment] = []
    for c in candidates:
        if c.kind in _EXACT_KINDS:
            prof, names = _exact_profile(model, tree, c, input_shape, param_dtype, device_type)
            fixed: set[str] = set()
        else:
            prof = bn_profile if c.bn_eval and bn_profile is not None else profile
            names, fixed = full_rank_names(model, c) if c.kind == "full_rank" else (trainable_names(c, model, tree), set())
        mem = estimate_memory(prof, names, optimizer=optimizer, amp=amp, device_type=device_type)
        if fixed:  # full-rank A+B's fixed copies A, beside the model: counted with the weights
            extra = sum(p.nbytes for p in prof.params if p.name in fixed)
            mem = replace(mem, weights=mem.weights + extra, peak=mem.peak + extra)
        count = sum(p.numel for p in prof.params if p.name in names)
        ratio = step_flops(prof, names, optimizer) / full_flops if full_flops else 1.0
        cached = cached_step_flops(prof, names, optimizer)
        assessed.append(Assessment(c, mem, ratio, count, mem.peak <= budget_bytes,
                                   cached_step_ratio=cached / full_flops if cached is not None and full_flops else None,
                                   cache_row_bytes=cache_row_bytes(prof, names)))
    weights = profile.param_bytes + profile.buffer_bytes
    _check_budget(budget_bytes, weights, min(a.memory.peak for a in assessed))
    return Advice(
        budget_bytes=budget_bytes,
        assessed=assessed,
        front=front_of(assessed),
        chosen=choose([a.point for a in assessed], budget_bytes),
        input_shape=input_shape if isinstance(input_shape, DictBatch) else tuple(input_shape),
        settings={"optimizer": optimizer, "amp": amp, "device_type": device_type,
                  "param_dtype": str(param_dtype).removeprefix("torch.") if param_dtype is not None else None},
        auto_freeze=auto_freeze_option(model, profile, budget_bytes, optimizer=optimizer, amp=amp,
                                       device_type=device_type, max_fraction=auto_freeze_max),
        weight_bytes=weights,
    )


def _check_budget(budget_bytes: int, weight_bytes: int, smallest_peak: int) -> None:
    """Refuse a budget below the model's own weights, naming the smallest memory that could work."""
    if budget_bytes < weight_bytes:
        raise AdvisorError(
            f"a budget of {fmt_bytes(budget_bytes)} is below the model's own weights ({fmt_bytes(weight_bytes)}); "
            f"the smallest plan needs about {fmt_bytes(smallest_peak)} ({smallest_peak} bytes): give at least that much"
        )


def predict_plan(
    model: nn.Module,
    plan: FreezePlan,
    input_shape: InputShape,
    *,
    optimizer: str = "adamw",
    amp: str = "off",
    device_type: str = "cpu",
) -> MemoryEstimate:
    """Predict the peak memory of a training step of ``model`` under any freeze plan.

    The plan is applied to a meta copy (A+B, low rank and all), and the pass is profiled with
    exactly the parameters the plan trains; what the plan keeps beside the model (fused A+B's
    fixed copies ``A``) counts with the weights.

    Args:
        model: the model (any device; not changed).
        plan: the plan.
        input_shape: one batch's shape (``(batch, seq_len)`` for text models, a
            :class:`~workbench.core.advisor.profile.DictBatch` for dict inputs).
        optimizer / amp / device_type: as :func:`advise`.

    Returns:
        The predicted memory.

    Raises:
        AdvisorError: the model cannot be profiled, or bad settings.
        PlanError: the plan does not apply to the model.
    """
    meta = meta_copy(model)
    bn_eval = any(getattr(r, "bn_eval", None) for r in plan.rules)
    applied = plan.apply(meta)
    names = {n for n, p in meta.named_parameters() if p.requires_grad}
    beside = fixed_beside_bytes(meta, applied)  # fused A+B's copies A: in the plan's handles, not in the model
    prof = profile_model(meta, input_shape, bn_eval=bn_eval, trainable=names, in_place=True, device_type=device_type)
    mem = estimate_memory(prof, names, optimizer=optimizer, amp=amp, device_type=device_type)
    return replace(mem, weights=mem.weights + beside, peak=mem.peak + beside) if beside else mem


def step_ratio_noise(rows: Sequence[tuple[str, Measured | None]]) -> list[str]:
    """Which measured step ratios are too noisy to order the rows: their spread exceeds the gap to a neighbour.

    Args:
        rows: ``(name, measured)`` per table row (None: not measured).

    Returns:
        Per row, "" or one sentence saying how far the row's steps spread and which row's
        ratio is closer than that.
    """
    out: list[str] = []
    for k, (_name, m) in enumerate(rows):
        if m is None or m.step_ratio_range is None:
            out.append("")
            continue
        lo, hi = m.step_ratio_range
        others = [(abs(m.step_ratio - o.step_ratio), n) for j, (n, o) in enumerate(rows) if j != k and o is not None]
        if not others:
            out.append("")
            continue
        gap, near = min(others)
        if hi - lo > gap:
            out.append(f"Step time varied {lo:.2f}–{hi:.2f}× full over {m.steps} steps, more than the {gap:.2f} "
                       f"between this row and {near!r}: their order is not settled. Measure again on a quiet machine.")
        else:
            out.append("")
    return out
