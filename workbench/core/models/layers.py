"""Layer indices of a model's parameters: they live in :mod:`workbench.core.plan.layers` (old import path)."""

from __future__ import annotations

from workbench.core.plan.layers import parameter_layers

__all__ = ["parameter_layers"]
