"""A :class:`~workbench.core.plan.rules.FreezePlan` applied to a live model: the :class:`AppliedPlan` handle.

:func:`install_plan` (behind :func:`workbench.core.freezing.apply.apply_plan` and
:meth:`FreezePlan.apply`) returns an :class:`AppliedPlan`, a handle that

- sets ``requires_grad`` per parameter from the plan (``param:`` rules included), and warns
  when a rule asks to train a parameter tied to a frozen one (one tensor, one flag);
- keeps BatchNorm modules marked ``bn_eval``, and every module marked ``eval``, in eval mode
  even after ``model.train()`` (their ``train`` is overridden on the instance, so
  ``model.train()`` cannot undo it and no torch code is patched);
- installs extensions (A+B reparameterization, sub-tensor freezing) where the plan asks;
- gives optimizer param groups with only trainable parameters, grouped by ``lr_scale`` and
  weight decay, each parameter once (by identity);
- counts parameters and the memory of params, grads and optimizer state;
- re-applies a changed plan to the same model (:meth:`AppliedPlan.update`);
- proves after training that frozen tensors did not change (:meth:`AppliedPlan.verify`);
- puts the model back as it was (:meth:`AppliedPlan.remove`).
"""

from __future__ import annotations

import os
import warnings
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from workbench.core.errors import WorkbenchError
from workbench.core.freezing import checkpointing, partial, plan_registry
from workbench.core.freezing.counts import (
    Counts,
    count_parameters,
    no_decay_names,
    optimizer_state_factor,
    tied_parameters,
)
from workbench.core.freezing.eval_lock import eval_wanted, is_bn_eval_locked, is_eval_locked, lock_eval, unlock_eval
from workbench.core.freezing.plan_diff import PlanDiff
from workbench.core.freezing.reparam import decay, ops
from workbench.core.freezing.reparam import peft as peft_io
from workbench.core.freezing.reparam.base import DeltaHandle, tied_scope
from workbench.core.freezing.reparam.full import FullRankHandle
from workbench.core.freezing.reparam.low_rank import install_a_plus_b
from workbench.core.freezing.snapshot import GradSeen, Snapshot, VerifyReport, compare_in_force, model_tensors
from workbench.core.plan.checkpoint_fit import outermost_fitting
from workbench.core.plan.keys import SETTING_KEYS, Effective, group_order, group_values
from workbench.core.plan.problems import PlanError, PlanProblem, PlanWarning
from workbench.core.plan.readiness import NOTHING_TRAINABLE
from workbench.core.plan.spec_base import ExtensionSpec
from workbench.core.plan.specs import SPECS, check_extensions, rule_index_for
from workbench.core.plan.tree import ModelTree

if TYPE_CHECKING:  # pragma: no cover - typing only
    from workbench.core.plan.rules import FreezePlan

__all__ = [
    "AppliedPlan",
    "Counts",
    "Installed",
    "INSTALLERS",
    "Installer",
    "PlanDiff",
    "check_extensions",
    "count_parameters",
    "install_plan",
    "is_bn_eval_locked",
    "is_eval_locked",
    "no_decay_names",
    "optimizer_state_factor",
    "tied_parameters",
]

class Installed(Protocol):
    """What an extension (A+B, sub-tensor freezing) installed on one module.

    Attributes:
        path: dotted path of the module.
        spec: the spec it was installed from.
    """

    path: str

    @property
    def spec(self) -> ExtensionSpec | bool:
        """The typed spec of its key (ReparamSpec, PartialSpec), or True (checkpoint)."""
        ...

    def trainable(self) -> list[tuple[str, nn.Parameter]]:
        """Parameters (full dotted names) whose ``requires_grad`` follows the module's frozen flag."""
        ...

    def fixed(self) -> list[tuple[str, torch.Tensor]]:
        """Tensors (full dotted names) that never train and must stay bit-identical."""
        ...

    def acts_in(self) -> list[str]:
        """Dotted paths of the modules whose forward uses the :meth:`trainable` tensors.

        The frozen-prefix cache cuts before the first of them to run, so a technique whose
        tensors live in a module that is never called (a fused adapter read by a forward
        hook) still trains on every step. A handle without this method is treated as
        acting anywhere: the cache stays off (see :meth:`AppliedPlan.acting_sites`).
        """
        ...

    def remove(self, merge: bool = True) -> None:
        """Undo the installation. ``merge``: keep the trained values in plain parameters."""
        ...


