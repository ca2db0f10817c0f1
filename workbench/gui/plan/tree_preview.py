"""The start-up tree from the cached description: the plan is edited before torch is imported.

:class:`~workbench.gui.startup.StartupWindow` shows the :class:`~workbench.core.models.tree_cache.CachedTree`
written the last time the model loaded in the window's own module tree (:func:`described_tree`):
a :class:`~workbench.gui.controller.Controller` holding the described tree
(:meth:`~workbench.gui.controller.Controller.show_described`), its tree model and view. The
checkboxes and the LR × cells edit the plan with the same edits and undo steps as on a loaded
model; above the tree one line says where the rows come from. Once the model has loaded, the
full window takes the tree and the edits over (:meth:`~workbench.gui.controller.Controller.take_edits`),
and the row the user picked and the rows they opened carry over (:func:`preview_state`,
:func:`carry_over`), to the full window and again to its live tree once the model has loaded.

This module imports Qt, numpy and the Qt-free plan engine only (not torch).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import QModelIndex
from PySide6.QtWidgets import QWidget

from workbench.core.models.tree_cache import CachedTree
from workbench.gui.controller import Controller
from workbench.gui.plan.tree_model import PATH_ROLE, ModuleFilterProxy, ModuleTreeModel
from workbench.gui.plan.tree_view import ModuleTreeView

__all__ = ["DescribedTree", "carry_over", "described_tree", "preview_notice", "preview_state"]


def preview_notice(cached: CachedTree) -> str:
    """The line above the described tree: what is loading and where the rows come from.

    Args:
        cached: the described tree.

    Returns:
        ``Loading PyTorch… resnet18's tree is from the last start: edit the plan now; costs and
        Start come once the model has loaded.`` (``as the app ships it`` for the description
        the app ships).
    """
    origin = "as the app ships it" if cached.shipped else "from the last start"
    return (f"Loading PyTorch… {cached.name}'s tree is {origin}: edit the plan now; "
            "costs and Start come once the model has loaded.")


@dataclass
class DescribedTree:
    """The start-up window's module tree over a described model.

    Attributes:
        controller: holds the described tree, the plan edited on it and its undo steps.
        tree_model / proxy / view: the window's tree model, its filter and the view.
    """

    controller: Controller
    tree_model: ModuleTreeModel
    proxy: ModuleFilterProxy
    view: ModuleTreeView


def described_tree(cached: CachedTree, parent: QWidget) -> DescribedTree:
    """Build the module tree of a described model, the root's children shown.

    Args:
        cached: the described tree.
        parent: the widget that holds the view.

    Returns:
        The controller, model, filter and view.
    """
    controller = Controller(parent)
    spec = {"source": cached.source, "name": cached.name, "weights": cached.weights}
    controller.show_described(cached.tree, spec)
    tree_model = ModuleTreeModel(controller, parent)
    proxy = ModuleFilterProxy(parent)
    proxy.setSourceModel(tree_model)
    view = ModuleTreeView(parent)
    view.setModel(proxy)
    view.frozenToggleRequested.connect(controller.toggle_frozen)  # Space, as in the full window
    view.expandToDepth(0)
    return DescribedTree(controller, tree_model, proxy, view)


def preview_state(described: DescribedTree) -> tuple[str | None, list[str]]:
    """What the user did in the described tree: the current row and the rows they opened.

    Args:
        described: the start-up window's tree.

    Returns:
        ``(current path or None, paths of the expanded rows below the root)``.
    """
    view, proxy = described.view, described.proxy
    current = view.currentIndex()
    path = current.data(PATH_ROLE) if current.isValid() else None
    expanded: list[str] = []
    stack = [proxy.index(i, 0) for i in range(proxy.rowCount(QModelIndex()))]
    while stack:
        index = stack.pop()
        if not view.isExpanded(index):
            continue
        row_path = index.data(PATH_ROLE)
        if isinstance(row_path, str) and row_path:
            expanded.append(row_path)
        stack.extend(proxy.index(i, 0, index) for i in range(proxy.rowCount(index)))
    return (path if isinstance(path, str) else None), expanded


def carry_over(
    state: tuple[str | None, list[str]],
    expand: Callable[[str], bool],
    select: Callable[[str], bool],
) -> list[str]:
    """Apply what the user did in the described tree to the live tree.

    Args:
        state: :func:`preview_state`'s result.
        expand: expands the live row of a path; False when the live tree has no such row.
        select: makes the live row of a path the current one; False when there is none.

    Returns:
        The paths the live tree does not have (the model changed since the description).
    """
    current, expanded = state
    missing = [p for p in sorted(expanded, key=lambda p: p.count(".")) if not expand(p)]
    if current is not None and not select(current):
        missing.append(current)
    return missing
