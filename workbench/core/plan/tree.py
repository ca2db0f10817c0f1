"""The module tree of a model, addressed by dotted paths.

A :class:`ModelTree` is a plain-data snapshot of ``model.named_modules()``: paths, class
names, parameter counts and BatchNorm flags. It holds no reference to the model, so it can
cross threads and be shown by a GUI without touching ``nn.Module`` objects.

Internals that the workbench itself adds to a model (the ``parametrizations`` containers of
:mod:`torch.nn.utils.parametrize`, or modules that declare ``_workbench_internal = True``)
are folded into the module that owns them: the tree of a model with a plan applied has the
same paths as the tree of the plain model.

This module is plain data and imports no torch, so the window can hold a tree described on
disk before torch is imported (:meth:`ModelTree.from_dict`); reading a model into a tree is
:mod:`workbench.core.plan.tree_from_model` (:meth:`ModelTree.from_model` imports it).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from workbench.core.errors import WorkbenchError
from workbench.core.plan.module_paths import split_internal, visible_path

if TYPE_CHECKING:  # pragma: no cover - typing only
    from torch import nn

__all__ = [
    "ModelTree",
    "ModuleNode",
    "TreeFormatError",
    "visible_path",  # the tree's paths (module_paths.py); kept here, where callers look for it
]

class TreeFormatError(WorkbenchError):
    """A tree's plain-data form (:meth:`ModelTree.to_dict`) is not one tree."""


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
        """Build the tree of ``model`` (from :mod:`workbench.core.plan.tree_from_model`'s rows).

        Args:
            model: any ``nn.Module``.

        Returns:
            The tree, with parameter counts and trainable counts as the model stands now.
        """
        # torch: there with the model
        from workbench.core.plan.layers import parameter_layers
        from workbench.core.plan.tree_from_model import fingerprint, module_rows, parameter_rows

        nodes: dict[str, ModuleNode] = {}
        for row in module_rows(model):
            node = ModuleNode(path=row.path, type_name=row.type_name, type_names=row.type_names, is_bn=row.is_bn,
                              bn_stats_fixed=row.bn_stats_fixed, training=row.training, order=row.order)
            if row.path:
                parent_path = row.path.rpartition(".")[0]
                parent = nodes.get(parent_path)
                if parent is None:  # child of an internal module: attach to its visible owner
                    parent = nodes[visible_path(parent_path)]
                node.parent, node.row = parent, len(parent.children)
                parent.children.append(node)
            nodes[row.path] = node
        tree = cls(nodes[""], nodes, fingerprint(model))
        tree.count(parameter_rows(model))
        tree.layer_ids = {tree.param_name(raw): i for raw, i in parameter_layers(model).items()}
        return tree

    def to_dict(self) -> dict[str, Any]:
        """The tree as plain JSON data, read back by :meth:`from_dict` without torch.

        Returns:
            ``{"modules": [...], "parameters": [...], "fingerprint": ...}``: one module row per
            node in pre-order, ``[path, class name, class names, parent row, order, own
            parameters, own trainable, parameter names, flags]`` (flags: 1 BatchNorm, 2 its
            statistics fixed, 4 in train mode; the root's parent row is -1), and one
            ``[canonical name, shape, layer index or None]`` per parameter.
        """
        nodes = list(self.root.walk())
        row = {id(n): i for i, n in enumerate(nodes)}
        modules = [
            [n.path, n.type_name, list(n.type_names), row[id(n.parent)] if n.parent is not None else -1, n.order,
             n.own_params, n.own_trainable, list(n.param_names),
             _BN * n.is_bn | _FIXED * n.bn_stats_fixed | _TRAINING * n.training]
            for n in nodes
        ]
        parameters = [[name, list(shape), self.layer_ids.get(name)] for name, shape in self.param_shapes.items()]
        return {"modules": modules, "parameters": parameters, "fingerprint": self.fingerprint}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelTree:
        """The tree :meth:`to_dict` wrote, checked to be one tree in pre-order.

        Args:
            data: the dict (from JSON).

        Returns:
            The tree, with the subtree sums recomputed.

        Raises:
            TreeFormatError: not one tree (the first bad row or field is named).
        """
        modules, parameters, fp = data.get("modules"), data.get("parameters"), data.get("fingerprint")
        if not isinstance(modules, list) or not modules:
            raise TreeFormatError("the tree has no modules")
        if not isinstance(parameters, list) or not isinstance(fp, str):
            raise TreeFormatError("the tree has no parameter list or fingerprint")
        nodes: list[ModuleNode] = []
        by_path: dict[str, ModuleNode] = {}
        open_rows: list[int] = []  # pre-order: a row's parent is the row before or one of its ancestors
        for i, item in enumerate(modules):
            node = _module_row(item, i)
            parent = item[3]
            while open_rows and open_rows[-1] != parent:
                open_rows.pop()
            if i == 0:
                ok = parent == -1 and node.path == ""
            else:
                ok = bool(open_rows) and _child_path(nodes[parent].path, node.path)
            if not ok or node.path in by_path:
                raise TreeFormatError(f"module row {i} ({node.path!r}) does not follow its parent in one tree")
            if i:
                owner = nodes[parent]
                node.parent, node.row = owner, len(owner.children)
                owner.children.append(node)
            open_rows.append(i)
            nodes.append(node)
            by_path[node.path] = node
        tree = cls(nodes[0], by_path, fp)
        for j, item in enumerate(parameters):
            if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str) and isinstance(item[1], list)
                    and all(type(d) is int and d >= 0 for d in item[1]) and (item[2] is None or type(item[2]) is int)):
                raise TreeFormatError(f"parameter row {j} is not [name, shape, layer]")
            tree.param_shapes[item[0]] = tuple(item[1])
            if item[2] is not None:
                tree.layer_ids[item[0]] = item[2]
        for node in reversed(nodes):
            node.total_params += node.own_params
            node.trainable_params += node.own_trainable
            if node.parent is not None:
                node.parent.total_params += node.total_params
                node.parent.trainable_params += node.trainable_params
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
        owner, rest = split_internal(owner_raw)
        node = self.nodes.get(owner)
        while node is None:  # inside a workbench-internal module
            owner = owner.rpartition(".")[0]
            node = self.nodes.get(owner)
        if rest:
            short = rest.split(".")[1]
        return node, short

    def count(self, parameters: Iterable[tuple[str, tuple[int, ...], int, bool]]) -> None:
        """Set the parameter counts, names and shapes from the model's parameters.

        Args:
            parameters: ``(name in named_parameters(), shape, elements, requires_grad)`` per
                parameter, shared tensors once.
        """
        for node in self.nodes.values():
            node.own_params = node.own_trainable = node.total_params = node.trainable_params = 0
        names: dict[str, list[str]] = {}
        self.param_shapes = {}
        for raw, shape, n, trainable in parameters:
            node, short = self._owner(raw)
            self.param_shapes.setdefault(f"{node.path}.{short}" if node.path else short, tuple(shape))
            node.own_params += n
            if trainable:
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
        from workbench.core.plan.tree_from_model import parameter_rows

        self.count(parameter_rows(model))
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