@dataclass(frozen=True)
class Installer:
    """How the freezing layer installs one extension key on a live model.

    Attributes:
        key: the plan key (the ``key`` of a spec class in :data:`~workbench.core.plan.specs.SPECS`).
        install: ``install(model, path, spec, base_dir=...)`` returning an :class:`Installed`.
        adjust_param_groups: optional ``adjust(groups, handles, weight_decay=...)`` applied to
            :meth:`AppliedPlan.param_groups`.
        changes_tensors: installing replaces tensors of the module (False for checkpointing:
            a change of it is no re-installation in :class:`PlanDiff` and keeps verify's baseline).
        narrow: optional ``narrow(paths, tree)``: of the modules whose setting is on, those to
            install on.
    """

    key: str
    install: Callable[..., Installed]
    adjust_param_groups: Callable[..., list[dict[str, Any]]] | None = None
    changes_tensors: bool = True
    narrow: Callable[[list[str], ModelTree], list[str]] | None = None


_BY_KEY = {
    "partial": Installer("partial", partial.install),
    "reparam": Installer("reparam", install_a_plus_b, decay.adjust_param_groups),
}
#: Installers in the order of the spec registry (the order they are installed on a module),
#: then activation checkpointing (wraps whatever the others installed).
INSTALLERS: tuple[Installer, ...] = tuple(_BY_KEY[cls.key] for cls in SPECS) + (
    Installer("checkpoint", checkpointing.install, changes_tensors=False, narrow=outermost_fitting),
)


