"""The A+B column shows full / r=8, the A+B dialog sets rank and alpha, and costs count U, V and A."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from PySide6.QtCore import Qt
from torch import nn

from workbench.core.plan.rules import FreezePlan
from workbench.gui.controller import Controller
from workbench.gui.model_loading import loaded_from_model
from workbench.gui.plan.reparam_dialog import ReparamDialog, edit_reparam
from workbench.gui.plan.state import PlanState
from workbench.gui.plan.tree_columns import Column
from workbench.gui.plan.tree_model import ModuleTreeModel


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.Linear(32, 4))


def _controller() -> Controller:
    c = Controller()
    c.set_loaded(loaded_from_model(_model(), "mlp", spec={"source": "py", "name": "mlp"}))
    return c


def test_cost_counts_u_v_and_a_exactly_as_the_applied_plan(qapp: Any) -> None:
    c = _controller()
    plan = FreezePlan.from_dict(
        {"rules": [{"select": "*", "frozen": True}, {"select": "0", "frozen": False, "reparam": {"rank": 4, "alpha": 8}}]}
    )
    state = PlanState.compute(c.tree, plan, param_shapes=c.loaded.param_shapes)
    model = _model()
    counts = plan.apply(model).counts()
    assert state.counts.trainable == counts.trainable == 4 * (16 + 32)
    assert state.counts.total == counts.total and state.counts.fixed_bytes == 0
    assert state.nodes["0"].reparam_text == "r=4" and state.nodes["0"].trainable == 4 * 48
    assert state.nodes["0"].reparam == "on" and state.nodes["1"].reparam_text == ""


def test_dora_cost_counts_the_magnitude_and_the_dialog_sets_it(qtbot: Any, dialogs: Any) -> None:
    c = _controller()
    plan = FreezePlan.from_dict({"rules": [
        {"select": "*", "frozen": True}, {"select": "0", "frozen": False, "reparam": {"rank": 4, "dora": True}}]})
    state = PlanState.compute(c.tree, plan, param_shapes=c.loaded.param_shapes)
    counts = plan.apply(_model()).counts()
    assert state.counts.trainable == counts.trainable == 4 * (16 + 32) + 32  # U, V and the magnitude
    assert state.nodes["0"].reparam_text == "r=4 DoRA"
    m = ModuleTreeModel(c)

    def fill(dlg: ReparamDialog) -> bool:
        assert not dlg.dora.isEnabled()  # full rank: no DoRA
        dlg.rank.setValue(2)
        assert dlg.dora.isEnabled()
        dlg.dora.setChecked(True)
        return dlg.spec() is not None

    dialogs.script("dialog", fill)
    assert edit_reparam(None, c, ["2"])
    assert c.state.effective["2"].reparam.low_rank.dora
    assert m.data(m.index(2, Column.AB, m.index(0, 0)), Qt.ItemDataRole.DisplayRole) == "r=2 DoRA"


def test_ab_column_shows_full_or_rank_and_the_dialog_sets_rank_and_alpha(qtbot: Any, dialogs: Any) -> None:
    c = _controller()
    m = ModuleTreeModel(c)
    c.set_value(["2"], "reparam", {"kind": "a_plus_b"})
    root = m.index(0, 0)
    cell = m.index(2, Column.AB, root)
    assert m.data(cell, Qt.ItemDataRole.DisplayRole) == "full"

    def fill(dlg: ReparamDialog) -> bool:
        assert dlg.rank.value() == 0  # the full-rank spec in force
        dlg.rank.setValue(2)
        dlg.alpha.setValue(4.0)
        return dlg.spec() is not None

    dialogs.script("dialog", fill)
    assert edit_reparam(None, c, ["2"])
    spec = c.state.effective["2"].reparam
    assert spec.rank == 2 and spec.low_rank.alpha == 4.0
    assert m.data(m.index(2, Column.AB, root), Qt.ItemDataRole.DisplayRole) == "r=2"


def test_dialog_shows_why_a_spec_is_invalid(qtbot: Any) -> None:
    dlg = ReparamDialog(None, ["0"], None)
    qtbot.addWidget(dlg)
    dlg.rank.setValue(4)
    dlg.mode.setCurrentText("exact")
    assert not dlg.dropout.isEnabled()
    dlg.mode.setCurrentText("fused")
    dlg.dropout.setValue(0.1)
    assert dlg.values()["dropout"] == 0.1 and dlg.spec() is not None
    dlg.rank.setValue(0)
    assert "rank" not in dlg.values() and dlg.spec().low_rank is None


def test_unselected_keep_shows_the_state_the_model_has(qapp: Any) -> None:
    model = _model()
    model[0].requires_grad_(False)  # a script froze the first layer
    c = Controller()
    c.set_loaded(loaded_from_model(model, "mlp", spec={"source": "py", "name": "mlp"}))
    plan = FreezePlan.from_dict({"unselected": "keep", "rules": [{"select": "2", "frozen": True}]})
    state = PlanState.compute(c.tree, plan, param_shapes=c.loaded.param_shapes)
    assert state.nodes["0"].frozen == "on" and state.nodes["1"].frozen == "off" and state.nodes["2"].frozen == "on"
    assert state.counts.trainable == plan.apply(model).counts().trainable == 64


def test_a_variant_row_gets_its_box_and_one_variant_is_checked_at_a_time(
    qtbot: Any, dialogs: Any, monkeypatch: Any, tmp_path: Any
) -> None:
    from workbench.core.plan import lora_variants

    row = lora_variants.VariantInfo("scaled", "Scaled", "twice the low-rank path", "W = A + 2 s U V")
    monkeypatch.setitem(lora_variants.VARIANTS, "scaled", row)  # no class: the dialog never needs one
    c = _controller()
    m = ModuleTreeModel(c)
    seen: list[bool] = []

    def fill(dlg: ReparamDialog) -> bool:
        assert set(dlg.variants) == {"dora", "scaled"} and dlg.scaled is dlg.variants["scaled"]
        assert dlg.scaled.text() == "twice the low-rank path" and dlg.scaled.toolTip() == "W = A + 2 s U V"
        assert not dlg.scaled.isEnabled()  # full rank: no variant
        dlg.rank.setValue(2)
        dlg.dora.setChecked(True)
        dlg.scaled.setChecked(True)
        seen.append(dlg.dora.isChecked())
        dlg.grab().save(str(tmp_path / "reparam_dialog.png"))
        assert dlg.values()["scaled"] is True and "dora" not in dlg.values()
        return dlg.spec() is not None

    dialogs.script("dialog", fill)
    assert edit_reparam(None, c, ["2"])
    assert seen == [False]  # checking one variant unchecks the other
    low = c.state.effective["2"].reparam.low_rank
    assert low.variant == "scaled"
    assert m.data(m.index(2, Column.AB, m.index(0, 0)), Qt.ItemDataRole.DisplayRole) == "r=2 Scaled"
    dlg = ReparamDialog(None, ["2"], c.state.effective["2"].reparam)
    qtbot.addWidget(dlg)
    assert dlg.scaled.isChecked() and not dlg.dora.isChecked()  # loads the variant back
    with pytest.raises(AttributeError):
        dlg.no_such_variant  # noqa: B018
