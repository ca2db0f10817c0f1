"""Full-rank A+B: train ``B`` in ``W = A + B`` with ``A`` fixed, in the original architecture.

A plan rule ``{"select": "layer3", "reparam": {"kind": "a_plus_b", ...}}`` replaces every
parameter a module owns (or the ones named in ``params``) by ``W = A + B``:

- ``mode: "exact"`` (default) registers a :mod:`torch.nn.utils.parametrize` parametrization
  :class:`APlusB`. ``A`` is a *persistent* buffer of the parametrization (so ``state_dict()``
  is self-contained) and ``B`` is the parametrization's ``original`` parameter — the very
  parameter object the module had, so an optimizer built before keeps working. ``A + B`` is
  computed once per access of ``module.weight`` inside the forward pass: the autograd graph of
  every step is fresh, ``A`` never receives a gradient, and ``dL/dB == dL/dW``.
- ``mode: "fused"`` trains ``W`` itself (set to ``A + B`` at install) and derives ``B = W - A``
  only when it is read, exported or verified. The model stays a plain model (same speed, same
  ``state_dict`` keys); ``A`` lives in the handle. Weight decay of ``B`` (which pulls ``W``
  toward ``A``) is :mod:`workbench.core.freezing.reparam.decay`.
"""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any, cast

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize

from workbench.core.freezing.reparam.base import DeltaHandle, record_order, shared_names
from workbench.core.freezing.reparam.sources import Sources
from workbench.core.plan.reparam_spec import ReparamError, ReparamSpec, SpecInput, parse_spec

__all__ = ["APlusB", "FullRankHandle", "ReparamHandle", "install"]


def _parametrizations(module: nn.Module) -> Any:
    """``module.parametrizations`` (a ModuleDict that ``parametrize`` adds), typed loosely."""
    return module.parametrizations


class _AddInto(torch.autograd.Function):
    """``W = A + B`` written into a buffer the parametrization keeps; ``dL/dB = dL/dW``.

    A weight-sized tensor allocated and freed every step costs page faults on the CPU (large
    blocks come from ``mmap``), more than the add itself at small batches; writing into one
    buffer costs the add only. The buffer is passed detached, so no autograd history links one
    step to the next; it shares its version counter with the buffer, so overwriting a ``W`` an
    unfinished backward still needs is an error, never a silent change.
    """

    @staticmethod
    def forward(ctx: Any, a: Tensor, b: Tensor, out: Tensor) -> Tensor:
        torch.add(a, b, out=out)
        ctx.mark_dirty(out)
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[None, Tensor, None]:
        return None, grad, None


class APlusB(nn.Module):
    """Parametrization ``W = A + B`` for :func:`torch.nn.utils.parametrize.register_parametrization`.

    ``A`` is a persistent buffer (it is saved in ``state_dict()`` under
    ``<module>.parametrizations.<tensor>.0.A``); ``B`` is the parametrization's ``original``.
    While training, ``W`` is written into one buffer kept between steps (see :class:`_AddInto`);
    otherwise (no gradient wanted, or inside ``torch.compile``) it is a new tensor.

    Args:
        a: the fixed tensor (same shape, dtype and device as the weight).
    """

    _workbench_internal = True
    A: Tensor

    def __init__(self, a: Tensor) -> None:
        super().__init__()
        self.register_buffer("A", a, persistent=True)
        self._w: Tensor | None = None
        self._last: weakref.ref[Tensor] | None = None  # the W handed out last: alive while a graph holds it

    def forward(self, b: Tensor) -> Tensor:
        """``A + B``; the gradient flows to ``B`` only (``A`` is a buffer)."""
        a = self.A
        if not (b.requires_grad and torch.is_grad_enabled()) or torch.compiler.is_compiling() or a.dtype != b.dtype:
            return a + b
        if self._last is not None and self._last() is not None:
            return a + b  # the last W is still in a graph (a module used twice, a pending backward)
        w = self._w
        if w is None or w.shape != b.shape or w.device != b.device or w.dtype != b.dtype or w.stride() != b.stride():
            w = self._w = torch.empty_like(b)
        out: Tensor = _AddInto.apply(a, b, w.detach())
        self._last = weakref.ref(out)
        return out

    def right_inverse(self, w: Tensor) -> Tensor:
        """``B = W - A``: what assigning ``module.weight = W`` stores in ``B``."""
        return w - self.A


