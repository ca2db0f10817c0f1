"""A+B reparameterization: train ``B`` in ``W = A + B`` with ``A`` fixed, in the original architecture.

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
  toward ``A``) is implemented by :func:`adjust_param_groups` plus an optimizer step pre-hook.

The spec (parsing, ``changes_function``, ``describe``) is
:class:`~workbench.core.plan.reparam_spec.ReparamSpec`, re-exported here; :func:`install` and
:func:`adjust_param_groups` are what :mod:`workbench.core.freezing.plan_handle` calls;
:func:`merge`, :func:`reset_b`, :func:`export_deltas`, :func:`load_deltas` and :func:`stats`
back the methods of the same names on :class:`~workbench.core.freezing.apply.AppliedPlan`.
See ``docs/reparam.md`` for the user-level description.
"""

from __future__ import annotations

import math
import os
import weakref
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, cast

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import Tensor, nn
from torch.nn.utils import parametrize

from workbench.core.atomic import atomic_path
from workbench.core.plan.reparam_spec import (
    KIND,
    ReparamError,
    ReparamSpec,
    Source,
    changes_function,
    describe,
    parse_spec,
)
from workbench.core.suggest import close_matches

if TYPE_CHECKING:  # pragma: no cover - typing only
    from workbench.core.freezing.apply import AppliedPlan, PlanDiff

__all__ = [
    "APlusB",
    "DELTA_FORMAT",
    "ReparamError",
    "ReparamHandle",
    "ReparamSpec",
    "adjust_param_groups",
    "changes_function",
    "ddp_ignore_names",
    "describe",
    "export_deltas",
    "install",
    "load_deltas",
    "merge",
    "module_stats",
    "parse_spec",
    "reset_b",
    "stats",
]

#: ``format`` value in the metadata of delta files written by :func:`export_deltas`.
DELTA_FORMAT = "freeze-workbench-deltas"
#: Extra key of optimizer param groups whose fused-mode parameters decay toward A.
DECAY_KEY = "reparam_decay"
#: Attribute on a module: its parameter names in plain-model order (read by tree.py).
ORDER_ATTR = "_workbench_param_order"


# ====================================================================== the parametrization
def _parametrizations(module: nn.Module) -> Any:
    """``module.parametrizations`` (a ModuleDict that ``parametrize`` adds), typed loosely."""
    return module.parametrizations

class APlusB(nn.Module):
    """Parametrization ``W = A + B`` for :func:`torch.nn.utils.parametrize.register_parametrization`.

    ``A`` is a persistent buffer (it is saved in ``state_dict()`` under
    ``<module>.parametrizations.<tensor>.0.A``); ``B`` is the parametrization's ``original``.

    Args:
        a: the fixed tensor (same shape, dtype and device as the weight).
    """

    _workbench_internal = True

    def __init__(self, a: Tensor) -> None:
        super().__init__()
        self.register_buffer("A", a, persistent=True)

    A: Tensor
    def forward(self, b: Tensor) -> Tensor:
        """``A + B``; the gradient flows to ``B`` only (``A`` is a buffer)."""
        return self.A + b

    def right_inverse(self, w: Tensor) -> Tensor:
        """``B = W - A``: what assigning ``module.weight = W`` stores in ``B``."""
        return w - self.A


# ====================================================================== tensors from specs
def _derived_seed(seed: int, role: str, key: str) -> int:
    return (seed * 0x9E3779B97F4A7C15 + zlib.crc32(f"{role}:{key}".encode())) % (2**63 - 1)


def _random_like(w: Tensor, r: Source, role: str, key: str) -> Tensor:
    g = torch.Generator(device="cpu").manual_seed(_derived_seed(r.seed, role, key))
    fn = torch.rand if r.dist == "uniform" else torch.randn
    t = fn(tuple(w.shape), generator=g, dtype=torch.float32)
    if r.scale != 1.0:
        t.mul_(r.scale)
    return t.to(device=w.device, dtype=w.dtype)


def _resolve(file: str, base_dir: Path | None) -> Path:
    p = Path(file).expanduser()
    if not p.is_absolute():
        p = (base_dir or Path.cwd()) / p
    return p


