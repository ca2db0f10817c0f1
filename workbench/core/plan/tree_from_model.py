"""Reading a model into its :class:`~workbench.core.plan.tree.ModelTree` (torch).

:mod:`workbench.core.plan.tree` is plain data and imports no torch; what needs the model's
modules and tensors is here: BatchNorm checks, the canonical parameter list and its
fingerprint, and the module and parameter rows :meth:`ModelTree.from_model` builds a tree
from (this module does not import the tree's: the tree imports this one when it reads a model).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.utils import parametrize

from workbench.core.plan.module_paths import split_internal, visible_path

__all__ = [
    "bn_stats_fixed",
    "canonical_parameters",
    "fingerprint",
    "is_batchnorm",
    "ModuleRow",
    "module_rows",
    "parameter_rows",
    "tensor_bytes",
]


def is_batchnorm(module: nn.Module) -> bool:
    """Whether ``module`` is a BatchNorm-family module with running statistics.

    Args:
        module: any module.

    Returns:
        True for BatchNorm1d/2d/3d, SyncBatchNorm, lazy variants and their subclasses
        (such as timm's ``BatchNormAct2d``).
    """
    return isinstance(module, _BatchNorm)


def bn_stats_fixed(module: nn.Module) -> bool:
    """Whether a BatchNorm keeps running statistics that train mode never updates.

    ``momentum=0`` (CREPE's, converted from Keras) or ``track_running_stats`` switched off with
    the buffers kept: in train mode such a module normalises with each batch's statistics, in
    eval mode with stored ones that training never moved.

    Args:
        module: any module.

    Returns:
        True for such a BatchNorm; False for other modules, for BatchNorm whose statistics follow
        the batches, and for BatchNorm without running statistics (eval normalises by batch too).
    """
    if not isinstance(module, _BatchNorm) or getattr(module, "running_mean", None) is None:
        return False
    return not module.track_running_stats or module.momentum == 0


def _canonical_name(raw_name: str) -> str:
    """``conv.parametrizations.weight.original`` → ``conv.weight``."""
    owner, rest = split_internal(raw_name.rsplit(".", 1)[0] if "." in raw_name else "")
    if rest:
        # rest = "parametrizations.<tensor>[.original...]"
        tensor = rest.split(".")[1] if rest.count(".") >= 1 else raw_name.rsplit(".", 1)[1]
        return f"{owner}.{tensor}" if owner else tensor
    return raw_name


def canonical_parameters(model: nn.Module) -> list[tuple[str, tuple[int, ...]]]:
    """The model's parameters as ``(name, shape)`` in the names of the plain model.

    Parametrized tensors are reported under their public name (``conv.weight``), once.
    Modules that replace a parameter by several (sub-tensor freezing) may define
    ``_workbench_canonical_parameters() -> list[tuple[str, tuple[int, ...]]]`` giving
    their own names relative to themselves.

    Args:
        model: the model.

    Returns:
        A list of ``(dotted name, shape)`` in registration order, shared tensors once.
    """
    out: list[tuple[str, tuple[int, ...]]] = []
    seen: set[str] = set()
    custom: dict[str, nn.Module] = {}
    for path, module in model.named_modules():
        if hasattr(module, "_workbench_canonical_parameters"):
            custom[path] = module
    emitted: set[str] = set()
    for raw, p in model.named_parameters():
        # a custom module's names go where its first parameter is, keeping registration order
        owner = next((c for c in custom if c == "" or raw.startswith(c + ".")), None)
        if owner is not None:
            if owner not in emitted:
                emitted.add(owner)
                canonical: Any = custom[owner]._workbench_canonical_parameters
                for name, shape in canonical():
                    full = f"{owner}.{name}" if owner else name
                    if full not in seen:
                        seen.add(full)
                        out.append((full, tuple(shape)))
            continue
        name = _canonical_name(raw)
        if name in seen:
            continue
        seen.add(name)
        if name != raw:
            # The public tensor of a parametrization: report its shape, not the original's.
            owner, _, tensor = name.rpartition(".")
            module = model.get_submodule(owner) if owner else model
            shape = tuple(getattr(module, tensor).shape)
        else:
            shape = tuple(p.shape)
        out.append((name, shape))
    return _plain_order(model, out)


def _plain_order(model: nn.Module, out: list[tuple[str, tuple[int, ...]]]) -> list[tuple[str, tuple[int, ...]]]:
    """Put parametrized tensors back where the plain model has them.

    parametrize moves a tensor into a ``parametrizations`` child, behind the module's other
    parameters and children. Sort by owning module (``named_modules`` order), then by the
    module's ``_workbench_param_order`` hint (set by A+B), else keep the order found.
    """
    if not any(parametrize.is_parametrized(m) for m in model.modules()):
        return out
    index: dict[str, tuple[int, tuple[str, ...]]] = {}
    for i, (path, m) in enumerate(model.named_modules()):
        if visible_path(path) == path and path not in index:
            index[path] = (i, tuple(getattr(m, "_workbench_param_order", ())))

    def key(item: tuple[int, tuple[str, tuple[int, ...]]]) -> tuple[int, int, int]:
        j, (name, _) = item
        owner, _, short = name.rpartition(".")
        mi, hint = index.get(owner, (len(index), ()))
        return (mi, hint.index(short) if short in hint else len(hint), j)

    return [x for _, x in sorted(enumerate(out), key=key)]


def fingerprint(model: nn.Module) -> str:
    """SHA-256 over the model's ``(parameter name, shape)`` list.

    Two models with the same architecture (and head size) have the same fingerprint whatever
    their weights; a plan stores it to warn when it is applied to a different model.

    Args:
        model: the model.

    Returns:
        A hex digest.
    """
    h = hashlib.sha256()
    for name, shape in canonical_parameters(model):
        h.update(f"{name}:{','.join(map(str, shape))};".encode())
    return h.hexdigest()


class ModuleRow(NamedTuple):
    """One visible module of a model, as :meth:`ModelTree.from_model` builds its node from it."""

    path: str
    type_name: str
    type_names: tuple[str, ...]
    is_bn: bool
    bn_stats_fixed: bool
    training: bool
    order: int


def module_rows(model: nn.Module) -> Iterator[ModuleRow]:
    """The model's visible modules in ``named_modules()`` order (workbench internals left out).

    Args:
        model: any ``nn.Module``.

    Yields:
        One row per module, the root first.
    """
    mro_cache: dict[type, tuple[str, ...]] = {}
    for order, (path, module) in enumerate(model.named_modules(remove_duplicate=True)):
        if visible_path(path) != path or getattr(module, "_workbench_internal", False):
            continue
        t = parametrize.type_before_parametrizations(module)  # not ParametrizedConv2d
        names = mro_cache.get(t)
        if names is None:
            names = tuple(c.__name__ for c in t.__mro__ if issubclass(c, nn.Module) and c is not nn.Module)
            mro_cache[t] = names
        yield ModuleRow(path, t.__name__, names, isinstance(module, _BatchNorm), bn_stats_fixed(module),
                        module.training, order)


def parameter_rows(model: nn.Module) -> Iterator[tuple[str, tuple[int, ...], int, bool]]:
    """``(name, shape, elements, requires_grad)`` per parameter, shared tensors once
    (what :meth:`ModelTree.count` takes).

    Args:
        model: any ``nn.Module``.

    Yields:
        One tuple per parameter of ``model.named_parameters()``.
    """
    for raw, p in model.named_parameters():
        yield raw, tuple(p.shape), p.numel(), p.requires_grad


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes a tensor's elements take."""
    return t.numel() * t.element_size()
