"""What the exported script carries: every plan key and every config field has an export rule.

The rules are columns of the tables they belong to: :attr:`PlanKey.export
<workbench.core.plan.keys.PlanKey.export>` in the key table and
:data:`~workbench.core.training.config.FIELD_EXPORT` beside the config's fields. Both default
to ``refuse``: a key or a field added without saying how the script carries it is refused in
one line naming it, never silently missing from the script. The exporter calls
:func:`check_exportable` first and iterates the same rules for the script's docstring.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from workbench.core.export.common import ExportError
from workbench.core.plan import keys
from workbench.core.plan.rules import FreezePlan
from workbench.core.training.config import TrainConfig, field_export

__all__ = ["check_exportable", "ignored_fields", "keys_in_use", "memory_only_keys"]

#: Key export rules the exporter writes code for.
_HANDLED_KEY_RULES = ("tables", "a_plus_b", "partial", "memory_only", "none")


def keys_in_use(plan: FreezePlan) -> list[keys.PlanKey]:
    """The rule keys some rule of the plan (base or stage) sets.

    Args:
        plan: the plan.

    Returns:
        Their rows, in key-table order.
    """
    rules = [*plan.rules, *(r for st in plan.stages for r in st.rules)]
    return [k for k in keys.RULE_KEYS if any(getattr(r, k.name, None) is not None for r in rules)]


def memory_only_keys(plan: FreezePlan) -> list[keys.PlanKey]:
    """The keys of the plan that change memory only (named in the script, not applied).

    Args:
        plan: the plan.

    Returns:
        Their rows.
    """
    return [k for k in keys_in_use(plan) if k.export == "memory_only"]


def ignored_fields(config: TrainConfig) -> list[str]:
    """The config fields set away from their defaults that do not change what is trained.

    Args:
        config: the run's config.

    Returns:
        Their names (``save_dir``, ``metrics_path`` ...).
    """
    return [f.name for f in fields(config) if field_export(f.name) == "ignored" and _changed(config, f)]


def _changed(config: TrainConfig, f: Any) -> bool:
    default = f.default_factory() if callable(f.default_factory) else f.default
    return bool(getattr(config, f.name) != default)


def check_exportable(plan: FreezePlan, config: TrainConfig) -> None:
    """Refuse a plan key or a config field the script cannot carry, naming it.

    Args:
        plan: the plan of the run.
        config: the run's config.

    Raises:
        ExportError: a key of the plan whose export rule is ``refuse`` (or unknown), or a config
            field set away from its default whose rule is ``refuse``.
    """
    for k in keys_in_use(plan):
        if k.export not in _HANDLED_KEY_RULES:
            raise ExportError(
                f"plan key '{k.name}' ({k.label}) has no plain-script form (its export rule is {k.export!r}); "
                "remove it from the plan to export, or train with the workbench"
            )
    for f in fields(config):
        if field_export(f.name) == "script" or field_export(f.name) == "ignored" or not _changed(config, f):
            continue
        value = getattr(config, f.name)
        raise ExportError(
            f"config field '{f.name}' = {value!r} has no plain-script form (its export rule is "
            f"{field_export(f.name)!r}); set it back to {_default_text(f)} to export, or train with the workbench"
        )


def _default_text(f: Any) -> str:
    default = f.default_factory() if callable(f.default_factory) else f.default
    return repr(default)
