"""Activation checkpointing from the plan (``checkpoint: true``).

:func:`install` makes a module keep no activations in forward and run its forward again in
backward (:func:`torch.utils.checkpoint.checkpoint`, non-reentrant). On the root of a model
that has its own switch (timm's ``set_grad_checkpointing``, transformers'
``gradient_checkpointing_enable``) that switch is used instead, since the model knows which of
its blocks to checkpoint. The handle's :meth:`CheckpointHandle.remove` puts the module back.

Checkpointing changes no tensor: the handle has nothing trainable and nothing fixed.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

__all__ = ["CheckpointHandle", "install", "is_checkpointed", "model_switch"]

_MARK = "_workbench_checkpoint"


def model_switch(model: nn.Module) -> str | None:
    """The model's own checkpointing switch, if it has one.

    Args:
        model: the model (the root).

    Returns:
        ``"timm"`` (``set_grad_checkpointing``), ``"transformers"``
        (``gradient_checkpointing_enable``/``_disable``), or None.
    """
    if callable(getattr(model, "set_grad_checkpointing", None)):
        return "timm"
    if callable(getattr(model, "gradient_checkpointing_enable", None)) and callable(
        getattr(model, "gradient_checkpointing_disable", None)
    ):
        return "transformers"
    return None


def is_checkpointed(module: nn.Module) -> bool:
    """Whether :func:`install` wrapped this module's forward."""
    return _MARK in module.__dict__


def _wrapped_forward(module: nn.Module, previous: Callable[..., Any] | None) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        if previous is not None:
            return previous(*args, **kwargs)
        return type(module).forward(module, *args, **kwargs)

    def forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():  # evaluation: nothing to save, nothing to recompute
            return run(*args, **kwargs)
        return checkpoint(run, *args, use_reentrant=False, **kwargs)

    return forward


class CheckpointHandle:
    """Activation checkpointing installed on one module.

    Attributes:
        path: dotted path of the module (``""`` for the root).
        spec: ``True`` (the plan's value).
        via: ``"wrap"`` (forward wrapped) or the model's own switch (``"timm"``, ``"transformers"``).
    """

    def __init__(self, model: nn.Module, path: str) -> None:
        self.path = path
        self.spec: Any = True
        self._module = model.get_submodule(path) if path else model
        switch = None if path else model_switch(model)
        self.via = switch or "wrap"
        if switch == "timm":
            self._module.set_grad_checkpointing(True)  # type: ignore[operator]
        elif switch == "transformers":
            self._module.gradient_checkpointing_enable(  # type: ignore[operator]
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
        else:
            if is_checkpointed(self._module):
                raise ValueError(f"module {path or '(root)'!r} is already checkpointed; remove the other plan first")
            previous = self._module.__dict__.get("forward")
            self._module.__dict__[_MARK] = previous
            self._module.forward = types.MethodType(_wrapped_forward(self._module, previous), self._module)

    def trainable(self) -> list[tuple[str, nn.Parameter]]:
        """Checkpointing adds no parameters."""
        return []

    def fixed(self) -> list[tuple[str, torch.Tensor]]:
        """Checkpointing adds no tensors."""
        return []

    def acts_in(self) -> list[str]:
        """Checkpointing adds no trainable tensors: they act nowhere."""
        return []

    def remove(self, merge: bool = True) -> None:
        """Switch checkpointing off again (``merge`` is ignored: no tensor changed)."""
        if self.via == "timm":
            self._module.set_grad_checkpointing(False)  # type: ignore[operator]
        elif self.via == "transformers":
            self._module.gradient_checkpointing_disable()  # type: ignore[operator]
        elif is_checkpointed(self._module):
            previous = self._module.__dict__.pop(_MARK)
            if previous is None:
                del self._module.__dict__["forward"]
            else:
                self._module.__dict__["forward"] = previous


def install(model: nn.Module, path: str, spec: Any, *, base_dir: Path | None = None) -> CheckpointHandle:
    """Checkpoint one module's activations.

    Args:
        model: the model.
        path: dotted module path (``""`` for the root, where the model's own switch wins).
        spec: the plan's value (``True``).
        base_dir: unused (installers share one signature).

    Returns:
        The handle.

    Raises:
        ValueError: the module is already checkpointed by another applied plan.
    """
    return CheckpointHandle(model, path)
