"""The plan advisor: which plans fit a memory budget, and which trains the most.

- :mod:`~workbench.core.advisor.profile`: one shape-only forward pass on the ``meta`` device;
- :mod:`~workbench.core.advisor.candidates`: candidate plans from the model's block sequence;
- :mod:`~workbench.core.advisor.memory`: predicted peak memory of a step;
- :mod:`~workbench.core.advisor.predict`: predicted step time relative to full fine-tuning;
- :mod:`~workbench.core.advisor.front`: the Pareto front and the chosen plan;
- :mod:`~workbench.core.advisor.adapters`: low-rank adapters on a meta copy, for profiling;
- :mod:`~workbench.core.advisor.advice`: all of it for one model (:func:`advise`), or one plan
  (:func:`predict_plan`);
- :mod:`~workbench.core.advisor.grad_signal`: the gradient-signal probe (blocks by ‖g‖/‖w‖);
- :mod:`~workbench.core.advisor.measure`: real steps of the front candidates, side by side;
- :mod:`~workbench.core.advisor.tracking`: live tensor bytes, the measured peak on CPU.
"""

from workbench.core.advisor.advice import Advice, Assessment, Measured, advise, predict_plan
from workbench.core.advisor.candidates import (
    DORA_RANKS,
    LOW_RANKS,
    Candidate,
    block_sequence,
    generate_candidates,
    low_rank_targets,
    trainable_names,
)
from workbench.core.advisor.front import Point, choose, pareto_front
from workbench.core.advisor.memory import MemoryEstimate, estimate_memory
from workbench.core.advisor.predict import step_flops, step_ratio
from workbench.core.advisor.profile import (
    AdvisorError,
    ModelProfile,
    is_text_model,
    meta_batch,
    meta_copy,
    profile_model,
)
from workbench.core.advisor.sizes import parse_size
from workbench.core.advisor.tracking import LiveTensorBytes, storage_bytes

__all__ = [
    "DORA_RANKS",
    "LOW_RANKS",
    "Advice",
    "AdvisorError",
    "Assessment",
    "Candidate",
    "LiveTensorBytes",
    "Measured",
    "MemoryEstimate",
    "ModelProfile",
    "Point",
    "advise",
    "block_sequence",
    "choose",
    "estimate_memory",
    "generate_candidates",
    "is_text_model",
    "low_rank_targets",
    "meta_batch",
    "meta_copy",
    "pareto_front",
    "predict_plan",
    "parse_size",
    "profile_model",
    "step_flops",
    "step_ratio",
    "storage_bytes",
    "trainable_names",
]
