"""What every A+B handle shares: the :class:`DeltaHandle` base and the helpers installers use.

A handle is what one installer put on one module (the ``Installed`` protocol of
:mod:`workbench.core.freezing.plan_handle`). :meth:`DeltaHandle.remove` is a template method:
the base walks the reparametrized tensors, asks the subclass to take its own machinery off
(:meth:`DeltaHandle._uninstall`), puts the weights of install time back when asked to, and
restores the module's parameter order. Full-rank (:mod:`.full`) and low-rank (:mod:`.low_rank`)
handles fill in the tensors (``a``, ``b``, ``set_b``) and the names (``trainable``, ``fixed``).
"""

from __future__ import annotations

import contextlib
import weakref
import zlib
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize

from workbench.core.plan.reparam_spec import ReparamError, ReparamSpec

__all__ = ["ORDER_ATTR", "DeltaHandle", "derived_seed", "record_order", "restore_order", "shared_names", "tied_scope"]

#: Attribute on a module: its parameter names in plain-model order (read by tree.py).
ORDER_ATTR = "_workbench_param_order"


def derived_seed(seed: int, role: str, key: str) -> int:
    """A seed for one tensor, derived from the spec's seed, its role and its parameter path.

    Args:
        seed: the spec's seed.
        role: ``"a"``, ``"b"`` or ``"lowrank"``.
        key: the parameter path.

    Returns:
        A non-negative 63-bit seed (the same for the same inputs on every machine).
    """
    return (seed * 0x9E3779B97F4A7C15 + zlib.crc32(f"{role}:{key}".encode())) % (2**63 - 1)


def restore_order(module: nn.Module, order: tuple[str, ...] | None) -> None:
    """Put ``module._parameters`` back in its plain order and drop the order hint.

    Args:
        module: the module.
        order: its parameter names in plain-model order, as recorded at install (None: nothing to do).
    """
    if order is None:
        return
    params = module._parameters
    items = sorted(params.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order))
    params.clear()
    params.update(items)
    if ORDER_ATTR in module.__dict__ and not parametrize.is_parametrized(module):
        del module.__dict__[ORDER_ATTR]


def record_order(module: nn.Module) -> tuple[str, ...]:
    """Remember the module's plain parameter order (parametrize moves ``weight`` to the end).

    Args:
        module: the module about to be parametrized.

    Returns:
        The order (also stored on the module for the tree).
    """
    order: tuple[str, ...] = getattr(module, ORDER_ATTR, None) or tuple(module._parameters)
    object.__setattr__(module, ORDER_ATTR, order)
    return order


#: The tied parameters of models whose installs run inside :func:`tied_scope`, by id(model).
_TIED: dict[int, tuple[weakref.ref[nn.Module], dict[int, list[str]]]] = {}


def _tied_map(model: nn.Module) -> dict[int, list[str]]:
    found: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        found.setdefault(id(p), []).append(name)
    return {k: v for k, v in found.items() if len(v) > 1}


@contextlib.contextmanager
def tied_scope(model: nn.Module) -> Iterator[None]:
    """Walk the model's parameters once for every install inside the block (not once per module).

    Installing A+B never ties or unties parameters, so the map taken on entry holds throughout.

    Args:
        model: the model the installs go to.

    Yields:
        Nothing.
    """
    key = id(model)
    outer = key in _TIED
    if not outer:
        _TIED[key] = (weakref.ref(model), _tied_map(model))
    try:
        yield
    finally:
        if not outer:
            _TIED.pop(key, None)


def shared_names(model: nn.Module, module: nn.Module) -> dict[int, list[str]]:
    """The parameters of ``module`` that the model holds under more than one name (tied weights).

    Args:
        model: the model.
        module: one of its modules.

    Returns:
        ``{id(parameter): [every name of it in the model]}`` for the tied ones only.
    """
    entry = _TIED.get(id(model))
    tied = entry[1] if entry is not None and entry[0]() is model else _tied_map(model)
    return {id(p): tied[id(p)] for p in module.parameters(recurse=False) if id(p) in tied}


