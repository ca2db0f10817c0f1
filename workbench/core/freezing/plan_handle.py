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

import fnmatch
import os
import types
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol

import torch
from torch import nn

from workbench.core.errors import WorkbenchError
from workbench.core.freezing import checkpointing, low_rank, partial, peft_interop, plan_registry, reparam
from workbench.core.freezing.snapshot import Snapshot, VerifyReport, compare_in_force, model_tensors
from workbench.core.models.tree import ModelTree, ModuleNode
from workbench.core.plan.checkpoint_fit import outermost_fitting
from workbench.core.plan.keys import Effective
from workbench.core.plan.problems import PlanError, PlanProblem, PlanWarning
from workbench.core.plan.specs import SPECS, check_extensions, rule_index_for

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
    spec: Any  # the typed spec of its key (ReparamSpec, PartialSpec) or True (checkpoint)

    def trainable(self) -> list[tuple[str, nn.Parameter]]:
        """Parameters (full dotted names) whose ``requires_grad`` follows the module's frozen flag."""
        ...

    def fixed(self) -> list[tuple[str, torch.Tensor]]:
        """Tensors (full dotted names) that never train and must stay bit-identical."""
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
    "reparam": Installer("reparam", low_rank.install_a_plus_b, reparam.adjust_param_groups),
}
#: Installers in the order of the spec registry (the order they are installed on a module),
#: then activation checkpointing (wraps whatever the others installed).
INSTALLERS: tuple[Installer, ...] = tuple(_BY_KEY[cls.key] for cls in SPECS) + (
    Installer("checkpoint", checkpointing.install, changes_tensors=False, narrow=outermost_fitting),
)


# ---------------------------------------------------------------- eval lock (bn_eval, eval)
def _train_keeping_eval(self: nn.Module, mode: bool = True) -> nn.Module:
    """``train`` for a module the plan keeps in eval mode: always eval (its children too)."""
    nn.Module.train(self, False)
    return self


def _lock_eval(module: nn.Module) -> None:
    object.__setattr__(module, "train", types.MethodType(_train_keeping_eval, module))
    nn.Module.train(module, False)


def _unlock_eval(module: nn.Module, training: bool) -> None:
    if "train" in module.__dict__:
        object.__delattr__(module, "train")
    nn.Module.train(module, training)


def is_eval_locked(module: nn.Module) -> bool:
    """Whether a plan keeps this module in eval mode across ``model.train()`` (``bn_eval`` or ``eval``).

    Args:
        module: any module.

    Returns:
        True when the workbench locked it in eval mode.
    """
    m = module.__dict__.get("train")
    return isinstance(m, types.MethodType) and m.__func__ is _train_keeping_eval


def is_bn_eval_locked(module: nn.Module) -> bool:
    """Whether a plan keeps this module in eval mode across ``model.train()``.

    The name predates the ``eval`` key; it answers for any locked module (see :func:`is_eval_locked`).

    Args:
        module: any module.

    Returns:
        True when the workbench locked it in eval mode.
    """
    return is_eval_locked(module)


def _eval_wanted(e: Effective, is_bn: bool) -> bool:
    return e.eval or (is_bn and e.bn_eval)


# ---------------------------------------------------------------- weight decay, tied weights
def no_decay_names(model: nn.Module) -> set[str]:
    """Parameters that get no weight decay with ``no_decay="auto"``: biases, 1-D (and 0-D)
    tensors and the names (fnmatch patterns) of the model's ``no_weight_decay()``, as timm's
    ``param_groups_weight_decay`` excludes them.

    Args:
        model: the model.

    Returns:
        Names from ``model.named_parameters()``.
    """
    fn = getattr(model, "no_weight_decay", None)
    listed = set(fn()) if callable(fn) else set()
    return {
        n for n, p in model.named_parameters()
        if p.ndim <= 1 or n.endswith(".bias") or any(fnmatch.fnmatch(n, pat) for pat in listed)
    }


def tied_parameters(model: nn.Module) -> dict[str, list[str]]:
    """Parameters shared under several names (tied weights such as GPT-2's ``lm_head.weight``
    and ``transformer.wte.weight``).

    Args:
        model: the model.

    Returns:
        ``{name in model.named_parameters(): [the other names of the same tensor]}``.
    """
    by_id: dict[int, list[str]] = {}
    for n, p in model.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(p), []).append(n)
    return {names[0]: names[1:] for names in by_id.values() if len(names) > 1}


