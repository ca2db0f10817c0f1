"""The advisor's candidates for a sweep: the plans that fit a memory budget, for the model and data of a run.

:func:`advised_plans` builds the run's model and data as training would (head fitted to the
data), takes the input shape from one sample, asks the advisor (:func:`~workbench.core.advisor.advice.advise`)
and returns the plans that fit the budget (the Pareto front of predicted cost, or all), and
auto-freeze when it fits, as ``(name, plan, config overrides)`` for
:func:`~workbench.core.advisor.sweep.cross_learning_rates`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from workbench.core.advisor.advice import Advice, advise
from workbench.core.advisor.auto_freeze_option import AutoFreezeOption
from workbench.core.advisor.profile import AdvisorError, InputShape, batch_template
from workbench.core.advisor.sweep_study import SweepError
from workbench.core.formatting import fmt_bytes
from workbench.core.plan import FreezePlan
from workbench.core.training.config import TrainConfig

if TYPE_CHECKING:
    from workbench.core.advisor.sweep_trial import SweepInputs

__all__ = ["advice_plans", "advised_plans", "auto_freeze_choice", "sample_input_shape"]

PlanChoice = tuple[str, FreezePlan, dict[str, Any]]


def sample_input_shape(sample: Any, batch_size: int) -> InputShape:
    """The batch of a dataset item's input: ``(batch, *x.shape)``; for token dicts ``(batch, seq_len)``; for
    other dicts of tensors a :class:`~workbench.core.advisor.profile.DictBatch` (:func:`batch_template`).

    Raises:
        SweepError: the item has no tensor input.
    """
    try:
        return batch_template(sample, batch_size)
    except AdvisorError as e:
        raise SweepError(f"{str(e).partition('; ')[0]}; give --plans FILE ... instead") from None


def auto_freeze_choice(option: AutoFreezeOption) -> PlanChoice:
    """Auto-freeze as a sweep candidate: every parameter trainable, and ``auto_freeze`` on.

    Args:
        option: the advisor's auto-freeze prediction.

    Returns:
        ``(name, plan, config overrides)``.
    """
    plan = FreezePlan.from_dict({"format": "freeze-plan", "version": 1, "rules": [{"select": "*", "frozen": False}]})
    return option.name, plan, {"auto_freeze": True}


def advice_plans(advice: Advice, *, front_only: bool = True) -> list[PlanChoice]:
    """The plans of an advice that fit its budget: the front (or every candidate), then auto-freeze.

    Args:
        advice: the advisor's answer.
        front_only: only the Pareto front of predicted cost (else every candidate that fits).

    Returns:
        ``(name, plan, config overrides)`` per plan, least trained first.

    Raises:
        SweepError: nothing fits the budget.
    """
    pool = advice.front_assessed if front_only else advice.assessed
    out: list[PlanChoice] = [(a.candidate.name, a.candidate.plan, {}) for a in pool if a.fits]
    af = advice.auto_freeze
    if af is not None and af.fits:
        out.append(auto_freeze_choice(af))
    if not out:
        raise SweepError(f"no candidate plan fits in {fmt_bytes(advice.budget_bytes)}; the smallest needs about "
                         f"{fmt_bytes(advice.smallest_peak)}: raise --memory or lower --batch-size")
    return out


def advised_plans(config: TrainConfig, budget_bytes: int, *, front_only: bool = True, trust_pickle: bool = False,
                  model: torch.nn.Module | None = None, dataset: Any = None,
                  inputs: SweepInputs | None = None) -> tuple[Advice, list[PlanChoice]]:
    """Ask the advisor for the plans of ``config``'s model and data that fit ``budget_bytes``.

    Args:
        config: the sweep's base config (model, data, batch size, optimizer, amp, device).
        budget_bytes: the memory budget.
        front_only: as :func:`advice_plans`.
        trust_pickle: allow pickled checkpoints.
        model / dataset: a model and data to use instead of the config's.
        inputs: the sweep's model and data built once: the advisor measures a copy of them
            (when neither ``model`` nor ``dataset`` is given), so the sweep does not build them again.

    Returns:
        The advice and its plans.

    Raises:
        WorkbenchError: the model or data cannot be built; nothing fits the budget.
    """
    from workbench.core.training.engine import Trainer

    kwargs: dict[str, Any] = {"trust_pickle": trust_pickle}
    if inputs is not None and inputs.build_once and model is None and dataset is None:
        kwargs["model"] = inputs.model()
        if inputs.dataset is not None:
            kwargs["dataset"] = inputs.dataset
    if model is not None:
        kwargs["model"] = model
    if dataset is not None:
        kwargs["dataset"] = dataset
    trainer = Trainer(config.replace(steps=1, save_dir=None, metrics_path=None, tensorboard_dir=None,
                                     auto_freeze=False, cache_frozen="off"), **kwargs)
    trainer.setup()  # the model as training builds it: the data's head, on the run's device
    assert trainer.model is not None and trainer.dataset is not None
    shape = sample_input_shape(trainer.dataset[0], config.batch_size)
    device_type = trainer.device.type
    if trainer.applied is not None:
        trainer.applied.remove(merge=False)
    advice = advise(trainer.model, budget_bytes, shape, optimizer=config.optimizer, amp=config.amp,
                    device_type=device_type)
    return advice, advice_plans(advice, front_only=front_only)
