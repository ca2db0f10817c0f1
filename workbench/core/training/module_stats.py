"""Per-module gradient norms and update/weight ratios, measured every N steps.

Which layers are learning? Two numbers per module answer it:

- the **gradient norm** ``‖g‖`` of the module's trainable parameters after backward;
- the **update/weight ratio** ``‖Δw‖ / ‖w‖``: how far one optimizer step moved the weights,
  relative to their size (about 1e-3 is the usual healthy order of magnitude; far below means
  the module barely learns, far above that it is being overwritten).

:class:`ModuleStatsProbe` measures them on every ``every``-th step only: after backward it
takes the gradient norms (``torch._foreach_norm``, one kernel per device and dtype) and a copy
of the trainable weights; after the optimizer step it subtracts the new weights from the copy
and takes those norms too. The per-parameter squares are summed per module on the device
(``index_add``) and read back with a single transfer. Frozen parameters cost nothing and
modules without trainable parameters are absent from the record. The copy of the trainable
weights exists only during a measured step's optimizer step.

The record, :class:`ModuleStats`, holds sums of squares (gradient, update, weight) for every
module with trainable parameters at or below it: a parent aggregates its subtree exactly (the
norm of a parent is the square root of its children's summed squares), summed on the device
through an index built once per plan version, so a reader only looks rows up.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch
    from torch import nn


__all__ = [
    "DEFAULT_EVERY",
    "ModuleStats",
    "ModuleStatsHistory",
    "ModuleStatsProbe",
    "owner_path",
]

#: Measure every N-th step by default: the cost stays under 2 % of step time on the models of
#: ``tests/benchmarks/bench_module_stats.py`` (numbers in docs/training.md).
DEFAULT_EVERY = 20


@dataclass(frozen=True)
class ModuleStats:
    """Sums of squares per module and everything below it, at one measured step.

    Plain data, safe to hand across threads. A module's figures cover its own trainable
    parameters and those of every module below it, so a parent's gradient norm is the square
    root of the sum of its children's squares, and its update/weight ratio is the norm of all
    updates below it over the norm of all weights below it.

    Attributes:
        step: the step measured.
        paths: module paths (in the model tree) with trainable parameters (with gradients)
            at or below them; frozen subtrees are absent.
        grad_sq: per module, the sum of squared gradient elements (unscaled under fp16).
        update_sq: per module, the sum of squared weight changes of the optimizer step.
        weight_sq: per module, the sum of squared weights before the step.
    """

    step: int
    paths: tuple[str, ...]
    grad_sq: tuple[float, ...]
    update_sq: tuple[float, ...]
    weight_sq: tuple[float, ...]

    def grad_norm(self, path: str) -> float | None:
        """The gradient norm of a module's trainable parameters, itself and below (None when absent)."""
        i = self._index().get(path)
        return math.sqrt(self.grad_sq[i]) if i is not None else None

    def update_ratio(self, path: str) -> float | None:
        """``‖Δw‖ / ‖w‖`` of a module's trainable parameters, itself and below (None when absent or ‖w‖ = 0)."""
        i = self._index().get(path)
        if i is None or self.weight_sq[i] <= 0:
            return None
        return math.sqrt(self.update_sq[i] / self.weight_sq[i])

    def _index(self) -> dict[str, int]:
        idx = self.__dict__.get("_idx")
        if idx is None:
            idx = {p: i for i, p in enumerate(self.paths)}
            object.__setattr__(self, "_idx", idx)
        return idx

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: ``{"step", "modules": {path: [grad_sq, update_sq, weight_sq]}}``."""
        return {
            "step": self.step,
            "modules": {p: [g, u, w] for p, g, u, w in zip(self.paths, self.grad_sq, self.update_sq, self.weight_sq)},
        }


class ModuleStatsHistory:
    """The measured steps of a run for the top-level modules (children of the root), for plots.

    Args:
        limit: measured steps kept per module (the oldest go first).
    """

    def __init__(self, limit: int = 5000) -> None:
        self.limit = limit
        self.steps: dict[str, list[int]] = {}
        self.grad_norm: dict[str, list[float]] = {}
        self.update_ratio: dict[str, list[float]] = {}

    def clear(self) -> None:
        """Forget every step (a new run)."""
        self.steps.clear()
        self.grad_norm.clear()
        self.update_ratio.clear()

    def add(self, stats: ModuleStats) -> None:
        """Keep one measured step's figures of the top-level modules.

        Args:
            stats: the step's statistics.
        """
        for path in stats.paths:
            if not path or "." in path:
                continue
            g, r = stats.grad_norm(path), stats.update_ratio(path)
            steps = self.steps.setdefault(path, [])
            steps.append(stats.step)
            self.grad_norm.setdefault(path, []).append(g if g is not None else math.nan)
            self.update_ratio.setdefault(path, []).append(r if r is not None else math.nan)
            if len(steps) > self.limit:
                del steps[0], self.grad_norm[path][0], self.update_ratio[path][0]

    @property
    def paths(self) -> list[str]:
        """The modules seen, in the order they first appeared."""
        return list(self.steps)


def _ancestors(path: str) -> Iterable[str]:
    """``path`` and every module above it, up to the root ``""``."""
    yield path
    while path:
        cut = path.rfind(".")
        path = path[:cut] if cut >= 0 else ""
        yield path


def owner_path(param_name: str, modules: Mapping[str, Any] | frozenset[str] | set[str]) -> str:
    """The deepest module in ``modules`` that holds a parameter.

    Parameters added by a plan (A+B deltas, adapters) live in modules that are not in the
    model's tree; they count for the tree module they belong to.

    Args:
        param_name: the parameter's name in ``model.named_parameters()``.
        modules: the module paths of the tree.

    Returns:
        The module path (``""`` for the root).
    """
    cut = param_name.rfind(".")
    path = param_name[:cut] if cut >= 0 else ""
    for p in _ancestors(path):
        if p in modules:
            return p
    return ""


class ModuleStatsProbe:
    """Measures :class:`ModuleStats` around the optimizer step of every ``every``-th step.

    The engine calls :meth:`before_step` after backward (gradients ready, weights not yet
    moved) and :meth:`after_step` after the optimizer step, on measured steps only
    (:meth:`due`); :meth:`take` hands the latest record over once.

    Args:
        model: the model being trained (not a DDP or compiled wrapper: parameter names
            must be the model's own).
        every: measure every N steps (>= 1).
        modules: the tree's module paths; parameters are counted for the deepest of them
            that holds them. None: the module that owns each parameter.
        version: returns a number that changes whenever trainable parameters may have
            changed (the engine's plan version); the parameter list is rebuilt then.

    Raises:
        ValueError: ``every`` < 1.
    """

    def __init__(
        self,
        model: nn.Module,
        every: int = DEFAULT_EVERY,
        *,
        modules: Iterable[str] | None = None,
        version: Callable[[], int] | None = None,
    ) -> None:
        if every < 1:
            raise ValueError(f"module statistics every {every} steps: use a number >= 1")
        self.model = model
        self.every = every
        self._modules = frozenset(modules) if modules is not None else None
        self._version = version
        self._built_for: int | None = None
        self._params: list[nn.Parameter] = []
        self._rows: list[list[int]] = []  # per trainable parameter: the rows it counts for
        self._paths: tuple[str, ...] = ()
        self._pending: tuple[int, list[nn.Parameter], list[list[int]], torch.Tensor, list[torch.Tensor]] | None = None
        self._latest: ModuleStats | None = None
        self._pairs: tuple[Any, torch.Tensor, torch.Tensor] | None = None

    def due(self, step: int) -> bool:
        """Whether ``step`` is measured."""
        return step % self.every == 0

    def _build(self) -> None:
        version = self._version() if self._version is not None else 0
        if self._built_for == version and self._params:
            return
        modules = self._modules
        if modules is None:
            modules = frozenset(name for name, _ in self.model.named_modules())
        index: dict[str, int] = {}
        params: list[nn.Parameter] = []
        rows: list[list[int]] = []
        for name, p in self.model.named_parameters():
            if not p.requires_grad:
                continue
            path = owner_path(name, modules)
            params.append(p)
            rows.append([index.setdefault(a, len(index)) for a in _ancestors(path)])
        self._params, self._rows = params, rows
        self._paths = tuple(index)
        self._built_for = version

    def before_step(self, step: int, grad_scale: float | None = None) -> None:
        """Take the gradient norms and a copy of the trainable weights (after backward).

        Args:
            step: the step being measured.
            grad_scale: the loss scale of fp16 training (gradients are divided by it), or None.
        """
        import torch

        self._build()
        pairs = [(p, r) for p, r in zip(self._params, self._rows) if p.grad is not None and not p.grad.is_sparse]
        if not pairs:
            self._pending = None
            return
        params = [p for p, _ in pairs]
        owners = [r for _, r in pairs]
        with torch.no_grad():
            g = _stacked_norms([p.grad for p in params])  # type: ignore[misc]
            g2 = g * g
            if grad_scale:
                g2 = g2 / (grad_scale * grad_scale)
            tensors: list[torch.Tensor] = list(params)
            before = list(torch._foreach_mul(tensors, 1.0))  # a copy, one kernel per device and dtype
        self._pending = (step, params, owners, g2, before)

    def after_step(self) -> None:
        """Take the update norms (after the optimizer step) and build the record."""
        import torch

        pending, self._pending = self._pending, None
        if pending is None:
            return
        step, params, owners, g2, before = pending
        with torch.no_grad():
            w = _stacked_norms(before)
            torch._foreach_sub_(before, [p.detach() for p in params])
            u = _stacked_norms(before)
            del before
            per_param = torch.stack([g2.to(w.device), u * u, w * w])  # (3, P)
            src, dst = self._index(owners, per_param.device)
            sums = torch.zeros(3, len(self._paths), dtype=per_param.dtype, device=per_param.device)
            sums.index_add_(1, dst, per_param.index_select(1, src))
            rows = sums.tolist()
        present = sorted({i for r in owners for i in r})
        paths = self._paths
        self._latest = ModuleStats(
            step=step,
            paths=tuple(paths[i] for i in present),
            grad_sq=tuple(rows[0][i] for i in present),
            update_sq=tuple(rows[1][i] for i in present),
            weight_sq=tuple(rows[2][i] for i in present),
        )

    def _index(self, owners: list[list[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(parameter, row) pairs: every parameter counts for its module and all above it."""
        import torch

        key = (self._built_for, tuple(map(id, owners)), device)
        if self._pairs is None or self._pairs[0] != key:
            src = [j for j, r in enumerate(owners) for _ in r]
            dst = [i for r in owners for i in r]
            self._pairs = (key, torch.tensor(src, device=device), torch.tensor(dst, device=device))
        return self._pairs[1], self._pairs[2]

    def cancel(self) -> None:
        """Drop a measurement in progress (the step failed or skipped the optimizer)."""
        self._pending = None

    def take(self) -> ModuleStats | None:
        """The latest record not yet taken, or None."""
        latest, self._latest = self._latest, None
        return latest


def _stacked_norms(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The L2 norm of each tensor, as one float64 vector on the first tensor's device."""
    import torch

    norms = list(torch._foreach_norm(tensors))
    dev = norms[0].device
    if any(n.device != dev for n in norms):  # a model spread over devices
        norms = [n.to(dev) for n in norms]
    if any(n.dtype != torch.float32 for n in norms):
        norms = [n.float() for n in norms]
    return torch.stack(norms).double()