# ---------------------------------------------------------------- counting
_STATE_FACTOR = {
    "sgd": 0,
    "sgd_momentum": 1,
    "momentum": 1,
    "rmsprop": 1,
    "adagrad": 1,
    "adam": 2,
    "adamw": 2,
    "nadam": 2,
    "radam": 2,
    "adamax": 2,
}


def optimizer_state_factor(optimizer: str | torch.optim.Optimizer) -> int:
    """How many parameter-sized state tensors an optimizer keeps per trainable parameter.

    Args:
        optimizer: a name (``"sgd"``, ``"sgd_momentum"``, ``"adam"``, ``"adamw"``, ...) or an
            optimizer instance (SGD counts 1 when its momentum is non-zero).

    Returns:
        0 for plain SGD, 1 for SGD with momentum, 2 for Adam/AdamW (3 with amsgrad).

    Raises:
        ValueError: unknown optimizer name.
    """
    if isinstance(optimizer, torch.optim.Optimizer):
        name = type(optimizer).__name__.lower()
        d = optimizer.defaults
        if name == "sgd":
            return 1 if d.get("momentum", 0) else 0
        base = _STATE_FACTOR.get(name, 2)
        return base + (1 if d.get("amsgrad") else 0)
    key = optimizer.lower().replace("-", "_").replace("+", "_")
    if key not in _STATE_FACTOR:
        raise ValueError(f"unknown optimizer {optimizer!r}; use one of {', '.join(sorted(_STATE_FACTOR))}")
    return _STATE_FACTOR[key]


