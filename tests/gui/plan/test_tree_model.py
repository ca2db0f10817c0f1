"""The module tree model: Qt's model tester, clicks as plan edits, dataChanged ranges, filter."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from PySide6.QtCore import QModelIndex, Qt
from torch import nn
from torchvision.models import resnet18

from tests.timeouts import GUI_EVENT_S, ms
from workbench.core.formatting import fmt_count
from workbench.gui.controller import Controller
from workbench.gui.model_loading import loaded_from_model
from workbench.gui.plan.tree_model import PATH_ROLE, Column, ModuleFilterProxy, ModuleTreeModel, parse_lr

CHECK = Qt.ItemDataRole.CheckStateRole


def make(model: nn.Module, label: str = "model") -> tuple[Controller, ModuleTreeModel]:
    c = Controller()
    c.set_loaded(loaded_from_model(model, label, spec={"source": "torchvision", "name": label}))
    return c, ModuleTreeModel(c)


@pytest.fixture
def resnet() -> tuple[Controller, ModuleTreeModel, nn.Module]:
    torch.manual_seed(0)
    model = resnet18()
    c, m = make(model, "resnet18")
    return c, m, model


def check(m: ModuleTreeModel, path: str, col: Column = Column.FROZEN) -> Any:
    return m.data(m.index_of(path, col), CHECK)


def test_qtmodeltester_resnet18(qtmodeltester: Any, resnet: tuple) -> None:
    c, m, _ = resnet
    qtmodeltester.check(m)
    c.set_value(["layer1", "fc"], "frozen", True)
    c.set_value(["layer4"], "lr_scale", 0.1)
    qtmodeltester.check(m)


def test_qtmodeltester_large_model(qtmodeltester: Any, nested_model: Any) -> None:
    model = nested_model(width=6, depth=3, leaf=25)  # 1 + 6 + 36 + 900 = 943 modules
    c, m = make(model)
    assert len(c.tree) == 943
    qtmodeltester.check(m)
    c.set_value(["0.1"], "frozen", True)
    qtmodeltester.check(m)


def test_large_tree_counts(nested_model: Any) -> None:
    model = nested_model(width=10, depth=3, leaf=50)  # 5,111 modules
    c, m = make(model)
    assert len(c.tree) > 5000
    root = m.index(0, 0)
    assert m.rowCount(root) == 10 and m.rowCount(m.index(0, 0, m.index(0, 0, root))) == 50
    c.set_value([""], "frozen", True)
    assert check(m, "") == Qt.CheckState.Checked
    assert check(m, "9.9.49") == Qt.CheckState.Checked
    assert c.counts.trainable == 0


def test_click_frozen_on_layer1_edits_the_plan(resnet: tuple, qtbot: Any) -> None:
    c, m, model = resnet
    total = c.counts.total
    layer1 = sum(p.numel() for p in model.layer1.parameters())
    events: list[tuple[str, int, int]] = []

    def record(top: QModelIndex, bottom: QModelIndex, roles: Any = ()) -> None:
        assert top.parent() == bottom.parent() and top.column() == 0 and bottom.column() == len(Column) - 1
        events.append((m.path(top.parent()) if top.parent().isValid() else "<top>", top.row(), bottom.row()))

    m.dataChanged.connect(record)
    with qtbot.waitSignal(c.planChanged, timeout=ms(GUI_EVENT_S)):
        assert m.setData(m.index_of("layer1", Column.FROZEN), Qt.CheckState.Checked, CHECK)
    assert [r.to_dict() for r in c.plan.rules] == [{"select": "layer1", "frozen": True}]
    # exactly layer1's parameters are frozen when the plan is applied
    applied = c.plan.apply(model)
    try:
        for name, p in model.named_parameters():
            assert p.requires_grad == (not name.startswith("layer1.")), name
    finally:
        applied.remove()
    assert check(m, "layer1") == Qt.CheckState.Checked
    assert check(m, "layer1.0.conv1") == Qt.CheckState.Checked
    assert check(m, "") == Qt.CheckState.PartiallyChecked
    assert check(m, "layer2") == Qt.CheckState.Unchecked
    assert c.counts.trainable == total - layer1
    assert m.data(m.index_of("layer1", Column.TRAINABLE)) == "0"
    # one dataChanged per run of adjacent changed siblings
    assert sorted(events) == sorted(
        [("<top>", 0, 0), ("", 4, 4), ("layer1", 0, 1), ("layer1.0", 0, 4), ("layer1.1", 0, 4)]
    )
    c.undo_stack.undo()
    assert c.plan.rules == [] and check(m, "") == Qt.CheckState.Unchecked and c.counts.trainable == total
    c.undo_stack.redo()
    assert check(m, "layer1") == Qt.CheckState.Checked


def test_partial_parent_click_freezes_whole_subtree(resnet: tuple) -> None:
    c, m, _ = resnet
    c.set_value(["layer1.0"], "frozen", True)
    assert check(m, "layer1") == Qt.CheckState.PartiallyChecked
    # a click on a partially checked box checks it
    m.setData(m.index_of("layer1", Column.FROZEN), Qt.CheckState.Checked, CHECK)
    assert check(m, "layer1") == Qt.CheckState.Checked
    assert [r.to_dict() for r in c.plan.rules] == [{"select": "layer1", "frozen": True}]
    m.setData(m.index_of("layer1", Column.FROZEN), Qt.CheckState.Unchecked, CHECK)
    assert c.plan.rules == []


def test_filter_keeps_ancestors(resnet: tuple) -> None:
    _, m, _ = resnet
    proxy = ModuleFilterProxy()
    proxy.setSourceModel(m)
    proxy.set_pattern("DOWNSAMPLE")

    def visible(path: str) -> bool:
        return proxy.mapFromSource(m.index_of(path)).isValid()

    for path in ("", "layer2", "layer2.0", "layer2.0.downsample", "layer2.0.downsample.1", "layer4.0.downsample"):
        assert visible(path), path
    for path in ("conv1", "layer1", "layer2.1", "layer2.0.conv1", "fc"):
        assert not visible(path), path
    proxy.set_pattern("BatchNorm2d")  # by type too
    assert visible("bn1") and visible("layer3.1.bn2") and visible("layer3") and not visible("fc")
    proxy.set_pattern("")
    assert visible("fc")
    idx = proxy.mapFromSource(m.index_of("layer1.0.conv1"))
    assert idx.data(PATH_ROLE) == "layer1.0.conv1"


def test_lr_column_edits(resnet: tuple, qtbot: Any) -> None:
    c, m, _ = resnet
    idx = m.index_of("layer4", Column.LR)
    assert m.flags(idx) & Qt.ItemFlag.ItemIsEditable
    assert m.setData(idx, "0.1", Qt.ItemDataRole.EditRole)
    assert [r.to_dict() for r in c.plan.rules] == [{"select": "layer4", "lr_scale": 0.1}]
    assert m.data(m.index_of("layer4.1.conv2", Column.LR)) == "0.1"
    assert m.data(idx, Qt.ItemDataRole.FontRole).bold()
    with qtbot.waitSignal(c.errorOccurred, timeout=ms(GUI_EVENT_S)) as blocker:
        assert not m.setData(idx, "fast", Qt.ItemDataRole.EditRole)
    assert "number >= 0" in blocker.args[1]
    assert m.setData(idx, "", Qt.ItemDataRole.EditRole)  # empty: inherit
    assert c.plan.rules == []
    assert parse_lr("× 1e-3") == 1e-3 and parse_lr("-1") is False and parse_lr(" ") is None


def test_bn_eval_column(resnet: tuple) -> None:
    c, m, _ = resnet
    assert check(m, "fc", Column.BN) is None
    assert not m.flags(m.index_of("fc", Column.BN)) & Qt.ItemFlag.ItemIsUserCheckable
    assert check(m, "layer1.0.bn1", Column.BN) == Qt.CheckState.Unchecked
    c.set_value(["layer1"], "frozen", True)
    bn = m.index_of("layer1.0.bn1", Column.BN)
    assert m.data(bn, CHECK) == Qt.CheckState.Checked and m.data(bn) == "auto"  # follows frozen
    assert check(m, "", Column.BN) == Qt.CheckState.PartiallyChecked
    m.setData(bn, Qt.CheckState.Unchecked, CHECK)
    assert m.data(bn, CHECK) == Qt.CheckState.Unchecked and m.data(bn) == ""
    assert "bn-frozen-train-mode" in {f.code for f in c.state.findings}
    m.setData(bn, Qt.CheckState.Checked, CHECK)  # back to following frozen: the explicit rule goes
    assert [r.to_dict() for r in c.plan.rules] == [{"select": "layer1", "frozen": True}]


def test_ab_column(resnet: tuple) -> None:
    c, m, _ = resnet
    idx = m.index_of("layer4", Column.AB)
    assert m.flags(idx) & Qt.ItemFlag.ItemIsEnabled
    assert m.setData(idx, Qt.CheckState.Checked, CHECK)
    assert c.plan.rules[0].reparam["kind"] == "a_plus_b"
    assert check(m, "layer4.0.conv1", Column.AB) == Qt.CheckState.Checked
    assert check(m, "", Column.AB) == Qt.CheckState.PartiallyChecked
    assert c.counts.fixed_bytes == sum(p.numel() * 4 for p in resnet[2].layer4.parameters())
    assert "A+B" in m.data(m.index_of("layer4.0.conv1", Column.AB), Qt.ItemDataRole.ToolTipRole)
    m.setData(idx, Qt.CheckState.Unchecked, CHECK)
    assert c.plan.rules == []


def test_partial_shows_partially_checked(resnet: tuple) -> None:
    from workbench.gui.plan import edits as plan_edits

    c, m, _ = resnet
    spec = {"param": "weight", "dim": 1, "trainable": [[0, 16]]}
    c.edit("partial", lambda plan, tree: plan_edits.set_partial(plan, tree, "fc", spec))
    idx = m.index_of("fc", Column.FROZEN)
    assert m.data(idx, CHECK) == Qt.CheckState.PartiallyChecked
    assert m.data(m.index_of("fc", Column.TRAINABLE)) == fmt_count(16 * 1000 + 1000)
    tip = m.data(idx, Qt.ItemDataRole.ToolTipRole)
    assert "Partially frozen" in tip and "0:16" in tip


def test_model_reset_on_new_model(resnet: tuple, qtbot: Any) -> None:
    c, m, _ = resnet
    with qtbot.waitSignal(m.modelReset, timeout=ms(GUI_EVENT_S)):
        c.set_loaded(loaded_from_model(nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))))
    assert m.rowCount(m.index(0, 0)) == 2
    assert m.data(m.index_of("1", Column.TYPE)) == "BatchNorm1d"


def test_view_space_emits_the_selected_paths(resnet: tuple, qtbot: Any) -> None:
    from workbench.gui.plan.tree_view import ModuleTreeView

    _, m, _ = resnet
    view = ModuleTreeView()
    qtbot.addWidget(view)
    view.setModel(m)
    view.expandToDepth(0)
    view.setCurrentIndex(m.index_of("layer2"))
    qtbot.keyClick(view, Qt.Key.Key_Space)  # nothing connected: a plain QTreeView's Space
    with qtbot.waitSignal(view.frozenToggleRequested, timeout=ms(GUI_EVENT_S)) as blocker:
        qtbot.keyClick(view, Qt.Key.Key_Space)
    assert blocker.args == [["layer2"]]
