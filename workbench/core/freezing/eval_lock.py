"""The eval lock of the ``bn_eval`` and ``eval`` keys: a module that stays in eval mode after ``model.train()``.

The module's ``train`` is overridden on the instance, so ``model.train()`` cannot undo it and no
torch code is patched; :func:`unlock_eval` takes the override off.
"""

from __future__ import annotations

import types

from torch import nn

from workbench.core.plan.keys import Effective

__all__ = ["eval_wanted", "is_bn_eval_locked", "is_eval_locked", "lock_eval", "unlock_eval"]


def _train_keeping_eval(self: nn.Module, mode: bool = True) -> nn.Module:
    """``train`` for a module the plan keeps in eval mode: always eval (its children too)."""
    nn.Module.train(self, False)
    return self


def lock_eval(module: nn.Module) -> None:
    """Keep ``module`` (and its children) in eval mode across ``model.train()`` (``train`` is overridden on the instance)."""
    object.__setattr__(module, "train", types.MethodType(_train_keeping_eval, module))
    nn.Module.train(module, False)


def unlock_eval(module: nn.Module, training: bool) -> None:
    """Undo :func:`lock_eval` and put the module in ``training`` mode."""
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


def eval_wanted(e: Effective, is_bn: bool) -> bool:
    """Whether settings ``e`` lock a module in eval mode (``eval``, or ``bn_eval`` on a BatchNorm)."""
    return e.eval or (is_bn and e.bn_eval)