@dataclass(frozen=True)
class Counts:
    """Parameter counts and the training memory they imply.

    Attributes:
        total / trainable / frozen: parameter elements (shared tensors once).
        param_bytes: bytes of all parameters.
        grad_bytes: bytes of gradients (one per trainable element).
        optimizer_bytes: bytes of optimizer state for the trainable parameters.
        fixed_bytes: extra bytes the plan adds (the fixed tensors A of A+B).
        full_ft_bytes: params + grads + optimizer state if every parameter trained.
        optimizer: the optimizer the state was counted for.
    """

    total: int
    trainable: int
    frozen: int
    param_bytes: int
    grad_bytes: int
    optimizer_bytes: int
    fixed_bytes: int
    full_ft_bytes: int
    optimizer: str

    @classmethod
    def from_totals(
        cls,
        total: int,
        trainable: int,
        param_bytes: int,
        trainable_bytes: int,
        fixed_bytes: int = 0,
        optimizer: str | torch.optim.Optimizer = "adamw",
    ) -> "Counts":
        """Counts from element and byte totals: gradients and optimizer state follow.

        Args:
            total / trainable: parameter elements.
            param_bytes / trainable_bytes: bytes of all / of the trainable parameters.
            fixed_bytes: extra fixed tensors (A of A+B).
            optimizer: name or instance, for the state factor.

        Returns:
            The counts.
        """
        factor = optimizer_state_factor(optimizer)
        return cls(
            total=total,
            trainable=trainable,
            frozen=total - trainable,
            param_bytes=param_bytes,
            grad_bytes=trainable_bytes,
            optimizer_bytes=trainable_bytes * factor,
            fixed_bytes=fixed_bytes,
            full_ft_bytes=param_bytes * (2 + factor),
            optimizer=optimizer if isinstance(optimizer, str) else type(optimizer).__name__.lower(),
        )

    @property
    def training_bytes(self) -> int:
        """Params + grads + optimizer state + fixed tensors."""
        return self.param_bytes + self.grad_bytes + self.optimizer_bytes + self.fixed_bytes

    @property
    def trainable_fraction(self) -> float:
        """Trainable share of all parameters (0..1)."""
        return self.trainable / self.total if self.total else 0.0

    @property
    def saving_bytes(self) -> int:
        """Bytes saved against full fine-tuning."""
        return self.full_ft_bytes - self.training_bytes

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, with the derived numbers."""
        d = dict(self.__dict__)
        d.update(
            training_bytes=self.training_bytes,
            trainable_fraction=self.trainable_fraction,
            saving_bytes=self.saving_bytes,
        )
        return d


def count_parameters(
    params: Iterator[tuple[str, nn.Parameter]] | list[tuple[str, nn.Parameter]],
    optimizer: str | torch.optim.Optimizer = "adamw",
    fixed: list[torch.Tensor] | None = None,
) -> Counts:
    """Count parameters (each tensor once, by identity) and the memory training needs.

    Args:
        params: ``(name, parameter)`` pairs, e.g. ``model.named_parameters()``.
        optimizer: optimizer name or instance, for the state factor.
        fixed: extra fixed tensors (A of A+B) whose bytes count too.

    Returns:
        The counts.
    """
    seen: set[int] = set()
    total = trainable = pbytes = tbytes = 0
    for _, p in params:
        if id(p) in seen:
            continue
        seen.add(id(p))
        n, b = p.numel(), p.numel() * p.element_size()
        total += n
        pbytes += b
        if p.requires_grad:
            trainable += n
            tbytes += b
    fixed_bytes = sum(t.numel() * t.element_size() for t in fixed or [])
    return Counts.from_totals(total, trainable, pbytes, tbytes, fixed_bytes, optimizer)


@dataclass
class PlanDiff:
    """What :meth:`AppliedPlan.update` changed.

    Attributes:
        newly_frozen / newly_trainable: parameter names whose ``requires_grad`` flipped.
        lr_changed: trainable parameter names whose lr_scale changed.
        reinstalled: module paths whose extensions were removed or installed (their
            parameter objects may be new).
        bn_changed: BatchNorm paths whose eval lock changed.
        eval_changed: module paths whose ``eval`` setting changed.
        tree: the model's tree, to name the modules in :meth:`describe` (None: parameter owners).
    """

    newly_frozen: list[str] = field(default_factory=list)
    newly_trainable: list[str] = field(default_factory=list)
    lr_changed: list[str] = field(default_factory=list)
    reinstalled: list[str] = field(default_factory=list)
    bn_changed: list[str] = field(default_factory=list)
    eval_changed: list[str] = field(default_factory=list)
    tree: ModelTree | None = field(default=None, repr=False, compare=False)

    @property
    def empty(self) -> bool:
        """Nothing changed."""
        return not (
            self.newly_frozen or self.newly_trainable or self.lr_changed or self.reinstalled
            or self.bn_changed or self.eval_changed
        )

    def describe(self) -> str:
        """Short text for plot markers and logs, naming the modules (``unfroze bert.encoder.layer.2``)."""
        parts = []
        if self.newly_frozen:
            parts.append(f"froze {self._params(self.newly_frozen)}")
        if self.newly_trainable:
            parts.append(f"unfroze {self._params(self.newly_trainable)}")
        if self.lr_changed:
            parts.append(f"lr× {self._params(self.lr_changed)}")
        if self.reinstalled:
            parts.append(f"A+B/partial {_compact(self.reinstalled)}")
        if self.bn_changed:
            parts.append(f"BN eval {_compact(self.bn_changed)}")
        if self.eval_changed:
            parts.append(f"eval {_compact(_outermost(self.eval_changed))}")
        return "; ".join(parts) or "no change"

    def _params(self, names: list[str]) -> str:
        if self.tree is None:
            return _compact(sorted({n.rsplit(".", 1)[0] if "." in n else "" for n in names}))
        return _compact(_whole_modules(self.tree, names))


def _outermost(paths: list[str]) -> list[str]:
    """The paths not inside another path of the list."""
    ps = sorted(set(paths), key=lambda p: (p.count("."), p))
    out: list[str] = []
    for p in ps:
        if not any(q == "" or p.startswith(q + ".") for q in out):
            out.append(p)
    return out


def _whole_modules(tree: ModelTree, raw_names: list[str]) -> list[str]:
    """The largest modules every parameter of which is in ``raw_names``, and the owners of the
    names left over (a change of a few parameters of a module)."""
    changed = {tree.param_name(n) for n in raw_names}
    total: dict[str, int] = {}
    hit: dict[str, int] = {}
    for name in tree.param_shapes:
        node: ModuleNode | None = tree.nodes[name.rpartition(".")[0]]
        inside = name in changed
        while node is not None:
            total[node.path] = total.get(node.path, 0) + 1
            hit[node.path] = hit.get(node.path, 0) + inside
            node = node.parent
    whole = [p for p, n in total.items() if n and hit.get(p) == n]
    out = _outermost(whole)
    covered = set(out)
    for name in sorted(changed):
        owner = name.rpartition(".")[0]
        if not any(owner == q or q == "" or owner.startswith(q + ".") for q in covered):
            covered.add(owner)
            out.append(owner)
    return sorted(out, key=lambda p: tree.nodes[p].order if p in tree.nodes else 0)


def _compact(mods: list[str]) -> str:
    """Module paths for a label: all when few, else their common prefix and how many."""
    mods = list(dict.fromkeys(mods))
    if not mods:
        return ""
    if len(mods) <= 3:
        return ", ".join(m or "(root)" for m in mods)
    parts = [m.split(".") for m in mods]
    prefix: list[str] = []
    for level in zip(*parts):
        if len(set(level)) > 1:
            break
        prefix.append(level[0])
    if prefix:
        return f"{'.'.join(prefix)} ({len(mods)} modules)"
    tops = sorted({m.split(".")[0] or "(root)" for m in mods})
    return ", ".join(tops[:3]) + (f" +{len(tops) - 3}" if len(tops) > 3 else "")


# ---------------------------------------------------------------- the handle
class AppliedPlan:
    """A plan applied to a model. Create with :func:`apply_plan` or :meth:`FreezePlan.apply`.

    Attributes:
        model: the model (modified in place).
        plan: the plan in force.
        tree: the model's tree (paths of the plain model).
    """

    def __init__(self, model: nn.Module, plan: "FreezePlan", tree: ModelTree, base_dir: Path | None) -> None:
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
        self, new: dict[str, Effective], diff: PlanDiff | None, plan: "FreezePlan | None" = None
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
            want = _eval_wanted(new[path], self.tree.nodes[path].is_bn)
            module = self.model.get_submodule(path)
            if want:
                if not is_eval_locked(module):
                    _lock_eval(module)
            elif is_eval_locked(module):
                parent_training = self.model.training if not path else self._parent_training(path)
                _unlock_eval(module, parent_training)
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
            if node.is_bn and _eval_wanted(self._effective[path], True):
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

    def trainable_parameters(self) -> list[nn.Parameter]:
        """Trainable parameters, each once, in model order."""
        return [p for _, p in self.named_trainable()]

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
        """Optimizer param groups with only trainable parameters, grouped by ``lr_scale`` and
        weight decay.

        Each parameter appears exactly once (by identity). Every group carries ``lr``
        (= ``lr * lr_scale``), ``weight_decay``, ``lr_scale`` and ``param_names``.

        Args:
            lr: base learning rate.
            weight_decay: weight decay of the parameters no ``weight_decay`` rule reaches.
            no_decay: ``"auto"``: weight decay 0 for biases, 1-D parameters and the model's
                ``no_weight_decay()`` names (see :func:`no_decay_names`), whatever the rules
                say; None: rules and ``weight_decay`` only.
            **extra: other per-group options (``momentum``, ``betas``...).

        Returns:
            A list for ``torch.optim.X(groups)``.

        Raises:
            ValueError: nothing is trainable (the optimizer would have no parameters), or
                ``no_decay`` is not None or ``"auto"``.
        """
        self._check_alive()
        if no_decay not in (None, "auto"):
            raise ValueError(f"no_decay must be None or \"auto\", got {no_decay!r}")
        skip = no_decay_names(self.model) if no_decay == "auto" else set()
        groups: dict[tuple[float, float], dict[str, Any]] = {}
        seen: set[int] = set()
        for name, p in self.model.named_parameters():
            if not p.requires_grad or id(p) in seen:
                continue
            seen.add(id(p))
            scale = self.lr_scale_of(name)
            wd = 0.0 if name in skip else self.weight_decay_of(name, weight_decay)
            g = groups.get((scale, wd))
            if g is None:
                g = groups[(scale, wd)] = {
                    "params": [],
                    "param_names": [],
                    "lr": lr * scale,
                    "lr_scale": scale,
                    "weight_decay": wd,
                    **extra,
                }
            g["params"].append(p)
            g["param_names"].append(name)
        if not groups:
            raise ValueError(
                "the plan leaves no parameter trainable; unfreeze at least one module "
                "(e.g. a rule {\"select\": \"fc\", \"frozen\": false})"
            )
        out = [groups[k] for k in sorted(groups, key=lambda k: (-k[0], -k[1]))]
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
        c = count_parameters(self.model.named_parameters(), optimizer, fixed)
        return c

    def update(self, plan: "FreezePlan", *, strict: bool = False) -> PlanDiff:
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
        before = {n: (id(p), p.requires_grad, self.lr_scale_of(n)) for n, p in self.model.named_parameters()}
        bn_before = {p: e.bn_eval for p, e in self._effective.items() if self.tree.nodes[p].is_bn}
        eval_before = {p: e.eval for p, e in self._effective.items()}
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
            elif p.requires_grad and b[2] != self.lr_scale_of(n):
                diff.lr_changed.append(n)
        diff.bn_changed = [p for p, was in bn_before.items() if was != new[p].bn_eval]
        diff.eval_changed = [p for p, was in eval_before.items() if was != new[p].eval]
        self.plan = plan
        for bucket in self._snapshot.entries.values():  # reinstalled modules: new tensors, new baseline
            for name in [n for n, (m, _) in bucket.items() if m in diff.reinstalled]:
                del bucket[name]
                self._snapshot.forget_places([name])
        self._snap(fresh=False)
        return diff

    def verify(self, steps: int | None = None) -> VerifyReport:
        """Prove the plan held: frozen tensors bit-identical, eval-BN stats unchanged.

        Trainable tensors that did not change are reported as warnings, except BatchNorm
        affine parameters and, when ``steps`` says so, after too few steps to tell (see
        :func:`workbench.core.freezing.snapshot.compare`). Tensors are checked in the categories
        of the snapshot taken at apply/update time; a ``requires_grad`` changed since then is
        a ``plan_not_in_force`` error.

        Args:
            steps: optimizer steps since the plan was applied or last updated, when known.

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
            self._snapshot, model_tensors(self.model, fixed), quiet=quiet, steps=steps, model=self.model
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
                _unlock_eval(module, self._orig_training.get(path, True))
        for p, rg in self._orig_requires_grad.values():
            p.requires_grad_(rg)
        for path, module in self.model.named_modules():
            if path in self._orig_training:
                module.training = self._orig_training[path]
        self._removed = True
        plan_registry.unregister(self.model, self)

    # ---------------------------------------------------------- A+B operations
    def _reparam(self) -> Any:
        self._check_alive()
        return reparam

    def merge(self) -> PlanDiff:
        """Bake W = A + B into plain parameters and remove the A+B parametrizations.

        The plan in force loses its ``reparam`` keys; parameter objects keep their identity.

        Returns:
            What changed (B's parameter names become the plain ones).
        """
        return self._reparam().merge(self)

    def reset_b(self, paths: list[str] | None = None) -> None:
        """Set B back to its initial value (zeros by default) for all or some modules."""
        self._reparam().reset_b(self, paths)

    def export_deltas(self, path: str | os.PathLike[str]) -> None:
        """Write every B (keyed by parameter path) to a safetensors file."""
        self._reparam().export_deltas(self, path)

    def load_deltas(self, path: str | os.PathLike[str]) -> None:
        """Load B tensors from a safetensors file written by :meth:`export_deltas`."""
        self._reparam().load_deltas(self, path)

    def to_peft(self, folder: str | os.PathLike[str]) -> Path:
        """Write the low-rank A+B as a PEFT LoRA adapter (``adapter_config.json`` +
        ``adapter_model.safetensors``) that ``peft.PeftModel.from_pretrained(base, folder)`` loads.

        Args:
            folder: the adapter folder.

        Returns:
            The folder.

        Raises:
            ReparamError: full-rank A+B or no low-rank A+B (see :func:`peft_interop.to_peft`).
        """
        self._check_alive()
        return peft_interop.to_peft(self, folder)

    def load_peft(self, folder: str | os.PathLike[str]) -> None:
        """Load a PEFT LoRA adapter's weights (U, V, modules_to_save) into this applied plan.

        Args:
            folder: the adapter folder.

        Raises:
            ReparamError: a tensor is missing or has another shape (see :func:`peft_interop.load_peft`).
        """
        self._check_alive()
        peft_interop.load_peft(self, folder)

    def reparam_stats(self) -> dict[str, dict[str, float]]:
        """Per reparametrized tensor: ``{"b_norm": ‖B‖, "ratio": ‖B‖/‖A‖}``."""
        return self._reparam().stats(self)


def install_plan(
    model: nn.Module,
    plan: "FreezePlan",
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
