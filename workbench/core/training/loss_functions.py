"""The built-in losses' functions and the check of a ``py:`` loss's result: what
:data:`~workbench.core.training.losses.LOSSES` rows and ``py:`` losses build (an exported script
carries their source).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["UserLoss", "element_loss"]


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


#: The ``torch.nn.functional`` loss of each element-wise row of ``LOSSES``.
_ELEMENT_FUNCTIONS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "bce": F.binary_cross_entropy_with_logits,
    "mse": F.mse_loss,
    "l1": F.l1_loss,
}


def element_loss(name: str) -> _ElementLoss:
    """The loss of an element-wise row (``bce``, ``mse``, ``l1``).

    Args:
        name: the row's name.

    Returns:
        ``f(output, target) -> scalar tensor``.
    """
    return _ElementLoss(name, _ELEMENT_FUNCTIONS[name])
