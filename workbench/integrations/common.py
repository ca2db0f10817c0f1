"""What the training-framework callbacks share: the plan in force at a step, the optimizer's
groups kept in step with it, and the group layout saved in a checkpoint and restored on resume.

The Lightning callback (:mod:`workbench.integrations.lightning`) and the Hugging Face
``Trainer`` callback (:mod:`workbench.integrations.transformers`) differ only in how they
reach the model, the optimizer and the checkpoint; the rules below are the same for both:

- a stage is in force from its ``at_step`` (optimizer steps done) or ``at_epoch`` on; the plan
  in force is the base rules followed by the rules of every stage in force
  (:func:`stage_key`, :func:`plan_for`);
- when the plan changes, :func:`sync_param_groups` moves parameters between the optimizer's
  groups by identity, keeping the state of those that stay and never deleting a group (so a
  learning-rate scheduler's per-group lists keep their indices);
- a checkpoint stores the layout of the groups by parameter name (:func:`optimizer_layout`);
  on resume :func:`groups_from_layout` rebuilds the same groups over the live parameters so
  that the saved optimizer state fits them;
- when a plan change alters which parameters train under ``DistributedDataParallel``, the
  wrapper is rebuilt in place (:func:`rebuild_ddp`), and a scheduler learns about groups added
  for newly trainable parameters (:func:`extend_scheduler`).
"""

from __future__ import annotations

import copy
import functools
import inspect
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from workbench.core.freezing.apply import AppliedPlan
from workbench.core.plan.keys import SETTING_KEYS
from workbench.core.plan.rules import FreezePlan, PlanError
from workbench.core.training.optim import sync_optimizer

__all__ = [
    "GROUP_SKIP",
    "check_same_plan",
    "extend_scheduler",
    "groups_from_layout",
    "load_plan",
    "optimizer_layout",
    "plan_for",
    "rebuild_ddp",
    "stage_key",
    "sync_param_groups",
    "trainable_ids",
]

GROUP_SKIP = ("params", "param_names")


def load_plan(
    plan: FreezePlan | str | os.PathLike[str] | Mapping[str, Any], base_dir: str | os.PathLike[str] | None = None
) -> tuple[FreezePlan, str | os.PathLike[str] | None]:
    """A plan given as a :class:`FreezePlan`, a file path or its dict, and the folder its relative
    file references are read from.

    Args:
        plan: the plan.
        base_dir: folder for relative file references; default: the plan file's folder (None
            for a plan given as an object or a dict).

    Returns:
        ``(plan, base_dir)``.

    Raises:
        PlanError: the file or the dict is not a valid plan.
    """
    if isinstance(plan, (str, os.PathLike)):
        base_dir = base_dir or Path(plan).resolve().parent
        plan = FreezePlan.load(plan)
    elif isinstance(plan, Mapping):
        plan = FreezePlan.from_dict(dict(plan))
    return plan, base_dir


def stage_key(plan: FreezePlan, step: int, epoch: int) -> tuple[bool, ...]:
    """Which of the plan's stages are in force at ``step`` (optimizer steps done) / ``epoch``."""
    return tuple(st.reached(step, epoch) for st in plan.stages)


def check_stage(applied: AppliedPlan, plan: FreezePlan, before: tuple[bool, ...], key: tuple[bool, ...]) -> None:
    """Refuse a stage whose plan leaves nothing trainable, before it touches the model.

    The message is the line ``workbench train`` prints when it refuses the same stage.

    Args:
        applied: the applied plan.
        plan: the plan with its stages.
        before: the stages in force until now (:func:`stage_key`).
        key: the stages in force from now.

    Raises:
        PlanError: the plan in force from now leaves nothing trainable.
    """
    from workbench.core.plan.readiness import NOTHING_TRAINABLE, check_plan

    if check_plan(plan_for(plan, key), applied.tree).trainable is not False:
        return
    new = [i for i, (was, now) in enumerate(zip(before, key, strict=True)) if now and not was]
    label = ", ".join(f"stage {i}" + (f" '{plan.stages[i].label}'" if plan.stages[i].label else "") for i in new)
    raise PlanError(f"{label or 'stage change'} refused: {NOTHING_TRAINABLE}")


