"""Freeze plans: which modules train, as ordered rules over dotted module paths.

A plan is plain data (schema v1, JSON). It is the one source of truth for the GUI, the CLI
and scripts: widgets edit it, :func:`workbench.core.freezing.apply.apply_plan` applies it to a model.

Rules apply in order and a later rule wins for the keys it sets. A rule's ``select`` is

- ``"*"`` or ``""``: the root (the whole model);
- a dotted module path (``"layer4"``): that module and its subtree;
- an fnmatch glob on dotted paths (``"layer3.*.conv1"``): every matching module and its subtree;
- ``"type:ClassName"``: every module whose class (or a base class) has that name, and its subtree.

``frozen``, ``bn_eval``, ``lr_scale`` and ``reparam`` are inherited by the subtree of what a
rule selects; ``partial`` applies only to the modules the selector matches directly.
``bn_eval`` absent means "follow ``frozen``".
"""

from __future__ import annotations

import copy
import difflib
import fnmatch
import importlib
import json
import math
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from torch import nn

from workbench.core.atomic import atomic_write
from workbench.core.errors import WorkbenchError
from workbench.core.models.tree import ModelTree

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

_TOP_KEYS = {"format", "version", "model", "rules", "stages", "description"}
_MODEL_KEYS = {"source", "name", "weights", "fingerprint", "num_classes", "checkpoint", "arch"}
_RULE_KEYS = ("select", "frozen", "bn_eval", "lr_scale", "reparam", "partial", "comment")
_SETTING_KEYS = ("frozen", "bn_eval", "lr_scale", "reparam", "partial")
_INHERITED = ("frozen", "bn_eval", "lr_scale", "reparam")
_STAGE_KEYS = {"at_step", "at_epoch", "rules", "label"}
#: Plan keys whose values are validated by the module that implements them.
_EXTENSIONS = {"reparam": "workbench.core.freezing.reparam", "partial": "workbench.core.freezing.partial"}


@dataclass(frozen=True)
class PlanProblem:
    """One thing wrong with a plan.

    Attributes:
        message: what is wrong and what to do.
        rule_index: index of the rule in ``rules`` (None for top-level problems).
        field: the offending key (``"lr_scale"``, ``"select"``...), if any.
        stage_index: index of the stage when the rule is inside ``stages``.
    """

    message: str
    rule_index: int | None = None
    field: str | None = None
    stage_index: int | None = None

    def where(self) -> str:
        """Human-readable location: ``stage 0, rule 2, field 'lr_scale'``."""
        parts = []
        if self.stage_index is not None:
            parts.append(f"stage {self.stage_index}")
        if self.rule_index is not None:
            parts.append(f"rule {self.rule_index}")
        if self.field is not None:
            parts.append(f"field '{self.field}'")
        return ", ".join(parts)

    def __str__(self) -> str:
        where = self.where()
        return f"{where}: {self.message}" if where else self.message


class PlanError(WorkbenchError, ValueError):
    """A plan is invalid. ``problems`` lists every problem found, each with its location.

    The message names the rule index, the field and what to do, one problem per line.
    """

    def __init__(self, problems: PlanProblem | str | Iterable[PlanProblem], source: str | None = None):
        if isinstance(problems, str):
            problems = [PlanProblem(problems)]
        elif isinstance(problems, PlanProblem):
            problems = [problems]
        self.problems: list[PlanProblem] = list(problems)
        self.source = source
        head = f"{source}: " if source else ""
        if len(self.problems) == 1:
            msg = head + str(self.problems[0])
        else:
            msg = head + f"{len(self.problems)} problems in plan:\n" + "\n".join(
                f"  - {p}" for p in self.problems
            )
        super().__init__(msg)

    @property
    def rule_index(self) -> int | None:
        """Rule index of the first problem."""
        return self.problems[0].rule_index if self.problems else None

    @property
    def field(self) -> str | None:
        """Field of the first problem."""
        return self.problems[0].field if self.problems else None

    @property
    def rule_indices(self) -> list[int]:
        """Indices of all rules that have a problem."""
        return sorted({p.rule_index for p in self.problems if p.rule_index is not None})


class PlanWarning(UserWarning):
    """A plan is usable but something is off (for example a different model fingerprint)."""


def _type_name(v: Any) -> str:
    return "null" if v is None else type(v).__name__