class DeltaHandle:
    """A+B on the parameters of one module: the operations every variant shares.

    Subclasses implement :meth:`a`, :meth:`b`, :meth:`set_b`, :meth:`initial_b`,
    :meth:`trainable`, :meth:`fixed` and :meth:`_uninstall`.

    Attributes:
        path: dotted path of the module.
        spec: the normalized spec.
        mode: ``"exact"`` or ``"fused"``.
        base_dir: folder for relative file sources.
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
        self._orig: dict[str, Tensor] = {}  # weights at install, when they are not A
        self._order: tuple[str, ...] | None = None
        self._removed = False

    @property
    def module(self) -> nn.Module:
        """The module A+B is installed on.

        Raises:
            ReparamError: the model was garbage-collected.
        """
        m = self._module_ref()
        if m is None:
            raise ReparamError(f"the model holding module {self.path or '(root)'!r} no longer exists")
        return m

    def param_path(self, name: str) -> str:
        """Dotted parameter path in the plain model (``layer1.0.conv1.weight``)."""
        return f"{self.path}.{name}" if self.path else name

    def raw_prefix(self, name: str) -> str:
        """``<module>.parametrizations.<name>``: where parametrize keeps a parametrized tensor."""
        base = f"{self.path}." if self.path else ""
        return f"{base}parametrizations.{name}"

    # ---------------------------------------------------------- tensors (per variant)
    def a(self, name: str) -> Tensor:
        """The fixed tensor A of parameter ``name``."""
        raise NotImplementedError

    def b(self, name: str) -> Tensor:
        """B of parameter ``name``, in the weight's shape."""
        raise NotImplementedError

    def weight(self, name: str) -> Tensor:
        """``W = A + B`` as the module uses it."""
        with torch.no_grad():
            return self.a(name) + self.b(name)

    def set_b(self, name: str, value: Tensor) -> None:
        """Overwrite B of parameter ``name`` in place (identity of every parameter kept)."""
        raise NotImplementedError

    def initial_b(self, name: str) -> Tensor:
        """B as the spec's ``b_init`` defines it."""
        raise NotImplementedError

    # ---------------------------------------------------------- Installed protocol
    def trainable(self) -> list[tuple[str, nn.Parameter]]:
        """Parameters (full dotted names) that train when the module does."""
        raise NotImplementedError

    def fixed(self) -> list[tuple[str, Tensor]]:
        """Tensors (full dotted names) that never train and must stay bit-identical."""
        raise NotImplementedError

    def work_buffers(self) -> list[Tensor]:
        """Tensors kept between steps outside the model's parameters and buffers that are neither
        trained nor fixed (exact full-rank A+B's ``W``, rewritten each step); none by default."""
        return []

    def acts_in(self) -> list[str]:
        """Where the trainable tensors act: the module A+B is on (exact mode computes its weight
        there; fused mode's forward hook on it adds B's path, its ``wb_lowrank`` child never runs)."""
        return [self.path]

    def _uninstall(self, module: nn.Module, name: str, merge: bool) -> Tensor:
        """Take this variant's machinery off parameter ``name``.

        Args:
            module: the module.
            name: the short parameter name.
            merge: leave ``A + B`` in the plain parameter.

        Returns:
            The plain parameter now in the module.
        """
        raise NotImplementedError

    def _restore_value(self, name: str) -> Tensor | None:
        """What ``remove(merge=False)`` writes back (None: the parameter already holds it)."""
        return self._orig.get(name)

    def _after_remove(self, module: nn.Module) -> None:
        """Module-level clean-up after every parameter is plain again (hooks, children)."""

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
                restore = None if merge else self._restore_value(n)
                w = self._uninstall(module, n, merge)
                if restore is not None:
                    with torch.no_grad():
                        w.copy_(restore)
            self._after_remove(module)
            restore_order(module, self._order)
        self._removed = True
        self._orig.clear()
