"""The optimizers the workbench knows: one table of names, constructors, hyperparameters and state.

Every reader of an optimizer name takes it from :data:`OPTIMIZER_TABLE`:

- the training engine builds the optimizer with :meth:`OptimizerKind.build`;
- the exported script writes the same constructor, every hyperparameter spelled out,
  with :meth:`OptimizerKind.source`;
- the cost panel, the counts of an applied plan, the memory estimates and the advisor read
  ``state_copies`` (parameter-sized state tensors kept per trainable parameter);
- the training config, the CLI and the app's optimizer boxes offer :data:`CHOICES` with
  their ``label``.

``"sgd"`` is plain SGD: momentum 0, everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CHOICES", "OPTIMIZER_TABLE", "Hyper", "OptimizerKind", "optimizer_kind", "state_copies"]


@dataclass(frozen=True)
class Hyper:
    """One hyperparameter of an optimizer's constructor.

    Attributes:
        name: the constructor's keyword (``"momentum"``, ``"betas"``).
        default: its value when the run does not set it (for ``fixed`` ones: always).
        config: the :class:`~workbench.core.training.config.TrainConfig` field that sets it
            (``"lr"``, ``"momentum"``), or None when the run cannot change it.
    """

    name: str
    default: Any
    config: str | None = None


@dataclass(frozen=True)
class OptimizerKind:
    """One optimizer.

    Attributes:
        name: the key (``"adamw"``).
        label: for people (``"AdamW"``).
        state_copies: parameter-sized state tensors per trainable parameter (Adam: 2).
        choice: offered by the training config, the GUI and the advisor (the others are only counted).
        constructor: the ``torch.optim`` class name (``"AdamW"``); empty for optimizers only counted.
        hypers: the constructor's hyperparameters, in the order the script writes them.
    """

    name: str
    label: str
    state_copies: int
    choice: bool = False
    constructor: str = ""
    hypers: tuple[Hyper, ...] = field(default=())

    def values(self, settings: Mapping[str, Any] | Any) -> dict[str, Any]:
        """Every hyperparameter's value for a run.

        Args:
            settings: the run's config (a :class:`TrainConfig` or a mapping of its fields);
                a hyperparameter whose config field it lacks takes its default.

        Returns:
            ``{keyword: value}`` in constructor order (tuples for ``betas``).
        """
        out: dict[str, Any] = {}
        for h in self.hypers:
            value = h.default
            if h.config is not None:
                got = settings.get(h.config) if isinstance(settings, Mapping) else getattr(settings, h.config, None)
                if got is not None:
                    value = tuple(got) if isinstance(h.default, tuple) else type(h.default)(got)
            out[h.name] = value
        return out

    def build(self, groups: list[dict[str, Any]], settings: Mapping[str, Any] | Any) -> Any:
        """The torch optimizer over ``groups`` with the run's hyperparameters.

        Args:
            groups: param groups (see :meth:`AppliedPlan.param_groups`).
            settings: the run's config (see :meth:`values`).

        Returns:
            The ``torch.optim`` optimizer.

        Raises:
            ValueError: the optimizer is only counted, not built (no constructor).
        """
        if not self.constructor:
            raise ValueError(f"optimizer {self.name!r} is not one the workbench trains with; use one of {', '.join(CHOICES)}")
        import torch

        cls = getattr(torch.optim, self.constructor)
        return cls(groups, **self.values(settings))

    def source(
        self, settings: Mapping[str, Any] | Any, groups: str = "groups", expressions: Mapping[str, str] | None = None
    ) -> str:
        """The constructor call as Python source, every hyperparameter written out.

        Args:
            settings: the run's config (see :meth:`values`).
            groups: the expression of the param groups.
            expressions: source text for some hyperparameters instead of their values
                (``{"lr": "lr"}``: the script's variable).

        Returns:
            ``"torch.optim.SGD(groups, lr=0.1, momentum=0.0, ...)"``.

        Raises:
            ValueError: the optimizer is only counted, not built.
        """
        if not self.constructor:
            raise ValueError(f"optimizer {self.name!r} is not one the workbench trains with; use one of {', '.join(CHOICES)}")
        given = expressions or {}
        args = ", ".join(f"{k}={given.get(k, repr(v))}" for k, v in self.values(settings).items())
        return f"torch.optim.{self.constructor}({groups}, {args})"


def _adam(name: str, label: str, constructor: str) -> OptimizerKind:
    return OptimizerKind(name, label, 2, choice=True, constructor=constructor, hypers=(
        Hyper("lr", 1e-3, "lr"),
        Hyper("betas", (0.9, 0.999)),
        Hyper("eps", 1e-8),
        Hyper("weight_decay", 0.0, "weight_decay"),
        Hyper("amsgrad", False),
    ))


#: Every optimizer by name, the choices first in the order the GUI lists them.
OPTIMIZER_TABLE: dict[str, OptimizerKind] = {k.name: k for k in (
    _adam("adamw", "AdamW", "AdamW"),
    _adam("adam", "Adam", "Adam"),
    OptimizerKind("sgd_momentum", "SGD + momentum", 1, choice=True, constructor="SGD", hypers=(
        Hyper("lr", 1e-3, "lr"),
        Hyper("momentum", 0.9, "momentum"),
        Hyper("dampening", 0.0),
        Hyper("weight_decay", 0.0, "weight_decay"),
        Hyper("nesterov", False),
    )),
    OptimizerKind("sgd", "SGD", 0, choice=True, constructor="SGD", hypers=(
        Hyper("lr", 1e-3, "lr"),
        Hyper("momentum", 0.0),  # plain SGD: no momentum, whatever the config's momentum field says
        Hyper("dampening", 0.0),
        Hyper("weight_decay", 0.0, "weight_decay"),
        Hyper("nesterov", False),
    )),
    OptimizerKind("momentum", "SGD + momentum", 1),
    OptimizerKind("rmsprop", "RMSprop", 1),
    OptimizerKind("adagrad", "Adagrad", 1),
    OptimizerKind("nadam", "NAdam", 2),
    OptimizerKind("radam", "RAdam", 2),
    OptimizerKind("adamax", "Adamax", 2),
)}
#: The names offered as choices: ``("adamw", "adam", "sgd_momentum", "sgd")``.
CHOICES: tuple[str, ...] = tuple(k.name for k in OPTIMIZER_TABLE.values() if k.choice)


def optimizer_kind(name: str) -> OptimizerKind:
    """The row of an optimizer.

    Args:
        name: an optimizer name (case, ``-`` and ``+`` do not matter: ``"SGD-momentum"``).

    Returns:
        The row.

    Raises:
        ValueError: unknown name (the known ones are listed).
    """
    key = name.lower().replace("-", "_").replace("+", "_")
    kind = OPTIMIZER_TABLE.get(key)
    if kind is None:
        raise ValueError(f"unknown optimizer {name!r}; use one of {', '.join(sorted(OPTIMIZER_TABLE))}")
    return kind


def state_copies(name: str) -> int:
    """Parameter-sized state tensors an optimizer keeps per trainable parameter.

    Args:
        name: an optimizer name (case, ``-`` and ``+`` do not matter: ``"SGD-momentum"``).

    Returns:
        The count (0 for plain SGD, 1 with momentum, 2 for Adam and AdamW).

    Raises:
        ValueError: unknown name (the known ones are listed).
    """
    return optimizer_kind(name).state_copies
