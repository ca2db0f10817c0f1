"""The doctor's runtime watch: real optimizer steps observed for freezing pitfalls.

See :mod:`workbench.core.checks.doctor` for what it reports; :class:`Watch` and :func:`watch`
are re-exported there.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from workbench.core.checks import bn_stats
from workbench.core.checks.findings import Finding
from workbench.core.checks.grouping import (
    common_path,
    grouped_paths,
    merge_findings,
    names_text,
    own_parameters,
    unique_params,
)
from workbench.core.formatting import fmt_bytes
from workbench.core.freezing.capture import (
    bn_eval_locked,
    cover_paths,
)
from workbench.core.models.tree import ModelTree, bn_stats_fixed
from workbench.core.training.memory_probe import MemoryProbe

__all__ = ["Watch", "watch"]

#: Graph traversal stops here (a runaway graph is reported long before).
_GRAPH_LIMIT = 2_000_000


def _slope(ys: Sequence[float]) -> float:
    """Least-squares slope of ``ys`` against 0..n-1."""
    n = len(ys)
    if n < 2:
        return 0.0
    mx = (n - 1) / 2
    my = sum(ys) / n
    sxx = sum((i - mx) ** 2 for i in range(n))
    return sum((i - mx) * (y - my) for i, y in enumerate(ys)) / sxx


def _growth(ys: Sequence[float], rel: float, floor: float) -> tuple[float, float, float] | None:
    """``(slope, first-third median, last-third median)`` when ``ys`` grows, else None.

    Growing means: the fitted line rises by more than ``max(rel * median, floor)`` over the
    series *and* the last third's median exceeds the first third's by that much too, so a
    few slow steps (noise, a garbage collection) do not count.
    """
    n = len(ys)
    if n < 6:
        return None
    b = _slope(ys)
    med = statistics.median(ys)
    k = max(2, n // 3)
    first, last = statistics.median(ys[:k]), statistics.median(ys[-k:])
    need = max(rel * med, floor)
    if b * (n - 1) > need and last - first > need:
        return b, first, last
    return None


def _graph_nodes(roots: Iterable[Any], limit: int = _GRAPH_LIMIT) -> int:
    seen: set[Any] = set()
    stack = [r for r in roots if r is not None]
    while stack and len(seen) < limit:
        fn = stack.pop()
        if fn in seen:
            continue
        seen.add(fn)
        for nxt, _ in fn.next_functions:
            if nxt is not None and nxt not in seen:
                stack.append(nxt)
    return len(seen)


@dataclass
class _GradStats:
    steps_with_grad: int = 0
    nonzero_steps: int = 0
    nonfinite_steps: int = 0


class Watch:
    """Records real training steps and turns them into findings. Create with :func:`watch`.

    Attributes:
        steps: steps to record (None: until :meth:`stop`).
        warmup: first steps left out of the time and memory trends.
        step_ms: wall time of each recorded step (from one optimizer step to the next).
        memory: CUDA allocated bytes (model on CUDA) or process RSS after each step.
        memory_kind: ``"cuda_allocated"``, ``"mps_allocated"`` or ``"rss"``.
        graph_nodes: autograd nodes still reachable from parameters and buffers after each step
            (0 for a correct setup, growing when a graph leaks across steps).
        loss_graph_nodes: size of each step's loss graph, when :meth:`after_backward` gets the loss.
    """

    def __init__(
        self, model: nn.Module, optimizer: torch.optim.Optimizer | None, steps: int | None = None, *, warmup: int = 2
    ) -> None:
        if steps is not None and steps < 1:
            raise ValueError(f"steps must be >= 1 or None, got {steps}")
        self.model = model
        self.optimizer = optimizer
        self.steps = steps
        self.warmup = max(0, warmup)
        self.step_ms: list[float] = []
        self.memory: list[float] = []
        self.graph_nodes: list[int] = []
        self.loss_graph_nodes: list[int] = []
        self.memory_kind = "rss"
        self._device = torch.device("cpu")
        self._handle: Any = None
        self._t_last: float | None = None
        self._grads: dict[str, _GradStats] = {}
        self._trainable_start: set[str] = set()
        self._frozen_start: dict[str, str] = {}
        self._bn_start: dict[str, dict[str, str]] = {}
        self._bn_frozen_start: dict[str, dict[str, str]] = {}
        self._bn_fixed_train: set[str] = set()
        self._bn_fixed_sampled = False
        self._names: dict[int, str] = {}
        self._running = False
        self._finished = False
        self._grads_seen_this_step = False

    # ---------------------------------------------------------- control
    @property
    def done(self) -> bool:
        """True once ``steps`` steps were recorded (the watcher then stops recording)."""
        return self.steps is not None and len(self.step_ms) >= self.steps

    def start(self) -> Watch:
        """Snapshot frozen tensors and BatchNorm statistics, hook ``optimizer.step``.

        Returns:
            self.
        """
        from workbench.core.checks.verify import tensor_digest

        if self._running:
            return self
        model = self.model
        p0 = next(model.parameters(), None)
        self._device = p0.device if p0 is not None else torch.device("cpu")
        self.memory_kind = {"cuda": "cuda_allocated", "mps": "mps_allocated"}.get(self._device.type, "rss")
        self._memory = MemoryProbe(self._device, reset_peak=False)
        params = unique_params(model)
        self._names = {id(p): n for n, p in params}
        self._trainable_start = {n for n, p in params if p.requires_grad}
        self._frozen_start = {n: tensor_digest(p) for n, p in params if not p.requires_grad}
        self._grads = {n: _GradStats() for n in self._trainable_start}
        for path, m in model.named_modules():
            if not isinstance(m, nn.modules.batchnorm._BatchNorm) or m.running_mean is None:
                continue
            stats = {k: tensor_digest(v) for k, v in m.named_buffers(recurse=False) if v is not None}
            if not m.training or bn_eval_locked(m):
                self._bn_start[path] = stats
            own = own_parameters(m)
            if own and not any(p.requires_grad for p in own):
                self._bn_frozen_start[path] = stats
        self._sample_fixed_stats()
        if self.optimizer is not None:
            self._handle = self.optimizer.register_step_post_hook(lambda opt, args, kwargs: self.step())
        self._t_last = self._now()
        self._running = True
        return self

    def stop(self) -> None:
        """Remove the hook and compare frozen tensors with the snapshot."""
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        if self._running:
            self._compare_end()
        self._running = False

    def __enter__(self) -> Watch:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ---------------------------------------------------------- recording
    def _sync(self) -> None:
        if self._device.type == "cuda" and torch.cuda.is_available():
            torch.cuda.synchronize(self._device)
        elif self._device.type == "mps" and hasattr(torch, "mps"):
            torch.mps.synchronize()

    def _now(self) -> float:
        self._sync()
        return time.perf_counter()

    def _memory_now(self) -> float:
        allocated = self._memory.sample()[0]
        if self._memory.kind == "cpu":  # the absolute process RSS (the probe's allocated is growth)
            return float(self._memory.rss or 0)
        return float(allocated or 0)

    def after_backward(self, loss: torch.Tensor | None = None) -> None:
        """Optional, between ``loss.backward()`` and ``optimizer.step()``: record the loss graph size.

        Also records gradient statistics now (useful when the optimizer is not hooked).

        Args:
            loss: the loss of this step (its graph is counted; it may already be backwarded).
        """
        if not self._running or self.done:
            return
        if loss is not None and loss.grad_fn is not None:
            self.loss_graph_nodes.append(_graph_nodes([loss.grad_fn]))
        self._record_grads()

    def step(self) -> None:
        """Record one step. Called by the optimizer hook; call it yourself without an optimizer."""
        if not self._running or self.done:
            return
        t = self._now()
        if self._t_last is not None:
            self.step_ms.append((t - self._t_last) * 1000.0)
        if not self._grads_seen_this_step:
            self._record_grads()
        if not self._bn_fixed_sampled:  # the modes the loop trains in, after its model.train()
            self._sample_fixed_stats()
            self._bn_fixed_sampled = True
        self._grads_seen_this_step = False
        self.memory.append(self._memory_now())
        roots = [p.grad_fn for p in self.model.parameters() if p.grad_fn is not None]
        roots += [b.grad_fn for b in self.model.buffers() if b.grad_fn is not None]
        self.graph_nodes.append(_graph_nodes(roots))
        if self.done and self._handle is not None:
            self._handle.remove()
            self._handle = None
        self._t_last = self._now()

    def _sample_fixed_stats(self) -> None:
        """Note BatchNorm modules with fixed statistics (momentum 0) that are in train mode now."""
        for path, m in self.model.named_modules():
            if m.training and bn_stats_fixed(m) and not bn_eval_locked(m):
                self._bn_fixed_train.add(path)

    def _record_grads(self) -> None:
        self._grads_seen_this_step = True
        by_device: dict[torch.device, list[tuple[str, torch.Tensor]]] = {}
        for name, p in self.model.named_parameters():
            st = self._grads.get(name)
            if st is None or p.grad is None:
                continue
            g = p.grad
            if g.is_sparse:
                g = g.coalesce().values()
            by_device.setdefault(g.device, []).append((name, g))
        for items in by_device.values():
            names = [n for n, _ in items]
            grads = [g.detach() for _, g in items]
            try:
                norms = torch.stack(torch._foreach_norm(grads, float("inf"))).float().cpu().tolist()
            except (RuntimeError, TypeError):  # dtypes or layouts foreach does not handle
                norms = [float(g.abs().max()) if g.numel() else 0.0 for g in grads]
            for n, v in zip(names, norms):
                st = self._grads[n]
                st.steps_with_grad += 1
                if not math.isfinite(v):
                    st.nonfinite_steps += 1
                elif v > 0:
                    st.nonzero_steps += 1

    def _compare_end(self) -> None:
        from workbench.core.checks.verify import tensor_digest

        model = self.model
        params = dict(unique_params(model))
        self._frozen_changed = [
            n
            for n, d in self._frozen_start.items()
            if n in params
            and tensor_digest(params[n]) != d
            and not (params[n].requires_grad and params[n].is_leaf)  # unfrozen on purpose (a stage)
        ]
        self._trainable_end = {n for n, p in params.items() if p.requires_grad and p.is_leaf}
        modules = dict(model.named_modules())

        def changed(start: dict[str, dict[str, str]]) -> list[str]:
            out = []
            for path, stats in start.items():
                m = modules.get(path)
                if m is None:
                    continue
                now = {k: tensor_digest(v) for k, v in m.named_buffers(recurse=False) if v is not None}
                if any(now.get(k) != v for k, v in stats.items()):
                    out.append(path)
            return out

        self._bn_changed = changed(self._bn_start)
        self._bn_frozen_changed = [p for p in changed(self._bn_frozen_start) if p not in set(self._bn_changed)]
        self._finished = True

    # ---------------------------------------------------------- results
    def findings(self) -> list[Finding]:
        """What the recorded steps show (call after the ``with`` block or :meth:`stop`).

        Returns:
            Findings, errors first. Trends need at least ``warmup + 6`` recorded steps.
        """
        if self._running:
            self.stop()
        tree = ModelTree.from_model(self.model)
        owner = {n: tree.owner_of(n) for n, _ in unique_params(self.model)}
        universe: dict[str, int] = {}
        for o in owner.values():
            universe[o] = universe.get(o, 0) + 1
        out: list[Finding] = []
        n_steps = len(self.step_ms)
        ms = self.step_ms[self.warmup :]
        g = _growth(ms, 0.2, 0.0)
        if g is not None:
            b, first, last = g
            out.append(
                Finding(
                    "step-time-growing",
                    "warning",
                    "",
                    f"step time grows by {b:.2f} ms per step ({first:.1f} ms → {last:.1f} ms over {len(ms)} steps)",
                    "each step is slower than the one before: training slows down without bound",
                    "look for state carried across steps: parameters written inside forward, tensors kept "
                    "with their graph (append loss.item(), not loss), retain_grad()",
                )
            )
        mem = self.memory[self.warmup :]
        floor = 1 << 20 if self.memory_kind != "rss" else 32 << 20
        g = _growth(mem, 0.05, float(floor))
        if g is not None:
            b, first, last = g
            out.append(
                Finding(
                    "memory-growing",
                    "warning",
                    "",
                    f"memory ({self.memory_kind}) grows by {fmt_bytes(int(b))} per step "
                    f"({fmt_bytes(int(first))} → {fmt_bytes(int(last))} over {len(mem)} steps)",
                    "memory that grows every step ends in an out-of-memory error",
                    "look for tensors kept across steps with their autograd graph, or retain_grad() on "
                    "tensors computed in forward",
                )
            )
        nodes = self.graph_nodes[self.warmup :] or self.graph_nodes
        loss_nodes = self.loss_graph_nodes[self.warmup :] or self.loss_graph_nodes
        for series, what in ((nodes, "reachable from the parameters"), (loss_nodes, "of the loss")):
            if len(series) >= 3 and series[-1] > series[0] and _slope(series) >= 0.5:
                out.append(
                    Finding(
                        "graph-growing",
                        "error",
                        "",
                        f"the autograd graph {what} grows every step ({series[0]} → {series[-1]} nodes "
                        f"over {len(series)} steps)",
                        "each step's graph is chained to the previous one, so backward gets slower and "
                        "memory grows every step",
                        "do not write into parameters inside forward (param.copy_/add_ + retain_grad): use "
                        'torch.nn.utils.parametrize for W = A + B (plan key "reparam")',
                    )
                )
                break
        if not self._finished:
            return merge_findings(out)
        if self._frozen_changed:
            flagged: dict[str, int] = {}
            for n in self._frozen_changed:
                flagged[owner.get(n, "")] = flagged.get(owner.get(n, ""), 0) + 1
            where = grouped_paths(tree, flagged, universe)
            out.append(
                Finding(
                    "frozen-changed",
                    "error",
                    common_path(where),
                    f"{len(self._frozen_changed)} frozen parameters changed during training: {names_text(where)}",
                    "weights you froze are not the pretrained ones any more (written in forward, "
                    "param.data = ..., or stepped by the optimizer with an old gradient)",
                    "never assign parameter .data in the training loop; keep frozen parameters out of the "
                    "optimizer; check with applied.verify()",
                )
            )
        bns = [p for p, n in tree.nodes.items() if n.is_bn]

        def bn_cover(paths: list[str]) -> list[str]:
            return cover_paths(tree, paths, [p for p in bns if p not in set(paths)])

        if self._bn_changed:
            where = bn_cover(self._bn_changed)
            out.append(
                Finding(
                    "bn-eval-stats-changed",
                    "error",
                    common_path(where),
                    f"running statistics of {len(self._bn_changed)} BatchNorm modules in eval mode changed: "
                    f"{names_text(where)}",
                    "a model.train() inside the loop put them back in train mode; they drift with every batch",
                    "lock them in eval mode with a plan (bn_eval) so model.train() cannot undo it",
                )
            )
        # num_batches_tracked counts in a BatchNorm with fixed statistics: its own finding says it
        frozen_moved = [p for p in self._bn_frozen_changed if p not in self._bn_fixed_train]
        if frozen_moved:
            where = bn_cover(frozen_moved)
            out.append(
                Finding(
                    "bn-frozen-train-mode",
                    "warning",
                    common_path(where),
                    f"running statistics of {len(frozen_moved)} frozen BatchNorm modules changed: "
                    f"{names_text(where)}",
                    "their weights are frozen but their statistics follow your data: the frozen part of the "
                    "model changes anyway",
                    "keep frozen BatchNorm in eval mode (plan: bn_eval follows frozen by default)",
                )
            )
        if self._bn_fixed_train and n_steps:
            fixed = [p for p in tree.nodes if p in self._bn_fixed_train]
            if fixed:
                out.append(bn_stats.fixed_stats_finding(tree, fixed))
        if n_steps:
            kept = self._trainable_start & self._trainable_end
            never = [n for n in kept if self._grads[n].steps_with_grad == 0]
            zero = [
                n
                for n in kept
                if self._grads[n].steps_with_grad and not self._grads[n].nonzero_steps and not self._grads[n].nonfinite_steps
            ]
            nonfinite = [n for n in kept if self._grads[n].nonfinite_steps]
            for names, code, msg, why, fix in (
                (
                    never,
                    "no-gradient",
                    "trainable parameters never received a gradient in {k} steps",
                    "they are not part of the loss's autograd graph: they never train (param.data = A + B "
                    "cuts B out of the graph; so does an unused module)",
                    "compute W = A + B in the graph (torch.nn.utils.parametrize; plan key \"reparam\"), or "
                    "freeze the parameters that are not used",
                ),
                (
                    zero,
                    "zero-gradient",
                    "trainable parameters received only zero gradients in {k} steps",
                    "a zero gradient never moves a weight: these parameters do not train",
                    "check for a gradient hook or mask that zeroes them, or a path where their output is "
                    "multiplied by zero; freeze them if they should not train",
                ),
                (
                    nonfinite,
                    "nonfinite-gradient",
                    "NaN/inf gradients in trainable parameters (in some of {k} steps)",
                    "one non-finite gradient corrupts the weights and the optimizer state",
                    "lower the learning rate, use gradient clipping, or a GradScaler with AMP",
                ),
            ):
                if not names:
                    continue
                flagged = {}
                for n in names:
                    flagged[owner.get(n, "")] = flagged.get(owner.get(n, ""), 0) + 1
                where = grouped_paths(tree, flagged, universe)
                out.append(
                    Finding(code, "error", common_path(where), f"{len(names)} " + msg.format(k=n_steps) + f": {names_text(where)}", why, fix)
                )
        return merge_findings(out)

    def summary(self) -> dict[str, Any]:
        """Recorded series and their trends, JSON-ready (for the CLI's ``--json`` and the GUI)."""
        ms = self.step_ms[self.warmup :]
        mem = self.memory[self.warmup :]
        return {
            "steps": len(self.step_ms),
            "warmup": self.warmup,
            "step_ms": list(self.step_ms),
            "step_ms_median": statistics.median(ms) if ms else None,
            "step_ms_slope": _slope(ms) if len(ms) > 1 else None,
            "memory_kind": self.memory_kind,
            "memory": list(self.memory),
            "memory_slope": _slope(mem) if len(mem) > 1 else None,
            "graph_nodes": list(self.graph_nodes),
            "loss_graph_nodes": list(self.loss_graph_nodes),
        }


def watch(
    model: nn.Module, optimizer: torch.optim.Optimizer | None = None, steps: int | None = None, *, warmup: int = 2
) -> Watch:
    """Watch real training steps for runtime freezing pitfalls.

    Use it as a context manager around the training loop; it hooks ``optimizer.step`` so the
    loop needs no change (see the module docstring). Without an optimizer, call
    :meth:`Watch.step` after each step yourself.

    Frozen tensors and BatchNorm statistics are hashed at the start and compared at the end;
    gradients are inspected at every step (one reduction per device, one host sync); on
    CUDA each step synchronizes the device so step times are real.

    Args:
        model: the model being trained.
        optimizer: its optimizer (hooked with ``register_step_post_hook``).
        steps: record this many steps, then stop recording (``w.done`` turns True); None
            records until the ``with`` block ends.
        warmup: first steps left out of the time and memory trends.

    Returns:
        The :class:`Watch` (not started: use ``with`` or :meth:`Watch.start`).

    Raises:
        ValueError: ``steps`` < 1.
    """
    return Watch(model, optimizer, steps, warmup=warmup)
