"""The losses a run trains with: one row per loss, the app's combo and ``--loss`` read the table.

=================  ============================================================
name               loss
=================  ============================================================
``cross_entropy``  class labels; torchvision's auxiliary heads added (the default)
``bce``            multi-label binary cross-entropy on logits (targets of the output's shape)
``mse``            mean squared error (regression)
``l1``             mean absolute error (regression)
``py:FILE:FUNC``   your own: ``FUNC(output, target)`` returns a scalar tensor
=================  ============================================================

A new loss is one :class:`LossKind` row and its builder. A ``py:`` loss runs code: it runs only
when the caller named it (:mod:`workbench.core.training.py_code`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from workbench.core.errors import WorkbenchError
from workbench.core.training.py_code import is_py_spec, load_py_function, table_or_py_name
from workbench.core.training.step import ClassificationLoss, LossFn

__all__ = ["LOSSES", "LossKind", "LossSpecError", "loss_name", "make_loss"]


class LossSpecError(WorkbenchError, ValueError):
    """A loss name that is neither a row of :data:`LOSSES` nor ``py:FILE:FUNC``."""


@dataclass(frozen=True)
class LossKind:
    """One built-in loss.

    Attributes:
        name: the config value (``TrainConfig.loss``, ``--loss``).
        label: what the app's combo shows.
        tooltip: one sentence: what the loss needs of the data.
        builder: makes the loss function ``f(output, target) -> scalar tensor``.
    """

    name: str
    label: str
    tooltip: str
    builder: Callable[[], LossFn]


def _logits(out: Any, name: str) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    logits = getattr(out, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    raise TypeError(f"the model returned {type(out).__name__}, not a tensor the {name} loss can take; "
                    "use --loss py:FILE.py:FUNC for such outputs")


def _same_shape(out: torch.Tensor, target: torch.Tensor, name: str) -> torch.Tensor:
    """The target as a float tensor of the output's shape, or a one-line TypeError."""
    if not isinstance(target, torch.Tensor):
        raise TypeError(f"the {name} loss needs tensor targets, got {type(target).__name__}")
    if target.shape != out.shape:
        if name == "bce" and target.dim() == 1 and out.dim() == 2 and not target.is_floating_point():
            return F.one_hot(target.long(), out.shape[1]).to(out.dtype)  # class labels: one-hot
        if target.numel() != out.numel():
            raise TypeError(f"the {name} loss needs a target of the output's shape {tuple(out.shape)}, "
                            f"got {tuple(target.shape)}")
        target = target.reshape(out.shape)
    return target.to(out.dtype)


class _ElementLoss:
    """A loss over matching output and target tensors (BCE on logits, MSE, L1)."""

    def __init__(self, name: str, fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
        self.name = name
        self.fn = fn

    def __call__(self, out: Any, target: torch.Tensor) -> torch.Tensor:
        logits = _logits(out, self.name)
        return self.fn(logits, _same_shape(logits, target, self.name))


class UserLoss:
    """A ``py:`` loss, its result checked: a scalar tensor (one line otherwise).

    Args:
        spec: the ``py:`` spec (for messages).
        fn: the user's function.
    """

    def __init__(self, spec: str, fn: Callable[[Any, Any], Any]) -> None:
        self.spec = spec
        self.fn = fn

    def __call__(self, out: Any, target: Any) -> torch.Tensor:
        """The user's loss of a batch.

        Raises:
            TypeError: the function returned something that is not a one-element tensor.
        """
        loss = self.fn(out, target)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            what = f"a tensor of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else type(loss).__name__
            raise TypeError(f"loss {self.spec} returned {what}, not a scalar tensor; return the batch's mean loss")
        return loss.reshape(())


LOSSES: dict[str, LossKind] = {k.name: k for k in (
    LossKind("cross_entropy", "Cross-entropy", "class labels (integers); adds auxiliary heads' losses",
             ClassificationLoss),
    LossKind("bce", "Binary cross-entropy (multi-label)",
             "logits against 0..1 targets of the output's shape (several labels per sample)",
             lambda: _ElementLoss("bce", F.binary_cross_entropy_with_logits)),
    LossKind("mse", "Mean squared error", "regression: targets of the output's shape", lambda: _ElementLoss("mse", F.mse_loss)),
    LossKind("l1", "Mean absolute error (L1)", "regression: targets of the output's shape",
             lambda: _ElementLoss("l1", F.l1_loss)),
)}

_ALIASES = {"ce": "cross_entropy", "crossentropy": "cross_entropy", "bce_with_logits": "bce", "bcewithlogits": "bce",
            "binary_cross_entropy": "bce", "l2": "mse", "mae": "l1"}


def loss_name(text: Any) -> str:
    """The canonical name of a loss setting (aliases accepted, ``py:`` specs kept as given).

    Args:
        text: ``cross_entropy``, ``bce``, ``mse``, ``l1`` (or an alias) or ``py:FILE:FUNC``.

    Returns:
        The name.

    Raises:
        LossSpecError: anything else.
    """
    return table_or_py_name(text, LOSSES, _ALIASES, LossSpecError)


def make_loss(name: str, *, origin: str | None = None) -> LossFn:
    """The loss function a setting names.

    Args:
        name: a row of :data:`LOSSES` or ``py:FILE.py:FUNC``.
        origin: what file named it (a ``py:`` loss is then refused); None: the caller did.

    Returns:
        ``f(output, target) -> scalar tensor``.

    Raises:
        LossSpecError: an unknown name.
        CodeFromFileError: a ``py:`` loss named by a file.
        PyCodeError: a ``py:`` loss that cannot be loaded.
    """
    name = loss_name(name)
    if is_py_spec(name):
        return UserLoss(name, load_py_function(name, what="loss", flag="--loss", origin=origin))
    return LOSSES[name].builder()
