"""Running a model from a cut of the frozen-prefix cache, or up to one.

A :class:`Cut` is the module whose input the cache keeps (:mod:`~workbench.core.training.frozen_cache`
finds it). Three ways to run the model around it:

* :func:`run_from`: the suffix on kept rows: each skipped module returns a zero placeholder of
  the shape it returned (no compute) and the cut's input is replaced by the rows. A cut whose
  output is the model's output (``Cut.direct``: a head) is called on the rows alone, so nothing
  before it runs at all, not even the model's functional glue (``F.pad``, ``relu``, pooling)
  between the skipped modules.
* :func:`rows_until`: the model up to a module, and that module's input, nothing after it (the
  forward stops there): the prefix for the samples of a batch the cache does not hold yet, or
  kept rows at an earlier cut carried through newly frozen modules to a later cut.
* :func:`batch_part`: the samples of a batch at some positions (every tensor whose first
  dimension is the batch is sliced), to run the prefix on those alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from workbench.core.errors import WorkbenchError

__all__ = [
    "Cut", "Placeholders", "SpecError", "batch_part", "out_spec", "reached_params", "rows_until", "run_from", "same_output",
]


class SpecError(WorkbenchError):
    """A module output the cache cannot stand in for (the message names its type)."""


def out_spec(out: Any, batch: int) -> Any:
    """A placeholder recipe for a module output: tensors become (shape, batched, dtype, device).

    Args:
        out: what the module returned.
        batch: the batch size (a tensor whose first dimension is it scales with the batch).

    Returns:
        The recipe :meth:`Placeholders.make` builds from.

    Raises:
        SpecError: an output of another type.
    """
    if isinstance(out, torch.Tensor):
        return ("T", tuple(out.shape), out.shape[0] == batch if out.dim() else False, out.dtype, out.device)
    if isinstance(out, tuple) and hasattr(out, "_fields"):
        return ("N", type(out), [out_spec(o, batch) for o in out])
    if isinstance(out, (tuple, list)):
        return ("S", type(out), [out_spec(o, batch) for o in out])
    if isinstance(out, Mapping):
        return ("M", type(out), {k: out_spec(v, batch) for k, v in out.items()})
    if out is None or isinstance(out, (int, float, bool, str)):
        return ("V", out)
    raise SpecError(f"its output of type {type(out).__name__} cannot be stood in for")


class Placeholders:
    """Zero tensors standing in for skipped modules' outputs, made once per shape and reused.

    They are contiguous zeros, not a broadcast view of one zero: the model's functional glue
    between modules still runs on them, and elementwise kernels on a stride-0 view take a slow
    path. Nothing writes to them (the kept rows replace the cut's input, and nothing skipped
    requires a gradient).
    """

    def __init__(self) -> None:
        self._z: dict[tuple[tuple[int, ...], torch.dtype, torch.device], torch.Tensor] = {}

    def make(self, spec: Any, batch: int) -> Any:
        """The placeholder of a recipe at this batch size.

        Args:
            spec: from :func:`out_spec`.
            batch: the batch size.

        Returns:
            The same structure, its tensors zeros.
        """
        kind = spec[0]
        if kind == "T":
            _, shape, batched, dtype, device = spec
            if batched:
                shape = (batch, *shape[1:])
            key = (tuple(shape), dtype, device)
            z = self._z.get(key)
            if z is None:
                z = self._z[key] = torch.zeros(shape, dtype=dtype, device=device)
            return z
        if kind == "N":
            return spec[1](*[self.make(s, batch) for s in spec[2]])
        if kind == "S":
            return spec[1](self.make(s, batch) for s in spec[2])
        if kind == "M":
            return spec[1](**{k: self.make(v, batch) for k, v in spec[2].items()})
        return spec[1]

    def clear(self) -> None:
        """Free the placeholders (a new cut has other shapes)."""
        self._z.clear()


@dataclass
class Cut:
    """Where the cache cuts the model.

    Attributes:
        path: the cut module's path.
        module: the cut module.
        key: its kept input: a position or a keyword.
        skipped: ``(path, module, placeholder recipe)`` of the outermost modules before it.
        row_shape: one sample's kept input shape.
        dtype: the kept input's dtype.
        direct: the cut's output is the model's output and its input its only argument: a
            cached step calls it on the rows alone.
    """

    path: str
    module: nn.Module
    key: str | int
    skipped: list[tuple[str, nn.Module, Any]]
    row_shape: tuple[int, ...]
    dtype: torch.dtype
    direct: bool = False


class _Reached(BaseException):
    """Raised by the stop hook to end a forward at a module: carries its input (a BaseException,
    so a model's own ``except Exception`` does not swallow it)."""

    def __init__(self, x: Any) -> None:
        super().__init__()
        self.x = x


@contextlib.contextmanager
def _from_rows(cut: Cut, rows: torch.Tensor, zeros: Placeholders) -> Any:
    """Within: the cut's input is the rows and each skipped module returns its placeholder."""
    batch = rows.shape[0]

    def pre(_m: nn.Module, a: tuple[Any, ...], kw: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if isinstance(cut.key, int):
            return (*a[: cut.key], rows, *a[cut.key + 1 :]), kw
        kw = dict(kw)
        kw[cut.key] = rows
        return a, kw

    patched: list[nn.Module] = []
    h = cut.module.register_forward_pre_hook(pre, with_kwargs=True)
    try:
        for _path, m, spec in cut.skipped:
            m.forward = (lambda *_a, _s=spec, **_k: zeros.make(_s, batch))
            patched.append(m)
        yield
    finally:
        h.remove()
        for m in patched:
            with contextlib.suppress(AttributeError):
                del m.forward


def run_from(cut: Cut, rows: torch.Tensor, forward: Callable[..., Any], args: Any, kwargs: Any,
             zeros: Placeholders) -> Any:
    """The model's output on kept rows at a cut, the prefix not run.

    Args:
        cut: the cut.
        rows: the kept inputs of the cut, one per sample of the batch.
        forward: what runs a batch.
        args: the batch's positional arguments (their inputs are not used).
        kwargs: its keyword arguments.
        zeros: the placeholders.

    Returns:
        What ``forward(*args, **kwargs)`` returns.
    """
    if cut.direct:
        return cut.module(rows)
    with _from_rows(cut, rows, zeros):
        return forward(*args, **kwargs)


def rows_until(module: nn.Module, key: str | int, forward: Callable[..., Any], args: Any, kwargs: Any, *,
               start: tuple[Cut, torch.Tensor, Placeholders] | None = None) -> torch.Tensor | None:
    """The input a module receives for a batch; the forward stops there, nothing after it runs.

    Runs without autograd: what runs before the module is frozen.

    Args:
        module: where to stop.
        key: which of its arguments is wanted (a position or a keyword).
        forward: what runs a batch.
        args: the batch's positional arguments.
        kwargs: its keyword arguments.
        start: ``(cut, rows, placeholders)``: start from kept rows at an earlier cut instead
            of the batch's inputs.

    Returns:
        The input (a tensor), or None when the module was not reached or its input is not a tensor.
    """

    def stop(_m: nn.Module, a: tuple[Any, ...], kw: dict[str, Any]) -> None:
        t = a[key] if isinstance(key, int) and key < len(a) else kw.get(str(key))
        raise _Reached(t)

    h = module.register_forward_pre_hook(stop, with_kwargs=True)
    try:
        with torch.no_grad():
            if start is None:
                forward(*args, **kwargs)
            else:
                with _from_rows(start[0], start[1], start[2]):
                    forward(*args, **kwargs)
    except _Reached as r:
        return r.x.detach() if isinstance(r.x, torch.Tensor) else None
    finally:
        h.remove()
    return None


def batch_part(value: Any, pos: torch.Tensor, batch: int) -> Any:
    """The samples at ``pos`` of a batch: every tensor whose first dimension is ``batch`` is sliced.

    Args:
        value: the batch's arguments (tensors, sequences and mappings of them, nested).
        pos: positions in the batch (int64).
        batch: the batch size.

    Returns:
        The same structure with those tensors cut to ``len(pos)`` samples.
    """
    if isinstance(value, torch.Tensor):
        return value.index_select(0, pos.to(value.device)) if value.dim() and value.shape[0] == batch else value
    if isinstance(value, Mapping):
        part = {k: batch_part(v, pos, batch) for k, v in value.items()}
        if type(value) is dict:
            return part
        try:
            return type(value)(part)  # type: ignore[call-arg]
        except Exception:
            return part
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*[batch_part(v, pos, batch) for v in value])
    if isinstance(value, (tuple, list)):
        return type(value)(batch_part(v, pos, batch) for v in value)
    return value


def reached_params(out: Any) -> set[int]:
    """Ids of the leaf tensors (parameters) whose gradient the output's graph would reach.

    Args:
        out: a model output (tensors, nested in sequences and mappings).

    Returns:
        The ids.
    """
    found: set[int] = set()
    seen: set[Any] = set()
    stack = [t.grad_fn for t in _tensors(out) if t.grad_fn is not None]
    found.update(id(t) for t in _tensors(out) if t.is_leaf and t.requires_grad)
    while stack:
        fn = stack.pop()
        if fn in seen:
            continue
        seen.add(fn)
        var = getattr(fn, "variable", None)
        if isinstance(var, torch.Tensor):
            found.add(id(var))
        stack.extend(nxt for nxt, _ in fn.next_functions if nxt is not None and nxt not in seen)
    return found


def _tensors(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, Mapping):
        return [t for v in out.values() for t in _tensors(v)]
    if isinstance(out, (tuple, list)):
        return [t for v in out for t in _tensors(v)]
    return []


def same_output(a: Any, b: Any, atol: float) -> bool:
    """Two outputs hold the same tensors (floating ones within ``atol`` of their scale).

    Args:
        a: one output.
        b: the other.
        atol: absolute tolerance, scaled by the largest magnitude above 1.

    Returns:
        True when they agree.
    """
    ta, tb = _tensors(a), _tensors(b)
    if len(ta) != len(tb) or not ta:
        return False
    for x, y in zip(ta, tb):
        if x.shape != y.shape:
            return False
        if x.is_floating_point():
            scale = max(1.0, float(x.detach().abs().max())) if x.numel() else 1.0
            if not torch.allclose(x.detach().float(), y.detach().float(), atol=atol * scale, rtol=1e-3):
                return False
        elif not torch.equal(x, y):
            return False
    return True