def plan_for(plan: FreezePlan, key: tuple[bool, ...]) -> FreezePlan:
    """The plan in force with the stages marked in ``key``: the base rules, then each stage's.

    Args:
        plan: the plan with its stages.
        key: one flag per stage, as :func:`stage_key` gives.

    Returns:
        A plan without stages.
    """
    rules = [copy.deepcopy(r) for r in plan.rules]
    for st, on in zip(plan.stages, key):
        if on:
            rules.extend(copy.deepcopy(r) for r in st.rules)
    return FreezePlan(
        rules=rules, model=dict(plan.model), description=plan.description, lr_decay=plan.lr_decay,
        unselected=plan.unselected,
    )


def check_same_plan(saved: Mapping[str, Any], plan: FreezePlan) -> None:
    """Refuse to resume a checkpoint made with another plan.

    Args:
        saved: the plan's dict as the checkpoint stored it.
        plan: the callback's plan.

    Raises:
        PlanError: the plans differ.
    """
    if FreezePlan.from_dict(dict(saved)).to_dict() != plan.to_dict():
        raise PlanError(
            "the checkpoint was trained with a different freeze plan than this callback's; resume "
            "with the same plan (or start a new run)"
        )


def _lr_base(optimizer: torch.optim.Optimizer) -> float:
    for g in optimizer.param_groups:
        if g.get("lr_scale"):
            return float(g["lr"]) / float(g["lr_scale"])
    return float(optimizer.param_groups[0]["lr"])


def sync_param_groups(
    optimizer: torch.optim.Optimizer,
    applied: AppliedPlan,
    *,
    base_lr: float | None = None,
    groups: list[dict[str, Any]] | None = None,
) -> dict[str, list[str]]:
    """Make an optimizer hold exactly the trainable parameters of an applied plan.

    A thin use of :func:`workbench.core.training.optim.sync_optimizer`: parameters that are no longer
    trainable leave their groups (their state is dropped); parameters whose ``lr_scale``
    changed move to the matching group; parameters that became trainable join the group with
    their settings, or a new group copying the other hyperparameters (weight decay, betas...)
    of the first group. Parameters that stay keep their identity and their optimizer state.
    Groups are never deleted, so learning-rate schedulers keep their indices.

    Args:
        optimizer: the optimizer.
        applied: the applied plan (after :meth:`AppliedPlan.update`).
        base_lr: learning rate for ``lr_scale`` 1; default: derived from a group that has an
            ``lr_scale`` (its current lr, so a scheduler's decay carries over), else the first
            group's lr.
        groups: the wanted groups when the caller makes them (its own weight-decay rules);
            default: ``applied.param_groups(base_lr, weight_decay of the first group, ...)``.

    Returns:
        ``{"added": [...], "removed": [...], "moved": [...]}`` parameter names.
    """
    base = base_lr if base_lr is not None else _lr_base(optimizer)
    if groups is None:
        skip = (*GROUP_SKIP, "lr", "initial_lr", *(k.name for k in SETTING_KEYS if k.group))
        settings = {k: v for k, v in optimizer.param_groups[0].items() if k not in skip}
        weight_decay = optimizer.param_groups[0].get("weight_decay", 0.0)
        groups = applied.param_groups(base, weight_decay, **settings)
    names = {id(p): n for n, p in applied.model.named_parameters()}
    scale_before = {id(p): g.get("lr_scale") for g in optimizer.param_groups for p in g["params"]}
    sync_optimizer(optimizer, groups, keep_empty_groups=True)
    scale_after = {id(p): g.get("lr_scale") for g in optimizer.param_groups for p in g["params"]}
    return {
        "added": [names[i] for i in scale_after if i not in scale_before],
        "removed": [names.get(i, "") for i in scale_before if i not in scale_after],
        "moved": [names[i] for i in scale_after if i in scale_before and scale_before[i] != scale_after[i]],
    }


