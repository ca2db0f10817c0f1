"""Operations on installed A+B handles: choose, reset, export and load deltas, statistics.

Every function takes handles (``applied.installed("reparam").values()``), never the plan: the
model-level part (rewriting the plan on merge, naming the plan in messages) is
:class:`~workbench.core.freezing.plan_handle.AppliedPlan`'s.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import Tensor

from workbench.core.atomic import atomic_path
from workbench.core.freezing.reparam.base import DeltaHandle
from workbench.core.freezing.reparam.sources import TensorFile
from workbench.core.plan.reparam_spec import KIND, ReparamError

__all__ = [
    "DELTA_FORMAT",
    "ddp_ignore_names",
    "export_deltas",
    "load_deltas",
    "module_stats",
    "require",
    "reset",
    "select",
    "stats",
]

#: ``format`` value in the metadata of delta files written by :func:`export_deltas`.
DELTA_FORMAT = "freeze-workbench-deltas"


def require(handles: Iterable[DeltaHandle]) -> list[DeltaHandle]:
    """The handles that reparametrize something.

    Args:
        handles: installed A+B handles.

    Returns:
        Those with at least one tensor.

    Raises:
        ReparamError: none has.
    """
    hs = [h for h in handles if h.names]
    if not hs:
        raise ReparamError(
            "the plan puts A+B on no parameter; add a rule like "
            '{"select": "layer4", "reparam": {"kind": "a_plus_b"}} first'
        )
    return hs


def _inside(path: str, root: str) -> bool:
    return not root or path == root or path.startswith(root + ".")


def select(handles: Iterable[DeltaHandle], paths: Iterable[str] | None) -> list[tuple[DeltaHandle, list[str]]]:
    """The A+B tensors that module paths, subtrees or parameter paths name.

    Args:
        handles: installed A+B handles.
        paths: each a module path (every A+B in its subtree, the module's own included), a
            parameter path (``layer4.0.conv1.weight``), or ``""`` for the whole model; None: all.

    Returns:
        ``[(handle, [short parameter names])]`` in handle order, each tensor once.

    Raises:
        ReparamError: no A+B at all, or a path with no A+B in it (the modules with A+B are named).
    """
    hs = require(handles)
    if paths is None:
        return [(h, list(h.names)) for h in hs]
    by_param = {h.param_path(n): (h, n) for h in hs for n in h.names}
    out: dict[str, tuple[DeltaHandle, list[str]]] = {}
    for p in paths:
        if p in by_param and not any(h.path == p for h in hs):
            picked = [by_param[p]]
        else:
            picked = [(h, n) for h in hs if _inside(h.path, p) for n in h.names]
        if not picked:
            have = sorted(h.path or "(root)" for h in hs)
            raise ReparamError(
                f"{p!r} has no A+B in it; give module paths with A+B or above them ({', '.join(have[:5])}"
                f"{' ...' if len(have) > 5 else ''}) or their parameter paths"
            )
        for h, n in picked:
            entry = out.setdefault(h.path, (h, []))
            if n not in entry[1]:
                entry[1].append(n)
    order = {h.path: i for i, h in enumerate(hs)}
    return sorted(out.values(), key=lambda e: order[e[0].path])


def reset(chosen: list[tuple[DeltaHandle, list[str]]]) -> None:
    """Set B back to its ``b_init`` value (zeros by default); optimizer state is not reset.

    Args:
        chosen: from :func:`select`.

    Raises:
        ReparamError: a ``b_init`` file is no longer usable (nothing is written then).
    """
    values = [(h, n, h.initial_b(n)) for h, names in chosen for n in names]  # read all before writing
    for h, n, v in values:
        h.set_b(n, v)


def export_deltas(handles: Iterable[DeltaHandle], path: str | os.PathLike[str]) -> None:
    """Write every B to a safetensors file, keyed by parameter path (``layer4.0.conv1.weight``).

    Args:
        handles: installed A+B handles.
        path: destination file (written atomically).

    Raises:
        ReparamError: no A+B.
        OSError: the folder is not writable.
    """
    hs = require(handles)
    tensors: dict[str, Tensor] = {}
    modes = set()
    for h in hs:
        for n in h.names:
            tensors[h.param_path(n)] = h.b(n).detach().to("cpu").contiguous()
            modes.add(h.mode)
    meta = {"format": DELTA_FORMAT, "version": "1", "kind": KIND, "mode": ",".join(sorted(modes))}
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata=meta)


def load_deltas(handles: Iterable[DeltaHandle], path: str | os.PathLike[str], *, strict: bool = True) -> None:
    """Load every B from a safetensors file written by :func:`export_deltas` (all checked before any write).

    Args:
        handles: installed A+B handles.
        path: the file.
        strict: the file must hold exactly these B tensors (no more).

    Raises:
        ReparamError: the file is missing or not safetensors, lacks a B (named), holds a
            tensor of the wrong shape (named), or (``strict``) holds tensors for parameters
            without A+B.
    """
    hs = require(handles)
    f = TensorFile(Path(path), "deltas")
    want = {h.param_path(n): (h, n) for h in hs for n in h.names}
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


def _ratio(b: float, a: float) -> float:
    return b / a if a else (math.inf if b else 0.0)


def stats(handles: Iterable[DeltaHandle]) -> dict[str, dict[str, float]]:
    """Size of B per reparametrized tensor.

    Args:
        handles: installed A+B handles.

    Returns:
        ``{parameter path: {"b_norm": ‖B‖, "a_norm": ‖A‖, "ratio": ‖B‖/‖A‖}}`` (L2 norms over
        all elements; ratio is ``inf`` when A is zero and B is not, 0 when both are).
    """
    out: dict[str, dict[str, float]] = {}
    with torch.no_grad():
        for h in handles:
            for n in h.names:
                b = float(torch.linalg.vector_norm(h.b(n).float()))
                a = float(torch.linalg.vector_norm(h.a(n).float()))
                out[h.param_path(n)] = {"b_norm": b, "a_norm": a, "ratio": _ratio(b, a)}
    return out


def module_stats(handles: Iterable[DeltaHandle]) -> dict[str, dict[str, float]]:
    """Size of B per module (all its reparametrized tensors together), for a tree column.

    Args:
        handles: installed A+B handles.

    Returns:
        ``{module path: {"b_norm": ‖B‖, "a_norm": ‖A‖, "ratio": ‖B‖/‖A‖}}`` with the norms
        taken over all of the module's A+B tensors.
    """
    hs = [h for h in handles if h.names]
    per_tensor = stats(hs)
    out: dict[str, dict[str, float]] = {}
    for h in hs:
        b = math.sqrt(sum(per_tensor[h.param_path(n)]["b_norm"] ** 2 for n in h.names))
        a = math.sqrt(sum(per_tensor[h.param_path(n)]["a_norm"] ** 2 for n in h.names))
        out[h.path] = {"b_norm": b, "a_norm": a, "ratio": _ratio(b, a)}
    return out


def ddp_ignore_names(handles: Iterable[DeltaHandle]) -> list[str]:
    """Buffer names of every full-rank A (exact mode), for DDP to skip broadcasting them each step.

    A is identical on every rank when built from the plan, so with the default
    ``broadcast_buffers=True`` DDP would send all of A every forward for nothing. Use::

        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, applied.ddp_ignore_names())

    before wrapping (or pass ``broadcast_buffers=False`` when no BatchNorm needs syncing).

    Args:
        handles: installed A+B handles.

    Returns:
        Fully qualified buffer names.
    """
    return [name for h in handles if h.mode == "exact" and not h.spec.low_rank for name, _ in h.fixed()]
