"""A Hugging Face PEFT LoRA adapter config as plan rules (behind :meth:`FreezePlan.from_peft`).

``{"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": ["query", "value"], ...}``
becomes::

    {"select": "*", "frozen": true}
    {"select": "<each target>", "frozen": false,
     "reparam": {"kind": "a_plus_b", "mode": "fused", "rank": 8, "alpha": 16, "dropout": 0.0, "init": "kaiming"}}
    {"select": "<each of modules_to_save>", "frozen": false}

With a model, targets resolve as PEFT resolves them (a string is a regular expression matched
against whole module paths; a list entry matches a path equal to it or ending in ``.<entry>``)
into exact module paths; without one, a plain name becomes the glob ``*.<name>`` and a dotted
entry is read as a path from the root (pass the model for PEFT's suffix matching). PEFT itself
is not needed: the config is read from ``adapter_config.json`` or from a ``LoraConfig`` object.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.core import safe_json
from workbench.core.plan.lora_variants import VARIANTS
from workbench.core.plan.problems import PlanError, PlanProblem
from workbench.core.plan.reparam_spec import LOW_RANK_LAYERS
from workbench.core.plan.safe_regex import RegexRefusedError, linear_fullmatch

if TYPE_CHECKING:  # pragma: no cover - typing only
    from torch import nn

__all__ = ["CONFIG_FILE", "SUPPORTED_LAYERS", "peft_plan_dict", "read_peft_config", "target_paths"]

#: The adapter config file of a PEFT adapter folder.
CONFIG_FILE = "adapter_config.json"
#: Class names of the layers a LoRA target may be (what low-rank A+B supports).
SUPPORTED_LAYERS = LOW_RANK_LAYERS


def _problem(field: str, msg: str) -> PlanError:
    return PlanError(PlanProblem(msg, None, field), "PEFT adapter config")


def read_peft_config(source: Any) -> dict[str, Any]:
    """The adapter config as a plain dict.

    Args:
        source: an adapter folder, its ``adapter_config.json``, a ``peft.LoraConfig`` (any
            object with ``to_dict()``) or a dict.

    Returns:
        The config dict (``peft_type`` as a string).

    Raises:
        PlanError: the file is missing or not JSON, or the object is not a config.
    """
    if isinstance(source, (str, os.PathLike)):
        p = Path(source)
        if p.is_dir():
            p = p / CONFIG_FILE
        try:  # bounded: a regular file, at most 16 MB, nested at most 64 deep (as plan files)
            data = safe_json.load(p, what="PEFT adapter config")
        except FileNotFoundError:
            raise PlanError(f"no {CONFIG_FILE} at {str(p)!r}; give a PEFT adapter folder (save_pretrained writes one)") from None
        except safe_json.JsonInputError as e:
            raise PlanError(str(e)) from None
        except json.JSONDecodeError as e:
            raise PlanError(f"cannot read {str(p)!r} as a PEFT adapter config ({e.msg} at line {e.lineno})") from None
        except OSError as e:
            raise PlanError(f"cannot read {str(p)!r} as a PEFT adapter config ({e.strerror or e})") from None
    elif isinstance(source, Mapping):
        data = dict(source)
    elif hasattr(source, "to_dict"):
        data = dict(source.to_dict())
    else:
        raise PlanError(
            f"from_peft needs an adapter folder, an {CONFIG_FILE} path or a peft.LoraConfig, got {type(source).__name__}"
        )
    if not isinstance(data, dict):
        raise _problem("peft_type", f"the adapter config must be a JSON object, got {type(data).__name__}")
    kind = data.get("peft_type")
    kind = getattr(kind, "value", kind)
    data["peft_type"] = kind
    return data


def target_paths(model: nn.Module, targets: Any) -> list[str]:
    """Module paths a PEFT ``target_modules`` value selects in ``model``, supported layers only.

    Args:
        model: the base model (not wrapped in a PeftModel).
        targets: a regular expression (whole-path match), a list of names (a path equal to the
            name or ending in ``.<name>``), or ``"all-linear"``.

    Returns:
        Paths in model order.

    Raises:
        PlanError: a regular expression that is invalid or whose matching time has no small
            bound (see :func:`bounded_regex`).
    """
    pattern = bounded_regex(targets) if isinstance(targets, str) and targets != "all-linear" else None
    out: list[str] = []
    for path, module in model.named_modules():
        if not path or type(module).__name__ not in SUPPORTED_LAYERS:
            continue
        if targets == "all-linear":
            hit = type(module).__name__ in ("Linear", "Conv1D")
        elif pattern is not None:
            hit = pattern(path)
        else:
            hit = any(path == t or path.endswith("." + t) for t in targets)
        if hit:
            out.append(path)
    return out


def bounded_regex(pattern: str, field: str = "target_modules") -> Callable[[str], bool]:
    """A whole-path matcher for a ``target_modules`` regular expression, in time linear in the path.

    The match is RE2's (:func:`workbench.core.plan.safe_regex.linear_fullmatch`): no
    pattern can make it backtrack, whatever its quantifiers, groups or ``{n}`` repeats.

    Args:
        pattern: The regular expression (matched against whole module paths, as PEFT does).
        field: The config key, for the message.

    Returns:
        ``match(path) -> bool``.

    Raises:
        PlanError: an invalid expression, one with no linear-time match (backreference,
            lookaround, atomic group, possessive quantifier), or one too large (one line).
    """
    try:
        return linear_fullmatch(pattern)
    except RegexRefusedError as e:
        raise _problem(field, f"'{field}' {_shown(pattern)} {e}; write it more simply (e.g. '.*\\.(q|v)_proj') "
                              "or list the module names") from None


def _shown(pattern: str) -> str:
    return repr(pattern) if len(pattern) <= 80 else repr(pattern[:60]) + f"... ({len(pattern):,} characters)"


def _selectors(targets: Any, model: nn.Module | None, field: str) -> list[str]:
    if isinstance(targets, (set, tuple)):
        targets = sorted(targets)
    if not targets or not isinstance(targets, (str, list)) or (
        isinstance(targets, list) and not all(isinstance(t, str) and t for t in targets)
    ):
        raise _problem(field, f"'{field}' must be a regular expression or a list of module names, got {targets!r}")
    if model is not None:
        paths = target_paths(model, targets)
        if not paths:
            raise _problem(
                field,
                f"'{field}' {targets!r} matches no Linear, Conv1d, Conv2d, Conv1D or Embedding layer of the model; "
                "check the names with `workbench inspect`",
            )
        return paths
    if isinstance(targets, str):
        raise _problem(
            field,
            f"'{field}' is a regular expression ({targets!r}); pass the model (from_peft(config, model=...)) "
            "to resolve it into module paths",
        )
    return [_glob(t) for t in targets]


def _glob(name: str) -> str:
    """A list entry as a selector without the model: ``*.query``, or a dotted path as it is."""
    return name if "." in name else f"*.{name}"


def _check(data: dict[str, Any]) -> None:
    if data.get("peft_type") != "LORA":
        raise _problem(
            "peft_type",
            f"'peft_type' is {data.get('peft_type')!r}; only LoRA adapters (peft_type \"LORA\") become plans",
        )
    unsupported = {
        "use_rslora": "rsLoRA scaling", "layers_to_transform": "layers_to_transform",
        "exclude_modules": "exclude_modules", "rank_pattern": "rank_pattern", "alpha_pattern": "alpha_pattern",
        "target_parameters": "target_parameters", "trainable_token_indices": "trainable_token_indices",
        "lora_bias": "lora_bias",
    }
    for key, what in unsupported.items():
        if data.get(key):
            raise _problem(key, f"{what} ('{key}') has no plan form; leave it unset (or write the rules by hand)")
    if data.get("bias", "none") != "none":
        raise _problem(
            "bias",
            f"'bias' is {data.get('bias')!r}; plans hold a LoRA layer's bias fixed as bias=\"none\" does: "
            "use \"none\" and add rules that unfreeze the biases you want to train",
        )


def _number(data: dict[str, Any], key: str, default: Any) -> Any:
    v = data.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _problem(key, f"'{key}' must be a number, got {v!r}")
    return v


def peft_plan_dict(source: Any, model: nn.Module | None = None) -> dict[str, Any]:
    """The plan (JSON form) equivalent to a PEFT LoRA adapter config.

    Args:
        source: see :func:`read_peft_config`.
        model: the base model, to resolve targets into exact paths (needed for a regular
            expression or ``"all-linear"``).

    Returns:
        A plan dict for :meth:`FreezePlan.from_dict`.

    Raises:
        PlanError: not a LoRA config, an option without a plan form, or targets that match nothing;
            the problem names the config field.
    """
    data = read_peft_config(source)
    _check(data)
    r = _number(data, "r", 8)
    alpha = _number(data, "lora_alpha", 8)
    dropout = _number(data, "lora_dropout", 0.0)
    init = data.get("init_lora_weights", True)
    if init is True:
        init_name = "kaiming"
    elif init == "gaussian":
        init_name = "gaussian"
    else:
        raise _problem(
            "init_lora_weights",
            f"'init_lora_weights' {init!r} has no plan form; use true (kaiming) or \"gaussian\"",
        )
    spec = {"kind": "a_plus_b", "mode": "fused", "rank": r, "alpha": alpha, "dropout": dropout, "init": init_name}
    for row in VARIANTS.values():
        if row.peft_field is None:
            continue
        flag = data.get(row.peft_field, False)
        if not isinstance(flag, bool):
            raise _problem(row.peft_field, f"'{row.peft_field}' must be true or false, got {flag!r}")
        if flag:
            spec[row.name] = True
    rules: list[dict[str, Any]] = [{"select": "*", "frozen": True}]
    for sel in _selectors(data.get("target_modules"), model, "target_modules"):
        rules.append({"select": sel, "frozen": False, "reparam": dict(spec)})
    saved = data.get("modules_to_save") or []
    if saved:
        if model is not None:
            names = [p for p, _ in model.named_modules() if p and any(p == t or p.endswith("." + t) for t in saved)]
            if not names:
                raise _problem("modules_to_save", f"'modules_to_save' {saved!r} matches no module of the model")
        else:
            names = [_glob(t) for t in saved]
        rules += [{"select": n, "frozen": False} for n in names]
    plan: dict[str, Any] = {"format": "freeze-plan", "version": 1, "rules": rules}
    base = data.get("base_model_name_or_path")
    if isinstance(base, str) and base:
        plan["description"] = f"LoRA adapter for {base} (from a PEFT config)"
    return plan