class FullRankHandle(DeltaHandle):
    """Full-rank A+B installed on the parameters one module owns."""

    def __init__(self, model: nn.Module, path: str, spec: ReparamSpec, base_dir: Path | None) -> None:
        super().__init__(model, path, spec, base_dir)
        self._a: dict[str, Tensor] = {}
        self._w: dict[str, nn.Parameter] = {}  # fused: W; exact: B (the parametrization's original)

    def a(self, name: str) -> Tensor:
        """The fixed tensor A of parameter ``name``, where the model is now.

        Exact mode reads the parametrization's buffer (``model.to()`` moves it); fused mode
        keeps A beside the model and follows W's device and dtype when the model moved.
        """
        if self.mode == "exact":
            m = self._module_ref()
            if m is not None and parametrize.is_parametrized(m, name):
                return cast(APlusB, _parametrizations(m)[name][0]).A
            return self._a[name]
        a, w = self._a[name], self._w[name]
        if a.device != w.device or a.dtype != w.dtype:
            a = self._a[name] = a.to(device=w.device, dtype=w.dtype)
        return a

    def b(self, name: str) -> Tensor:
        """B of parameter ``name``: the trained parameter (exact) or ``W - A`` computed now (fused)."""
        if self.mode == "exact":
            return self._w[name]
        with torch.no_grad():
            return self._w[name] - self.a(name)

    def weight(self, name: str) -> Tensor:
        """``W = A + B`` as the module uses it (a new tensor in exact mode, the parameter in fused)."""
        if self.mode == "fused":
            return self._w[name]
        return super().weight(name)

    def set_b(self, name: str, value: Tensor) -> None:
        """Overwrite B of parameter ``name`` in place (identity of every parameter kept)."""
        with torch.no_grad():
            target = self._w[name]
            value = value.to(device=target.device, dtype=target.dtype)
            if self.mode == "exact":
                target.copy_(value)
            else:
                target.copy_(self.a(name) + value)

    def initial_b(self, name: str) -> Tensor:
        """B as ``b_init`` defines it (files are read again)."""
        return Sources(self.base_dir).make(self.spec.b_init, "b", self.param_path(name), self._w[name])

    def fused_anchors(self) -> list[tuple[nn.Parameter, Tensor]]:
        """``(W, A)`` per tensor in fused mode (what weight decay pulls W toward); empty in exact mode."""
        return [(self._w[n], self.a(n)) for n in self.names] if self.mode == "fused" else []

    def trainable(self) -> list[tuple[str, nn.Parameter]]:
        """B (exact: ``<module>.parametrizations.<name>.original``) or W (fused), full names."""
        if self.mode == "exact":
            return [(f"{self.raw_prefix(n)}.original", self._w[n]) for n in self.names]
        return [(self.param_path(n), self._w[n]) for n in self.names]

    def fixed(self) -> list[tuple[str, Tensor]]:
        """A per parameter: its ``state_dict`` key (exact) or ``<parameter path>.A`` (fused)."""
        if self.mode == "exact":
            return [(f"{self.raw_prefix(n)}.0.A", self.a(n)) for n in self.names]
        return [(f"{self.param_path(n)}.A", self.a(n)) for n in self.names]

    def work_buffers(self) -> list[Tensor]:
        """Exact mode: the weight-sized buffer each parametrization writes ``W = A + B`` into, once made."""
        m = self._module_ref()
        if self.mode != "exact" or m is None:
            return []
        fns = [_parametrizations(m)[n][0] for n in self.names if parametrize.is_parametrized(m, n)]
        return [f._w for f in fns if isinstance(f, APlusB) and f._w is not None]

    def _restore_value(self, name: str) -> Tensor | None:
        return self._orig[name] if name in self._orig else self.a(name)

    def _uninstall(self, module: nn.Module, name: str, merge: bool) -> Tensor:
        if (self.mode == "exact" and parametrize.is_parametrized(module, name)
                and isinstance(_parametrizations(module)[name][0], APlusB)):
            parametrize.remove_parametrizations(module, name, leave_parametrized=True)
        return self._w[name]


#: The name this handle had before the package: same class.
ReparamHandle = FullRankHandle


def install(model: nn.Module, path: str, spec: SpecInput, *, base_dir: Path | None = None) -> FullRankHandle:
    """Install full-rank A+B on the parameters module ``path`` owns itself.

    Every A and B is built and checked before the module is touched, so an error leaves the
    model as it was.

    Args:
        model: the model.
        path: dotted module path (``""`` for the root).
        spec: the ``reparam`` spec (raw or normalized, see :func:`parse_spec`).
        base_dir: folder for relative ``{"file": ...}`` paths (default: the working directory).

    Returns:
        The handle.

    Raises:
        ReparamError: a file is missing or unusable (the message names the parameter), a
            parameter is tied to another module, already parametrized, or not floating point.
    """
    spec = parse_spec(spec)
    handle = FullRankHandle(model, path, spec, base_dir)
    module = handle.module
    wanted = spec.params
    own = dict(module.named_parameters(recurse=False))
    for n in wanted or ():
        if n not in own and parametrize.is_parametrized(module, n):
            raise ReparamError(
                f"{handle.param_path(n)} is already parametrized (weight_norm, spectral_norm or "
                "another tool); A+B cannot stack on it: remove that parametrization or leave "
                f"{n!r} out of reparam.params"
            )
    names = [n for n in own if not wanted or n in wanted]
    shared = shared_names(model, module)
    sources = Sources(base_dir)
    a_t: dict[str, Tensor] = {}
    b_t: dict[str, Tensor] = {}
    for n in names:
        w = own[n]
        key = handle.param_path(n)
        if not w.is_floating_point():
            raise ReparamError(f"{key} has dtype {w.dtype}; A+B needs floating-point parameters: leave it out of reparam.params")
        if id(w) in shared:
            raise ReparamError(
                f"{key} is the same tensor as {', '.join(x for x in shared[id(w)] if x != key)} (tied weights); "
                "A+B on tied weights is not supported: leave it out with reparam.params or select another module"
            )
        a_t[n] = sources.make(spec.a, "a", key, w)
        b_t[n] = sources.make(spec.b_init, "b", key, w)
    if spec.a.kind != "current":
        handle._orig = {n: own[n].detach().to("cpu", copy=True) for n in names}
    with torch.no_grad():
        for n in names:
            handle.function_changed[n] = not spec.starts_at_loaded and not torch.equal(a_t[n] + b_t[n], own[n])
    if names and spec.mode == "exact":
        handle._order = record_order(module)
    for n in names:
        w = own[n]
        handle._a[n] = a_t[n]
        if spec.mode == "exact":
            parametrize.register_parametrization(module, n, APlusB(a_t[n]))
            b = _parametrizations(module)[n].original
            with torch.no_grad():
                b.copy_(b_t[n])
            handle._w[n] = b
        else:
            if handle.function_changed[n]:
                with torch.no_grad():
                    w.copy_(a_t[n] + b_t[n])
            handle._w[n] = w
        handle.names.append(n)
    return handle
