"""The table of rule keys: one row per key drives parsing, resolution, JSON and the schema docs.

Each :class:`PlanKey` row says how a key's JSON value is checked, whether the subtree of what
a rule selects inherits it, its value when no rule sets it, how it shows in
:meth:`~workbench.core.plan.rules.Stage.describe`, and its line in the schema table of
``docs/plan-schema.md`` (:func:`schema_markdown`). :class:`~workbench.core.plan.rules.Rule`
and :class:`Effective` hold one typed field per setting row; a test keeps them in step.

A row also carries what the window needs, so that no GUI module names a key: a human
:attr:`PlanKey.label`, how a value reads as on/off (:meth:`PlanKey.is_on`), how a typed value
is read (:meth:`PlanKey.parse_text`), the undo text of an edit (:meth:`PlanKey.edit_text`), and
whether the key is a number edited as text (:attr:`PlanKey.numeric`).

A row also says what the effect layers need: whether parameters with different values train
in separate optimizer param groups (:attr:`PlanKey.group`, :func:`group_values`), how
:class:`~workbench.core.freezing.plan_diff.PlanDiff` reports a change (:attr:`PlanKey.diff`),
the key in one-line summaries (:attr:`PlanKey.short`, :meth:`PlanKey.summary`), and how the
exported script carries it (:attr:`PlanKey.export`, refused by default).

Adding a key: a row in :data:`RULE_KEYS`, a field on ``Rule`` and ``Effective``, and, unless it
acts through the optimizer's param groups, its apply logic in
:mod:`workbench.core.freezing.plan_handle` (see docs/architecture.md, "How to add a plan key").
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workbench.core.plan.partial_spec import PartialSpec
from workbench.core.plan.reparam_spec import ReparamSpec
from workbench.core.plan.spec_base import ExtensionSpec

__all__ = [
    "CHECKPOINT_KEY",
    "DIFF_KINDS",
    "DIRECT_KEYS",
    "EXPORT_RULES",
    "INHERITED_KEYS",
    "PARAM_KEYS",
    "PLAN_KEYS",
    "UNSELECTED_VALUES",
    "cache_key",
    "RULE_KEYS",
    "RULE_KEY_NAMES",
    "SETTING_KEYS",
    "Effective",
    "PlanKey",
    "effective_from",
    "group_order",
    "group_values",
    "rule_key",
    "schema_markdown",
]


def _type_name(v: Any) -> str:
    return "null" if v is None else type(v).__name__


def _jsonable(v: Any) -> bool:
    try:
        json.dumps(v)
        return True
    except (TypeError, ValueError):
        return False


def _parse_bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"must be true or false, got {json.dumps(v) if _jsonable(v) else _type_name(v)}")
    return v


def _parse_lr_scale(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"must be a number >= 0 (1 = base learning rate), got {_type_name(v)}")
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"must be a finite number >= 0, got {v}; use 0 or \"frozen\": true to stop a module training")
    return float(v)


def _parse_weight_decay(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"must be a number >= 0 (the absolute weight decay, e.g. 0.05), got {_type_name(v)}")
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"must be a finite number >= 0, got {v}; use 0 for no weight decay")
    return float(v)


def _parse_comment(v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError("must be a string")
    return v


def _parse_partial(v: Any) -> PartialSpec:
    if v is False:
        raise ValueError("use an object to set partial freezing, or leave the key out")
    return PartialSpec.parse(v)


def _show_spec(v: Any) -> str:
    return str(v.to_json()) if isinstance(v, ExtensionSpec) else str(v)


@dataclass(frozen=True)
class PlanKey:
    """One rule key.

    Attributes:
        name: the JSON key.
        json_type: the JSON type, for the schema table.
        parse: checks a JSON value and returns it normalized; raises ``ValueError`` (message:
            what is wrong and what to do) or a spec error.
        inherited: the subtree of what a rule selects takes the value (False: only the
            modules the selector matches directly).
        default: the value in force when no rule sets the key.
        doc: what the key means, for the schema table.
        setting: the key is a setting (False for ``select`` and ``comment``).
        can_switch_off: ``false`` switches the key off again in a later rule (kept as
            ``Rule.<name>_off``).
        follows: the key defaults to the value of this other key (``bn_eval`` follows ``frozen``).
        spec: the typed spec class of an extension key (its value on a rule is an instance).
        show: how a value shows in :meth:`Stage.describe`.
        per_param: a ``"param:GLOB"`` selector may set the key on single parameters.
        label: the key's name for people (tree headers, undo texts, error titles); empty:
            the JSON name.
        switch: the key reads as on/off where the window shows and edits it: a value counts by
            its truthiness (:meth:`is_on`; an A+B spec is "on", ``false``/absent "off").
        numeric: a number >= 0 that the window edits as text (:meth:`parse_text`; empty text
            inherits).
        batchnorm_only: the key has an effect on BatchNorm modules only (``bn_eval``).
        verbs: the undo texts of switching the key on and off (``("Freeze", "Unfreeze")``);
            None: ``"<label> on: ..."`` / ``"<label> off: ..."``.
        text_prefix: characters a typed number may start with (``"×"`` for ``LR ×``).
        hint: what a typed value must be, for the message when it is not (``"a learning-rate
            multiplier; enter a number >= 0 ..."``); empty: from ``json_type``.
        export: how the exported plain-PyTorch script carries the key (one of
            :data:`EXPORT_RULES`); ``"refuse"`` (the default): a plan that sets it is not
            exported, and the message names the key.
        group: parameters whose values of the key differ go into separate optimizer param
            groups, each carrying its value under the key's name
            (:meth:`AppliedPlan.param_groups <workbench.core.freezing.plan_handle.AppliedPlan.param_groups>`;
            ``lr_scale`` and ``weight_decay``).
        diff: how :class:`~workbench.core.freezing.plan_diff.PlanDiff` reports a change of the
            key (one of :data:`DIFF_KINDS`): ``"value"`` (the default: the parameters, for a
            :attr:`per_param` key, or modules whose value in force changed, under
            :attr:`short`), ``"requires_grad"`` (as parameters newly frozen or trainable:
            ``frozen``), ``"tensors"`` (as modules whose tensors were re-installed: the
            extension keys).
        short: the key in one-line texts (a plan change's marker on the plots, a rule's
            :meth:`summary`): ``"lr×"``; empty: the JSON name.
        words: how :meth:`summary` reads an on and an off value (``("frozen", "trains")``);
            None: by the value.
    """

    name: str
    json_type: str
    parse: Callable[[Any], Any]
    inherited: bool
    default: Any
    doc: str
    setting: bool = True
    can_switch_off: bool = False
    follows: str | None = None
    spec: type[ExtensionSpec] | None = None
    show: Callable[[Any], str] = str
    per_param: bool = False
    label: str = ""
    switch: bool = False
    numeric: bool = False
    batchnorm_only: bool = False
    verbs: tuple[str, str] | None = None
    text_prefix: str = ""
    hint: str = ""
    export: str = "refuse"
    group: bool = False
    diff: str = "value"
    short: str = ""
    words: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        """An empty label or short text is the JSON name; an unknown diff kind is refused."""
        if not self.label:
            object.__setattr__(self, "label", self.name)
        if not self.short:
            object.__setattr__(self, "short", self.name)
        if self.diff not in DIFF_KINDS:
            raise ValueError(f"plan key {self.name!r}: diff must be one of {', '.join(DIFF_KINDS)}, not {self.diff!r}")

    def summary(self, value: Any) -> str:
        """The key and a value of it in a few words, for one-line plan summaries (the runs table).

        Args:
            value: a value of the key as a plan file holds it (possibly hand-edited).

        Returns:
            ``"frozen"``/``"trains"`` (by :attr:`words`), ``"eval"`` for ``True``,
            ``"lr×0.1"`` for a :attr:`numeric` key with a :attr:`short` text of its own,
            else ``"name=value"``.
        """
        if self.words is not None:
            return self.words[0] if self.is_on(value) else self.words[1]
        if value is True:
            return self.name
        if self.numeric and self.short != self.name:
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            return f"{self.short}{value:g}" if number else f"{self.short}{value}"
        return f"{self.name}={value}"

    def is_on(self, value: Any) -> bool:
        """Whether a value of the key reads as "on" (its truthiness: a spec is on, ``False``,
        ``None`` and ``0`` are off).

        Args:
            value: a value of the key (parsed, or as the window passes it).

        Returns:
            True for on.
        """
        return bool(value)

    def gui_value(self, value: Any) -> Any:
        """A value as the window compares it: on/off for a :attr:`switch` key, else itself.

        Args:
            value: a value of the key.

        Returns:
            ``is_on(value)`` for a switch, else ``value``.
        """
        return self.is_on(value) if self.switch else value

    def agrees(self, current: Any, value: Any) -> bool:
        """Whether a value in force (``Effective.<name>``) is ``value`` as the window sees it.

        Args:
            current: the value in force on a module.
            value: the value a click sets.

        Returns:
            True when they are the same (for a switch: both on or both off).
        """
        return bool(self.gui_value(current) == self.gui_value(value))

    def parse_text(self, raw: Any) -> Any:
        """A value typed in the window's editor of a :attr:`numeric` key, checked by :attr:`parse`.

        Args:
            raw: the text entered (leading :attr:`text_prefix` characters and spaces are
                dropped), or a number.

        Returns:
            The value, or None for empty text (inherit).

        Raises:
            ValueError: not a valid value; the message says what to enter.
        """
        if raw is None:
            return None
        value: Any = raw
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            text = str(raw).strip().lstrip(self.text_prefix).strip()
            if not text:
                return None
            try:
                value = float(text)
            except ValueError:
                raise ValueError(self._enter(raw)) from None
        try:
            return self.parse(value)
        except (ValueError, TypeError):
            raise ValueError(self._enter(raw)) from None

    def _enter(self, raw: Any) -> str:
        hint = self.hint or f"a value of {self.name}; enter a {self.json_type}"
        return f"{raw!r} is not {hint}, or leave it empty to inherit"

    def edit_text(self, value: Any, what: str) -> str:
        """The undo text of setting the key to ``value`` on ``what``.

        Args:
            value: the value set (None: inherit, or follow :attr:`follows`).
            what: the modules, in words (``"layer1"``, ``"3 modules"``).

        Returns:
            ``"Freeze layer1"``, ``"A+B on: fc"``, ``"BN eval follows frozen: bn1"``,
            ``"LR × 0.1 on layer4"``, ``"LR × inherited on layer4"``.
        """
        if self.verbs is not None:
            return f"{self.verbs[0] if self.is_on(value) else self.verbs[1]} {what}"
        if self.switch:
            if value is None and self.follows is not None:
                return f"{self.label} follows {self.follows}: {what}"
            return f"{self.label} {'on' if self.is_on(value) else 'off'}: {what}"
        if self.numeric:
            return f"{self.label} {value:g} on {what}" if value is not None else f"{self.label} inherited on {what}"
        return f"Set {self.name} on {what}"


#: How :class:`~workbench.core.freezing.plan_diff.PlanDiff` reports a change of a key (:attr:`PlanKey.diff`).
DIFF_KINDS: tuple[str, ...] = ("value", "requires_grad", "tensors")


#: Keys of the plan language beyond freezing: train/eval behaviour and weight decay.
_LANGUAGE_KEYS: tuple[PlanKey, ...] = (
    PlanKey(
        "eval", "boolean", _parse_bool, True, False,
        "the modules stay in eval mode across `model.train()` (Dropout, DropPath, BatchNorm, anything "
        "with train/eval behaviour)",
        label="Eval mode", switch=True, export="tables",
    ),
    PlanKey(
        "weight_decay", "number >= 0", _parse_weight_decay, True, None,
        "absolute weight decay of the parameters; absent: the optimizer's", per_param=True,
        label="Weight decay", numeric=True,
        hint="a weight decay; enter a number >= 0 (the absolute decay, e.g. 0.05; 0 for none)", export="tables",
        group=True,
    ),
)
# ---- activation checkpointing (its own block: a plain boolean, not inherited)
#: ``checkpoint: true`` recomputes the selected modules' activations in backward.
CHECKPOINT_KEY = PlanKey(
    "checkpoint", "boolean", _parse_bool, False, False,
    "activation checkpointing: the selected modules keep no activations and run their forward again "
    "in backward (less memory, about one more forward of them per step); the root uses the model's own "
    "`set_grad_checkpointing`/`gradient_checkpointing_enable` when it has one (see docs/scaling.md)",
    label="Checkpointing", switch=True, export="memory_only",
)
# ---- end of activation checkpointing

#: How the exported script carries a key (:attr:`PlanKey.export`): ``tables`` (the resolved
#: settings tables: requires_grad, eval locks, learning-rate multipliers, weight decays),
#: ``a_plus_b`` (W = A + B, full-rank or low-rank, as plain code), ``partial`` (sub-tensor
#: freezing as gradient masks), ``memory_only`` (changes memory, not the numbers: named in
#: the script's docstring, not applied), ``none`` (not a setting), ``refuse`` (not exported).
EXPORT_RULES: tuple[str, ...] = ("tables", "a_plus_b", "partial", "memory_only", "none", "refuse")

#: Every rule key, in schema (and JSON output) order.
RULE_KEYS: tuple[PlanKey, ...] = (
    PlanKey(
        "select", "string", str, False, None,
        '`"*"` (whole model), a dotted module path, an fnmatch glob on paths, `"type:ClassName"`, or '
        '`"param:GLOB"` (an fnmatch glob on dotted parameter names; sets `frozen`, `lr_scale` and '
        '`weight_decay` per parameter: `"param:*.bias"` is BitFit); required',
        setting=False, label="Select", export="tables",
    ),
    PlanKey(
        "frozen", "boolean", _parse_bool, True, False, "the modules' own parameters do not train", per_param=True,
        label="Frozen", switch=True, verbs=("Freeze", "Unfreeze"), export="tables", diff="requires_grad",
        words=("frozen", "trains"),
    ),
    PlanKey(
        "bn_eval", "boolean", _parse_bool, True, False,
        "BatchNorm runs on its running statistics (eval mode) while the model trains; absent: follows `frozen`",
        follows="frozen", label="BN eval", switch=True, batchnorm_only=True, export="tables", short="BN eval",
    ),
    PlanKey(
        "lr_scale", "number >= 0", _parse_lr_scale, True, 1.0,
        "multiplier of the base learning rate; absent: the plan's `lr_decay` for the layer, else 1",
        per_param=True, label="LR ×", numeric=True, text_prefix="×x*",
        hint="a learning-rate multiplier; enter a number >= 0 (1 = base rate, 0.1 = ten times slower)",
        export="tables", group=True, short="lr×",
    ),
    *_LANGUAGE_KEYS,
    PlanKey(
        "reparam", "object, true or false", ReparamSpec.parse, True, None,
        "A+B: train B in W = A + B with A fixed (see docs/reparam.md); `true` for the defaults, "
        "`false` switches it off; `rank`, `alpha`, `dropout`, `init` make B = (alpha/rank) U V low-rank "
        "(LoRA) on Linear, Conv1d/2d, Conv1D and Embedding layers; `\"dora\": true` (with `rank`) adds "
        "DoRA's trained magnitude per output channel (not on Embedding)",
        can_switch_off=True, spec=ReparamSpec, show=_show_spec, label="A+B", switch=True, export="a_plus_b",
        diff="tensors", short="A+B", words=("A+B", "no A+B"),
    ),
    PlanKey(
        "partial", "object", _parse_partial, False, None,
        "sub-tensor freezing: the ranges of a weight that train (see docs/partial.md)",
        spec=PartialSpec, show=_show_spec, label="Partial freezing", diff="tensors", export="partial",
    ),
    CHECKPOINT_KEY,
    PlanKey(
        "comment", "string", _parse_comment, False, None, "free text, kept with the rule", setting=False,
        label="Comment", export="none",
    ),
)
RULE_KEY_NAMES: tuple[str, ...] = tuple(k.name for k in RULE_KEYS)

# ---- plan-level keys (top level of the plan file, beside "rules")
#: Values of the top-level ``unselected`` key.
UNSELECTED_VALUES: tuple[str, ...] = ("train", "keep")
#: ``(name, JSON type, default, meaning)`` of the plan-level keys, for the schema docs.
PLAN_KEYS: tuple[tuple[str, str, Any, str], ...] = (
    (
        "unselected", '`"train"` or `"keep"`', "train",
        "modules no rule selects: `\"train\"` gives them the defaults (they train); `\"keep\"` leaves "
        "their `requires_grad` and train/eval mode as the model has them (a PEFT model, a model a script "
        "partly froze)",
    ),
    (
        "lr_decay", "number in (0, 1]", None,
        "layer-wise learning-rate decay: a parameter of layer i of L gets `lr_scale = lr_decay ** (L - 1 - i)` "
        "unless a rule sets `lr_scale`; layers from a timm model's `group_matcher` (as timm's "
        "`param_groups_layer_decay`), else the repeated blocks in registration order",
    ),
)
SETTING_KEYS: tuple[PlanKey, ...] = tuple(k for k in RULE_KEYS if k.setting)
INHERITED_KEYS: tuple[str, ...] = tuple(k.name for k in SETTING_KEYS if k.inherited)
#: Settings that reach only the modules a selector matches directly (not their subtree).
DIRECT_KEYS: tuple[str, ...] = tuple(k.name for k in SETTING_KEYS if not k.inherited)
#: Keys a ``"param:GLOB"`` selector may set.
PARAM_KEYS: tuple[str, ...] = tuple(k.name for k in SETTING_KEYS if k.per_param)


def rule_key(name: str) -> PlanKey:
    """The row of a rule key.

    Args:
        name: the JSON key.

    Returns:
        The row.

    Raises:
        KeyError: not a rule key.
    """
    for k in RULE_KEYS:
        if k.name == name:
            return k
    raise KeyError(name)


@dataclass(frozen=True)
class Effective:
    """Settings in force for one module after all rules (one field per setting key).

    Attributes:
        frozen: the module's own parameters do not train.
        bn_eval: a BatchNorm module runs on its running statistics (eval mode) even when the
            model is in train mode. Meaningful for BatchNorm modules only.
        bn_eval_explicit: ``bn_eval`` was set by a rule rather than following ``frozen``.
        lr_scale: multiplier of the base learning rate for the module's parameters.
        reparam: the A+B spec, or None.
        partial: the sub-tensor freezing spec, or None.
        eval: the module stays in eval mode across ``model.train()``.
        weight_decay: absolute weight decay, or None for the optimizer's.
        kept: no rule selects the module and the plan says ``"unselected": "keep"``: its
            parameters keep the ``requires_grad`` and its mode the model had (the fields
            above are then only defaults).
        checkpoint: activation checkpointing of the module (set on the module itself, not inherited).
    """

    frozen: bool = False
    bn_eval: bool = False
    bn_eval_explicit: bool = False
    lr_scale: float = 1.0
    reparam: ReparamSpec | None = None
    partial: PartialSpec | None = None
    eval: bool = False
    weight_decay: float | None = None
    # ---- plan-level: what a plan does not select (not a rule key)
    kept: bool = False
    checkpoint: bool = False


def effective_from(state: dict[str, Any], *, kept: bool = False) -> Effective:
    """The settings in force from the values the rules left on a module.

    Args:
        state: ``{key: value}`` for the keys some rule set (``False`` for a switched-off key).
        kept: no rule selects the module and the plan keeps unselected modules as they are.

    Returns:
        The settings, with defaults for the keys no rule set.
    """
    values: dict[str, Any] = {}
    for key in SETTING_KEYS:
        v = state.get(key.name)
        if key.can_switch_off and v is False:
            v = None
        if key.follows is not None:
            values[f"{key.name}_explicit"] = v is not None
            if v is None:
                v = values[key.follows]
        values[key.name] = key.default if v is None else v
    return Effective(**values, kept=kept)


def cache_key(state: dict[str, Any]) -> tuple[Any, ...]:
    """A key equal for two modules exactly when :func:`effective_from` gives equal settings.

    Spec values count by identity (they are shared between the modules one rule reaches).

    Args:
        state: as for :func:`effective_from`.

    Returns:
        A hashable tuple.
    """
    return tuple(
        id(v) if isinstance(v, ExtensionSpec) else v for v in (state.get(k.name) for k in SETTING_KEYS)
    )


def group_values(settings: Effective, *, weight_decay: float, no_decay: bool = False) -> dict[str, Any]:
    """What a parameter's optimizer param group carries: the value of each ``group`` key.

    Args:
        settings: the settings in force for the parameter.
        weight_decay: the optimizer's weight decay, for a parameter no ``weight_decay`` rule reaches.
        no_decay: the parameter takes no weight decay whatever the rules say (a bias, a norm).

    Returns:
        ``{key name: value}`` in key-table order (``lr_scale``, ``weight_decay``, then any
        other ``group`` key); parameters with equal values share a group.
    """
    out: dict[str, Any] = {}
    for k in SETTING_KEYS:
        if not k.group:
            continue
        value = getattr(settings, k.name)
        if k.name == "weight_decay":
            value = 0.0 if no_decay else (weight_decay if value is None else value)
        out[k.name] = value
    return out


def group_order(values: tuple[Any, ...]) -> tuple[tuple[int, Any], ...]:
    """A sort key of param groups: larger numbers first (``lr_scale``, then weight decay), None
    after the numbers, other values by their text.

    Args:
        values: the values of a group, as :func:`group_values` lists them.

    Returns:
        A key for ``sorted``.
    """
    def one(v: Any) -> tuple[int, Any]:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return (0, -v)
        return (1, "") if v is None else (2, repr(v))

    return tuple(one(v) for v in values)


def schema_markdown() -> str:
    """The schema table of rule keys, as in ``docs/plan-schema.md``.

    Returns:
        Markdown text.
    """
    plan_lines = [
        "",
        "## Plan-level keys",
        "",
        "| key | JSON type | default | meaning |",
        "| --- | --- | --- | --- |",
    ] + [f"| `{name}` | {json_type} | `{json.dumps(default)}` | {doc} |" for name, json_type, default, doc in PLAN_KEYS]
    lines = [
        "# Plan schema: rule keys",
        "",
        "<!-- generated by workbench.core.plan.keys.schema_markdown(); edit the table there -->",
        "",
        "A plan file is a JSON object `{\"format\": \"freeze-plan\", \"version\": 1, \"model\": {...}, "
        "\"rules\": [...], \"stages\": [...]}`. Rules apply in order; a later rule wins for the keys it sets. "
        "A stage (`{\"at_step\": N, \"rules\": [...]}` or `at_epoch`) adds its rules after the base rules "
        "once reached; stages are listed in the order they are reached (a plan listing them out of order "
        "is refused), so a later stage wins.",
        "",
        "| key | JSON type | inherited by the subtree | default | meaning |",
        "| --- | --- | --- | --- | --- |",
    ]
    for k in RULE_KEYS:
        if not k.setting:
            default = "—"
        elif k.follows:
            default = f"follows `{k.follows}`"
        else:
            default = f"`{json.dumps(k.default)}`"
        inherited = "yes" if k.inherited else ("no (matched modules only)" if k.setting else "—")
        lines.append(f"| `{k.name}` | {k.json_type} | {inherited} | {default} | {k.doc} |")
    return "\n".join(lines + plan_lines) + "\n"
