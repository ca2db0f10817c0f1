"""One rule and one stage of a plan, and how their JSON is read (with one problem per mistake)."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

from workbench.core.plan.keys import PARAM_KEYS, RULE_KEY_NAMES, RULE_KEYS, SETTING_KEYS, UNSELECTED_VALUES, rule_key
from workbench.core.plan.partial_spec import PartialSpec
from workbench.core.plan.problems import PlanProblem
from workbench.core.plan.reparam_spec import ReparamSpec
from workbench.core.plan.selectors import PARAM_PREFIX, is_param_selector
from workbench.core.plan.spec_base import ExtensionSpec
from workbench.core.suggest import did_you_mean

__all__ = ["Rule", "Stage", "parse_rule", "parse_stage", "type_name", "unselected_problem"]

_STAGE_KEYS = {"at_step", "at_epoch", "rules", "label"}


def type_name(v: Any) -> str:
    return "null" if v is None else type(v).__name__


@dataclass
class Rule:
    """One rule: a selector and the settings it sets (None = not set by this rule).

    The keys are the rows of :data:`workbench.core.plan.keys.RULE_KEYS`.
    """

    select: str
    frozen: bool | None = None
    bn_eval: bool | None = None
    lr_scale: float | None = None
    reparam: ReparamSpec | None = None
    partial: PartialSpec | None = None
    eval: bool | None = None
    weight_decay: float | None = None
    checkpoint: bool | None = None
    comment: str | None = None
    #: ``reparam: false`` in a later rule switches A+B off again (distinct from "not set").
    reparam_off: bool = False

    def __post_init__(self) -> None:
        """Parse ``reparam``/``partial`` as a parsed plan does, so that a rule built in code
        (``Rule("fc", reparam=True)``, ``Rule("fc", reparam=False)``) is the same as one read
        from a file.

        Raises:
            ValueError: an invalid ``reparam`` or ``partial`` value (the message says why).
        """
        for key in SETTING_KEYS:
            value = getattr(self, key.name)
            if key.can_switch_off and value is False:
                setattr(self, key.name, None)
                setattr(self, f"{key.name}_off", True)
            elif value is not None and key.spec is not None:  # extension keys: a typed spec
                setattr(self, key.name, key.parse(value))

    def sets(self, key: str) -> bool:
        """Whether this rule sets ``key``."""
        return getattr(self, key) is not None or (rule_key(key).can_switch_off and getattr(self, f"{key}_off"))

    def value(self, key: str) -> Any:
        """The value this rule sets for ``key`` (``False`` for a switched-off key)."""
        if rule_key(key).can_switch_off and getattr(self, f"{key}_off"):
            return False
        return getattr(self, key)

    def unset(self, key: str) -> None:
        """Stop setting ``key`` (a switched-off key is no longer switched off either)."""
        setattr(self, key, None)
        if rule_key(key).can_switch_off:
            setattr(self, f"{key}_off", False)

    def take(self, key: str, other: Rule) -> None:
        """Set ``key`` as ``other`` sets it."""
        setattr(self, key, getattr(other, key))
        if rule_key(key).can_switch_off:
            setattr(self, f"{key}_off", getattr(other, f"{key}_off"))

    @property
    def empty(self) -> bool:
        """True when the rule sets nothing."""
        return not any(self.sets(k.name) for k in SETTING_KEYS)

    def to_dict(self) -> dict[str, Any]:
        """JSON form, keys in schema order, unset keys omitted."""
        d: dict[str, Any] = {"select": self.select}
        for k in SETTING_KEYS:
            if self.sets(k.name):
                v = self.value(k.name)
                d[k.name] = v.to_json() if isinstance(v, ExtensionSpec) else copy.deepcopy(v)
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
        return ", ".join(
            f"{r.select or '*'}: "
            + " ".join(f"{k.name}={k.show(r.value(k.name))}" for k in SETTING_KEYS if r.sets(k.name))
            for r in self.rules
        )


def parse_rule(raw: Any, index: int, stage: int | None, problems: list[PlanProblem]) -> Rule | None:
    def bad(field_: str | None, msg: str) -> None:
        problems.append(PlanProblem(msg, index, field_, stage))

    if not isinstance(raw, dict):
        bad(None, f"a rule must be an object like {{\"select\": \"layer4\", \"frozen\": false}}, got {type_name(raw)}")
        return None
    ok = True
    for k in raw:
        if k not in RULE_KEY_NAMES:
            hint = did_you_mean(str(k), RULE_KEY_NAMES) or f"allowed keys: {', '.join(RULE_KEY_NAMES)}"
            bad(str(k), f"unknown key; {hint}")
            ok = False
    select = raw.get("select")
    if "select" not in raw:
        bad("select", "missing; use \"*\" for the whole model or a dotted module path like \"layer4\"")
        ok = False
    elif not isinstance(select, str):
        bad("select", f"must be a string (module path, glob, or type:ClassName), got {type_name(select)}")
        ok = False
    elif select.startswith("type:") and not select[5:].strip():
        bad("select", "'type:' needs a class name, e.g. \"type:BatchNorm2d\"")
        ok = False
    elif is_param_selector(select):
        if not select[len(PARAM_PREFIX):].strip():
            bad("select", "'param:' needs a glob on parameter names, e.g. \"param:*.bias\"")
            ok = False
        for k in raw:
            if k in RULE_KEY_NAMES and rule_key(k).setting and k not in PARAM_KEYS and raw[k] is not None:
                bad(k, f"a \"param:\" selector sets only {', '.join(PARAM_KEYS)}; select the module to set {k!r}")
                ok = False
    rule = Rule(select=select if isinstance(select, str) else "")
    for key in RULE_KEYS:
        if key.name == "select" or raw.get(key.name) is None:
            continue
        v = raw[key.name]
        if key.can_switch_off and v is False:
            setattr(rule, f"{key.name}_off", True)
            continue
        try:
            setattr(rule, key.name, key.parse(v))
        except (ValueError, TypeError) as e:
            bad(key.name, str(e))
            ok = False
    return rule if ok else None


def unselected_problem(value: Any) -> PlanProblem | None:
    if value in UNSELECTED_VALUES:
        return None
    shown = json.dumps(value) if isinstance(value, (str, int, float, bool)) or value is None else type_name(value)
    return PlanProblem(
        f"'unselected' must be \"train\" (modules no rule selects train) or \"keep\" (they stay as the "
        f"model has them), got {shown}",
        field="unselected",
    )


def parse_stage(raw: Any, si: int, problems: list[PlanProblem]) -> Stage | None:
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
            rule = parse_rule(r, i, si, problems)
            if rule is None:
                ok = False
            else:
                rules.append(rule)
    if not ok:
        return None
    return Stage(rules=rules, at_step=at_step, at_epoch=at_epoch, label=label)