class _TensorFile:
    """A safetensors file opened lazily, with errors that name the file and the parameter."""

    def __init__(self, path: Path, role: str) -> None:
        self.path = path
        self.role = role
        if not path.is_file():
            raise ReparamError(
                f"{role} file {str(path)!r} not found; give a path relative to the plan file's folder "
                "(or to base_dir) or an absolute path"
            )
        try:
            self._f = safe_open(str(path), framework="pt", device="cpu")
            self.keys = set(self._f.keys())
        except Exception as e:  # safetensors raises its own error type for a bad header
            raise ReparamError(
                f"{role} file {str(path)!r} is not a readable safetensors file ({e}); write it with "
                "applied.export_deltas() or safetensors.torch.save_file({parameter path: tensor})"
            ) from None

    def tensor(self, key: str, like: Tensor) -> Tensor:
        """The tensor for parameter ``key``, checked against ``like`` and cast to its dtype/device."""
        if key not in self.keys:
            hint = close_matches(key, sorted(self.keys))
            near = f"; closest key: {hint[0]!r}" if hint else (
                f"; it holds {len(self.keys)} tensors" + (f" such as {sorted(self.keys)[0]!r}" if self.keys else "")
            )
            raise ReparamError(
                f"{self.role} file {str(self.path)!r} has no tensor for parameter {key!r}{near}; "
                "key tensors by the parameter path of the plain model (as model.named_parameters() names it)"
            )
        shape = tuple(self._f.get_slice(key).get_shape())
        if shape != tuple(like.shape):
            raise ReparamError(
                f"tensor {key!r} in {self.role} file {str(self.path)!r} has shape {shape} but parameter "
                f"{key!r} has shape {tuple(like.shape)}; the file was made for a different model or head size"
            )
        t = self._f.get_tensor(key)
        if not t.is_floating_point():
            raise ReparamError(
                f"tensor {key!r} in {self.role} file {str(self.path)!r} has dtype {t.dtype}; A+B needs "
                "floating-point tensors"
            )
        return t.to(device=like.device, dtype=like.dtype)


class _Sources:
    """Builds A and B tensors for one install, opening each file once."""

    def __init__(self, base_dir: Path | None) -> None:
        self.base_dir = base_dir
        self._files: dict[tuple[Path, str], _TensorFile] = {}

    def file(self, name: str, role: str) -> _TensorFile:
        p = _resolve(name, self.base_dir)
        f = self._files.get((p, role))
        if f is None:
            f = self._files[(p, role)] = _TensorFile(p, role)
        return f

    def make(self, src: Source, role: str, key: str, w: Tensor) -> Tensor:
        """The tensor for ``src`` (current, zeros, random or file) shaped like ``w``."""
        with torch.no_grad():
            if src.kind == "current":
                return w.detach().clone()
            if src.kind == "zeros":
                return torch.zeros_like(w, memory_format=torch.contiguous_format)
            if src.kind == "random":
                return _random_like(w, src, role, key)
            return self.file(str(src.file), "A" if role == "a" else "B").tensor(key, w)


# ====================================================================== fused-mode weight decay
#: id(W) -> (weak reference to W, A) for every trainable W of a fused-mode A+B.
_ANCHORS: dict[int, tuple["weakref.ref[Tensor]", Tensor]] = {}
_HOOK: Any = None


def _anchor_of(p: Tensor) -> Tensor | None:
    """A of a fused W, on W's device and dtype (the model may have moved since install)."""
    entry = _ANCHORS.get(id(p))
    if entry is None or entry[0]() is not p:
        return None
    a = entry[1]
    if a.device != p.device or a.dtype != p.dtype:
        a = a.to(device=p.device, dtype=p.dtype)
        _ANCHORS[id(p)] = (entry[0], a)
    return a


