"""The "every parameter is frozen" finding names the model's own head, read from its tree."""

from __future__ import annotations

import pytest
import torchvision
from torch import nn

from workbench.core.checks.lint import head_path, lint_plan, unfreeze_head_fix
from workbench.core.models.tree import ModelTree
from workbench.core.plan.rules import FreezePlan

FROZEN = FreezePlan.from_dict({"rules": [{"select": "*", "frozen": True}]})


class _Tagger(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.head = nn.Linear(16, 3)


class _Pitch(nn.Module):  # a head by no usual name: the last Linear in module order
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, 4, 3)
        self.to_bins = nn.Linear(4, 360)


@pytest.mark.parametrize(
    ("model", "head"),
    [
        (_Tagger(), "head"),
        (_Pitch(), "to_bins"),
        (torchvision.models.resnet18(weights=None, num_classes=4), "fc"),
        (torchvision.models.mobilenet_v3_small(weights=None, num_classes=4), "classifier.3"),
        (nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2)), "1"),
    ],
)
def test_nothing_trainable_names_the_models_own_head(model: nn.Module, head: str) -> None:
    tree = ModelTree.from_model(model)
    assert head_path(tree) == head
    (finding,) = [f for f in lint_plan(FROZEN, tree) if f.code == "nothing-trainable"]
    assert finding.fix == f"unfreeze at least the head (`{head}`)"
    assert "`fc` or `classifier`" not in finding.fix


def test_without_parameters_or_a_tree_the_fix_says_the_last_layer() -> None:
    assert head_path(ModelTree.from_model(nn.Sequential(nn.ReLU()))) is None
    assert unfreeze_head_fix(None) == "unfreeze at least the model's head (its last layer)"
