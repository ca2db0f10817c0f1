"""Auto-freeze as an advisor candidate: what ``train --auto-freeze`` costs, predicted.

An auto-freeze run starts as full fine-tuning (so its peak memory is full fine-tuning's: the
first steps reach it before anything freezes) and, as the blocks' gradient norms flatten,
freezes the front-most blocks (the blocks the training engine uses:
:func:`~workbench.core.training.fsdp.block_paths`), together with what runs before the first
block. It stops at ``auto_freeze_max`` of them, or earlier, after the last block worth freezing
(:func:`~workbench.core.training.auto_freeze.worth_freezing`: a block holding at least half an
even share of the compute). The advisor prices the blocks as the run does, with the same count
(:class:`~workbench.core.training.auto_freeze_cost.BlockCosts`) on the multiply-accumulates its
shape-only pass recorded (:attr:`~workbench.core.advisor.profile.ModelProfile.module_macs`), so
the blocks the candidate's name says it freezes are the most the run can freeze. Its step time
falls from full fine-tuning's to that of the plan it ends in, and further once the frozen-prefix
cache serves that plan (after an epoch). The prediction is the two ends of that range; where in
it a run ends depends on the data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from workbench.core.advisor.memory import estimate_memory
from workbench.core.advisor.predict import cache_row_bytes, cached_step_flops, step_flops
from workbench.core.advisor.profile import ModelProfile

__all__ = ["AutoFreezeOption", "auto_freeze_option"]


@dataclass(frozen=True)
class AutoFreezeOption:
    """``train --auto-freeze`` for a model, predicted.

    Attributes:
        blocks: the model's blocks as the engine finds them.
        max_frozen: blocks it may freeze: ``floor(max_fraction * blocks)`` of them, through the last
            one worth freezing.
        last_frozen: the last block it may freeze.
        cap: blocks ``max_fraction`` alone would let it freeze (``floor(max_fraction * blocks)``).
        peak_bytes: predicted peak memory (full fine-tuning's: reached before anything freezes).
        fits: the peak is within the budget.
        trainable_start: parameters trained at the start (all).
        trainable_end: parameters trained once ``max_frozen`` blocks froze.
        step_ratio_start: step time relative to full fine-tuning at the start (1.0).
        step_ratio_end: the same once ``max_frozen`` blocks froze.
        cached_step_ratio_end: the same once the frozen-prefix cache serves (None where it
            cannot apply).
        cache_row_bytes: what the cache then keeps per sample (None where it does not apply).
        max_fraction: the ``auto_freeze_max`` the prediction is for.
    """

    blocks: int
    max_frozen: int
    last_frozen: str
    peak_bytes: int
    fits: bool
    trainable_start: int
    trainable_end: int
    step_ratio_start: float
    step_ratio_end: float
    cached_step_ratio_end: float | None
    cache_row_bytes: int | None
    max_fraction: float
    cap: int

    @property
    def name(self) -> str:
        """For people: ``full fine-tuning, auto-freeze (up to 6 of 8 blocks, through layer3.1)``."""
        return f"full fine-tuning, auto-freeze (up to {self.max_frozen} of {self.blocks} blocks, through {self.last_frozen})"

    @property
    def stop_reason(self) -> str:
        """Why it stops where it does, for a tooltip or a note: the maximum, or the blocks after it saving too little."""
        rest = self.cap - self.max_frozen
        if rest:
            what = "the block" if rest == 1 else f"the {rest} blocks"
            return (f"{what} after {self.last_frozen} that --auto-freeze-max {self.max_fraction:g} allows would save "
                    f"too little to freeze (each under half an even share of the compute)")
        return f"the most --auto-freeze-max {self.max_fraction:g} allows"

    def to_dict(self) -> dict[str, Any]:
        """The ``auto_freeze`` entry of ``workbench advise --json``."""
        return {
            "name": self.name,
            "train": {"auto_freeze": True, "auto_freeze_max": self.max_fraction},
            "blocks": self.blocks,
            "max_frozen": self.max_frozen,
            "stops": self.stop_reason,
            "predicted": {
                "peak_bytes": self.peak_bytes,
                "step_ratio": [round(self.step_ratio_start, 4), round(self.step_ratio_end, 4)],
                "cached_step_ratio": round(self.cached_step_ratio_end, 4) if self.cached_step_ratio_end is not None else None,
                "cache_bytes_per_sample": self.cache_row_bytes,
            },
            "trainable_params": [self.trainable_start, self.trainable_end],
            "fits": self.fits,
        }


def _frozen_at_end(model: nn.Module, blocks: list[str], max_frozen: int) -> set[str]:
    """Names of the parameters frozen once ``max_frozen`` front blocks froze (and the front)."""
    from workbench.core.training.auto_freeze import front_paths

    frozen: set[str] = set()
    for sel in front_paths(model, blocks[0]):
        if sel.startswith("param:"):
            frozen.add(sel.removeprefix("param:"))
        else:
            frozen.update(f"{sel}.{n}" for n, _ in model.get_submodule(sel).named_parameters())
    for b in blocks[:max_frozen]:
        frozen.update(f"{b}.{n}" for n, _ in model.get_submodule(b).named_parameters())
    return frozen


def auto_freeze_option(
    model: nn.Module, profile: ModelProfile, budget_bytes: int, *, optimizer: str = "adamw", amp: str = "off",
    device_type: str = "cpu", max_fraction: float = 0.75,
) -> AutoFreezeOption | None:
    """Predict ``train --auto-freeze`` for ``model`` (None where it has nothing to freeze).

    Args:
        model: the model (not changed).
        profile: its profile (every parameter trainable: full fine-tuning).
        budget_bytes: the memory budget.
        optimizer / amp / device_type: as :func:`~workbench.core.advisor.advice.advise`.
        max_fraction: ``TrainConfig.auto_freeze_max``.

    Returns:
        The prediction, or None when the model has fewer than two blocks, the fraction allows
        none to freeze, or none it allows is worth freezing.
    """
    from workbench.core.training.auto_freeze import front_modules, max_frozen_blocks, worth_freezing
    from workbench.core.training.auto_freeze_cost import BlockCosts
    from workbench.core.training.fsdp import block_paths

    blocks = block_paths(model)
    cap = max_frozen_blocks(max_fraction, len(blocks))
    if len(blocks) < 2 or cap < 1:
        return None
    costs = BlockCosts(model, blocks, front_modules(model, blocks[0]), counts=profile.module_macs)
    max_frozen = len(worth_freezing(blocks[:cap], costs))  # where the run stops: the cap, or the last block worth it
    if max_frozen < 1:
        return None
    everything = [p.name for p in profile.params]
    frozen = _frozen_at_end(model, blocks, max_frozen)
    end = [n for n in everything if n not in frozen]
    if not end or len(end) == len(everything):
        return None
    full_flops = step_flops(profile, everything, optimizer)
    if not full_flops:
        return None
    peak = estimate_memory(profile, set(everything), optimizer=optimizer, amp=amp, device_type=device_type).peak
    cached = cached_step_flops(profile, end, optimizer)
    sizes = {p.name: p.numel for p in profile.params}
    return AutoFreezeOption(
        blocks=len(blocks), max_frozen=max_frozen, last_frozen=blocks[max_frozen - 1], peak_bytes=peak,
        fits=peak <= budget_bytes, trainable_start=sum(sizes.values()), trainable_end=sum(sizes[n] for n in end),
        step_ratio_start=1.0, step_ratio_end=step_flops(profile, end, optimizer) / full_flops,
        cached_step_ratio_end=cached / full_flops if cached is not None else None,
        cache_row_bytes=cache_row_bytes(profile, end), max_fraction=max_fraction, cap=cap,
    )
