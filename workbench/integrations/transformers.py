"""Hugging Face ``Trainer`` integration: a freeze plan, its stages and its proof, from a callback.

::

    from transformers import Trainer, TrainingArguments
    from workbench.integrations.transformers import FreezePlanCallback

    trainer = Trainer(model=model, args=TrainingArguments("out", learning_rate=5e-5, weight_decay=0.01),
                      train_dataset=train, callbacks=[FreezePlanCallback("bert.plan.json")])
    trainer.train()

Given only ``callbacks=[FreezePlanCallback(plan)]``, the callback

- applies the plan to the Trainer's model when the Trainer is made (``on_init_end``), so the
  Trainer's own parameter count, checkpoints and evaluation see the planned model;
- builds the Trainer's optimizer itself, in place of ``Trainer.create_optimizer`` (see
  :meth:`FreezePlanCallback.attach`): the optimizer class and its arguments are the Trainer's
  (``args.optim``, ``optim_args``, or ``optimizer_cls_and_kwargs``), the param groups are the
  plan's: trainable parameters only, ``lr = args.learning_rate * lr_scale`` (rules and
  ``lr_decay``), the rules' ``weight_decay`` where they set one and otherwise
  ``args.weight_decay`` with the Trainer's no-decay convention (biases and LayerNorm/RMSNorm
  weights get 0; ``no_decay="auto"`` uses the workbench's, ``no_decay=None`` none). The
  scheduler the Trainer then makes covers every group;
- keeps modules marked ``eval`` / ``bn_eval`` in eval mode across the Trainer's
  ``model.train()`` (the plan's instance-level lock);
- brings each stage into force at the start of the step ``at_step`` (optimizer steps done,
  ``state.global_step``) or of the epoch ``at_epoch``: the model is updated, newly trainable
  parameters join the optimizer in new groups that the scheduler then also drives (their
  learning rate follows the same schedule, scaled by their ``lr_scale``), and under DDP the
  ``DistributedDataParallel`` wrapper is rebuilt so their gradients are averaged too;
- logs the trainable parameter count, the stage and every plan change through
  ``Trainer.log`` (``freeze/trainable_params``, ``freeze/frozen_params``, ``freeze/stage``;
  TensorBoard, W&B and the other reporting integrations see them) and the text of each change
  through the ``transformers`` logger;
- with ``loss=`` / ``metric=`` (the workbench's ``--loss`` / ``--metric`` settings), installs them
  as the Trainer's ``compute_loss_func`` and ``compute_metrics`` (:mod:`workbench.integrations.task`);
- at the end of training runs :meth:`AppliedPlan.verify`, logs ``freeze/verify_ok`` and
  ``freeze/verify_errors`` and raises :class:`PlanViolation` when a frozen tensor changed;
- saves the stage and the optimizer's group layout in the checkpoint's ``trainer_state.json``
  and, on ``trainer.train(resume_from_checkpoint=...)``, restores both before the Trainer loads
  the optimizer's state.

``transformers`` is imported only when :data:`FreezePlanCallback` is first accessed.
"""

from __future__ import annotations

import inspect
import logging
import math
import os
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from workbench.core.errors import WorkbenchError
from workbench.core.freezing.apply import AppliedPlan, apply_plan
from workbench.core.plan.rules import FreezePlan, PlanError
from workbench.integrations.common import (
    check_same_plan,
    check_stage,
    extend_scheduler,
    groups_from_layout,
    lazy_callback,
    load_plan,
    optimizer_layout,
    plan_for,
    rebuild_ddp,
    stage_key,
    sync_param_groups,
    trainable_ids,
)
from workbench.integrations.task import TrainerLoss, TrainerMetric

__all__ = [  # noqa: F822 - FreezePlanCallback is made on first access (PEP 562)
    "STATE_KEY",
    "FreezePlanCallback",
    "PlanViolation",
    "TransformersMissingError",
    "extend_scheduler",
    "rebuild_ddp",
]

