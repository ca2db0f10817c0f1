"""PyTorch Lightning integration: apply a freeze plan from a callback.

::

    from workbench.integrations.lightning import FreezePlanCallback

    freeze = FreezePlanCallback("resnet18.plan.json", module="model")

    class Classifier(L.LightningModule):
        def configure_optimizers(self):
            return torch.optim.AdamW(freeze.param_groups(lr=1e-3, weight_decay=0.01))

    L.Trainer(callbacks=[freeze]).fit(Classifier(), datamodule=dm)

The model is named with the same model-spec syntax as everywhere else (``resnet18``,
``timm:NAME``, ``hf:FOLDER``, ``py:MODULE:FACTORY``): ``model=`` of the callback, or the plan's
``model`` block. :meth:`FreezePlanCallback.build_model` builds it for the LightningModule, and
the callback finds the submodule the plan applies to by that model's structure::

    freeze = FreezePlanCallback("vit.plan.json", model="timm:vit_small_patch16_224", num_classes=10)

    class Classifier(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.backbone = freeze.build_model()   # timm.create_model(...), head for 10 classes

The callback

- applies the plan in ``setup`` (before ``configure_optimizers``), to the LightningModule or
  to the submodule named by ``module`` (found automatically when the plan's fingerprint, or
  the structure of the model the spec names, matches a child);
- keeps BatchNorm modules marked ``bn_eval`` in eval mode across Lightning's train/eval
  switches (the workbench's instance-level lock; Lightning's mode restore keeps it);
- at each stage of the plan (``at_step`` = ``trainer.global_step``, ``at_epoch`` =
  ``trainer.current_epoch``) updates the model and the optimizer: newly trainable parameters
  go into new param groups (one per ``lr_scale``), parameters that are frozen again leave
  their groups and their optimizer state, parameters whose ``lr_scale`` changed move;
- under DDP (``strategy="ddp"`` and its variants) rebuilds the strategy's
  ``DistributedDataParallel`` wrapper when a stage changes which parameters train (see
  :func:`rewrap_ddp`): DDP reduces only the gradients of the parameters that required grad
  when it was built, so without this a backbone unfrozen at a stage would train on each
  rank's own gradients and the replicas would drift apart;
- saves the plan, the stage and the optimizer's group layout in the checkpoint, and on
  resume restores the stage and the group layout before Lightning loads the optimizer state.

Lightning takes the loss from the module's ``training_step`` and metrics from what the module
logs; a callback reaches neither, so this one has no ``loss=``/``metric=`` (the ``Trainer``
callback has). Use the workbench's settings in the module itself:
:func:`~workbench.core.training.losses.make_loss` and
:func:`~workbench.core.training.task_metrics.make_metric` (docs/integrations.md).

``lightning`` (or ``pytorch_lightning``) is imported only when :data:`FreezePlanCallback` is
first accessed; :func:`sync_param_groups` works with any optimizer and needs no Lightning.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from workbench.core.errors import WorkbenchError
from workbench.core.freezing.apply import AppliedPlan, apply_plan
from workbench.core.models.sources import source_of
from workbench.core.models.spec import ModelSpec
from workbench.core.models.zoo import ModelSourceError
from workbench.core.plan.rules import FreezePlan, PlanError
from workbench.core.plan.tree import ModelTree
from workbench.integrations.common import (
    check_same_plan,
    check_stage,
    groups_from_layout,
    lazy_callback,
    load_plan,
    optimizer_layout,
    plan_for,
    stage_key,
    sync_param_groups,
    trainable_ids,
)

__all__ = ["FreezePlanCallback", "LightningMissingError", "rewrap_ddp", "sync_param_groups"]  # noqa: F822 - FreezePlanCallback is made on first access (PEP 562)

class LightningMissingError(WorkbenchError, ImportError):
    """Neither ``lightning`` nor ``pytorch_lightning`` is installed."""


def rewrap_ddp(strategy: Any) -> bool:
    """Rebuild a Lightning strategy's DDP wrapper for the parameters that train now.

    ``DistributedDataParallel`` registers the parameters that require grad when it is built
    and all-reduces only their gradients. After a plan change that unfreezes parameters, their
    gradients would stay local to each rank (the replicas drift apart); after one that freezes
    parameters, the reducer would wait for gradients that never come. This unwraps the
    LightningModule and lets the strategy wrap it again with its own ``configure_ddp`` (the
    same device ids, DDP options such as ``find_unused_parameters`` or ``static_graph``, and
    communication hooks as at the start of the run). The new wrapper broadcasts rank 0's
    parameters and buffers, which every rank already shares. Call it on every rank at the
    same step (the callback does, at stage boundaries, which depend only on
    ``global_step``/``current_epoch``), between two optimizer steps.

    Args:
        strategy: ``trainer.strategy``.

    Returns:
        True when the model was wrapped again; False when the strategy does not run the model
        in ``DistributedDataParallel`` (single process, FSDP, DeepSpeed...), where nothing
        is done.

    Raises:
        PlanError: the strategy runs the model in DDP but has no ``configure_ddp`` to build a
            new wrapper.
    """
    old = getattr(strategy, "model", None)
    if not isinstance(old, nn.parallel.DistributedDataParallel):
        return False
    configure = getattr(strategy, "configure_ddp", None)
    if configure is None:
        raise PlanError(
            f"the strategy {type(strategy).__name__} runs the model in DistributedDataParallel but has no "
            "configure_ddp() to rebuild it after a stage changed which parameters train; use strategy=\"ddp\" "
            "or a plan without stages"
        )
    strategy.model = strategy.lightning_module
    configure()
    strategy.model.training = old.training
    return True


class _FreezePlanCallbackImpl:
    """Applies a freeze plan in a Lightning run (see the module docstring).

    Args:
        plan: a :class:`FreezePlan`, a plan file path, or the plan's dict.
        model: the model the plan is for, in the model-spec syntax of ``--model``
            (``"resnet18"``, ``"timm:NAME"``, ``"hf:FOLDER"``, ``"py:MODULE:FACTORY"``), a
            :class:`ModelSpec` or its dict; default: the plan's ``model`` block. Used by
            :meth:`build_model` and to find the submodule the plan applies to.
        num_classes: classes of the model's head (overrides the spec's).
        module: dotted path of the submodule of the LightningModule the plan was made for
            (``"model"``, ``"backbone"``); ``None`` finds it: the LightningModule itself, or
            the child whose fingerprint matches the plan's.
        optimizer_index: which of ``trainer.optimizers`` follows the stages.
        base_dir: folder for relative file references in the plan (A+B tensor files);
            default: the plan file's folder.
        strict: a fingerprint mismatch is an error.

    Attributes:
        applied: the :class:`AppliedPlan` once ``setup`` ran.
    """

    def __init__(
        self,
        plan: FreezePlan | str | os.PathLike[str] | Mapping[str, Any],
        *,
        model: str | ModelSpec | Mapping[str, Any] | None = None,
        num_classes: int | None = None,
        module: str | None = None,
        optimizer_index: int = 0,
        base_dir: str | os.PathLike[str] | None = None,
        strict: bool = False,
    ) -> None:
        plan, base_dir = load_plan(plan, base_dir)
        self.plan: FreezePlan = plan
        self.model_spec, self._spec_given = _model_spec(model, plan, num_classes)
        self._spec_fingerprint: str | None = None
        self.module = module
        self.optimizer_index = optimizer_index
        self.base_dir = base_dir
        self.strict = strict
        self.applied: AppliedPlan | None = None
        self._stage: tuple[bool, ...] = tuple(False for _ in plan.stages)
        self._restored_groups: list[list[dict[str, Any]]] | None = None
        self._resumed = False  # load_state_dict ran: verify's baseline is taken again at fit start
        self._trainer: Any = None
        self._pl_module: nn.Module | None = None

    # ---------------------------------------------------------- helpers
    def _target(self, pl_module: nn.Module) -> tuple[str, nn.Module]:
        if self.module is not None:
            try:
                return self.module, pl_module.get_submodule(self.module) if self.module else pl_module
            except AttributeError:
                raise PlanError(
                    f"the LightningModule has no submodule {self.module!r}; pass module= the attribute "
                    "that holds the model the plan was made for (e.g. \"model\")"
                ) from None
        fp = self.plan.model.get("fingerprint") or self._fingerprint_of_spec()
        candidates = [("", pl_module), *pl_module.named_children()]
        for name, child in candidates:
            if fp and ModelTree.from_model(child).fingerprint == fp:
                return name, child
        if not fp:
            for name, child in candidates:
                if not self.plan.unmatched(child):
                    return name, child
        return "", pl_module  # validation names what does not match

    def _fingerprint_of_spec(self) -> str | None:
        """Fingerprint of the model the spec names, built on the meta device (nothing allocated).

        A spec from the plan file that would run code (``py:``) is not built for this.
        """
        spec = self.model_spec
        if spec is None or (not self._spec_given and source_of(_source(spec)).runs_code):
            return None
        if self._spec_fingerprint is None:
            shape_only = ModelSpec(source=spec.source, name=spec.name, num_classes=spec.num_classes, origin=spec.origin)
            try:
                self._spec_fingerprint = ModelTree.from_model(shape_only.build(allow_download=False, meta=True)).fingerprint
            except ModelSourceError:
                return None  # then the selectors decide, as for a plan without a model
        return self._spec_fingerprint

    def _key(self, step: int, epoch: int) -> tuple[bool, ...]:
        return stage_key(self.plan, step, epoch)

    def _plan_for(self, key: tuple[bool, ...]) -> FreezePlan:
        """The plan in force with the stages marked in ``key`` (as :meth:`FreezePlan.at`)."""
        return plan_for(self.plan, key)

    def _optimizer(self, trainer: Any) -> torch.optim.Optimizer | None:
        opts = getattr(trainer, "optimizers", None) or []
        return opts[self.optimizer_index] if len(opts) > self.optimizer_index else None

    # ---------------------------------------------------------- public API
    def build_model(self, *, allow_download: bool = False, trust_pickle: bool = False) -> nn.Module:
        """Build the model the spec names (``model=`` or the plan's ``model`` block).

        Args:
            allow_download: whether missing pretrained weights may be downloaded.
            trust_pickle: whether pickled weight files may be read.

        Returns:
            The model (torchvision, timm, transformers or your factory's), with its head
            fitted to ``num_classes``.

        Raises:
            CodeFromFileError: the plan's ``model`` block names code (``py:``); code named by
                a file is never run: pass ``model="py:FILE:FUNC"`` to run it deliberately.
            ModelSourceError: no model is named, or it cannot be built (one line).
        """
        if self.model_spec is None:
            raise ModelSourceError(
                "no model named: pass model=\"timm:NAME\" (or hf:FOLDER, py:MODULE:FACTORY, resnet18) to "
                "FreezePlanCallback, or save the plan with its model block (workbench export --to plan.json)"
            )
        return self.model_spec.build(allow_download=allow_download, trust_pickle=trust_pickle)

    def param_groups(
        self, lr: float, weight_decay: float = 0.0, no_decay: str | None = None, **extra: Any
    ) -> list[dict[str, Any]]:
        """Param groups for ``configure_optimizers``: trainable parameters only, by ``lr_scale``
        and weight decay.

        Args:
            lr: base learning rate.
            weight_decay: weight decay of the parameters no ``weight_decay`` rule reaches.
            no_decay: ``"auto"``: no weight decay for biases, 1-D parameters and the model's
                ``no_weight_decay()`` names.
            **extra: other per-group options.

        Returns:
            Groups as :meth:`AppliedPlan.param_groups` makes them.

        Raises:
            RuntimeError: called before the callback's ``setup`` (outside ``trainer.fit``).
        """
        if self.applied is None:
            raise RuntimeError(
                "the freeze plan is applied in the callback's setup(); call param_groups() from "
                "configure_optimizers(), which Lightning calls after setup"
            )
        return self.applied.param_groups(lr, weight_decay, no_decay=no_decay, **extra)

    def apply(self, pl_module: nn.Module) -> AppliedPlan:
        """Apply the plan (at step 0) to the LightningModule or its ``module`` submodule.

        Args:
            pl_module: the LightningModule.

        Returns:
            The applied plan (also in :attr:`applied`).

        Raises:
            PlanError: the plan does not fit the model.
        """
        if self.applied is None:
            self.module, target = self._target(pl_module)
            self._stage = self._key(-1, -1)
            self.applied = apply_plan(target, self._plan_for(self._stage), strict=self.strict, base_dir=self.base_dir)
        return self.applied

    def remove(self, merge: bool = True) -> None:
        """Take the plan off the model (see :meth:`AppliedPlan.remove`)."""
        if self.applied is not None:
            self.applied.remove(merge=merge)
            self.applied = None

    # ---------------------------------------------------------- Lightning hooks
    def setup(self, trainer: Any, pl_module: nn.Module, stage: str) -> None:
        """Apply the plan before ``configure_optimizers``."""
        self._trainer = trainer
        self._pl_module = pl_module
        self.apply(pl_module)

    def on_fit_start(self, trainer: Any, pl_module: nn.Module) -> None:
        """Attach the plan to each optimizer (fused A+B weight decay); on resume, give the optimizer
        the group layout of the checkpoint before its state loads."""
        if self.applied is not None:
            for opt in trainer.optimizers:
                self.applied.attach_optimizer(opt)
        if self._resumed and self.applied is not None:
            self.applied.rebaseline()  # Lightning loaded the checkpoint's weights after setup applied the plan
        self._resumed = False
        if self._restored_groups is None:
            return
        named = dict(pl_module.named_parameters())
        for opt, groups in zip(trainer.optimizers, self._restored_groups):
            opt.param_groups = groups_from_layout(groups, named, self._local)
            opt.state.clear()
        self._restored_groups = None

    def on_train_batch_start(self, trainer: Any, pl_module: nn.Module, batch: Any, batch_idx: int) -> None:
        """Bring a stage into force when ``global_step`` / ``current_epoch`` reaches it.

        Updates the model and the optimizer's groups; when the set of trainable parameters
        changed and the strategy runs DDP, rebuilds the DDP wrapper (:func:`rewrap_ddp`).
        """
        if self.applied is None or not self.plan.stages:
            return
        key = self._key(trainer.global_step, trainer.current_epoch)
        if key == self._stage:
            return
        trainable = trainable_ids(pl_module)
        check_stage(self.applied, self.plan, self._stage, key)
        self.applied.update(self._plan_for(key), strict=self.strict)
        self._stage = key
        opt = self._optimizer(trainer)
        if opt is not None:
            sync_param_groups(opt, self.applied)
        if trainable_ids(pl_module) != trainable:
            rewrap_ddp(getattr(trainer, "strategy", None))

    def _local(self, full: str) -> str:
        prefix = f"{self.module}." if self.module else ""
        return full[len(prefix):] if prefix and full.startswith(prefix) else full

    def state_dict(self) -> dict[str, Any]:
        """The plan, the stage in force, the step and each optimizer's group layout (parameter names)."""
        trainer = self._trainer
        opts = list(getattr(trainer, "optimizers", None) or [])
        return {
            "plan": self.plan.to_dict(),
            "module": self.module,
            "stage": list(self._stage),
            "step": int(getattr(trainer, "global_step", 0) or 0),
            "epoch": int(getattr(trainer, "current_epoch", 0) or 0),
            "optimizers": [self._layout(o) for o in opts],
        }

    def _layout(self, optimizer: torch.optim.Optimizer) -> list[dict[str, Any]]:
        names = {id(p): n for n, p in self._pl_module.named_parameters()} if self._pl_module is not None else {}
        return optimizer_layout(optimizer, names)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """On resume: put the model in the stage of the checkpoint before the optimizer is built."""
        check_same_plan(state_dict["plan"], self.plan)
        step, epoch = int(state_dict.get("step", 0)), int(state_dict.get("epoch", 0))
        saved_stage = state_dict.get("stage")
        key = tuple(bool(x) for x in saved_stage) if saved_stage is not None else self._key(step, epoch)
        if self.applied is not None and key != self._stage:
            self.applied.update(self._plan_for(key), strict=self.strict)
        self._stage = key
        self._restored_groups = state_dict.get("optimizers") or None
        self._resumed = True


def _source(spec: ModelSpec) -> str:
    return spec.architecture_source


def _model_spec(
    model: str | ModelSpec | Mapping[str, Any] | None, plan: FreezePlan, num_classes: int | None
) -> tuple[ModelSpec | None, bool]:
    """The callback's model spec and whether it was given (not read from the plan).

    Raises:
        ModelSourceError: a given spec is malformed.
    """
    given = model is not None
    if isinstance(model, ModelSpec):
        spec: ModelSpec | None = dataclasses.replace(model)  # keeps its origin
    elif isinstance(model, str):
        spec = ModelSpec(name=model)  # "timm:NAME" and the other prefixes move to their source
    elif isinstance(model, Mapping):
        spec = ModelSpec.from_dict(model, origin=None)  # written in the Python call
    elif plan.model.get("name") or plan.model.get("checkpoint"):
        try:  # a py: model named by the plan is refused when built (check_code_origin)
            spec = ModelSpec.from_dict(plan.model, origin="the plan's model block")
        except ModelSourceError:
            spec = None  # a plan's model block that names nothing buildable: selectors decide
    else:
        spec = None
    if spec is not None and num_classes is not None:
        spec.num_classes = num_classes
        spec.validate()
    return spec, given


def _callback_base() -> type:
    try:
        from lightning.pytorch import Callback
    except ImportError:
        try:
            from pytorch_lightning import Callback  # type: ignore[assignment]
        except ImportError:
            raise LightningMissingError(
                "FreezePlanCallback needs PyTorch Lightning; install it with `pip install lightning`"
            ) from None
    return Callback


__getattr__ = lazy_callback(_FreezePlanCallbackImpl, _callback_base, __name__)
