"""The optimizers the workbench knows: one table of names, labels and state copies.

The cost panel, the counts of an applied plan, the memory estimates, the advisor and the
training config all read this table (``state_copies``: parameter-sized state tensors kept per
trainable parameter).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CHOICES", "OPTIMIZERS", "OptimizerKind", "state_copies"]


@dataclass(frozen=True)
class OptimizerKind:
    """One optimizer.

    Attributes:
        name: the key (``"adamw"``).
        label: for people (``"AdamW"``).
        state_copies: parameter-sized state tensors per trainable parameter (Adam: 2).
        choice: offered by the training config, the GUI and the advisor (the others are only counted).
    """

    name: str
    label: str
    state_copies: int
    choice: bool = False


#: Every optimizer by name, the choices first in the order the GUI lists them.
OPTIMIZERS: dict[str, OptimizerKind] = {k.name: k for k in (
    OptimizerKind("adamw", "AdamW", 2, choice=True),
    OptimizerKind("adam", "Adam", 2, choice=True),
    OptimizerKind("sgd_momentum", "SGD + momentum", 1, choice=True),
    OptimizerKind("sgd", "SGD", 0, choice=True),
    OptimizerKind("momentum", "SGD + momentum", 1),
    OptimizerKind("rmsprop", "RMSprop", 1),
    OptimizerKind("adagrad", "Adagrad", 1),
    OptimizerKind("nadam", "NAdam", 2),
    OptimizerKind("radam", "RAdam", 2),
    OptimizerKind("adamax", "Adamax", 2),
)}
#: The names offered as choices: ``("adamw", "adam", "sgd_momentum", "sgd")``.
CHOICES: tuple[str, ...] = tuple(k.name for k in OPTIMIZERS.values() if k.choice)


def state_copies(name: str) -> int:
    """Parameter-sized state tensors an optimizer keeps per trainable parameter.

    Args:
        name: an optimizer name (case, ``-`` and ``+`` do not matter: ``"SGD-momentum"``).

    Returns:
        The count (0 for plain SGD, 1 with momentum, 2 for Adam and AdamW).

    Raises:
        ValueError: unknown name (the known ones are listed).
    """
    key = name.lower().replace("-", "_").replace("+", "_")
    kind = OPTIMIZERS.get(key)
    if kind is None:
        raise ValueError(f"unknown optimizer {name!r}; use one of {', '.join(sorted(OPTIMIZERS))}")
    return kind.state_copies