#: Key of the callback's entry in ``TrainerState.stateful_callbacks`` (``trainer_state.json``).
STATE_KEY = "workbench.FreezePlanCallback"

logger = logging.getLogger("transformers.trainer")


class TransformersMissingError(WorkbenchError, ImportError):
    """``transformers`` is not installed."""


class PlanViolation(WorkbenchError):  # noqa: N818 - names what happened, like PlanError's siblings
    """``verify`` found a frozen tensor (or eval-mode BatchNorm statistics) changed by training."""


def _find_trainer(callback: Any) -> Any:
    """The ``transformers.Trainer`` whose ``__init__`` is calling ``on_init_end`` on ``callback``."""
    from transformers import Trainer

    frame = inspect.currentframe()
    try:
        while frame is not None:
            obj = frame.f_locals.get("self")
            if isinstance(obj, Trainer) and callback in getattr(obj.callback_handler, "callbacks", ()):
                return obj
            frame = frame.f_back
    finally:
        del frame
    return None


class _FreezePlanCallbackImpl:
    """Applies a freeze plan in a Hugging Face ``Trainer`` run (see the module docstring).

    Args:
        plan: a :class:`FreezePlan`, a plan file path, or the plan's dict.
        no_decay: ``"trainer"`` (default): parameters no ``weight_decay`` rule reaches follow the
            Trainer's ``get_decay_parameter_names`` (biases and norm weights get 0); ``"auto"``:
            the workbench's (biases, 1-D parameters, ``no_weight_decay()``); None:
            ``args.weight_decay`` for all of them.
        base_dir: folder for relative file references in the plan (A+B tensor files);
            default: the plan file's folder.
        strict: a fingerprint mismatch is an error.
        verify: run :meth:`AppliedPlan.verify` at the end of training and raise
            :class:`PlanViolation` on a violation.
        loss: a loss setting (``bce``, ``mse``, ``l1``, ``py:FILE.py:FUNC`` ...), installed as the
            Trainer's ``compute_loss_func`` (:class:`~workbench.integrations.task.TrainerLoss`: it
            reads the outputs' ``logits``); None: the model's own loss.
        metric: a metric setting (``accuracy``, ``top5``, ``py:FILE.py:FUNC``), installed as the
            Trainer's ``compute_metrics`` (:class:`~workbench.integrations.task.TrainerMetric`:
            logged as ``eval_<name>``); None: the Trainer's own.

    Raises:
        LossSpecError / MetricSpecError / PyCodeError: a bad ``loss`` or ``metric``.

    Attributes:
        applied: the :class:`AppliedPlan` once the Trainer was made.
        verify_report: the report of the last verify, or None.
    """

    def __init__(
        self,
        plan: FreezePlan | str | os.PathLike[str] | Mapping[str, Any],
        *,
        no_decay: str | None = "trainer",
        base_dir: str | os.PathLike[str] | None = None,
        strict: bool = False,
        verify: bool = True,
        loss: str | None = None,
        metric: str | None = None,
    ) -> None:
        if no_decay not in ("trainer", "auto", None):
            raise ValueError(f"no_decay must be \"trainer\", \"auto\" or None, got {no_decay!r}")
        self.loss = TrainerLoss(loss) if loss is not None else None
        self.metric = TrainerMetric(metric) if metric is not None else None
        self.plan, self.base_dir = load_plan(plan, base_dir)
        self.no_decay = no_decay
        self.strict = strict
        self.verify = verify
        self.applied: AppliedPlan | None = None
        self.verify_report: Any = None
        self._stage: tuple[bool, ...] = stage_key(self.plan, -1, -1)
        self._trainer: Any = None
        self._built: Any = None  # the optimizer this callback built
        self._steps_since_update = 0

    # ---------------------------------------------------------- public API
    def apply(self, model: nn.Module) -> AppliedPlan:
        """Apply the plan (before any stage) to the model; again on the same model it does nothing.

        Args:
            model: the Trainer's model (a ``PreTrainedModel``, a PEFT model, any ``nn.Module``).

        Returns:
            The applied plan (also in :attr:`applied`).

        Raises:
            PlanError: the plan does not fit the model, or the callback already holds a plan
                applied to another model.
        """
        if self.applied is not None:
            if self.applied.model is not model:
                raise PlanError(
                    "this FreezePlanCallback already applied its plan to another model; make one callback per Trainer"
                )
            return self.applied
        self._stage = stage_key(self.plan, -1, -1)
        self.applied = apply_plan(model, plan_for(self.plan, self._stage), strict=self.strict, base_dir=self.base_dir)
        return self.applied

    def attach(self, trainer: Any) -> None:
        """Make ``trainer`` build its optimizer from the plan.

        ``on_init_end`` calls this with the Trainer that is being made; call it yourself only
        for a Trainer that does not run its callbacks' ``on_init_end`` from its ``__init__``.
        The Trainer's ``create_optimizer`` is wrapped on this instance: when the Trainer has no
        optimizer yet, the callback makes one with the Trainer's optimizer class and arguments
        over the plan's param groups (restoring the stage and group layout of a checkpoint
        being resumed), then the Trainer's own method runs and keeps it.

        Args:
            trainer: a ``transformers.Trainer``.

        Raises:
            PlanError: the Trainer has no model (``model_init`` is not supported).
        """
        if self._trainer is trainer:
            return
        if getattr(trainer, "model", None) is None:
            raise PlanError("FreezePlanCallback needs the Trainer's model= (model_init is not supported)")
        for attr, mine, flag in (("compute_loss_func", self.loss, "loss"), ("compute_metrics", self.metric, "metric")):
            if mine is not None and getattr(trainer, attr, None) not in (None, mine):
                raise PlanError(f"the Trainer has its own {attr} and FreezePlanCallback has {flag}=: give one of them")
        self.apply(trainer.model)
        if self.loss is not None:
            trainer.compute_loss_func = self.loss
        if self.metric is not None:
            trainer.compute_metrics = self.metric
        self._trainer = trainer
        original = trainer.create_optimizer

        def create_optimizer(model: nn.Module | None = None) -> torch.optim.Optimizer:
            if trainer.optimizer is None:
                trainer.optimizer = self._build_optimizer(trainer)
                self._built = trainer.optimizer
            return original(model) if model is not None else original()

        trainer.create_optimizer = create_optimizer

    def param_groups(self, lr: float, weight_decay: float = 0.0, decay_names: Any = None) -> list[dict[str, Any]]:
        """The plan's param groups with the callback's no-decay convention.

        Args:
            lr: base learning rate.
            weight_decay: weight decay of the parameters no ``weight_decay`` rule reaches.
            decay_names: with ``no_decay="trainer"``, the names that get ``weight_decay``
                (the Trainer's ``get_decay_parameter_names(model)``); None: all of them.

        Returns:
            Groups for an optimizer: trainable parameters only, each with ``lr``,
            ``lr_scale``, ``weight_decay`` and ``param_names``.

        Raises:
            RuntimeError: the plan is not applied yet.
            ValueError: the plan leaves nothing trainable.
        """
        applied = self._require_applied()
        if self.no_decay == "auto":
            return applied.param_groups(lr, weight_decay, no_decay="auto")
        groups = applied.param_groups(lr, weight_decay)
        if self.no_decay is None or decay_names is None:
            return groups
        decay = set(decay_names)
        out: list[dict[str, Any]] = []
        for g in groups:
            names = g.get("param_names")
            if names is None or g.get("weight_decay", 0.0) == 0.0:
                out.append(g)
                continue
            keep = [(p, n) for p, n in zip(g["params"], names) if n in decay or _rule_sets_decay(applied, n)]
            zero = [(p, n) for p, n in zip(g["params"], names) if not (n in decay or _rule_sets_decay(applied, n))]
            for part, wd in ((keep, g["weight_decay"]), (zero, 0.0)):
                if part:
                    out.append({**g, "params": [p for p, _ in part], "param_names": [n for _, n in part], "weight_decay": wd})
        return out

    # ---------------------------------------------------------- internals
    def _require_applied(self) -> AppliedPlan:
        if self.applied is None:
            raise RuntimeError(
                "the freeze plan is applied when the Trainer is made; pass the callback in Trainer(callbacks=[...])"
            )
        return self.applied

    def _decay_names(self, trainer: Any, model: nn.Module) -> Any:
        if self.no_decay != "trainer":
            return None
        return trainer.get_decay_parameter_names(model)

    def _build_optimizer(self, trainer: Any) -> torch.optim.Optimizer:
        applied = self._require_applied()
        model = applied.model
        saved = _saved_state(trainer)
        layout = None
        if saved is not None:  # resuming: trainer.state was read from the checkpoint
            check_same_plan(saved["plan"], self.plan)
            key = tuple(bool(x) for x in saved["stage"])
            if key != self._stage:
                applied.update(plan_for(self.plan, key), strict=self.strict)
                self._stage = key
            layout = saved.get("optimizer")
            # the Trainer loaded the checkpoint's weights after the plan was applied: they are
            # verify's baseline (as install_plan takes it right after applying)
            applied.rebaseline()
        if trainer.optimizer_cls_and_kwargs is not None:
            cls, kwargs = trainer.optimizer_cls_and_kwargs
        else:
            cls, kwargs = trainer.get_optimizer_cls_and_kwargs(trainer.args, model)
        kwargs = dict(kwargs)
        unsupported = [k for k in ("params", "model", "optimizer_dict") if k in kwargs]
        if unsupported or not isinstance(cls, type) or not issubclass(cls, torch.optim.Optimizer):
            raise PlanError(
                f"the Trainer's optimizer ({trainer.args.optim}) makes its own parameter groups, which a freeze "
                "plan cannot set; use an optimizer such as adamw_torch (TrainingArguments(optim=...))"
            )
        lr = float(kwargs.get("lr", trainer.args.learning_rate))
        if layout:
            groups = groups_from_layout(layout, dict(model.named_parameters()))
        else:
            groups = self.param_groups(lr, trainer.args.weight_decay, self._decay_names(trainer, model))
        optimizer = cls(groups, **kwargs)
        self._record(trainer, optimizer)
        return optimizer

    def _record(self, trainer: Any, optimizer: torch.optim.Optimizer) -> None:
        """Put the stage and the optimizer's layout where the Trainer's checkpoint saves them."""
        applied = self._require_applied()
        names = {id(p): n for n, p in applied.model.named_parameters()}
        trainer.state.stateful_callbacks[STATE_KEY] = {
            "plan": self.plan.to_dict(),
            "stage": list(self._stage),
            "optimizer": optimizer_layout(optimizer, names),
        }

    def _log(self, trainer: Any, extra: Mapping[str, float] | None = None) -> None:
        applied = self._require_applied()
        counts = applied.counts()
        logs = {
            "freeze/trainable_params": float(counts.trainable),
            "freeze/frozen_params": float(counts.frozen),
            "freeze/stage": float(sum(self._stage)),
            **(extra or {}),
        }
        trainer.log(logs)

    def _epoch(self, state: Any) -> int:
        return int(math.floor((state.epoch or 0.0) + 1e-9))

    def _maybe_stage(self, state: Any) -> None:
        if self.applied is None or not self.plan.stages or self._trainer is None:
            return
        key = stage_key(self.plan, state.global_step, self._epoch(state))
        if key == self._stage:
            return
        trainer = self._trainer
        applied = self.applied
        trainable = trainable_ids(applied.model)
        check_stage(applied, self.plan, self._stage, key)
        diff = applied.update(plan_for(self.plan, key), strict=self.strict)
        self._stage = key
        self._steps_since_update = 0
        opt = trainer.optimizer
        if opt is not None:
            n_before = len(opt.param_groups)
            skip_base = float(opt.param_groups[0].get("initial_lr") or trainer.args.learning_rate)
            base_lr = next(
                (float(g["lr"]) / float(g["lr_scale"]) for g in opt.param_groups if g.get("lr_scale")), skip_base
            )
            groups = self.param_groups(base_lr, trainer.args.weight_decay, self._decay_names(trainer, applied.model))
            sync_param_groups(opt, applied, groups=groups)
            if len(opt.param_groups) > n_before:
                extend_scheduler(trainer.lr_scheduler, opt, n_before)
            self._record(trainer, opt)
        rebuilt = trainable_ids(applied.model) != trainable and rebuild_ddp(trainer.model_wrapped)
        logger.info(
            "freeze plan: stage %d of %d at step %d: %s%s", sum(key), len(key), state.global_step, diff.describe(),
            " (DDP wrapper rebuilt)" if rebuilt else "",
        )
        self._log(trainer, {"freeze/plan_change": 1.0})

    # ---------------------------------------------------------- Trainer hooks
    def on_init_end(self, args: Any, state: Any, control: Any, model: nn.Module | None = None, **kwargs: Any) -> None:
        """Apply the plan to the Trainer's model and take over its optimizer's param groups."""
        trainer = _find_trainer(self)
        if trainer is not None:
            self.attach(trainer)
        elif model is not None:
            self.apply(model)

    def on_train_begin(self, args: Any, state: Any, control: Any, optimizer: Any = None, **kwargs: Any) -> None:
        """Check that the optimizer is the plan's; log the trainable counts."""
        if self._trainer is None:
            raise PlanError(
                "FreezePlanCallback could not find its Trainer when it was made; call callback.attach(trainer) "
                "before trainer.train()"
            )
        if self._built is None or self._trainer.optimizer is None or _inner(self._trainer.optimizer) is not _inner(self._built):
            raise PlanError(
                "the Trainer was given its own optimizer (optimizers=...); with FreezePlanCallback leave it out: "
                "the callback builds the optimizer from the plan with TrainingArguments(optim=...)"
            )
        self._steps_since_update = 0
        self._record(self._trainer, self._trainer.optimizer)  # a second train() starts a new TrainerState
        logger.info("freeze plan: %s", _counts_line(self._require_applied()))
        self._log(self._trainer)

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Bring an ``at_epoch`` stage into force."""
        self._maybe_stage(state)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Bring a stage into force when ``global_step`` / the epoch reaches it."""
        self._maybe_stage(state)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Count optimizer steps since the plan was last applied (for verify)."""
        self._steps_since_update += 1

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Verify the plan held; log the result; raise :class:`PlanViolation` on a violation."""
        if not self.verify or self.applied is None:
            return
        report = self.applied.verify(steps=self._steps_since_update)
        self.verify_report = report
        logger.info("freeze plan: %s", report.summary())
        if self._trainer is not None:
            self._trainer.log({"freeze/verify_ok": float(report.ok), "freeze/verify_errors": float(len(report.errors))})
        if not report.ok:
            raise PlanViolation(f"the freeze plan did not hold during training: {report}")


def _rule_sets_decay(applied: AppliedPlan, name: str) -> bool:
    return not math.isnan(applied.weight_decay_of(name, math.nan))


def _inner(optimizer: Any) -> Any:
    return getattr(optimizer, "optimizer", optimizer)


def _saved_state(trainer: Any) -> dict[str, Any] | None:
    entry = getattr(getattr(trainer, "state", None), "stateful_callbacks", None) or {}
    saved = entry.get(STATE_KEY)
    return saved if isinstance(saved, dict) and "plan" in saved and "stage" in saved else None


def _counts_line(applied: AppliedPlan) -> str:
    c = applied.counts()
    return f"{c.trainable:,} of {c.total:,} parameters train ({100 * c.trainable_fraction:.2f}%), {c.frozen:,} frozen"


def _callback_base() -> type:
    try:
        from transformers import TrainerCallback
    except ImportError:
        raise TransformersMissingError(
            "FreezePlanCallback needs transformers; install it with `pip install 'freeze-workbench[hf]'`"
        ) from None
    return TrainerCallback


__getattr__ = lazy_callback(_FreezePlanCallbackImpl, _callback_base, __name__)
