"""The module tree of a model, addressed by dotted paths.

A :class:`ModelTree` is a plain-data snapshot of ``model.named_modules()``: paths, class
names, parameter counts and BatchNorm flags. It holds no reference to the model, so it can
cross threads and be shown by a GUI without touching ``nn.Module`` objects.

Internals that the workbench itself adds to a model (the ``parametrizations`` containers of
:mod:`torch.nn.utils.parametrize`, or modules that declare ``_workbench_internal = True``)
are folded into the module that owns them: the tree of a model with a plan applied has the
same paths as the tree of the plain model.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.utils import parametrize

from workbench.core.plan.layers import parameter_layers

__all__ = [
    "ModuleNode",
    "ModelTree",
    "bn_stats_fixed",
    "canonical_parameters",
    "fingerprint",
    "is_batchnorm",
    "visible_path",
]

_PARAMETRIZATIONS = "parametrizations"
#: Child names of workbench internals folded into their owner (low-rank A+B's U and V).
_INTERNAL_SEGMENTS = (_PARAMETRIZATIONS, "wb_lowrank")


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


def _split_internal(path: str) -> tuple[str, str]:
    """Split a raw dotted path at the first workbench-internal segment.

    Returns ``(visible_owner_path, rest)`` where ``rest`` is empty for ordinary paths.
    """
    parts = path.split(".") if path else []
    for i, part in enumerate(parts):
        if part in _INTERNAL_SEGMENTS:
            return ".".join(parts[:i]), ".".join(parts[i:])
    return path, ""


def visible_path(path: str) -> str:
    """Map a raw module path to the path shown in the tree (internals folded in).

    Args:
        path: a dotted path from ``named_modules()``.

    Returns:
        The path of the visible module that owns ``path``.
    """
    return _split_internal(path)[0]


def _canonical_name(raw_name: str) -> str:
    """``conv.parametrizations.weight.original`` → ``conv.weight``."""
    owner, rest = _split_internal(raw_name.rsplit(".", 1)[0] if "." in raw_name else "")
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


@dataclass(eq=False)
class ModuleNode:
    """One module of the tree, as plain data.

    Attributes:
        path: dotted path (``""`` for the root).
        type_name: class name (``"Conv2d"``).
        type_names: class names along the MRO up to ``nn.Module`` (for ``type:`` selectors).
        own_params: number of parameter elements the module registers itself
            (shared tensors counted at their first owner only).
        own_trainable: of those, elements with ``requires_grad``.
        param_names: short names of the parameters the module owns.
        is_bn: BatchNorm family with running statistics.
        bn_stats_fixed: a BatchNorm whose running statistics train mode never updates
            (:func:`bn_stats_fixed`: momentum 0, or ``track_running_stats`` off).
        training: the module's ``training`` flag when the tree was built.
        children: child nodes in registration order.
        parent: the parent node (None for the root).
        total_params / trainable_params: subtree sums.
        order: index in ``named_modules()`` order (execution-order proxy).
        row: index of this node among its parent's children.
    """

    path: str
    type_name: str
    type_names: tuple[str, ...]
    own_params: int = 0
    own_trainable: int = 0
    param_names: tuple[str, ...] = ()
    is_bn: bool = False
    bn_stats_fixed: bool = False
    training: bool = True
    children: list[ModuleNode] = field(default_factory=list)
    parent: ModuleNode | None = None
    total_params: int = 0
    trainable_params: int = 0
    order: int = 0
    row: int = 0

    @property
    def name(self) -> str:
        """The last segment of the path, ``"(root)"`` for the root."""
        return self.path.rsplit(".", 1)[-1] if self.path else "(root)"

    @property
    def depth(self) -> int:
        """0 for the root, 1 for its children, and so on."""
        return 0 if not self.path else self.path.count(".") + 1


    def walk(self) -> Iterator[ModuleNode]:
        """Yield this node and all descendants, parents before children."""
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))

    @property
    def has_bn(self) -> bool:
        """Whether this node or a descendant is a BatchNorm module."""
        return any(n.is_bn for n in self.walk())


class ModelTree:
    """Plain-data tree of a model's modules, keyed by dotted path.

    Build it with :meth:`from_model`. The tree never holds a reference to the model.
    """

    def __init__(self, root: ModuleNode, nodes: dict[str, ModuleNode], fp: str) -> None:
        self.root = root
        self.nodes = nodes
        self.fingerprint = fp
        #: ``{canonical parameter name: shape}``, each tensor once, in model order.
        self.param_shapes: dict[str, tuple[int, ...]] = {}
        #: ``{canonical parameter name: layer index}`` for layer-wise LR decay (see
        #: :func:`workbench.core.models.layers.parameter_layers`).
        self.layer_ids: dict[str, int] = {}

    @classmethod
    def from_model(cls, model: nn.Module) -> ModelTree:
        """Build the tree of ``model``.

        Args:
            model: any ``nn.Module``.

        Returns:
            The tree, with parameter counts and trainable counts as the model stands now.
        """
        nodes: dict[str, ModuleNode] = {}
        mro_cache: dict[type, tuple[str, ...]] = {}
        root: ModuleNode | None = None
        for order, (path, module) in enumerate(model.named_modules(remove_duplicate=True)):
            if visible_path(path) != path or getattr(module, "_workbench_internal", False):
                continue
            t = parametrize.type_before_parametrizations(module)  # not ParametrizedConv2d
            names = mro_cache.get(t)
            if names is None:
                names = tuple(
                    c.__name__ for c in t.__mro__ if issubclass(c, nn.Module) and c is not nn.Module
                )
                mro_cache[t] = names
            node = ModuleNode(
                path=path,
                type_name=t.__name__,
                type_names=names,
                is_bn=isinstance(module, _BatchNorm),
                bn_stats_fixed=bn_stats_fixed(module),
                training=module.training,
                order=order,
            )
            if path:
                parent_path = path.rpartition(".")[0]
                parent = nodes.get(parent_path)
                if parent is None:  # child of an internal module: attach to its visible owner
                    parent = nodes[visible_path(parent_path)]
                node.parent = parent
                node.row = len(parent.children)
                parent.children.append(node)
            else:
                root = node
            nodes[path] = node
        assert root is not None
        tree = cls(root, nodes, "")
        tree._count(model)
        tree.fingerprint = fingerprint(model)
        tree.layer_ids = {tree.param_name(raw): i for raw, i in parameter_layers(model).items()}
        return tree

    def param_name(self, raw_param_name: str) -> str:
        """Canonical dotted name of a parameter (workbench internals folded in).

        Args:
            raw_param_name: a name from ``model.named_parameters()``
                (``fc.parametrizations.weight.original`` → ``fc.weight``).

        Returns:
            The name in the plain model.
        """
        node, short = self._owner(raw_param_name)
        return f"{node.path}.{short}" if node.path else short

    def owner_of(self, raw_param_name: str) -> str:
        """Path of the visible module that owns a parameter (workbench internals folded in).

        Args:
            raw_param_name: a name from ``model.named_parameters()``
                (``layer1.0.conv1.parametrizations.weight.original`` → ``layer1.0.conv1``).

        Returns:
            The owner's path (``""`` for the root).
        """
        return self._owner(raw_param_name)[0].path

    def _owner(self, raw_param_name: str) -> tuple[ModuleNode, str]:
        owner_raw, _, short = raw_param_name.rpartition(".")
        owner, rest = _split_internal(owner_raw)
        node = self.nodes.get(owner)
        while node is None:  # inside a workbench-internal module
            owner = owner.rpartition(".")[0]
            node = self.nodes.get(owner)
        if rest:
            short = rest.split(".")[1]
        return node, short

    def _count(self, model: nn.Module) -> None:
        for node in self.nodes.values():
            node.own_params = node.own_trainable = node.total_params = node.trainable_params = 0
        names: dict[str, list[str]] = {}
        self.param_shapes = {}
        for raw, p in model.named_parameters():
            node, short = self._owner(raw)
            self.param_shapes.setdefault(f"{node.path}.{short}" if node.path else short, tuple(p.shape))
            n = p.numel()
            node.own_params += n
            if p.requires_grad:
                node.own_trainable += n
            lst = names.setdefault(node.path, [])
            if short not in lst:
                lst.append(short)
        for path, lst in names.items():
            self.nodes[path].param_names = tuple(lst)
        for node in sorted(self.nodes.values(), key=lambda n: -n.order):
            node.total_params += node.own_params
            node.trainable_params += node.own_trainable
            if node.parent is not None:
                node.parent.total_params += node.total_params
                node.parent.trainable_params += node.trainable_params

    def refresh(self, model: nn.Module) -> None:
        """Recount parameters and training flags from ``model`` (same architecture).

        Args:
            model: the model this tree was built from.
        """
        self._count(model)
        for path, module in model.named_modules():
            node = self.nodes.get(path)
            if node is not None:
                node.training = module.training

    def __contains__(self, path: object) -> bool:
        return path in self.nodes

    def __getitem__(self, path: str) -> ModuleNode:
        return self.nodes[path]

    def __len__(self) -> int:
        return len(self.nodes)

    def paths(self) -> list[str]:
        """All paths, parents before children, in registration order."""
        return [n.path for n in self.root.walk()]

    def subtree(self, path: str) -> list[str]:
        """``path`` and the paths below it."""
        return [n.path for n in self.nodes[path].walk()]

    @property
    def total_params(self) -> int:
        """Parameter elements in the whole model (shared tensors once)."""
        return self.root.total_params

    @property
    def trainable_params(self) -> int:
        """Trainable parameter elements in the whole model."""
        return self.root.trainable_params


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes a tensor's elements take."""
    return t.numel() * t.element_size()