def trainable_ids(module: nn.Module) -> frozenset[int]:
    """Identities of the parameters of ``module`` that require grad."""
    return frozenset(id(p) for p in module.parameters() if p.requires_grad)


def optimizer_layout(optimizer: torch.optim.Optimizer, names: Mapping[int, str]) -> list[dict[str, Any]]:
    """The optimizer's groups as plain data: settings and parameter names (no tensors).

    Args:
        optimizer: the optimizer.
        names: ``{id(param): name}`` of the model the optimizer trains.

    Returns:
        One dict per group: its JSON-friendly settings, ``param_names`` and ``has_param_names``
        (whether the group itself carried ``param_names``).
    """
    out = []
    for g in optimizer.param_groups:
        entry = {
            k: (list(v) if isinstance(v, tuple) else v)
            for k, v in g.items()
            if k not in GROUP_SKIP and isinstance(v, (int, float, str, bool, type(None), tuple, list))
        }
        entry["param_names"] = [names.get(id(p), "") for p in g["params"]]
        entry["has_param_names"] = "param_names" in g
        out.append(entry)
    return out


def groups_from_layout(
    layout: list[dict[str, Any]],
    named: Mapping[str, nn.Parameter],
    local: Callable[[str], str] = lambda n: n,
) -> list[dict[str, Any]]:
    """Param groups over the live parameters, in a saved layout (see :func:`optimizer_layout`).

    Args:
        layout: the saved layout.
        named: ``{name: parameter}`` of the live model.
        local: maps a saved name to the name a group's ``param_names`` should carry.

    Returns:
        Groups for ``optimizer.param_groups`` (or an optimizer's constructor).

    Raises:
        PlanError: the layout names parameters the model lacks.
    """
    new = []
    for g in layout:
        missing = [n for n in g["param_names"] if n not in named]
        if missing:
            raise PlanError(
                f"the checkpoint's optimizer has parameters the model lacks ({', '.join(missing[:3])}); "
                "resume with the same model and plan"
            )
        group = {k: (tuple(v) if k == "betas" and isinstance(v, list) else v) for k, v in g.items() if k != "param_names"}
        group["params"] = [named[n] for n in g["param_names"]]
        if g.get("has_param_names"):
            group["param_names"] = [local(n) for n in g["param_names"]]
        group.pop("has_param_names", None)
        new.append(group)
    return new


def extend_scheduler(scheduler: Any, optimizer: torch.optim.Optimizer, first_new: int) -> None:
    """Let a learning-rate scheduler drive the param groups added from index ``first_new`` on.

    A new group gets ``initial_lr = base * lr_scale`` (``base``: the un-scheduled base rate of
    the groups already there) and the current ``lr = initial_lr * factor`` where ``factor``
    is where the schedule stands now, so it continues the same schedule. The scheduler's
    per-group lists (``base_lrs``, ``lr_lambdas``, ``min_lrs``, ``_last_lr``) grow by one
    entry per new group, copied from its first group's.

    Args:
        scheduler: the scheduler (``LambdaLR`` and friends; an accelerate wrapper is unwrapped),
            or None.
        optimizer: the optimizer whose groups grew.
        first_new: index of the first new group.
    """
    groups = optimizer.param_groups
    ref = next((g for g in groups[:first_new] if g.get("initial_lr") and g.get("lr_scale")), None)
    for g in groups[first_new:]:
        scale = float(g.get("lr_scale", 1.0))
        if ref is not None:
            base0 = float(ref["initial_lr"]) / float(ref["lr_scale"])
            factor = float(ref["lr"]) / float(ref["initial_lr"])
            g["initial_lr"] = base0 * scale
            g["lr"] = g["initial_lr"] * factor
        else:
            g.setdefault("initial_lr", g["lr"])
    sched = getattr(scheduler, "scheduler", scheduler)  # accelerate's AcceleratedScheduler
    if sched is None:
        return
    n = len(groups)
    for attr, value in (
        ("base_lrs", lambda g: g["initial_lr"]),
        ("_last_lr", lambda g: g["lr"]),
    ):
        lst = getattr(sched, attr, None)
        if isinstance(lst, list) and len(lst) == first_new:
            lst.extend(value(g) for g in groups[first_new:])
    for attr in ("lr_lambdas", "min_lrs"):
        lst = getattr(sched, attr, None)
        if isinstance(lst, list) and lst and len(lst) == first_new:
            lst.extend(lst[0] for _ in range(n - first_new))