def _fused_decay_hook(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
    """Optimizer step pre-hook: decay ``B = W - A`` of fused A+B, as exact mode decays ``B``.

    Decoupled decay (AdamW, ``decoupled_weight_decay=True``): ``W <- W - lr*wd*(W - A)``.
    Coupled (L2) decay (SGD, Adam, ...): ``grad <- grad + wd*(W - A)``. Only groups made by
    :func:`adjust_param_groups` (key ``reparam_decay``) are touched.
    """
    for group in optimizer.param_groups:
        wd = group.get(DECAY_KEY)
        if not wd:
            continue
        decoupled = bool(group.get("decoupled_weight_decay", False)) or isinstance(optimizer, torch.optim.AdamW)
        sign = -1.0 if group.get("maximize", False) else 1.0
        lr = group["lr"]
        with torch.no_grad():
            for p in group["params"]:
                a = _anchor_of(p)
                if a is None or p.grad is None:
                    continue
                if decoupled:
                    p.lerp_(a, lr * wd)
                else:
                    p.grad.add_(p - a, alpha=sign * wd)  # W - A first: no cancellation against the grad


def _ensure_hook() -> None:
    global _HOOK
    if _HOOK is None:
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        _HOOK = register_optimizer_step_pre_hook(_fused_decay_hook)


# ====================================================================== the handle
class ReparamHandle:
    """A+B installed on the parameters one module owns (the ``Installed`` protocol of apply.py).

    Attributes:
        path: dotted path of the module.
        spec: the normalized spec.
        mode: ``"exact"`` or ``"fused"``.
        names: short names of the reparametrized parameters (``["weight", "bias"]``).
        function_changed: per short name, whether ``A + B`` differed from the weight at install.
    """

    def __init__(self, model: nn.Module, path: str, spec: ReparamSpec, base_dir: Path | None) -> None:
        self.path = path
        self.spec = spec
        self.mode: str = spec.mode
        self.base_dir = base_dir
        self.names: list[str] = []
        self.function_changed: dict[str, bool] = {}
        self._module_ref = weakref.ref(model.get_submodule(path) if path else model)
        self._a: dict[str, Tensor] = {}
        self._w: dict[str, nn.Parameter] = {}  # fused: W; exact: B (the parametrization's original)
        self._orig: dict[str, Tensor] = {}  # weights at install, when they are not A
        self._order: tuple[str, ...] | None = None
        self._removed = False

    # ---------------------------------------------------------- names and tensors
    @property
    def module(self) -> nn.Module:
        """The module A+B is installed on."""
        m = self._module_ref()
        if m is None:
            raise ReparamError(f"the model holding module {self.path or '(root)'!r} no longer exists")
        return m

    def param_path(self, name: str) -> str:
        """Dotted parameter path in the plain model (``layer1.0.conv1.weight``)."""
        return f"{self.path}.{name}" if self.path else name

    def _raw_prefix(self, name: str) -> str:
        base = f"{self.path}." if self.path else ""
        return f"{base}parametrizations.{name}"

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
        w = self._w[name]
        a = _anchor_of(w)
        if a is None:
            a = self._a[name]
        self._a[name] = a
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
        with torch.no_grad():
            return self.a(name) + self._w[name]

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
        return _Sources(self.base_dir).make(self.spec.b_init, "b", self.param_path(name), self._w[name])

    # ---------------------------------------------------------- Installed protocol
    def trainable(self) -> list[tuple[str, nn.Parameter]]:
        """B (exact: ``<module>.parametrizations.<name>.original``) or W (fused), full names."""
        if self.mode == "exact":
            return [(f"{self._raw_prefix(n)}.original", self._w[n]) for n in self.names]
        return [(self.param_path(n), self._w[n]) for n in self.names]

    def fixed(self) -> list[tuple[str, Tensor]]:
        """A per parameter: its ``state_dict`` key (exact) or ``<parameter path>.A`` (fused)."""
        if self.mode == "exact":
            return [(f"{self._raw_prefix(n)}.0.A", self.a(n)) for n in self.names]
        return [(f"{self.param_path(n)}.A", self.a(n)) for n in self.names]

    def remove(self, merge: bool = True) -> None:
        """Undo A+B on this module.

        Args:
            merge: keep ``W = A + B`` in the plain parameter; False puts back the weights the
                module had at install. Parameter objects keep their identity either way.
        """
        if self._removed:
            return
        module = self._module_ref()
        if module is not None:
            for n in self.names:
                w = self._w[n]
                if self.mode == "exact":
                    if parametrize.is_parametrized(module, n) and isinstance(_parametrizations(module)[n][0], APlusB):
                        parametrize.remove_parametrizations(module, n, leave_parametrized=True)
                else:
                    _ANCHORS.pop(id(w), None)
                if not merge:
                    with torch.no_grad():
                        w.copy_(self._orig[n] if n in self._orig else self.a(n))
            _restore_order(module, self._order)
        self._removed = True
        self._orig.clear()


def _restore_order(module: nn.Module, order: tuple[str, ...] | None) -> None:
    """Put ``module._parameters`` back in its plain order and drop the order hint."""
    if order is None:
        return
    params = module._parameters
    items = sorted(params.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order))
    params.clear()
    params.update(items)
    if ORDER_ATTR in module.__dict__ and not parametrize.is_parametrized(module):
        del module.__dict__[ORDER_ATTR]


