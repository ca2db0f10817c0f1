"""Freeze plans: which modules train, as ordered rules over dotted module paths.

A plan is plain data (schema v1, JSON). It is the one source of truth for the GUI, the CLI
and scripts: widgets edit it, :func:`workbench.core.freezing.apply.apply_plan` applies it to a model.

Rules apply in order and a later rule wins for the keys it sets. A rule's ``select`` is

- ``"*"`` or ``""``: the root (the whole model);
- a dotted module path (``"layer4"``): that module and its subtree;
- an fnmatch glob on dotted paths (``"layer3.*.conv1"``): every matching module and its subtree;
- ``"type:ClassName"``: every module whose class (or a base class) has that name, and its subtree;
- ``"param:GLOB"``: the parameters whose dotted names match the fnmatch glob (``"param:*.bias"``),
  for ``frozen``, ``lr_scale`` and ``weight_decay`` only (:meth:`FreezePlan.resolve_params`).

The plan-level ``lr_decay`` gives each parameter ``lr_scale = lr_decay ** (L - 1 - layer)``
unless a rule sets ``lr_scale`` for it.

``frozen``, ``bn_eval``, ``lr_scale`` and ``reparam`` are inherited by the subtree of what a
rule selects; ``partial`` and ``checkpoint`` apply only to the modules the selector matches
directly.
``bn_eval`` absent means "follow ``frozen``".
"""

from __future__ import annotations

import copy
import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.core import safe_json
from workbench.core.atomic import atomic_write
from workbench.core.plan.checkpoint_fit import checkpoint_problems
from workbench.core.plan.editing import Resolver, set_in_force, tidy
from workbench.core.plan.keys import (
    PARAM_KEYS,
    SETTING_KEYS,
    Effective,
)
from workbench.core.plan.layer_decay import parse_lr_decay
from workbench.core.plan.param_counts import frozen_elements
from workbench.core.plan.problems import PlanError, PlanProblem, PlanWarning
from workbench.core.plan.resolution import resolve_modules, resolve_params
from workbench.core.plan.rule import Rule, Stage, parse_rule, parse_stage, type_name, unselected_problem
from workbench.core.plan.selectors import as_tree, is_param_selector, matcher, select_paths
from workbench.core.plan.specs import check_extensions
from workbench.core.plan.tree import ModelTree

if TYPE_CHECKING:  # pragma: no cover - typing only
    from torch import nn

    from workbench.core.freezing.plan_handle import AppliedPlan

__all__ = [
    "FORMAT",
    "VERSION",
    "Effective",
    "FreezePlan",
    "PlanError",
    "PlanProblem",
    "PlanWarning",
    "Rule",
    "Stage",
    "select_paths",
]

FORMAT = "freeze-plan"
VERSION = 1

_TOP_KEYS = {"format", "version", "model", "rules", "stages", "description", "lr_decay", "unselected"}
_MODEL_KEYS = {"source", "name", "weights", "fingerprint", "num_classes", "checkpoint", "arch"}
_STAGE_KEYS = {"at_step", "at_epoch", "rules", "label"}


def _stage_order_problems(stages: list[Stage]) -> list[PlanProblem]:
    """Stages must be listed in the order they are reached (a later stage's rules win)."""
    out: list[PlanProblem] = []
    for key in ("at_step", "at_epoch"):
        last: tuple[int, int] | None = None
        for si, st in enumerate(stages):
            at = getattr(st, key)
            if at is None:
                continue
            if last is not None and at < last[1]:
                out.append(PlanProblem(
                    f"stages apply in list order and a later one wins: this one ({key} {at}) is listed after "
                    f"stage {last[0]} ({key} {last[1]}); list the stages in the order they are reached",
                    field=key, stage_index=si,
                ))
            last = (si, at)
    return out


