"""A tree as plain data: written by ModelTree.to_dict, read back by ModelTree.from_dict without torch."""

from __future__ import annotations

import json

import pytest
from torch import nn

from workbench.core.plan.fast.counts import count_plan
from workbench.core.plan.rules import FreezePlan
from workbench.core.plan.tree import ModelTree, TreeFormatError


def _model() -> nn.Module:
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Sequential(nn.Linear(4, 2), nn.Linear(2, 2)))
    m[2][1].weight.requires_grad_(False)
    m[1].momentum = 0.0  # statistics train mode never updates
    m[2].eval()
    return m


def test_a_tree_survives_json_with_every_field() -> None:
    tree = ModelTree.from_model(_model())
    read = ModelTree.from_dict(json.loads(json.dumps(tree.to_dict())))
    assert read.to_dict() == tree.to_dict()
    fields = ("path", "type_name", "type_names", "own_params", "own_trainable", "param_names", "is_bn",
              "bn_stats_fixed", "training", "order", "row", "total_params", "trainable_params")
    for a, b in zip(tree.root.walk(), read.root.walk(), strict=True):
        assert [getattr(a, f) for f in fields] == [getattr(b, f) for f in fields]
        assert (a.parent.path if a.parent else None) == (b.parent.path if b.parent else None)
    assert read.param_shapes == tree.param_shapes and read.layer_ids == tree.layer_ids
    assert read.fingerprint == tree.fingerprint
    assert read["1"].bn_stats_fixed and not read["2"].training and read["2.1"].own_trainable == 2  # its bias


def test_the_plan_engine_counts_a_read_tree_as_the_live_one() -> None:
    tree = ModelTree.from_model(_model())
    read = ModelTree.from_dict(tree.to_dict())
    plan = FreezePlan.from_dict({"rules": [{"select": "0", "frozen": True}, {"select": "2.0", "reparam": {"rank": 1}}]})
    live_rows, read_rows = count_plan(plan, tree), count_plan(plan, read)
    assert (live_rows.sums == read_rows.sums).all()
    assert plan.resolve(read) == plan.resolve(tree)


@pytest.mark.parametrize("change", ["no modules", "root with a parent", "child before its parent", "bad flags"])
def test_a_broken_tree_says_which_row(change: str) -> None:
    data = ModelTree.from_model(_model()).to_dict()
    if change == "no modules":
        data["modules"] = []
    elif change == "root with a parent":
        data["modules"][0][3] = 0
    elif change == "child before its parent":
        data["modules"][3][3] = 4
    else:
        data["modules"][1][8] = 9
    with pytest.raises(TreeFormatError) as info:
        ModelTree.from_dict(data)
    assert "\n" not in str(info.value)