_BN, _FIXED, _TRAINING = 1, 2, 4  # a module row's flags (ModelTree.to_dict)


def _module_row(item: Any, i: int) -> ModuleNode:
    """One module row of :meth:`ModelTree.to_dict`, checked field by field."""
    if not (isinstance(item, list) and len(item) == 9):
        raise TreeFormatError(f"module row {i} is not [path, class, classes, parent, order, parameters, trainable, names, flags]")
    path, type_name, type_names, parent, order, own, trainable, names, flags = item
    texts = (isinstance(path, str) and isinstance(type_name, str) and bool(type_name) and isinstance(type_names, list)
             and all(isinstance(t, str) for t in type_names) and isinstance(names, list)
             and all(isinstance(n, str) for n in names))
    numbers = all(type(v) is int for v in (parent, order, own, trainable, flags))
    if not (texts and numbers and parent < i and 0 <= trainable <= own and 0 <= flags < 8 and order >= 0):
        raise TreeFormatError(f"module row {i} has a bad field")
    return ModuleNode(
        path=path, type_name=type_name, type_names=tuple(type_names), own_params=own, own_trainable=trainable,
        param_names=tuple(names), is_bn=bool(flags & _BN), bn_stats_fixed=bool(flags & _FIXED),
        training=bool(flags & _TRAINING), order=order,
    )


def _child_path(parent: str, path: str) -> bool:
    """``path`` is a direct child's path of ``parent`` (one more non-empty segment)."""
    if parent:
        prefix, dot, segment = path.rpartition(".")
        return bool(dot) and prefix == parent and bool(segment)
    return bool(path) and "." not in path
