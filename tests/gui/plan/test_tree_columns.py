"""The tree's column table: the model and the view only iterate it; a toggle column is one row."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from PySide6.QtCore import Qt
from torchvision.models import resnet18

from workbench.gui.controller import Controller
from workbench.gui.model_loading import loaded_from_model
from workbench.gui.plan import tree_columns, tree_model, tree_view
from workbench.gui.plan.tree_columns import COLUMNS, HEADERS, Column, Editor, column_index, toggle_column
from workbench.gui.plan.tree_model import ModuleTreeModel
from workbench.gui.plan.tree_view import CheckDelegate, LrDelegate, ModuleTreeView

CHECK = Qt.ItemDataRole.CheckStateRole


def make() -> tuple[Controller, ModuleTreeModel]:
    torch.manual_seed(0)
    c = Controller()
    c.set_loaded(loaded_from_model(resnet18(), "resnet18", spec={"source": "torchvision", "name": "resnet18"}))
    return c, ModuleTreeModel(c)


def test_headers_come_from_the_table(qapp: Any) -> None:
    _, m = make()
    assert m.columnCount() == len(COLUMNS) == len(HEADERS) == len(Column)
    for i, col in enumerate(COLUMNS):
        assert m.headerData(i, Qt.Orientation.Horizontal) == col.header
        assert m.headerData(i, Qt.Orientation.Horizontal, Qt.ItemDataRole.ToolTipRole) == col.tooltip
        align = m.headerData(i, Qt.Orientation.Horizontal, Qt.ItemDataRole.TextAlignmentRole)
        assert align == (int(Qt.AlignmentFlag.AlignCenter) if col.toggle else col.alignment)
    assert [c.key for c in COLUMNS if c.toggle] == ["frozen", "reparam", "bn_eval"]
    assert column_index("lr_scale") == Column.LR and COLUMNS[Column.AB].header == "A+B"
    with pytest.raises(KeyError, match="no tree column 'nope'; the columns are module, type"):
        column_index("nope")


def test_view_delegates_follow_the_editor_kind(qtbot: Any) -> None:
    _, m = make()
    view = ModuleTreeView()
    qtbot.addWidget(view)
    view.setModel(m)
    for i, col in enumerate(COLUMNS):
        delegate = view.itemDelegateForColumn(i)
        expected = {Editor.CHECK: CheckDelegate, Editor.LR: LrDelegate}.get(col.editor)
        assert (type(delegate) is expected) if expected else delegate is None, col.key


def test_a_toggle_column_is_one_row(qtbot: Any, qtmodeltester: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    extra = toggle_column("bn_eval", "BN again", "a second BN eval column", "bn", lambda c, node, st: "tip")
    columns = COLUMNS + (extra,)
    for module in (tree_columns, tree_model, tree_view):
        monkeypatch.setattr(module, "COLUMNS", columns)
    c, m = make()
    new = len(columns) - 1
    assert m.columnCount() == len(columns) and m.headerData(new, Qt.Orientation.Horizontal) == "BN again"
    fc, bn = m.index_of("fc", new), m.index_of("layer1.0.bn1", new)
    assert m.data(fc, CHECK) is None and not m.flags(fc) & Qt.ItemFlag.ItemIsUserCheckable
    assert m.flags(bn) & Qt.ItemFlag.ItemIsUserCheckable and m.data(bn, CHECK) == Qt.CheckState.Unchecked
    assert m.data(bn, Qt.ItemDataRole.ToolTipRole) == "tip"
    changed: list[tuple[int, int]] = []
    m.dataChanged.connect(lambda top, bottom, roles=(): changed.append((top.column(), bottom.column())))
    assert m.setData(bn, Qt.CheckState.Checked, CHECK)
    assert [r.to_dict() for r in c.plan.rules] == [{"select": "layer1.0.bn1", "bn_eval": True}]
    assert changed and all(span == (0, new) for span in changed)  # one range spans every column
    qtmodeltester.check(m)
    view = ModuleTreeView()
    qtbot.addWidget(view)
    view.setModel(m)
    assert isinstance(view.itemDelegateForColumn(new), CheckDelegate)
