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

A new loss is one :class:`LossKind` row and its builder (the functions, which need torch, are in
:mod:`workbench.core.training.loss_functions`; this table does not import torch, so the app lists
the losses before torch is imported). A ``py:`` loss runs code: it runs only
when the caller named it (:mod:`workbench.core.training.py_code`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workbench.core.errors import WorkbenchError
from workbench.core.training.py_code import is_py_spec, load_py_function, table_or_py_name

if TYPE_CHECKING:  # pragma: no cover - typing only
    from workbench.core.training.step import LossFn

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


def _cross_entropy() -> LossFn:
    from workbench.core.training.step import ClassificationLoss

    return ClassificationLoss()


def _element(name: str) -> Callable[[], LossFn]:
    def build() -> LossFn:
        from workbench.core.training.loss_functions import element_loss

        return element_loss(name)

    return build


LOSSES: dict[str, LossKind] = {k.name: k for k in (
    LossKind("cross_entropy", "Cross-entropy", "class labels (integers); adds auxiliary heads' losses",
             _cross_entropy),
    LossKind("bce", "Binary cross-entropy (multi-label)",
             "logits against 0..1 targets of the output's shape (several labels per sample)",
             _element("bce")),
    LossKind("mse", "Mean squared error", "regression: targets of the output's shape", _element("mse")),
    LossKind("l1", "Mean absolute error (L1)", "regression: targets of the output's shape",
             _element("l1")),
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
    from workbench.core.training.loss_functions import UserLoss

    name = loss_name(name)
    if is_py_spec(name):
        return UserLoss(name, load_py_function(name, what="loss", flag="--loss", origin=origin))
    return LOSSES[name].builder()