# ---------------------------------------------------------------- the handle
class AppliedPlan:
    """A plan applied to a model. Create with :func:`apply_plan` or :meth:`FreezePlan.apply`.

    Attributes:
        model: the model (modified in place).
        plan: the plan in force.
        tree: the model's tree (paths of the plain model).
    """

    def __init__(self, model: nn.Module, plan: FreezePlan, tree: ModelTree, base_dir: Path | None) -> None:
        self.model = model
        self.plan = plan
        self.tree = tree
        self.base_dir = base_dir
        self._effective: dict[str, Effective] = {}
        self._param_effective: dict[str, Effective] = {}  # canonical parameter name -> settings
        self._installed: dict[tuple[str, str], Installed] = {}  # (key, path) -> handle
        self._orig_requires_grad: dict[int, tuple[nn.Parameter, bool]] = {
            id(p): (p, p.requires_grad) for p in model.parameters()
        }
        self._orig_training: dict[str, bool] = {p: m.training for p, m in model.named_modules()}
        self._snapshot = Snapshot()
        self._optimizer_hooks: dict[int, tuple[weakref.ref[torch.optim.Optimizer], RemovableHandle]] = {}
        self._removed = False
        # a model built on the meta device has shapes but no values: nothing to snapshot
        self._meta = any(t.is_meta for t in (*model.parameters(), *model.buffers()))

    # ---------------------------------------------------------- internals
    def _owner(self, raw_name: str) -> str:
        return self.tree.owner_of(raw_name)

    def _fixed_ids(self) -> set[int]:
        return {id(t) for h in self._installed.values() for _, t in h.fixed()}

    def _wanted(self, installer: Installer, new: dict[str, Effective]) -> dict[str, Any]:
        want = {p: getattr(e, installer.key) for p, e in new.items() if getattr(e, installer.key)}
        if installer.narrow is not None:
            want = {p: want[p] for p in installer.narrow(list(want), self.tree)}
        return want

    def _install_extensions(
        self, new: dict[str, Effective], diff: PlanDiff | None, plan: FreezePlan | None = None
    ) -> None:
        for installer in INSTALLERS:
            key = installer.key
            want = self._wanted(installer, new)
            have = {p: h.spec for (k, p), h in self._installed.items() if k == key}
            # remove what changed or went away (reverse order of install: reparam before partial)
            for path in sorted(set(have) - set(want)) + sorted(p for p in want if p in have and have[p] != want[p]):
                self._installed.pop((key, path)).remove(merge=True)
                if diff is not None and installer.changes_tensors:
                    diff.reinstalled.append(path)
        with tied_scope(self.model):
            self._install_new(new, diff, plan)

    def _install_new(self, new: dict[str, Effective], diff: PlanDiff | None, plan: FreezePlan | None) -> None:
        for installer in INSTALLERS:
            key = installer.key
            want = self._wanted(installer, new)
            if not want:
                continue
            for path in sorted(want, key=lambda p: self.tree.nodes[p].order):
                if (key, path) in self._installed:
                    continue
                try:
                    handle = installer.install(self.model, path, want[path], base_dir=self.base_dir)
                except ValueError as e:  # name the rule that set the spec, and the module
                    idx = rule_index_for(plan or self.plan, key, want[path])
                    raise PlanError(PlanProblem(f"module {path or '(root)'!r}: {e}", idx, key)) from e
                self._installed[(key, path)] = handle
                if diff is not None and installer.changes_tensors and path not in diff.reinstalled:
                    diff.reinstalled.append(path)

    def _param_settings(self, raw_name: str, module_effective: dict[str, Effective] | None = None) -> Effective:
        """Settings of a parameter by its name in ``model.named_parameters()``."""
        hit = self._param_effective.get(self.tree.param_name(raw_name)) if module_effective is None else None
        return hit if hit is not None else (module_effective or self._effective)[self._owner(raw_name)]

    def _apply_flags(self, new: dict[str, Effective], new_params: dict[str, Effective]) -> None:
        fixed = self._fixed_ids()
        for name, p in self.model.named_parameters():
            if id(p) in fixed:
                p.requires_grad_(False)
                continue
            pe = new_params.get(self.tree.param_name(name)) or new[self._owner(name)]
            if pe.kept and id(p) in self._orig_requires_grad:  # "unselected": "keep"
                p.requires_grad_(self._orig_requires_grad[id(p)][1])
                continue
            p.requires_grad_(not pe.frozen)
        # parents before children: unlocking a parent first cannot undo a child's lock
        for path in sorted(self.tree.nodes, key=lambda q: self.tree.nodes[q].order):
            if new[path].kept:  # "unselected": "keep": its mode stays as the model has it
                continue
            want = eval_wanted(new[path], self.tree.nodes[path].is_bn)
            module = self.model.get_submodule(path)
            if want:
                if not is_eval_locked(module):
                    lock_eval(module)
            elif is_eval_locked(module):
                parent_training = self.model.training if not path else self._parent_training(path)
                unlock_eval(module, parent_training)
        self._effective = new
        self._param_effective = new_params
        self._warn_tied()

    def _warn_tied(self) -> None:
        """Warn where rules ask one tensor to train under one name and stay frozen under another."""
        for first, others in tied_parameters(self.model).items():
            for other in others:
                owner = self._owner(other)
                if self._effective[owner].frozen == self._param_settings(first).frozen:
                    continue
                trains = not self._param_settings(first).frozen
                warnings.warn(
                    PlanWarning(
                        f"{other} is tied to {first} (one tensor): the plan {'freezes' if trains else 'unfreezes'} "
                        f"{owner or 'the root'} but the tensor follows {first}, so it "
                        f"{'trains anyway' if trains else 'does not train'}; set 'frozen' the same for "
                        f"{first.rpartition('.')[0] or 'the root'} and {owner or 'the root'}"
                    ),
                    stacklevel=4,
                )

    def _parent_training(self, path: str) -> bool:
        parent = path.rpartition(".")[0]
        return (self.model.get_submodule(parent) if parent else self.model).training

    def _categories(self) -> dict[str, dict[str, torch.Tensor]]:
        fixed = {n: t for h in self._installed.values() for n, t in h.fixed()}
        fixed_ids = {id(t) for t in fixed.values()}
        frozen: dict[str, torch.Tensor] = {}
        trainable: dict[str, torch.Tensor] = {}
        for name, p in self.model.named_parameters():
            if id(p) in fixed_ids:
                continue
            (trainable if p.requires_grad else frozen)[name] = p
        bn: dict[str, torch.Tensor] = {}
        for path, node in self.tree.nodes.items():
            if node.is_bn and eval_wanted(self._effective[path], True):
                module = self.model.get_submodule(path)
                for bname, buf in module.named_buffers(recurse=False):
                    if buf is not None:
                        bn[f"{path}.{bname}" if path else bname] = buf
        return {"frozen": frozen, "fixed": fixed, "bn_stats": bn, "trainable": trainable}

    def _snap(self, *, fresh: bool) -> None:
        if self._meta:
            return
        cats = self._categories()
        s = self._snapshot
        if fresh:
            self._snapshot = s = Snapshot()
        for category, tensors in cats.items():
            # forget tensors that left the category; hash newcomers (keep the baseline of stayers)
            s.drop(category, [n for n in list(s.entries[category]) if n not in tensors])
            s.record(category, ((n, self._module_of(n, category), t) for n, t in tensors.items()), keep=True)
        s.record_places(self.model, keep=True)  # identity and place of newcomers; stayers keep theirs

    def _module_of(self, name: str, category: str) -> str:
        if category == "bn_stats":
            return name.rpartition(".")[0]
        return self._owner(name)

    def _check_alive(self) -> None:
        if self._removed:
            raise RuntimeError("this plan was removed from the model; apply the plan again")

    # ---------------------------------------------------------- public API
    @property
    def effective(self) -> dict[str, Effective]:
        """Settings in force per module path."""
        return dict(self._effective)

    def installed(self, key: str | None = None) -> dict[str, Installed]:
        """Extension handles by module path (``key``: ``"reparam"`` or ``"partial"``)."""
        return {p: h for (k, p), h in self._installed.items() if key is None or k == key}

    def named_trainable(self) -> list[tuple[str, nn.Parameter]]:
        """Trainable parameters with their names, each once, in model order."""
        return [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]

    def acting_sites(self) -> dict[str, list[str] | None]:
        """Where each trainable tensor acts: the modules whose forward uses it.

        A plain parameter acts in the module that holds it (each of them, for a tied one); a
        tensor an extension installed acts where its handle says (:meth:`Installed.acts_in`).

        Returns:
            ``{tensor name: [module paths]}`` for every trainable tensor (by its first name
            in ``model.named_parameters()``); None for the tensors of a handle that does not
            declare where they act (anywhere, as far as a caller can tell).
        """
        self._check_alive()
        held: dict[int, list[str] | None] = {}
        for h in self._installed.values():
            declare = getattr(h, "acts_in", None)
            sites = list(declare()) if callable(declare) else None
            for _, p in h.trainable():
                known = held.get(id(p), [])
                held[id(p)] = None if sites is None or known is None else known + sites
        out: dict[str, list[str] | None] = {}
        first: dict[int, str] = {}
        for name, p in self.model.named_parameters(remove_duplicate=False):
            if not p.requires_grad:
                continue
            key = first.setdefault(id(p), name)
            if id(p) in held:
                out[key] = held[id(p)]
                continue
            sites_now = out.setdefault(key, [])
            assert sites_now is not None
            sites_now.append(name.rpartition(".")[0])
        return out

    def trainable_parameters(self) -> list[nn.Parameter]:
        """Trainable parameters, each once, in model order."""
        return [p for _, p in self.named_trainable()]

    def _param_values(self, raw_name: str, names: list[str]) -> tuple[Any, ...]:
        settings = self._param_settings(raw_name)
        return tuple(getattr(settings, name) for name in names)

    def lr_scale_of(self, param_name: str) -> float:
        """lr_scale in force for a parameter (by its name in ``model.named_parameters()``)."""
        return self._param_settings(param_name).lr_scale

    def weight_decay_of(self, param_name: str, default: float = 0.0) -> float:
        """Weight decay a rule sets for a parameter, else ``default``.

        Args:
            param_name: a name from ``model.named_parameters()``.
            default: the optimizer's weight decay.

        Returns:
            The absolute weight decay.
        """
        wd = self._param_settings(param_name).weight_decay
        return default if wd is None else wd

    def param_groups(
        self, lr: float, weight_decay: float = 0.0, no_decay: str | None = None, **extra: Any
    ) -> list[dict[str, Any]]:
        """Optimizer param groups with only trainable parameters, grouped by the keys of the key
        table whose row says ``group`` (``lr_scale`` and weight decay).

        Each parameter appears exactly once (by identity). Every group carries ``lr``
        (= ``lr * lr_scale``), ``param_names`` and the value of each ``group`` key under its
        name (``lr_scale``, ``weight_decay``); a key whose value is None is left out of the
        group, so that the optimizer's own setting of that name applies.

        Args:
            lr: base learning rate.
            weight_decay: weight decay of the parameters no ``weight_decay`` rule reaches.
            no_decay: ``"auto"``: weight decay 0 for biases, 1-D parameters and the model's
                ``no_weight_decay()`` names (see :func:`no_decay_names`), whatever the rules
                say; None: rules and ``weight_decay`` only.
            **extra: other per-group options (``momentum``, ``betas``...); a ``group`` key's
                value set by the plan wins over the option of the same name.

        Returns:
            A list for ``torch.optim.X(groups)``.

        Raises:
            PlanError: nothing is trainable (the optimizer would have no parameters).
            ValueError: ``no_decay`` is not None or ``"auto"``.
        """
        self._check_alive()
        if no_decay not in (None, "auto"):
            raise ValueError(f"no_decay must be None or \"auto\", got {no_decay!r}")
        skip = no_decay_names(self.model) if no_decay == "auto" else set()
        groups: dict[tuple[Any, ...], dict[str, Any]] = {}
        seen: set[int] = set()
        for name, p in self.model.named_parameters():
            if not p.requires_grad or id(p) in seen:
                continue
            seen.add(id(p))
            values = group_values(self._param_settings(name), weight_decay=weight_decay, no_decay=name in skip)
            sig = tuple(values.values())
            g = groups.get(sig)
            if g is None:
                present = {k: v for k, v in values.items() if v is not None}  # None: the optimizer's
                g = groups[sig] = {
                    "params": [],
                    "param_names": [],
                    "lr": lr * values.get("lr_scale", 1.0),
                    **present,
                    **{k: v for k, v in extra.items() if k not in present},
                }
            g["params"].append(p)
            g["param_names"].append(name)
        if not groups:
            raise PlanError(NOTHING_TRAINABLE)
        out = [groups[k] for k in sorted(groups, key=group_order)]
        for installer in INSTALLERS:
            handles = self.installed(installer.key)
            if handles and installer.adjust_param_groups is not None:
                out = installer.adjust_param_groups(out, handles, weight_decay=weight_decay)
        return out

    def counts(self, optimizer: str | torch.optim.Optimizer = "adamw") -> Counts:
        """Parameter counts and memory for params, grads and optimizer state.

        Args:
            optimizer: ``"sgd"`` (no state), ``"sgd_momentum"`` (1×), ``"adam"``/``"adamw"`` (2×),
                or an optimizer instance.

        Returns:
            The counts.
        """
        # frozen slices of partial freezing are parameters (counted as frozen); A of A+B is extra
        fixed = [t for h in self._installed.values() for _, t in h.fixed() if not isinstance(t, nn.Parameter)]
        return count_parameters(self.model.named_parameters(), optimizer, fixed)

    def update(self, plan: FreezePlan, *, strict: bool = False) -> PlanDiff:
        """Re-apply a changed plan to the same model.

        Parameters that stay trainable keep their identity (an optimizer can keep their
        state); extensions are re-installed only where their spec changed.

        Args:
            plan: the new plan.
            strict: fingerprint mismatch is an error.

        Returns:
            What changed.

        Raises:
            PlanError: the new plan does not fit the model; nothing was changed.
        """
        self._check_alive()
        plan.validate(self.tree, strict=strict)
        new = plan.resolve(self.tree)
        value_keys = [k for k in SETTING_KEYS if k.diff == "value"]
        param_keys = [k.name for k in value_keys if k.per_param]
        before = {
            n: (id(p), p.requires_grad, self._param_values(n, param_keys)) for n, p in self.model.named_parameters()
        }
        old = self._effective
        diff = PlanDiff(tree=self.tree)
        self._install_extensions(new, diff, plan)
        self._apply_flags(new, plan.resolve_params(self.tree))
        for n, p in self.model.named_parameters():
            b = before.get(n)
            if b is None or b[0] != id(p):
                if p.requires_grad:
                    diff.newly_trainable.append(n)
                continue
            if b[1] and not p.requires_grad:
                diff.newly_frozen.append(n)
            elif not b[1] and p.requires_grad:
                diff.newly_trainable.append(n)
            elif p.requires_grad:
                now = self._param_values(n, param_keys)
                for key, was, value in zip(param_keys, b[2], now):
                    if was != value:
                        diff.changed.setdefault(key, []).append(n)
        for k in value_keys:
            if k.per_param:
                continue
            paths = [p for p, e in old.items() if not k.batchnorm_only or self.tree.nodes[p].is_bn]
            moved = [p for p in paths if getattr(old[p], k.name) != getattr(new[p], k.name)]
            if moved:
                diff.changed[k.name] = moved
        self.plan = plan
        for bucket in self._snapshot.entries.values():  # reinstalled modules: new tensors, new baseline
            for name in [n for n, (m, _) in bucket.items() if m in diff.reinstalled]:
                del bucket[name]
                self._snapshot.forget_places([name])
        self._snap(fresh=False)
        return diff

    def rebaseline(self) -> None:
        """Take :meth:`verify`'s baseline again from the weights the model holds now.

        For a checkpoint loaded into a model whose plan is already applied (a resumed run):
        the frozen tensors verify compares against are then the checkpoint's, not the values
        they had when the plan was applied. Lightning's callback and the Trainer callback call
        it on resume; a script that loads a checkpoint after :func:`apply_plan` calls it once.
        """
        self._check_alive()
        self._snap(fresh=True)

    def verify(self, steps: int | None = None, grads: GradSeen | None = None) -> VerifyReport:
        """Prove the plan held: frozen tensors bit-identical, eval-BN stats unchanged.

        Trainable tensors that did not change are reported as warnings, except BatchNorm
        affine parameters and, when ``steps`` says so, after too few steps to tell (see
        :func:`workbench.core.freezing.snapshot.compare`). With ``grads`` (what a
        :class:`~workbench.core.freezing.snapshot.GradWatch` saw over the run), each trainable
        tensor is also checked for receiving a gradient to the end, and a long run's findings
        are errors. Tensors are checked in the categories of the snapshot taken at
        apply/update time; a ``requires_grad`` changed since then is a ``plan_not_in_force`` error.

        Args:
            steps: optimizer steps since the plan was applied or last updated, when known.
            grads: the run's gradients as a ``GradWatch`` saw them (its steps are the steps).

        Returns:
            The report (``report.ok`` is False on any frozen change).

        Raises:
            WorkbenchError: The model is on the meta device (no values to compare).
        """
        self._check_alive()
        if self._meta:
            raise WorkbenchError(
                "verify needs real tensors, and this model was built on the meta device (structure only); "
                "build it with its weights (without --meta) to verify the plan"
            )
        quiet = {
            f"{path}.{short}" if path else short
            for path, node in self.tree.nodes.items() if node.is_bn for short in node.param_names
        }
        fixed = {n: t for h in self._installed.values() for n, t in h.fixed()}
        # the plan's snapshot, not requires_grad as it is now
        return compare_in_force(
            self._snapshot, model_tensors(self.model, fixed), quiet=quiet, steps=steps, model=self.model, grads=grads
        )

    def remove(self, merge: bool = True) -> None:
        """Put the model back as it was before the plan.

        Args:
            merge: for A+B and sub-tensor freezing, keep the trained values (W = A + B baked
                into a plain parameter); False restores the weights as they were at apply time.
        """
        if self._removed:
            return
        for key in reversed([i.key for i in INSTALLERS]):
            for (k, path) in [kp for kp in self._installed if kp[0] == key]:
                self._installed.pop((k, path)).remove(merge=merge)
        for path in self.tree.nodes:
            module = self.model.get_submodule(path)
            if is_eval_locked(module):
                unlock_eval(module, self._orig_training.get(path, True))
        for p, rg in self._orig_requires_grad.values():
            p.requires_grad_(rg)
        for path, module in self.model.named_modules():
            if path in self._orig_training:
                module.training = self._orig_training[path]
        for _, hook in self._optimizer_hooks.values():
            hook.remove()
        self._optimizer_hooks.clear()
        self._removed = True
        plan_registry.unregister(self.model, self)

    # ---------------------------------------------------------- optimizers
    def attach_optimizer(self, optimizer: torch.optim.Optimizer) -> RemovableHandle:
        """Attach what the plan needs at each step of ``optimizer`` (idempotent per optimizer).

        Today that is the weight decay of fused-mode full-rank A+B (``B = W - A`` decays, so
        ``W`` is pulled toward ``A``): a step pre-hook on this optimizer only, reading the A+B
        in force at each step, so :meth:`update` needs no re-attach. The engine and the
        Lightning callback call it; a script that builds its own optimizer from
        :meth:`param_groups` calls it once. :meth:`remove` detaches it.

        Args:
            optimizer: an optimizer built from :meth:`param_groups`.

        Returns:
            The hook's handle (``.remove()`` detaches it).
        """
        self._check_alive()
        known = self._optimizer_hooks.get(id(optimizer))
        if known is not None and known[0]() is optimizer:
            return known[1]
        me = weakref.ref(self)

        def anchors() -> list[tuple[nn.Parameter, torch.Tensor]]:
            applied = me()
            if applied is None or applied._removed:
                return []
            return [pair for h in applied._reparam_handles() if isinstance(h, FullRankHandle) for pair in h.fused_anchors()]

        handle = decay.attach(optimizer, anchors)
        self._optimizer_hooks[id(optimizer)] = (weakref.ref(optimizer), handle)
        return handle

    # ---------------------------------------------------------- A+B operations
    def _reparam_handles(self) -> list[DeltaHandle]:
        return [h for h in self.installed("reparam").values() if isinstance(h, DeltaHandle)]

    def _live_reparam(self) -> list[DeltaHandle]:
        self._check_alive()
        return self._reparam_handles()

    def merge(self) -> PlanDiff:
        """Bake W = A + B into plain parameters and remove every A+B.

        The plan in force loses its ``reparam`` keys (so the GUI, the counts and
        :meth:`verify` see a plain model); parameter objects keep their identity, so an
        optimizer keeps working (its state for B now applies to W; rebuild param groups if you
        use weight decay, which now acts on W).

        Returns:
            What changed (B's parameter names become the plain ones).
        """
        self._check_alive()
        plan = self.plan.copy()
        for r in plan.rules:
            r.reparam = None
            r.reparam_off = False
        plan.rules = [r for r in plan.rules if not r.empty or r.comment]
        return self.update(plan)

    def reset_b(self, paths: Iterable[str] | None = None) -> None:
        """Set B back to its initial value (zeros by default); optimizer state is kept.

        Args:
            paths: module paths (every A+B in the subtree), parameter paths, or None for all.

        Raises:
            ReparamError: a path has no A+B in it, or a ``b_init`` file is no longer usable.
        """
        ops.reset(ops.select(self._live_reparam(), paths))

    def export_deltas(self, path: str | os.PathLike[str]) -> None:
        """Write every B (keyed by parameter path) to a safetensors file (see :func:`ops.export_deltas`)."""
        ops.export_deltas(self._live_reparam(), path)

    def load_deltas(self, path: str | os.PathLike[str], *, strict: bool = True) -> None:
        """Load B tensors from a safetensors file written by :meth:`export_deltas`.

        Args:
            path: the file.
            strict: the file must hold exactly the plan's B tensors.

        Raises:
            ReparamError: see :func:`workbench.core.freezing.reparam.ops.load_deltas`.
        """
        ops.load_deltas(self._live_reparam(), path, strict=strict)

    def to_peft(self, folder: str | os.PathLike[str]) -> Path:
        """Write the low-rank A+B as a PEFT LoRA (or DoRA) adapter (``adapter_config.json`` +
        ``adapter_model.safetensors``) that ``peft.PeftModel.from_pretrained(base, folder)`` loads.

        Args:
            folder: the adapter folder.

        Returns:
            The folder.

        Raises:
            ReparamError: full-rank A+B or no low-rank A+B (see :func:`workbench.core.freezing.reparam.peft.to_peft`).
        """
        name = self.plan.model.get("name")
        return peft_io.to_peft(self._live_reparam(), self.model, self.tree.owner_of, folder,
                               base_model_name=name if isinstance(name, str) else None)

    def load_peft(self, folder: str | os.PathLike[str]) -> None:
        """Load a PEFT LoRA adapter's weights (U, V, DoRA's magnitude, modules_to_save) into this applied plan.

        Args:
            folder: the adapter folder.

        Raises:
            ReparamError: a tensor is missing or has another shape (see :func:`workbench.core.freezing.reparam.peft.load_peft`).
        """
        peft_io.load_peft(self._live_reparam(), self.model, folder)

    def reparam_stats(self) -> dict[str, dict[str, float]]:
        """Per reparametrized tensor: ``{"b_norm": ‖B‖, "a_norm": ‖A‖, "ratio": ‖B‖/‖A‖}``."""
        return ops.stats(self._live_reparam())

    def reparam_module_stats(self) -> dict[str, dict[str, float]]:
        """The same as :meth:`reparam_stats` per module (all its A+B tensors together)."""
        return ops.module_stats(self._live_reparam())

    def ddp_ignore_names(self) -> list[str]:
        """Buffer names of every exact-mode full-rank A, for DDP not to broadcast them (see
        :func:`workbench.core.freezing.reparam.ops.ddp_ignore_names`)."""
        return ops.ddp_ignore_names(self._live_reparam())