@dataclass
class FreezePlan:
    """An ordered list of freezing rules, optional stages, and the model they were made for.

    Build one in code, from JSON (:meth:`load`, :meth:`from_dict`), or from a model's current
    state (:meth:`from_model`). Apply it with :meth:`apply`.

    Example:
        >>> plan = FreezePlan([Rule("*", frozen=True), Rule("fc", frozen=False)])
    """

    rules: list[Rule] = field(default_factory=list)
    stages: list[Stage] = field(default_factory=list)
    model: dict[str, Any] = field(default_factory=dict)
    description: str | None = None
    #: layer-wise learning-rate decay in (0, 1]; None: off.
    lr_decay: float | None = None
    #: ``"train"`` (default): modules no rule selects train; ``"keep"``: they stay as the model has them.
    unselected: str = "train"

    def __post_init__(self) -> None:
        """Check ``unselected``.

        Raises:
            PlanError: ``unselected`` is not ``"train"`` or ``"keep"``.
        """
        problem = unselected_problem(self.unselected)
        if problem is not None:
            raise PlanError(problem)

    # ---------------------------------------------------------------- (de)serialization
    @classmethod
    def from_dict(cls, data: Any, source: str | None = None) -> FreezePlan:
        """Build a plan from its JSON-like dict, checking the schema.

        Args:
            data: the decoded JSON object.
            source: file name for error messages.

        Returns:
            The plan.

        Raises:
            PlanError: listing every problem (rule index, field, what to do).
        """
        problems: list[PlanProblem] = []
        if not isinstance(data, dict):
            raise PlanError(
                f"a plan must be a JSON object with \"format\": \"{FORMAT}\", got {type_name(data)}", source
            )
        fmt = data.get("format", FORMAT)
        if fmt != FORMAT:
            problems.append(PlanProblem(f"'format' is {fmt!r}; this is not a freeze plan (expected {FORMAT!r})", field="format"))
        version = data.get("version", VERSION)
        if isinstance(version, bool) or not isinstance(version, int):
            problems.append(PlanProblem(f"'version' must be an integer, got {type_name(version)}", field="version"))
        elif version > VERSION:
            raise PlanError(
                PlanProblem(
                    f"plan version {version} is newer than this workbench supports ({VERSION}); "
                    "upgrade freeze-workbench to read it",
                    field="version",
                ),
                source,
            )
        elif version < 1:
            problems.append(PlanProblem(f"'version' must be >= 1, got {version}", field="version"))
        for k in data:
            if k not in _TOP_KEYS:
                problems.append(
                    PlanProblem(f"unknown top-level key {k!r}; allowed: {', '.join(sorted(_TOP_KEYS))}", field=str(k))
                )
        model = data.get("model", {}) or {}
        if not isinstance(model, dict):
            problems.append(PlanProblem("'model' must be an object like {\"name\": \"resnet18\"}", field="model"))
            model = {}
        for k in model:
            if k not in _MODEL_KEYS:
                problems.append(
                    PlanProblem(f"unknown key {k!r} in 'model'; allowed: {', '.join(sorted(_MODEL_KEYS))}", field=f"model.{k}")
                )
        rules_raw = data.get("rules", [])
        rules: list[Rule] = []
        if not isinstance(rules_raw, list):
            problems.append(PlanProblem("'rules' must be a list of rule objects", field="rules"))
        else:
            for i, r in enumerate(rules_raw):
                rule = parse_rule(r, i, None, problems)
                if rule is not None:
                    rules.append(rule)
        stages: list[Stage] = []
        stages_raw = data.get("stages", [])
        if not isinstance(stages_raw, list):
            problems.append(PlanProblem("'stages' must be a list like [{\"at_step\": 500, \"rules\": [...]}]", field="stages"))
        else:
            for si, s in enumerate(stages_raw):
                st = parse_stage(s, si, problems)
                if st is not None:
                    stages.append(st)
            problems.extend(_stage_order_problems(stages))
        desc = data.get("description")
        if desc is not None and not isinstance(desc, str):
            problems.append(PlanProblem("'description' must be a string", field="description"))
            desc = None
        lr_decay = data.get("lr_decay")
        if lr_decay is not None:
            try:
                lr_decay = parse_lr_decay(lr_decay)
            except ValueError as e:
                problems.append(PlanProblem(str(e), field="lr_decay"))
        unselected = data.get("unselected", "train")
        bad_unselected = unselected_problem(unselected)
        if bad_unselected is not None:
            problems.append(bad_unselected)
            unselected = "train"
        if problems:
            raise PlanError(problems, source)
        return cls(
            rules=rules, stages=stages, model=dict(model), description=desc, lr_decay=lr_decay, unselected=unselected
        )

    def to_dict(self) -> dict[str, Any]:
        """The plan as a JSON-ready dict (schema v1)."""
        d: dict[str, Any] = {"format": FORMAT, "version": VERSION}
        if self.description:
            d["description"] = self.description
        d["model"] = dict(self.model)
        if self.lr_decay is not None:
            d["lr_decay"] = self.lr_decay
        if self.unselected != "train":
            d["unselected"] = self.unselected
        d["rules"] = [r.to_dict() for r in self.rules]
        if self.stages:
            d["stages"] = [s.to_dict() for s in self.stages]
        return d

    def to_json(self) -> str:
        """The plan as pretty JSON text (one rule per line)."""
        d = self.to_dict()
        rules = d.pop("rules")
        stages = d.pop("stages", None)
        head = json.dumps(d, indent=2)[:-2]
        lines = [head + ",", '  "rules": [']
        lines.append(",\n".join("    " + json.dumps(r) for r in rules))
        lines.append("  ]" + ("," if stages else ""))
        if stages:
            lines.append('  "stages": ' + json.dumps(stages, indent=2).replace("\n", "\n  "))
        lines.append("}")
        return "\n".join(x for x in lines if x) + "\n"

    @classmethod
    def from_json(cls, text: str, source: str | None = None) -> FreezePlan:
        """Parse JSON text.

        Raises:
            PlanError: invalid JSON (with line and column) or an invalid plan.
        """
        try:
            data = safe_json.loads(text, what="the plan")
        except json.JSONDecodeError as e:
            raise PlanError(
                f"invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}; fix the file's syntax", source
            ) from None
        except safe_json.JsonInputError as e:
            raise PlanError(str(e), source) from None
        return cls.from_dict(data, source)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> FreezePlan:
        """Read a plan file.

        Args:
            path: a ``.json`` plan file.

        Returns:
            The plan.

        Raises:
            PlanError: the file is missing, unreadable, not JSON, or not a valid plan.
        """
        p = Path(path)
        try:
            text = safe_json.read_text(p, what="plan file")
        except FileNotFoundError:
            raise PlanError("no such plan file; check the path", str(p)) from None
        except safe_json.JsonInputError as e:
            raise PlanError(str(e)) from None  # the message names the file
        except (OSError, UnicodeDecodeError) as e:
            raise PlanError(f"cannot read plan file ({e}); is it a JSON freeze plan?", str(p)) from None
        return cls.from_json(text, str(p))

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the plan atomically: a temp file in the same folder, then a rename.

        An existing file is left intact if anything fails.

        Args:
            path: destination.

        Raises:
            OSError: the folder is not writable.
        """
        text = self.to_json()  # serialize first: nothing is written if this fails
        atomic_write(path, text)

    # ---------------------------------------------------------------- resolution
    def resolve(self, model_or_tree: nn.Module | ModelTree) -> dict[str, Effective]:
        """Effective settings of every module.

        Selectors that match nothing are ignored here (see :meth:`validate`). ``param:``
        rules are not in these (see :meth:`resolve_params`); with ``lr_decay`` a module's
        ``lr_scale`` is that of its first parameter unless a rule sets it.

        Args:
            model_or_tree: the model, or its :class:`ModelTree`.

        Returns:
            ``{path: Effective}`` for every module of the tree.
        """
        return resolve_modules(self.rules, self.unselected, self.lr_decay, as_tree(model_or_tree))

    def resolve_params(self, model_or_tree: nn.Module | ModelTree) -> dict[str, Effective]:
        """Effective settings of every parameter: its module's, with ``param:`` rules and
        ``lr_decay`` applied.

        Args:
            model_or_tree: the model, or its :class:`ModelTree`.

        Returns:
            ``{canonical parameter name: Effective}`` in model order.
        """
        return resolve_params(self.rules, self.unselected, self.lr_decay, as_tree(model_or_tree))

    def effective(self, path: str, model_or_tree: nn.Module | ModelTree) -> Effective:
        """Effective settings of one module.

        Args:
            path: dotted module path (``""`` for the root).
            model_or_tree: the model or its tree (needed for ``type:`` and glob selectors).

        Returns:
            The settings in force for that module.

        Raises:
            KeyError: the model has no module at ``path``.
        """
        tree = as_tree(model_or_tree)
        if path not in tree.nodes:
            raise KeyError(f"no module {path!r} in the model")
        return self.resolve(tree)[path]

    def unmatched(self, model_or_tree: nn.Module | ModelTree) -> list[PlanProblem]:
        """Problems for selectors that match no module, with close names suggested."""
        tree = as_tree(model_or_tree)
        m = matcher(tree)
        problems = []

        def check(rules: list[Rule], stage: int | None) -> None:
            for i, r in enumerate(rules):
                if is_param_selector(r.select):
                    for k in (k.name for k in SETTING_KEYS if k.name not in PARAM_KEYS and r.sets(k.name)):
                        problems.append(PlanProblem(
                            f"a \"param:\" selector sets only {', '.join(PARAM_KEYS)}; select the module to set {k!r}",
                            i, k, stage,
                        ))
                    if m.params(r.select):
                        continue
                    sug = m.suggest(r.select)
                    hint = f"; did you mean {', '.join(repr(s) for s in sug)}?" if sug else (
                        "; run `workbench inspect` to list the model's parameter names"
                    )
                    problems.append(PlanProblem(f"selector {r.select!r} matches no parameter{hint}", i, "select", stage))
                elif not m.direct(r.select):
                    sug = m.suggest(r.select)
                    hint = f"; did you mean {', '.join(repr(s) for s in sug)}?" if sug else (
                        "; run `workbench inspect` to list the model's module paths"
                    )
                    problems.append(PlanProblem(f"selector {r.select!r} matches no module{hint}", i, "select", stage))

        check(self.rules, None)
        for si, st in enumerate(self.stages):
            check(st.rules, si)
        return problems

    def validate(self, model_or_tree: nn.Module | ModelTree, *, strict: bool = False) -> None:
        """Check the plan against a model.

        Args:
            model_or_tree: the model (or its tree).
            strict: a fingerprint mismatch is an error instead of a :class:`PlanWarning`.

        Raises:
            PlanError: selectors that match no module (every one listed, with close names);
                a fingerprint mismatch when ``strict``.
        """
        tree = as_tree(model_or_tree)
        problems: list[PlanProblem] = []
        fp = self.model.get("fingerprint")
        if fp and fp != tree.fingerprint:
            msg = (
                f"plan was made for a model with fingerprint {fp[:12]}…, this model has "
                f"{tree.fingerprint[:12]}… (different parameter names or shapes)"
            )
            if strict:
                problems.append(PlanProblem(msg + "; apply it to the model it was made for", field="model.fingerprint"))
            else:
                warnings.warn(PlanWarning(msg + "; rules are applied by module path anyway"), stacklevel=2)
        problems.extend(self.fit_problems(tree))
        if problems:
            raise PlanError(problems)

    def fit_problems(self, model_or_tree: nn.Module | ModelTree) -> list[PlanProblem]:
        """Rules that do not fit a model, every stage included: the one place this is decided.

        Args:
            model_or_tree: the model (or its tree).

        Returns:
            Selectors that match no module (with close names), then A+B and sub-tensor
            specs the model refuses, then ``checkpoint`` on modules that cannot use it; empty
            when every rule fits.
        """
        tree = as_tree(model_or_tree)
        problems = self.unmatched(tree)
        if any(r.reparam or r.partial for r in self.rules):
            problems.extend(check_extensions(self, tree))
        problems.extend(checkpoint_problems(self, tree))
        return problems

    # ---------------------------------------------------------------- stages
    def at(self, step: int, epoch: int = 0) -> FreezePlan:
        """The plan in force at ``step``/``epoch``: base rules plus the rules of reached stages.

        Args:
            step: 0-based optimizer step.
            epoch: 0-based epoch.

        Returns:
            A plan without stages.
        """
        rules = [copy.deepcopy(r) for r in self.rules]
        for st in self.stages:
            if st.reached(step, epoch):
                rules.extend(copy.deepcopy(r) for r in st.rules)
        return FreezePlan(
            rules=rules, model=dict(self.model), description=self.description, lr_decay=self.lr_decay,
            unselected=self.unselected,
        )

    def add_stage(self, stage: Stage) -> None:
        """Add ``stage`` where it keeps the stages in the order they are reached.

        Before the first stage of the same kind (``at_step`` or ``at_epoch``) that comes later;
        after any that comes at the same time (list order decides between those, the new one
        wins).

        Args:
            stage: the stage.
        """
        key = "at_step" if stage.at_step is not None else "at_epoch"
        at = getattr(stage, key)
        for i, st in enumerate(self.stages):
            other = getattr(st, key)
            if other is not None and other > at:
                self.stages.insert(i, stage)
                return
        self.stages.append(stage)

    def stage_index(self, step: int, epoch: int = 0) -> int:
        """Number of stages in force at ``step``/``epoch``."""
        return sum(1 for st in self.stages if st.reached(step, epoch))

    # ---------------------------------------------------------------- editing (GUI)
    def copy(self) -> FreezePlan:
        """A deep copy."""
        return copy.deepcopy(self)

    def set(self, path: str, key: str, value: Any, tree: ModelTree) -> None:
        """Set ``key`` for the subtree at ``path`` so that it is in force there, as a click does
        (see :func:`workbench.core.plan.editing.set_in_force`).

        Args:
            path: dotted module path (``""`` for the root).
            key: an inherited setting key (:data:`~workbench.core.plan.keys.INHERITED_KEYS`:
                ``frozen``, ``bn_eval``, ``lr_scale``, ``reparam``, ...).
            value: the value; ``None`` removes the explicit setting at ``path`` (inherit).
            tree: the model's tree.

        Raises:
            KeyError: no module at ``path``.
            ValueError: unknown key or invalid value.
        """
        self.rules = set_in_force(self.rules, path, key, value, tree, self._resolver(tree))

    def tidy(self, tree: ModelTree) -> None:
        """Sort runs of plain-path rules into tree order, when that keeps the meaning."""
        self.rules = tidy(self.rules, tree, self._resolver(tree))

    def _resolver(self, tree: ModelTree) -> Resolver:
        return lambda rules: resolve_modules(rules, self.unselected, self.lr_decay, tree)

    # ---------------------------------------------------------------- summaries
    def summary(self, model_or_tree: nn.Module | ModelTree) -> str:
        """One paragraph saying what the plan does to a model."""
        tree = as_tree(model_or_tree)
        eff = self.resolve(tree)
        total = tree.total_params
        frozen = frozen_elements(tree, eff, self.resolve_params(tree))
        trainable = sum(n.own_params - frozen.get(p, 0) for p, n in tree.nodes.items())
        bn_eval = sum(1 for p, n in tree.nodes.items() if n.is_bn and eff[p].bn_eval)
        bn = sum(1 for n in tree.nodes.values() if n.is_bn)
        rp = sum(1 for p, n in tree.nodes.items() if eff[p].reparam and n.own_params)
        parts = [
            f"{len(self.rules)} rules; trainable {trainable:,} of {total:,} parameters "
            f"({100.0 * trainable / max(total, 1):.1f}%)",
            f"BatchNorm in eval: {bn_eval}/{bn}",
        ]
        if rp:
            parts.append(f"A+B on {rp} modules")
            verdicts = [r.reparam.changes_function() for r in self.rules if r.reparam]
            if any(verdicts):
                parts.append("A+B does not start at the current weights: the model's function changes")
            elif None in verdicts:
                parts.append("A+B reads A or B from a file: the model's function changes unless they add up to the loaded weights")
        if self.stages:
            parts.append(f"{len(self.stages)} stages")
        return "; ".join(parts)

    # ---------------------------------------------------------------- applying
    def apply(
        self, model: nn.Module, *, strict: bool = False, base_dir: str | os.PathLike[str] | None = None
    ) -> AppliedPlan:
        """Apply the plan to ``model`` (see :func:`workbench.core.freezing.apply.apply_plan`).

        Returns:
            AppliedPlan: handle for param groups, counts, verify, update and remove.
        """
        # the freezing layer imports the plan's submodules, never this module (no cycle)
        from workbench.core.freezing.plan_handle import install_plan

        return install_plan(model, self, strict=strict, base_dir=base_dir)

    @classmethod
    def from_peft(cls, source: Any, model: nn.Module | None = None) -> FreezePlan:
        """The plan of a Hugging Face PEFT LoRA adapter: its targets get low-rank A+B.

        Args:
            source: an adapter folder, its ``adapter_config.json``, or a ``peft.LoraConfig``.
            model: the base model; targets then resolve into exact module paths (needed for a
                regular-expression ``target_modules``).

        Returns:
            A plan: everything frozen, each target ``{"frozen": false, "reparam": {"rank": r,
            "alpha": lora_alpha, "dropout": lora_dropout, "mode": "fused"}}``, each of
            ``modules_to_save`` unfrozen. Load the adapter's weights into an applied plan with
            :meth:`AppliedPlan.load_peft`.

        Raises:
            PlanError: not a LoRA config (field ``peft_type``), an option with no plan form
                (the field is named), or targets that match nothing.
        """
        from workbench.core.plan.peft_config import peft_plan_dict

        return cls.from_dict(peft_plan_dict(source, model), "PEFT adapter config")

    @classmethod
    def from_model(cls, model: nn.Module) -> FreezePlan:
        """Capture a model's current requires_grad, BatchNorm modes and A+B as a compact plan.

        Args:
            model: the model as a script left it.

        Returns:
            A plan that, applied to a fresh copy of the architecture, reproduces that state.
        """
        from workbench.core.freezing.state_reader import observed_plan

        return FreezePlan.from_dict(observed_plan(model))
