"""Counting what a plan trains: parameters, the memory of grads and optimizer state, weight-decay exclusions, tied weights."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workbench.core.optimizers import OPTIMIZER_TABLE, state_copies

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch
    from torch import nn

__all__ = ["Counts", "count_parameters", "no_decay_names", "optimizer_state_factor", "tied_parameters"]


def no_decay_names(model: nn.Module) -> set[str]:
    """Parameters that get no weight decay with ``no_decay="auto"``: biases, 1-D (and 0-D)
    tensors and the names (fnmatch patterns) of the model's ``no_weight_decay()``, as timm's
    ``param_groups_weight_decay`` excludes them.

    Args:
        model: the model.

    Returns:
        Names from ``model.named_parameters()``.
    """
    fn = getattr(model, "no_weight_decay", None)
    listed = set(fn()) if callable(fn) else set()
    return {
        n for n, p in model.named_parameters()
        if p.ndim <= 1 or n.endswith(".bias") or any(fnmatch.fnmatch(n, pat) for pat in listed)
    }


def tied_parameters(model: nn.Module) -> dict[str, list[str]]:
    """Parameters shared under several names (tied weights such as GPT-2's ``lm_head.weight``
    and ``transformer.wte.weight``).

    Args:
        model: the model.

    Returns:
        ``{name in model.named_parameters(): [the other names of the same tensor]}``.
    """
    by_id: dict[int, list[str]] = {}
    for n, p in model.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(p), []).append(n)
    return {names[0]: names[1:] for names in by_id.values() if len(names) > 1}


# ---------------------------------------------------------------- counting


def optimizer_state_factor(optimizer: str | torch.optim.Optimizer) -> int:
    """How many parameter-sized state tensors an optimizer keeps per trainable parameter.

    Args:
        optimizer: a name (``"sgd"``, ``"sgd_momentum"``, ``"adam"``, ``"adamw"``, ...) or an
            optimizer instance (SGD counts 1 when its momentum is non-zero).

    Returns:
        0 for plain SGD, 1 for SGD with momentum, 2 for Adam/AdamW (3 with amsgrad).

    Raises:
        ValueError: unknown optimizer name.
    """
    if not isinstance(optimizer, str):  # an optimizer instance
        name = type(optimizer).__name__.lower()
        d = optimizer.defaults
        if name == "sgd":
            return 1 if d.get("momentum", 0) else 0
        base = OPTIMIZER_TABLE[name].state_copies if name in OPTIMIZER_TABLE else 2
        return base + (1 if d.get("amsgrad") else 0)
    return state_copies(optimizer)


@dataclass(frozen=True)
class Counts:
    """Parameter counts and the training memory they imply.

    Attributes:
        total / trainable / frozen: parameter elements (shared tensors once).
        param_bytes: bytes of all parameters.
        grad_bytes: bytes of gradients (one per trainable element).
        optimizer_bytes: bytes of optimizer state for the trainable parameters.
        fixed_bytes: extra bytes the plan adds (the fixed tensors A of A+B).
        full_ft_bytes: params + grads + optimizer state if every parameter trained.
        optimizer: the optimizer the state was counted for.
    """

    total: int
    trainable: int
    frozen: int
    param_bytes: int
    grad_bytes: int
    optimizer_bytes: int
    fixed_bytes: int
    full_ft_bytes: int
    optimizer: str

    @classmethod
    def from_totals(
        cls,
        total: int,
        trainable: int,
        param_bytes: int,
        trainable_bytes: int,
        fixed_bytes: int = 0,
        optimizer: str | torch.optim.Optimizer = "adamw",
    ) -> Counts:
        """Counts from element and byte totals: gradients and optimizer state follow.

        Args:
            total / trainable: parameter elements.
            param_bytes / trainable_bytes: bytes of all / of the trainable parameters.
            fixed_bytes: extra fixed tensors (A of A+B).
            optimizer: name or instance, for the state factor.

        Returns:
            The counts.
        """
        factor = optimizer_state_factor(optimizer)
        return cls(
            total=total,
            trainable=trainable,
            frozen=total - trainable,
            param_bytes=param_bytes,
            grad_bytes=trainable_bytes,
            optimizer_bytes=trainable_bytes * factor,
            fixed_bytes=fixed_bytes,
            full_ft_bytes=param_bytes * (2 + factor),
            optimizer=optimizer if isinstance(optimizer, str) else type(optimizer).__name__.lower(),
        )

    @property
    def training_bytes(self) -> int:
        """Params + grads + optimizer state + fixed tensors."""
        return self.param_bytes + self.grad_bytes + self.optimizer_bytes + self.fixed_bytes

    @property
    def trainable_fraction(self) -> float:
        """Trainable share of all parameters (0..1)."""
        return self.trainable / self.total if self.total else 0.0

    @property
    def saving_bytes(self) -> int:
        """Bytes saved against full fine-tuning."""
        return self.full_ft_bytes - self.training_bytes

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, with the derived numbers."""
        d = dict(self.__dict__)
        d.update(
            training_bytes=self.training_bytes,
            trainable_fraction=self.trainable_fraction,
            saving_bytes=self.saving_bytes,
        )
        return d


def count_parameters(
    params: Iterator[tuple[str, nn.Parameter]] | list[tuple[str, nn.Parameter]],
    optimizer: str | torch.optim.Optimizer = "adamw",
    fixed: list[torch.Tensor] | None = None,
) -> Counts:
    """Count parameters (each tensor once, by identity) and the memory training needs.

    Args:
        params: ``(name, parameter)`` pairs, e.g. ``model.named_parameters()``.
        optimizer: optimizer name or instance, for the state factor.
        fixed: extra fixed tensors (A of A+B) whose bytes count too.

    Returns:
        The counts.
    """
    seen: set[int] = set()
    total = trainable = pbytes = tbytes = 0
    for _, p in params:
        if id(p) in seen:
            continue
        seen.add(id(p))
        n, b = p.numel(), p.numel() * p.element_size()
        total += n
        pbytes += b
        if p.requires_grad:
            trainable += n
            tbytes += b
    fixed_bytes = sum(t.numel() * t.element_size() for t in fixed or [])
    return Counts.from_totals(total, trainable, pbytes, tbytes, fixed_bytes, optimizer)
