"""A new plan key, added as a row (and its two fields) only, reaches the window: per-row state,
minimal plan edits, the undo text and a column (one ``number_column`` row for a number, one
``toggle_column`` row for a switch), with no GUI module naming it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from PySide6.QtCore import Qt
from torchvision.models import resnet18

from tests.fixtures.plan_keys import CLIP, register_key
from workbench.core.models.tree import ModelTree
from workbench.core.plan.keys import PlanKey
from workbench.core.plan.rules import FreezePlan
from workbench.gui.controller import Controller
from workbench.gui.model_loading import loaded_from_model
from workbench.gui.plan import edits as plan_edits
from workbench.gui.plan import tree_columns, tree_model, tree_view
from workbench.gui.plan.state import PlanState
from workbench.gui.plan.tree_columns import COLUMNS, Editor, number_column, toggle_column
from workbench.gui.plan.tree_model import ModuleTreeModel
from workbench.gui.plan.tree_view import ModuleTreeView, NumberDelegate

EDIT = Qt.ItemDataRole.EditRole
CHECK = Qt.ItemDataRole.CheckStateRole


def _parse_bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError("must be true or false")
    return v


#: A new switch: inherited, off by default.
QUANT = PlanKey("quantize", "boolean", _parse_bool, True, False, "fake-quantize the modules", label="Quant", switch=True)


@pytest.fixture(scope="module")
def tree() -> ModelTree:
    torch.manual_seed(0)
    return ModelTree.from_model(resnet18(num_classes=10))


def test_state_and_edits_take_a_new_key(monkeypatch: pytest.MonkeyPatch, tree: ModelTree) -> None:
    register_key(monkeypatch, CLIP, float | None)
    plan = FreezePlan.from_dict({"rules": [{"select": "layer4", "grad_clip": 0.5}]})
    state = PlanState.compute(tree, plan)
    assert state.nodes["layer4.0.conv1"].value("grad_clip") == 0.5 and state.nodes["fc"].value("grad_clip") is None
    assert state.explicit["grad_clip"] == {"layer4"}
    # a setting the subtree already inherits adds no rule; another value does; None removes it
    edited = plan.copy()
    plan_edits.set_on_paths(edited, tree, ["layer4.0", "layer4.1.conv2"], "grad_clip", 0.5)
    assert edited.to_dict() == plan.to_dict()
    plan_edits.set_on_paths(edited, tree, ["layer4.1"], "grad_clip", 0.25)
    assert [r.to_dict() for r in edited.rules] == [
        {"select": "layer4", "grad_clip": 0.5}, {"select": "layer4.1", "grad_clip": 0.25},
    ]
    plan_edits.set_on_paths(edited, tree, ["layer4.1"], "grad_clip", 0.5)  # the parent gives 0.5 again
    assert edited.to_dict() == plan.to_dict()
    # the counted-again state of an edit equals a full count
    after = plan.copy()
    plan_edits.set_minimal(after, tree, "layer3", "grad_clip", 2.0)
    inc = PlanState.compute(tree, after, previous=state)
    full = PlanState.compute(tree, after)
    assert inc.changed is not None and full.nodes["layer3.0"].value("grad_clip") == 2.0
    assert all(inc.nodes[p] == full.nodes[p] for p in tree.nodes)
    assert not len(inc.rows_differing(full))
    # frozen everywhere below: the setting has no effect
    frozen = FreezePlan.from_dict({"rules": [{"select": "layer4", "frozen": True, "grad_clip": 0.5}]})
    assert PlanState.compute(tree, frozen).nodes["layer4"].ignored("grad_clip")
    assert not state.nodes["layer4"].ignored("grad_clip") and not state.nodes["fc"].ignored("grad_clip")
    np.testing.assert_array_equal(inc.rows_differing(state), np.flatnonzero(
        [p == "layer3" or p.startswith("layer3.") for p in state._lay.paths]
    ))


def _tree_with_column(monkeypatch: pytest.MonkeyPatch, extra: Any) -> tuple[Controller, ModuleTreeModel, int]:
    """resnet18 in a tree model whose columns end with ``extra`` (its index returned)."""
    columns = COLUMNS + (extra,)
    for module in (tree_columns, tree_model, tree_view):
        monkeypatch.setattr(module, "COLUMNS", columns)
    torch.manual_seed(0)
    c = Controller()
    c.set_loaded(loaded_from_model(resnet18(), "resnet18", spec={"source": "torchvision", "name": "resnet18"}))
    return c, ModuleTreeModel(c), len(columns) - 1


def test_a_numeric_column_is_one_row(qtbot: Any, qtmodeltester: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    register_key(monkeypatch, CLIP, float | None)
    extra = number_column("grad_clip", "Gradient clip of the module's parameters")
    c, m, new = _tree_with_column(monkeypatch, extra)
    assert extra.header == "Clip" and extra.editor is Editor.NUMBER and extra.editable
    assert m.headerData(new, Qt.Orientation.Horizontal) == "Clip"
    cell = m.index_of("layer4", new)
    assert m.data(cell, Qt.ItemDataRole.DisplayRole) == "" and m.flags(cell) & Qt.ItemFlag.ItemIsEditable
    assert m.setData(cell, " 0.5 ", EDIT)
    assert [r.to_dict() for r in c.plan.rules] == [{"select": "layer4", "grad_clip": 0.5}]
    assert c.undo_stack.undoText() == "Clip 0.5 on layer4"
    below = m.index_of("layer4.0.conv1", new)
    assert m.data(below, Qt.ItemDataRole.DisplayRole) == "0.5"
    assert m.data(below, Qt.ItemDataRole.ToolTipRole) == "Clip 0.5 — from rule 0: layer4"
    assert m.data(cell, Qt.ItemDataRole.FontRole).bold() and m.data(below, Qt.ItemDataRole.FontRole) is None
    errors: list[tuple[str, str]] = []
    c.errorOccurred.connect(lambda title, message, details: errors.append((title, message)))
    assert not m.setData(cell, "-1", EDIT)
    assert errors == [("Invalid Clip", "'-1' is not a gradient clip; enter a number > 0, or leave it empty to inherit")]
    assert m.setData(cell, "", EDIT) and c.plan.rules == []  # empty: inherit
    assert c.undo_stack.undoText() == "Clip inherited on layer4"
    qtmodeltester.check(m)
    view = ModuleTreeView()
    qtbot.addWidget(view)
    view.setModel(m)
    assert isinstance(view.itemDelegateForColumn(new), NumberDelegate)


def test_switch_keys_count_over_the_subtree(monkeypatch: pytest.MonkeyPatch, tree: ModelTree) -> None:
    register_key(monkeypatch, QUANT, bool)
    plan = FreezePlan.from_dict({"rules": [
        {"select": "layer4", "quantize": True, "eval": True}, {"select": "layer1", "checkpoint": True},
    ]})
    state = PlanState.compute(tree, plan)
    nodes = state.nodes
    for key in ("quantize", "eval"):  # inherited: the subtree's modules
        assert (nodes["layer4"].tri(key), nodes["layer4.0.conv1"].tri(key), nodes[""].tri(key)) == ("on", "on", "mixed")
        assert nodes["fc"].tri(key) == "off"
    # set on matched modules only: on where set, mixed above it
    assert (nodes["layer1"].tri("checkpoint"), nodes[""].tri("checkpoint"), nodes["layer1.0"].tri("checkpoint")) == (
        "on", "mixed", "off",
    )
    assert nodes["layer4"].tri("frozen") == nodes["layer4"].frozen and nodes["bn1"].tri("bn_eval") == nodes["bn1"].bn
    with pytest.raises(KeyError):
        nodes["fc"].tri("lr_scale")
    # minimal edits: switching it on below a module that has it on adds nothing
    edited = plan.copy()
    plan_edits.set_on_paths(edited, tree, ["layer4.1"], "quantize", True)
    assert edited.to_dict() == plan.to_dict()
    plan_edits.set_on_paths(edited, tree, ["layer4.1"], "quantize", False)
    inc = PlanState.compute(tree, edited, previous=state)
    full = PlanState.compute(tree, edited)
    assert inc.changed is not None and all(inc.nodes[p] == full.nodes[p] for p in tree.nodes)
    assert (full.nodes["layer4"].tri("quantize"), full.nodes["layer4.1.bn2"].tri("quantize")) == ("mixed", "off")


def test_a_switch_column_is_one_row(qtbot: Any, qtmodeltester: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    register_key(monkeypatch, QUANT, bool)
    extra = toggle_column("quantize", "Quant", "Fake-quantized modules", None, lambda c, node, st: "tip")
    c, m, new = _tree_with_column(monkeypatch, extra)
    fc, root = m.index_of("fc", new), m.index_of("", new)
    assert m.data(fc, CHECK) == Qt.CheckState.Unchecked and m.flags(fc) & Qt.ItemFlag.ItemIsUserCheckable
    assert m.setData(fc, Qt.CheckState.Checked, CHECK)
    assert [r.to_dict() for r in c.plan.rules] == [{"select": "fc", "quantize": True}]
    assert c.undo_stack.undoText() == "Quant on: fc"
    assert m.data(fc, CHECK) == Qt.CheckState.Checked and m.data(root, CHECK) == Qt.CheckState.PartiallyChecked
    c.undo_stack.undo()
    assert c.plan.rules == [] and m.data(fc, CHECK) == Qt.CheckState.Unchecked
    qtmodeltester.check(m)