def install_plan(
    model: nn.Module,
    plan: FreezePlan,
    *,
    strict: bool = False,
    base_dir: str | os.PathLike[str] | None = None,
) -> AppliedPlan:
    """Apply a parsed plan to a model in place (see :func:`workbench.core.freezing.apply.apply_plan`).

    Args:
        model: the model.
        plan: the plan.
        strict: a fingerprint mismatch is an error instead of a warning.
        base_dir: folder for relative file references inside the plan (A+B tensors from a
            file); default: the working directory.

    Returns:
        The handle.

    Raises:
        PlanError: the plan is invalid or names modules the model lacks, or the model
            already has a live plan (``update()`` or ``remove()`` it first); the model is
            left untouched.
    """
    plan_registry.refuse_second_plan(model)  # one plan in force per model (update() changes it)
    tree = ModelTree.from_model(model)
    plan.validate(tree, strict=strict)
    applied = AppliedPlan(model, plan, tree, Path(base_dir) if base_dir else None)
    new = plan.resolve(tree)
    try:
        applied._install_extensions(new, None)
    except PlanError:
        applied.remove(merge=False)
        raise
    except (ValueError, OSError, KeyError) as e:
        applied.remove(merge=False)
        raise PlanError(str(e)) from e
    applied._apply_flags(new, plan.resolve_params(tree))
    applied._snap(fresh=True)
    plan_registry.register(model, applied)
    return applied