def _shared_names(model: nn.Module, module: nn.Module, prefix: str) -> dict[int, list[str]]:
    own = {id(p) for p in module.parameters(recurse=False)}
    found: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in own:
            found.setdefault(id(p), []).append(name)
    return {k: v for k, v in found.items() if len(v) > 1}


def install(model: nn.Module, path: str, spec: Any, *, base_dir: Path | None = None) -> ReparamHandle:
    """Install A+B on the parameters module ``path`` owns itself.

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
    handle = ReparamHandle(model, path, spec, base_dir)
    module = handle.module
    wanted = spec.params
    own = dict(module.named_parameters(recurse=False))
    if wanted:
        for n in wanted:
            if n not in own and parametrize.is_parametrized(module, n):
                raise ReparamError(
                    f"{handle.param_path(n)} is already parametrized (weight_norm, spectral_norm or "
                    "another tool); A+B cannot stack on it: remove that parametrization or leave "
                    f"{n!r} out of reparam.params"
                )
    names = [n for n in own if not wanted or n in wanted]
    shared = _shared_names(model, module, path)
    sources = _Sources(base_dir)
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
            if spec.starts_at_loaded:
                handle.function_changed[n] = False
            else:
                handle.function_changed[n] = not torch.equal(a_t[n] + b_t[n], own[n])
    if names and spec.mode == "exact":
        handle._order = getattr(module, ORDER_ATTR, None) or tuple(module._parameters)
        object.__setattr__(module, ORDER_ATTR, handle._order)
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
            _ANCHORS[id(w)] = (weakref.ref(w), a_t[n])
            handle._w[n] = w
        handle.names.append(n)
    return handle


# ====================================================================== param groups
def adjust_param_groups(
    groups: list[dict[str, Any]], handles: Mapping[str, ReparamHandle], *, weight_decay: float
) -> list[dict[str, Any]]:
    """Give weight decay its A+B meaning in fused mode: decay of ``B``, i.e. ``W`` toward ``A``.

    In exact mode the optimizer already decays ``B`` (the parameter), so nothing changes. In
    fused mode the parameter is ``W``; its parameters move to a group of their own with
    ``weight_decay=0`` and ``reparam_decay=<wd>``, and an optimizer step pre-hook applies the
    decay to ``W - A`` (decoupled for AdamW / ``decoupled_weight_decay=True``, L2 otherwise).
    Build the optimizer from :meth:`AppliedPlan.param_groups` for this to take effect.

    Args:
        groups: param groups from :meth:`AppliedPlan.param_groups`.
        handles: installed A+B handles by module path.
        weight_decay: the base weight decay.

    Returns:
        The groups, fused-mode parameters split out where a group decays.
    """
    fused = {id(p) for h in handles.values() if h.mode == "fused" and not h.spec.low_rank for _, p in h.trainable()}
    if not fused or not weight_decay:
        return groups
    out: list[dict[str, Any]] = []
    for g in groups:
        wd = g.get("weight_decay", weight_decay)
        idx = [i for i, p in enumerate(g["params"]) if id(p) in fused]
        if not wd or not idx:
            out.append(g)
            continue
        names = g.get("param_names")
        keep = [i for i in range(len(g["params"])) if i not in set(idx)]
        if keep:
            rest = dict(g)
            rest["params"] = [g["params"][i] for i in keep]
            if names is not None:
                rest["param_names"] = [names[i] for i in keep]
            out.append(rest)
        ab = dict(g)
        ab["params"] = [g["params"][i] for i in idx]
        if names is not None:
            ab["param_names"] = [names[i] for i in idx]
        ab["weight_decay"] = 0.0
        ab[DECAY_KEY] = wd
        out.append(ab)
    _ensure_hook()
    return out


# ====================================================================== AppliedPlan operations
def _handles(applied: "AppliedPlan") -> dict[str, ReparamHandle]:
    return applied.installed("reparam")  # type: ignore[return-value]


def _require(applied: "AppliedPlan") -> dict[str, ReparamHandle]:
    hs = _handles(applied)
    if not any(h.names for h in hs.values()):
        raise ReparamError(
            "the plan puts A+B on no parameter; add a rule like "
            '{"select": "layer4", "reparam": {"kind": "a_plus_b"}} first'
        )
    return hs


def merge(applied: "AppliedPlan") -> "PlanDiff":
    """Bake ``W = A + B`` into plain parameters and remove every A+B.

    The applied plan is updated to the same plan without ``reparam`` keys, so the GUI, the
    counts and :meth:`AppliedPlan.verify` see a plain model. Parameter objects keep their
    identity: an optimizer keeps working (its state for B now applies to W; rebuild param
    groups if you use weight decay, which now acts on W).

    Args:
        applied: the applied plan.

    Returns:
        What changed (parameter names go from ``...parametrizations.weight.original`` to
        ``...weight``).
    """
    plan = applied.plan.copy()
    for r in plan.rules:
        r.reparam = None
        r.reparam_off = False
    plan.rules = [r for r in plan.rules if not r.empty or r.comment]
    return applied.update(plan)


def _select(applied: "AppliedPlan", paths: Iterable[str] | None) -> list[tuple[ReparamHandle, list[str]]]:
    hs = _require(applied)
    if paths is None:
        return [(h, list(h.names)) for h in hs.values() if h.names]
    by_param = {h.param_path(n): (h, n) for h in hs.values() for n in h.names}
    out: dict[str, tuple[ReparamHandle, list[str]]] = {}
    for p in paths:
        if p in hs and hs[p].names:
            picked = [(hs[p], n) for n in hs[p].names]
        elif p in by_param:
            picked = [by_param[p]]
        else:
            have = sorted(h.path or "(root)" for h in hs.values() if h.names)
            raise ReparamError(
                f"{p!r} has no A+B; give module paths with A+B ({', '.join(have[:5])}"
                f"{' ...' if len(have) > 5 else ''}) or their parameter paths"
            )
        for h, n in picked:
            entry = out.setdefault(h.path, (h, []))
            if n not in entry[1]:
                entry[1].append(n)
    return list(out.values())


def reset_b(applied: "AppliedPlan", paths: Iterable[str] | None = None) -> None:
    """Set B back to its ``b_init`` value (zeros by default), so ``W`` is back at ``A + B0``.

    Optimizer state (Adam moments) is not reset.

    Args:
        applied: the applied plan.
        paths: module paths (or parameter paths) to reset; None for all.

    Raises:
        ReparamError: a path has no A+B, or a ``b_init`` file is no longer usable.
    """
    chosen = _select(applied, paths)
    values = [(h, n, h.initial_b(n)) for h, names in chosen for n in names]  # read all before writing
    for h, n, v in values:
        h.set_b(n, v)


def export_deltas(applied: "AppliedPlan", path: str | os.PathLike[str]) -> None:
    """Write every B to a safetensors file, keyed by parameter path (``layer4.0.conv1.weight``).

    The file is a fine-tune shipped as a delta: with the same A (``a: "current"`` on the same
    pretrained weights), ``{"b_init": {"file": ...}}`` or :func:`load_deltas` restores it.

    Args:
        applied: the applied plan.
        path: destination file (written atomically).

    Raises:
        ReparamError: the plan has no A+B.
        OSError: the folder is not writable.
    """
    hs = _require(applied)
    tensors: dict[str, Tensor] = {}
    modes = set()
    for h in hs.values():
        for n in h.names:
            tensors[h.param_path(n)] = h.b(n).detach().to("cpu").contiguous()
            modes.add(h.mode)
    meta = {"format": DELTA_FORMAT, "version": "1", "kind": KIND, "mode": ",".join(sorted(modes))}
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata=meta)


def load_deltas(applied: "AppliedPlan", path: str | os.PathLike[str], *, strict: bool = True) -> None:
    """Load every B from a safetensors file written by :func:`export_deltas`.

    Everything is read and checked before any B is written.

    Args:
        applied: the applied plan.
        path: the file.
        strict: the file must hold exactly the plan's B tensors (no more).

    Raises:
        ReparamError: the file is missing or not safetensors, lacks a B (named), holds a
            tensor of the wrong shape (named), or (``strict``) holds tensors for parameters
            without A+B.
    """
    hs = _require(applied)
    f = _TensorFile(Path(path), "deltas")
    want = {h.param_path(n): (h, n) for h in hs.values() for n in h.names}
    missing = [k for k in want if k not in f.keys]
    if missing:
        raise ReparamError(
            f"deltas file {str(path)!r} has no B for {len(missing)} parameter(s) with A+B: "
            f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}; export it from a model with "
            "the same plan, or restrict the plan's reparam to what the file holds"
        )
    extra = sorted(f.keys - set(want))
    if strict and extra:
        raise ReparamError(
            f"deltas file {str(path)!r} holds B for parameter(s) without A+B in this plan: "
            f"{', '.join(extra[:5])}{' ...' if len(extra) > 5 else ''}; add A+B there, or pass strict=False"
        )
    values = [(h, n, f.tensor(k, h.a(n))) for k, (h, n) in want.items()]
    for h, n, v in values:
        h.set_b(n, v)


def stats(applied: "AppliedPlan") -> dict[str, dict[str, float]]:
    """Size of B per reparametrized tensor.

    Args:
        applied: the applied plan.

    Returns:
        ``{parameter path: {"b_norm": ‖B‖, "a_norm": ‖A‖, "ratio": ‖B‖/‖A‖}}`` (L2 norms over
        all elements; ratio is ``inf`` when A is zero and B is not, 0 when both are).
    """
    out: dict[str, dict[str, float]] = {}
    with torch.no_grad():
        for h in _handles(applied).values():
            for n in h.names:
                b = float(torch.linalg.vector_norm(h.b(n).float()))
                a = float(torch.linalg.vector_norm(h.a(n).float()))
                ratio = b / a if a else (math.inf if b else 0.0)
                out[h.param_path(n)] = {"b_norm": b, "a_norm": a, "ratio": ratio}
    return out


def module_stats(applied: "AppliedPlan") -> dict[str, dict[str, float]]:
    """Size of B per module (all its reparametrized tensors together), for a tree column.

    Args:
        applied: the applied plan.

    Returns:
        ``{module path: {"b_norm": ‖B‖, "a_norm": ‖A‖, "ratio": ‖B‖/‖A‖}}`` with the norms
        taken over all of the module's A+B tensors.
    """
    out: dict[str, dict[str, float]] = {}
    per_tensor = stats(applied)
    for h in _handles(applied).values():
        if not h.names:
            continue
        b = math.sqrt(sum(per_tensor[h.param_path(n)]["b_norm"] ** 2 for n in h.names))
        a = math.sqrt(sum(per_tensor[h.param_path(n)]["a_norm"] ** 2 for n in h.names))
        out[h.path] = {"b_norm": b, "a_norm": a, "ratio": b / a if a else (math.inf if b else 0.0)}
    return out


def ddp_ignore_names(applied: "AppliedPlan") -> list[str]:
    """Buffer names of every A (exact mode), for DDP to skip broadcasting them each step.

    A is identical on every rank when built from the plan, so with the default
    ``broadcast_buffers=True`` DDP would send all of A every forward for nothing. Use::

        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, ddp_ignore_names(applied))

    before wrapping (or pass ``broadcast_buffers=False`` when no BatchNorm needs syncing).

    Args:
        applied: the applied plan.

    Returns:
        Fully qualified buffer names.
    """
    return [
        name for h in _handles(applied).values() if h.mode == "exact" and not h.spec.low_rank for name, _ in h.fixed()
    ]