@dataclass
class Rule:
    """One rule: a selector and the settings it sets (None = not set by this rule)."""

    select: str
    frozen: bool | None = None
    bn_eval: bool | None = None
    lr_scale: float | None = None
    reparam: dict | bool | None = None
    partial: dict | None = None
    comment: str | None = None
    #: ``reparam: false`` in a later rule switches A+B off again (distinct from "not set").
    reparam_off: bool = False

    def __post_init__(self) -> None:
        """Normalize ``reparam``/``partial`` as a parsed plan does, so that a rule built in code
        (``Rule("fc", reparam=True)``) is the same as one read from a file.

        Raises:
            ValueError: an invalid ``reparam`` or ``partial`` value (the message says why).
        """
        if self.reparam is False:
            self.reparam, self.reparam_off = None, True
        for key in ("reparam", "partial"):
            value = getattr(self, key)
            if value is not None:
                setattr(self, key, _parse_extension(key, value))

    def sets(self, key: str) -> bool:
        """Whether this rule sets ``key``."""
        if key == "reparam":
            return self.reparam is not None or self.reparam_off
        return getattr(self, key) is not None

    def value(self, key: str) -> Any:
        """The value this rule sets for ``key`` (``False`` for a switched-off reparam)."""
        if key == "reparam" and self.reparam_off:
            return False
        return getattr(self, key)

    @property
    def empty(self) -> bool:
        """True when the rule sets nothing."""
        return not any(self.sets(k) for k in _SETTING_KEYS)

    def to_dict(self) -> dict[str, Any]:
        """JSON form, keys in schema order, unset keys omitted."""
        d: dict[str, Any] = {"select": self.select}
        for k in _SETTING_KEYS:
            if self.sets(k):
                v = self.value(k)
                d[k] = copy.deepcopy(v)
        if self.comment is not None:
            d["comment"] = self.comment
        return d


@dataclass
class Stage:
    """Rules that come into force at a step or an epoch (progressive unfreezing)."""

    rules: list[Rule]
    at_step: int | None = None
    at_epoch: int | None = None
    label: str | None = None

    def reached(self, step: int, epoch: int = 0) -> bool:
        """Whether the stage is in force at ``step`` (0-based) / ``epoch``."""
        if self.at_step is not None:
            return step >= self.at_step
        return self.at_epoch is not None and epoch >= self.at_epoch

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        d: dict[str, Any] = {}
        if self.at_step is not None:
            d["at_step"] = self.at_step
        if self.at_epoch is not None:
            d["at_epoch"] = self.at_epoch
        if self.label is not None:
            d["label"] = self.label
        d["rules"] = [r.to_dict() for r in self.rules]
        return d

    def describe(self) -> str:
        """Short label for plots and logs."""
        if self.label:
            return self.label
        what = ", ".join(
            f"{r.select or '*'}: " + " ".join(f"{k}={r.value(k)}" for k in _SETTING_KEYS if r.sets(k))
            for r in self.rules
        )
        return what


@dataclass(frozen=True)
class Effective:
    """Settings in force for one module after all rules.

    Attributes:
        frozen: the module's own parameters do not train.
        bn_eval: a BatchNorm module runs on its running statistics (eval mode) even when the
            model is in train mode. Meaningful for BatchNorm modules only.
        bn_eval_explicit: ``bn_eval`` was set by a rule rather than following ``frozen``.
        lr_scale: multiplier of the base learning rate for the module's parameters.
        reparam: normalized A+B spec, or None.
        partial: normalized sub-tensor freezing spec, or None.
    """

    frozen: bool = False
    bn_eval: bool = False
    bn_eval_explicit: bool = False
    lr_scale: float = 1.0
    reparam: Mapping[str, Any] | None = None
    partial: Mapping[str, Any] | None = None


_DEFAULT = Effective()


def _parse_extension(key: str, raw: Any) -> dict:
    """Validate a ``reparam``/``partial`` value with the module that implements it."""
    try:
        mod = importlib.import_module(_EXTENSIONS[key])
    except ImportError:
        raise ValueError(
            f"'{key}' is not supported by this version of the workbench; remove the key"
        ) from None
    return mod.parse_spec(raw)


