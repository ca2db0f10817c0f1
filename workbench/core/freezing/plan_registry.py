"""Which model has a plan in force, so that a second plan is not stacked on it silently.

Two :class:`~workbench.core.freezing.apply.AppliedPlan` handles on one model would each
record the other's flags as "the model before the plan": removing them in apply order
leaves the model frozen. :func:`apply_plan` therefore refuses a model that already has a
live plan; change the plan in force with ``AppliedPlan.update(plan)``, or ``remove()`` it
first. The registry holds no strong reference: a handle that was dropped (garbage
collected) no longer counts.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from torch import nn

from workbench.core.plan.problems import PlanError

__all__ = ["plan_in_force", "refuse_second_plan", "register", "unregister"]

_LOCK = threading.Lock()
_IN_FORCE: weakref.WeakKeyDictionary[nn.Module, weakref.ref[Any]] = weakref.WeakKeyDictionary()


def plan_in_force(model: nn.Module) -> Any | None:
    """The live applied plan on ``model``, if any.

    Args:
        model: the model.

    Returns:
        The ``AppliedPlan``, or None.
    """
    with _LOCK:
        ref = _IN_FORCE.get(model)
    return ref() if ref is not None else None


def refuse_second_plan(model: nn.Module) -> None:
    """Refuse to apply a plan to a model that has one in force.

    Args:
        model: the model a plan is about to be applied to.

    Raises:
        PlanError: a plan is already applied to this model and was not removed.
    """
    if plan_in_force(model) is not None:
        raise PlanError(
            f"this {type(model).__name__} already has a plan applied; change it with "
            "applied.update(new_plan), or call applied.remove() before applying another"
        )


def register(model: nn.Module, applied: Any) -> None:
    """Record ``applied`` as the plan in force on ``model``.

    Args:
        model: the model.
        applied: its ``AppliedPlan``.
    """
    with _LOCK:
        _IN_FORCE[model] = weakref.ref(applied)


def unregister(model: nn.Module, applied: Any) -> None:
    """Forget ``applied`` as the plan in force on ``model`` (no-op if another is registered).

    Args:
        model: the model.
        applied: the ``AppliedPlan`` being removed.
    """
    with _LOCK:
        ref = _IN_FORCE.get(model)
        if ref is not None and ref() in (applied, None):
            del _IN_FORCE[model]