def rebuild_ddp(ddp: Any) -> bool:
    """Rebuild a ``DistributedDataParallel`` wrapper in place for the parameters that train now.

    DDP registers the parameters that require grad when it is built and all-reduces only their
    gradients: after a stage unfreezes parameters their gradients would stay local to each rank
    (the replicas drift apart), after one that freezes parameters the reducer would wait for
    gradients that never come. The Trainer's loop holds the wrapper object itself, so it is
    re-initialised in place, with the same options (device ids, process group, bucket size,
    ``find_unused_parameters``, ``gradient_as_bucket_view``, ``static_graph``); a registered
    communication hook is not carried over. Every rank must call it at the same step, between
    two optimizer steps (the callback does, at stage boundaries, which depend only on
    ``global_step`` and the epoch).

    Args:
        ddp: the Trainer's ``model_wrapped``.

    Returns:
        True when a DDP wrapper was rebuilt; False when ``ddp`` is not one (single process,
        FSDP, DeepSpeed), where nothing is done.
    """
    if not isinstance(ddp, nn.parallel.DistributedDataParallel):
        return False
    kwargs = {
        "device_ids": ddp.device_ids,
        "output_device": ddp.output_device,
        "dim": ddp.dim,
        "process_group": ddp.process_group,
        "bucket_cap_mb": ddp.bucket_bytes_cap / (1024 * 1024),
        "find_unused_parameters": ddp.find_unused_parameters,
        "gradient_as_bucket_view": ddp.gradient_as_bucket_view,
        "static_graph": bool(getattr(ddp, "static_graph", False)),
    }
    if "forward_sync_buffers" in inspect.signature(nn.parallel.DistributedDataParallel.__init__).parameters:
        kwargs["forward_sync_buffers"] = bool(getattr(ddp, "forward_sync_buffers", True))
    else:  # torch before forward_sync_buffers
        kwargs["broadcast_buffers"] = ddp.broadcast_buffers
    module, training = ddp.module, ddp.training
    nn.parallel.DistributedDataParallel.__init__(ddp, module, **kwargs)
    ddp.training = training
    return True


@functools.cache
def callback_class(impl: type, base: Callable[[], type], module: str) -> type:
    """A framework callback class made on first use: ``impl`` mixed with the framework's base.

    The integrations import without their framework; the class is built (and the framework
    imported) only when ``FreezePlanCallback`` is first asked for, once per implementation.

    Args:
        impl: the callback's implementation (framework-free methods).
        base: returns the framework's callback base class (raises a one-line error without it).
        module: the module the class belongs to (``__module__``).

    Returns:
        ``FreezePlanCallback``, a subclass of ``impl`` and of the framework's base.
    """
    return type("FreezePlanCallback", (impl, base()), {"__doc__": impl.__doc__, "__module__": module})


def lazy_callback(impl: type, base: Callable[[], type], module: str) -> Callable[[str], Any]:
    """The module ``__getattr__`` of an integration: ``FreezePlanCallback`` made on first access.

    Args:
        impl / base / module: as for :func:`callback_class`.

    Returns:
        A function to assign to the module's ``__getattr__``.
    """

    def getattr_(name: str) -> Any:
        if name == "FreezePlanCallback":
            return callback_class(impl, base, module)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return getattr_