def _parse_rule(raw: Any, index: int, stage: int | None, problems: list[PlanProblem]) -> Rule | None:
    def bad(field_: str | None, msg: str) -> None:
        problems.append(PlanProblem(msg, index, field_, stage))

    if not isinstance(raw, dict):
        bad(None, f"a rule must be an object like {{\"select\": \"layer4\", \"frozen\": false}}, got {_type_name(raw)}")
        return None
    ok = True
    for k in raw:
        if k not in _RULE_KEYS:
            close = difflib.get_close_matches(str(k), _RULE_KEYS, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else f"; allowed keys: {', '.join(_RULE_KEYS)}"
            bad(str(k), f"unknown key{hint}")
            ok = False
    select = raw.get("select")
    if "select" not in raw:
        bad("select", "missing; use \"*\" for the whole model or a dotted module path like \"layer4\"")
        ok = False
    elif not isinstance(select, str):
        bad("select", f"must be a string (module path, glob, or type:ClassName), got {_type_name(select)}")
        ok = False
    elif select.startswith("type:") and not select[5:].strip():
        bad("select", "'type:' needs a class name, e.g. \"type:BatchNorm2d\"")
        ok = False
    rule = Rule(select=select if isinstance(select, str) else "")
    for k in ("frozen", "bn_eval"):
        if k in raw and raw[k] is not None:
            if not isinstance(raw[k], bool):
                bad(k, f"must be true or false, got {json.dumps(raw[k]) if _jsonable(raw[k]) else _type_name(raw[k])}")
                ok = False
            else:
                setattr(rule, k, raw[k])
    if "lr_scale" in raw and raw["lr_scale"] is not None:
        v = raw["lr_scale"]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            bad("lr_scale", f"must be a number >= 0 (1 = base learning rate), got {_type_name(v)}")
            ok = False
        elif not math.isfinite(v) or v < 0:
            bad("lr_scale", f"must be a finite number >= 0, got {v}; use 0 or \"frozen\": true to stop a module training")
            ok = False
        else:
            rule.lr_scale = float(v)
    for k in ("reparam", "partial"):
        if k not in raw or raw[k] is None:
            continue
        v = raw[k]
        if v is False:
            if k == "reparam":
                rule.reparam_off = True
            else:
                bad(k, "use an object to set partial freezing, or leave the key out")
                ok = False
            continue
        try:
            setattr(rule, k, _parse_extension(k, v))
        except (ValueError, TypeError) as e:
            bad(k, str(e))
            ok = False
    if "comment" in raw and raw["comment"] is not None:
        if not isinstance(raw["comment"], str):
            bad("comment", "must be a string")
            ok = False
        else:
            rule.comment = raw["comment"]
    return rule if ok else None


def _jsonable(v: Any) -> bool:
    try:
        json.dumps(v)
        return True
    except (TypeError, ValueError):
        return False


class _Matcher:
    """Resolves selectors against a tree (cached per tree)."""

    def __init__(self, tree: ModelTree) -> None:
        self.tree = tree
        self._paths = tree.paths()
        self._cache: dict[str, list[str]] = {}

    def direct(self, select: str) -> list[str]:
        """Modules the selector matches directly."""
        hit = self._cache.get(select)
        if hit is not None:
            return hit
        tree = self.tree
        if select in ("", "*"):
            hit = [""]
        elif select.startswith("type:"):
            cls = select[5:].strip()
            hit = [p for p in self._paths if cls in tree.nodes[p].type_names]
        elif select in tree.nodes:
            hit = [select]
        elif any(c in select for c in "*?["):
            hit = [p for p in self._paths if p and fnmatch.fnmatchcase(p, select)]
        else:
            hit = []
        self._cache[select] = hit
        return hit

    def covered(self, select: str) -> list[str]:
        """Modules the selector reaches: the matches and their subtrees (no duplicates)."""
        direct = self.direct(select)
        if direct == [""]:
            return self._paths
        seen: dict[str, None] = {}
        for p in direct:
            if p in seen:
                continue
            for q in self.tree.subtree(p):
                seen[q] = None
        return list(seen)

    def suggest(self, select: str) -> list[str]:
        if select.startswith("type:"):
            names = sorted({n.type_name for n in self.tree.nodes.values()})
            return ["type:" + n for n in difflib.get_close_matches(select[5:], names, n=3, cutoff=0.5)]
        return difflib.get_close_matches(select, [p for p in self._paths if p], n=3, cutoff=0.6)


_MATCHERS: "dict[int, tuple[ModelTree, _Matcher]]" = {}


def _matcher(tree: ModelTree) -> _Matcher:
    hit = _MATCHERS.get(id(tree))
    if hit is None or hit[0] is not tree:
        if len(_MATCHERS) > 8:
            _MATCHERS.clear()
        hit = (tree, _Matcher(tree))
        _MATCHERS[id(tree)] = hit
    return hit[1]


def select_paths(selector: str, model_or_tree: nn.Module | ModelTree, *, subtree: bool = True) -> list[str]:
    """Module paths a selector reaches.

    Args:
        selector: ``"*"``, a dotted path, a glob, or ``type:ClassName``.
        model_or_tree: the model or its tree.
        subtree: include the subtrees of the matched modules (as inherited keys do).

    Returns:
        Paths in tree order (empty when nothing matches).
    """
    m = _matcher(_as_tree(model_or_tree))
    return m.covered(selector) if subtree else list(m.direct(selector))


def _as_tree(model_or_tree: nn.Module | ModelTree) -> ModelTree:
    if isinstance(model_or_tree, ModelTree):
        return model_or_tree
    if isinstance(model_or_tree, nn.Module):
        return ModelTree.from_model(model_or_tree)
    raise TypeError(f"expected an nn.Module or a ModelTree, got {type(model_or_tree).__name__}")


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

    # ---------------------------------------------------------------- (de)serialization
    @classmethod
    def from_dict(cls, data: Any, source: str | None = None) -> "FreezePlan":
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
                f"a plan must be a JSON object with \"format\": \"{FORMAT}\", got {_type_name(data)}", source
            )
        fmt = data.get("format", FORMAT)
        if fmt != FORMAT:
            problems.append(PlanProblem(f"'format' is {fmt!r}; this is not a freeze plan (expected {FORMAT!r})", field="format"))
        version = data.get("version", VERSION)
        if isinstance(version, bool) or not isinstance(version, int):
            problems.append(PlanProblem(f"'version' must be an integer, got {_type_name(version)}", field="version"))
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
                rule = _parse_rule(r, i, None, problems)
                if rule is not None:
                    rules.append(rule)
        stages: list[Stage] = []
        stages_raw = data.get("stages", [])
        if not isinstance(stages_raw, list):
            problems.append(PlanProblem("'stages' must be a list like [{\"at_step\": 500, \"rules\": [...]}]", field="stages"))
        else:
            for si, s in enumerate(stages_raw):
                st = _parse_stage(s, si, problems)
                if st is not None:
                    stages.append(st)
        desc = data.get("description")
        if desc is not None and not isinstance(desc, str):
            problems.append(PlanProblem("'description' must be a string", field="description"))
            desc = None
        if problems:
            raise PlanError(problems, source)
        return cls(rules=rules, stages=stages, model=dict(model), description=desc)

    def to_dict(self) -> dict[str, Any]:
        """The plan as a JSON-ready dict (schema v1)."""
        d: dict[str, Any] = {"format": FORMAT, "version": VERSION}
        if self.description:
            d["description"] = self.description
        d["model"] = dict(self.model)
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
    def from_json(cls, text: str, source: str | None = None) -> "FreezePlan":
        """Parse JSON text.

        Raises:
            PlanError: invalid JSON (with line and column) or an invalid plan.
        """
        from workbench.core import safe_json  # limits on hostile input: docs/bad-input.md

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
    def load(cls, path: str | os.PathLike[str]) -> "FreezePlan":
        """Read a plan file.

        Args:
            path: a ``.json`` plan file.

        Returns:
            The plan.

        Raises:
            PlanError: the file is missing, unreadable, not JSON, or not a valid plan.
        """
        from workbench.core import safe_json  # limits on hostile input: docs/bad-input.md

        p = Path(path)
        try:
            text = safe_json.read_text(p, what="plan file")
        except FileNotFoundError:
            raise PlanError(f"no such plan file; check the path", str(p)) from None
        except safe_json.JsonInputError as e:
            raise PlanError(str(e), str(p)) from None
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

        Selectors that match nothing are ignored here (see :meth:`validate`).

        Args:
            model_or_tree: the model, or its :class:`ModelTree`.

        Returns:
            ``{path: Effective}`` for every module of the tree.
        """
        tree = _as_tree(model_or_tree)
        m = _matcher(tree)
        state: dict[str, dict[str, Any]] = {p: {} for p in m._paths}
        for rule in self.rules:
            inherited = {k: rule.value(k) for k in _INHERITED if rule.sets(k)}
            if inherited:
                for p in m.covered(rule.select):
                    state[p].update(inherited)
            if rule.partial is not None:
                for p in m.direct(rule.select):
                    state[p]["partial"] = rule.partial
        out: dict[str, Effective] = {}
        cache: dict[tuple, Effective] = {}
        for p, s in state.items():
            key = (s.get("frozen"), s.get("bn_eval"), s.get("lr_scale"), id(s.get("reparam")), id(s.get("partial")))
            eff = cache.get(key)
            if eff is None:
                frozen = bool(s.get("frozen", False))
                explicit = s.get("bn_eval")
                rp = s.get("reparam")
                eff = Effective(
                    frozen=frozen,
                    bn_eval=frozen if explicit is None else bool(explicit),
                    bn_eval_explicit=explicit is not None,
                    lr_scale=float(s.get("lr_scale", 1.0)),
                    reparam=rp if rp else None,
                    partial=s.get("partial"),
                )
                cache[key] = eff
            out[p] = eff
        return out

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
        tree = _as_tree(model_or_tree)
        if path not in tree.nodes:
            raise KeyError(f"no module {path!r} in the model")
        return self.resolve(tree)[path]

    def unmatched(self, model_or_tree: nn.Module | ModelTree) -> list[PlanProblem]:
        """Problems for selectors that match no module, with close names suggested."""
        tree = _as_tree(model_or_tree)
        m = _matcher(tree)
        problems = []

        def check(rules: list[Rule], stage: int | None) -> None:
            for i, r in enumerate(rules):
                if not m.direct(r.select):
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
        tree = _as_tree(model_or_tree)
        problems = self.unmatched(tree)
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
        if problems:
            raise PlanError(problems)
        from workbench.core.freezing import apply as _apply  # extension checks need the live specs

        ext = _apply.check_extensions(self, tree)
        if ext:
            raise PlanError(ext)

    # ---------------------------------------------------------------- stages
    def at(self, step: int, epoch: int = 0) -> "FreezePlan":
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
        return FreezePlan(rules=rules, model=dict(self.model), description=self.description)

    def stage_index(self, step: int, epoch: int = 0) -> int:
        """Number of stages in force at ``step``/``epoch``."""
        return sum(1 for st in self.stages if st.reached(step, epoch))

    # ---------------------------------------------------------------- editing (GUI)
    def copy(self) -> "FreezePlan":
        """A deep copy."""
        return copy.deepcopy(self)

    def set(self, path: str, key: str, value: Any, tree: ModelTree) -> None:
        """Set ``key`` for the subtree at ``path`` so that it is in force there, as a click does.

        Explicit settings of ``key`` on modules inside the subtree are removed, and the
        setting is placed after any rule that would otherwise override it. Rules are kept in
        tree order (parents first) where that does not change their meaning.

        Args:
            path: dotted module path (``""`` for the root).
            key: one of ``frozen``, ``bn_eval``, ``lr_scale``, ``reparam``.
            value: the value; ``None`` removes the explicit setting at ``path`` (inherit).
            tree: the model's tree.

        Raises:
            KeyError: no module at ``path``.
            ValueError: unknown key or invalid value.
        """
        if path not in tree.nodes:
            raise KeyError(f"no module {path!r} in the model")
        if key not in _INHERITED:
            raise ValueError(f"cannot set {key!r} by path; use one of {', '.join(_INHERITED)}")
        if value is not None:
            probe = _parse_rule({"select": path or "*", key: value}, 0, None, problems := [])
            if probe is None:
                raise ValueError(str(problems[0]))
        sel = path or "*"
        prefix = path + "." if path else ""
        # 1. drop explicit settings of `key` inside the subtree (path rules only)
        for r in self.rules:
            if r.sets(key) and not _is_pattern(r.select) and (
                r.select in (path, sel) or (r.select not in ("", "*") and r.select.startswith(prefix))
            ):
                _unset(r, key)
        self.rules = [r for r in self.rules if not r.empty or r.comment]
        if value is None:
            return
        # 2. put it in force: at the end (later rule wins), merged into a rule for the same path
        m = _matcher(tree)
        own = next((r for r in reversed(self.rules) if r.select == sel), None)
        target = own
        if own is not None:
            after = self.rules[self.rules.index(own) + 1 :]
            covered = set(m.covered(sel))
            if any(r.sets(key) and covered.intersection(m.covered(r.select)) for r in after):
                target = None
        if target is None:
            target = Rule(select=sel)
            self.rules.append(target)
        _set(target, key, probe)
        self.tidy(tree)

    def tidy(self, tree: ModelTree) -> None:
        """Sort runs of plain-path rules into tree order, when that keeps the meaning."""
        nodes = tree.nodes
        before = self.resolve(tree)
        new: list[Rule] = []
        run: list[Rule] = []

        def flush() -> None:
            run.sort(key=lambda r: -1 if r.select in ("", "*") else nodes[r.select].order)
            new.extend(run)
            run.clear()

        for r in self.rules:
            if r.select in ("", "*") or (not _is_pattern(r.select) and r.select in nodes):
                run.append(r)
            else:
                flush()
                new.append(r)
        flush()
        old = self.rules
        self.rules = new
        if self.resolve(tree) != before:
            self.rules = old

    # ---------------------------------------------------------------- summaries
    def summary(self, model_or_tree: nn.Module | ModelTree) -> str:
        """One paragraph saying what the plan does to a model."""
        tree = _as_tree(model_or_tree)
        eff = self.resolve(tree)
        total = tree.total_params
        trainable = sum(n.own_params for p, n in tree.nodes.items() if not eff[p].frozen)
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
            from workbench.core.freezing.reparam import changes_function

            verdicts = [changes_function(r.reparam) for r in self.rules if r.reparam]
            if any(verdicts):
                parts.append("A+B does not start at the current weights: the model's function changes")
            elif None in verdicts:
                parts.append("A+B reads A or B from a file: the model's function changes unless they add up to the loaded weights")
        if self.stages:
            parts.append(f"{len(self.stages)} stages")
        return "; ".join(parts)

    # ---------------------------------------------------------------- applying
    def apply(self, model: nn.Module, *, strict: bool = False, base_dir: str | os.PathLike[str] | None = None):
        """Apply the plan to ``model`` (see :func:`workbench.core.freezing.apply.apply_plan`).

        Returns:
            AppliedPlan: handle for param groups, counts, verify, update and remove.
        """
        from workbench.core.freezing.apply import apply_plan

        return apply_plan(model, self, strict=strict, base_dir=base_dir)

    @classmethod
    def from_model(cls, model: nn.Module) -> "FreezePlan":
        """Capture a model's current requires_grad, BatchNorm modes and A+B as a compact plan.

        Args:
            model: the model as a script left it.

        Returns:
            A plan that, applied to a fresh copy of the architecture, reproduces that state.
        """
        from workbench.core.freezing.capture import capture_plan

        return capture_plan(model)


def _is_pattern(select: str) -> bool:
    return select.startswith("type:") or (select not in ("", "*") and any(c in select for c in "*?["))


def _unset(rule: Rule, key: str) -> None:
    setattr(rule, key, None)
    if key == "reparam":
        rule.reparam_off = False


def _set(target: Rule, key: str, probe: Rule) -> None:
    setattr(target, key, getattr(probe, key))
    if key == "reparam":
        target.reparam_off = probe.reparam_off


def _parse_stage(raw: Any, si: int, problems: list[PlanProblem]) -> Stage | None:
    if not isinstance(raw, dict):
        problems.append(PlanProblem("a stage must be an object like {\"at_step\": 500, \"rules\": [...]}", stage_index=si))
        return None
    ok = True
    for k in raw:
        if k not in _STAGE_KEYS:
            problems.append(PlanProblem(f"unknown key {k!r} in stage; allowed: {', '.join(sorted(_STAGE_KEYS))}", field=str(k), stage_index=si))
            ok = False
    at_step, at_epoch = raw.get("at_step"), raw.get("at_epoch")
    if (at_step is None) == (at_epoch is None):
        problems.append(PlanProblem("give exactly one of 'at_step' or 'at_epoch'", field="at_step", stage_index=si))
        ok = False
    for k, v in (("at_step", at_step), ("at_epoch", at_epoch)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            problems.append(PlanProblem(f"'{k}' must be an integer >= 0, got {v!r}", field=k, stage_index=si))
            ok = False
    label = raw.get("label")
    if label is not None and not isinstance(label, str):
        problems.append(PlanProblem("'label' must be a string", field="label", stage_index=si))
        ok = False
    rules_raw = raw.get("rules")
    rules: list[Rule] = []
    if not isinstance(rules_raw, list) or not rules_raw:
        problems.append(PlanProblem("'rules' must be a non-empty list of rules", field="rules", stage_index=si))
        ok = False
    else:
        for i, r in enumerate(rules_raw):
            rule = _parse_rule(r, i, si, problems)
            if rule is None:
                ok = False
            else:
                rules.append(rule)
    if not ok:
        return None
    return Stage(rules=rules, at_step=at_step, at_epoch=at_epoch, label=label)
