"""The start-up tree from the cached description: the model's rows before torch is imported.

:class:`~workbench.gui.startup.StartupWindow` fills its tree with the rows of the
:class:`~workbench.core.models.tree_cache.CachedTree` written the last time the model loaded
(Module, Type, Params; read-only, no checkboxes), above it one line saying where the rows come
from. The live tree replaces it once the model has loaded; the row the user picked and the rows
they opened carry over (:func:`carry_over`).

This module imports Qt, the standard library and the Qt-free tree description only (not torch).
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QTreeWidget, QTreeWidgetItem

from workbench.core.formatting import fmt_count
from workbench.core.models.tree_cache import CachedTree

__all__ = ["PATH_ROLE", "carry_over", "fill_preview", "preview_notice", "preview_state", "row_click_text"]

#: Item data role holding a preview row's module path.
PATH_ROLE = Qt.ItemDataRole.UserRole + 1
_MODULE, _TYPE, _PARAMS = 0, 1, 2


def preview_notice(cached: CachedTree, *, torch_imported: bool = False) -> str:
    """The line above the preview: what is loading and where the rows come from.

    Args:
        cached: the described tree.
        torch_imported: torch is there and the model loads (else torch is loading).

    Returns:
        ``Loading PyTorch… resnet18's tree is from the last start; the checkboxes work once the model has loaded.``
        (``Loading resnet18…`` once torch is imported).
    """
    loading = cached.name if torch_imported else "PyTorch"
    return f"Loading {loading}… {cached.name}'s tree is from the last start; the checkboxes work once the model has loaded."


def row_click_text(path: str, model: str) -> str:
    """What the status bar says when a preview row is clicked.

    Args:
        path: the row's module path (``""`` for the root).
        model: the model's name.

    Returns:
        One line: the row stays picked, the plan waits for the model.
    """
    where = path or "the root"
    return f"{where}: still loading {model}; this row stays selected, and its checkboxes work once the model has loaded"


def fill_preview(tree: QTreeWidget, cached: CachedTree) -> None:
    """Fill ``tree`` with the described rows, read-only, the root's children shown.

    Args:
        tree: an empty tree widget whose first three columns are Module, Type and Params.
        cached: the described tree.
    """
    items: list[QTreeWidgetItem] = []
    flags = Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable
    right = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
    for row, total in zip(cached.rows, cached.total_params, strict=True):
        item = QTreeWidgetItem([row.name, row.type_name, fmt_count(total)])
        item.setFlags(flags)
        item.setData(_MODULE, PATH_ROLE, row.path)
        item.setToolTip(_MODULE, row.path or cached.name)
        item.setToolTip(_PARAMS, f"{total:,} parameters")
        item.setTextAlignment(_PARAMS, right)
        if row.parent < 0:
            font = item.font(_MODULE)
            font.setBold(True)
            item.setFont(_MODULE, font)
            tree.addTopLevelItem(item)
        else:
            items[row.parent].addChild(item)
        items.append(item)
    tree.expandToDepth(0)
    for column in (_MODULE, _TYPE, _PARAMS):
        tree.resizeColumnToContents(column)


def preview_state(tree: QTreeWidget) -> tuple[str | None, list[str]]:
    """What the user did in the preview: the current row and the rows they opened.

    Args:
        tree: a tree filled by :func:`fill_preview`.

    Returns:
        ``(current path or None, paths of the expanded rows below the root)``.
    """
    current = tree.currentItem()
    path = current.data(_MODULE, PATH_ROLE) if current is not None else None
    expanded: list[str] = []
    stack = [tree.topLevelItem(i) for i in range(tree.topLevelItemCount())]
    while stack:
        item = stack.pop()
        if item is None:
            continue
        if item.isExpanded() and item.data(_MODULE, PATH_ROLE):
            expanded.append(item.data(_MODULE, PATH_ROLE))
        stack.extend(item.child(i) for i in range(item.childCount()) if item.isExpanded())
    return (path if isinstance(path, str) else None), expanded


def carry_over(
    state: tuple[str | None, list[str]],
    expand: Callable[[str], bool],
    select: Callable[[str], bool],
) -> list[str]:
    """Apply what the user did in the preview to the live tree.

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
