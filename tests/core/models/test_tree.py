import torch
import torchvision
from torch import nn

from tests.fixtures.models import Tied
from workbench.core.models.tree import ModelTree, canonical_parameters, fingerprint, is_batchnorm


def test_resnet18_tree_paths_and_counts(resnet18):
    tree = ModelTree.from_model(resnet18)
    assert tree.total_params == sum(p.numel() for p in resnet18.parameters()) == 11_689_512
    assert tree.root.type_name == "ResNet"
    assert tree["fc"].own_params == 513_000
    assert tree["layer1"].total_params == sum(p.numel() for p in resnet18.layer1.parameters())
    assert tree["layer1"].own_params == 0
    assert tree["layer1.0.bn1"].is_bn and not tree["layer1.0.conv1"].is_bn
    assert tree["layer1.0.bn1"].param_names == ("weight", "bias")
    assert [c.path for c in tree["layer1"].children] == ["layer1.0", "layer1.1"]
    assert tree["layer1.1"].row == 1 and tree["layer1.1"].parent is tree["layer1"]
    assert tree.paths()[0] == "" and tree.paths()[1] == "conv1"
    assert tree["layer1"].has_bn and not tree["fc"].has_bn


def test_trainable_counts_follow_requires_grad(resnet18):
    for p in resnet18.parameters():
        p.requires_grad_(False)
    resnet18.fc.requires_grad_(True)
    tree = ModelTree.from_model(resnet18)
    assert tree.trainable_params == 513_000
    assert tree["layer4"].trainable_params == 0
    resnet18.layer4.requires_grad_(True)
    tree.refresh(resnet18)
    assert tree.trainable_params == 513_000 + sum(p.numel() for p in resnet18.layer4.parameters())


def test_tied_parameters_counted_once():
    tree = ModelTree.from_model(Tied())
    assert tree.total_params == 40
    assert tree["emb"].own_params == 40 and tree["out"].own_params == 0


def test_batchnorm_family_flags():
    class BatchNormAct2d(nn.BatchNorm2d):  # like timm's: a subclass with children
        def __init__(self, n):
            super().__init__(n)
            self.act = nn.ReLU()

    m = nn.Sequential(nn.BatchNorm1d(3), nn.BatchNorm3d(3), nn.SyncBatchNorm(3), BatchNormAct2d(3), nn.LayerNorm(3))
    tree = ModelTree.from_model(m)
    assert [tree[str(i)].is_bn for i in range(5)] == [True, True, True, True, False]
    assert "BatchNorm2d" in tree["3"].type_names
    assert is_batchnorm(m[0]) and not is_batchnorm(m[4])


def test_parametrized_model_keeps_plain_paths_and_fingerprint(resnet18):
    from torch.nn.utils import parametrize

    class Identity(nn.Module):
        def forward(self, x):
            return x

    fp = fingerprint(resnet18)
    before = canonical_parameters(resnet18)
    parametrize.register_parametrization(resnet18.layer1[0].conv1, "weight", Identity())
    tree = ModelTree.from_model(resnet18)
    assert "layer1.0.conv1.parametrizations" not in tree
    assert tree["layer1.0.conv1"].own_params == 64 * 64 * 9
    assert tree.total_params == 11_689_512
    assert canonical_parameters(resnet18) == before
    assert fingerprint(resnet18) == fp


def test_fingerprint_depends_on_shapes_not_values():
    a = torchvision.models.resnet18(weights=None)
    b = torchvision.models.resnet18(weights=None, num_classes=10)
    c = torchvision.models.resnet18(weights=None)
    with torch.no_grad():
        c.fc.weight.add_(1)
    assert fingerprint(a) == fingerprint(c) != fingerprint(b)


def test_large_model_tree():
    # 5,000+ modules of nested Sequentials (build time is measured in tests/benchmarks/bench_tree.py)
    blocks = [nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(10)]) for _ in range(170)]
    m = nn.Sequential(*blocks)
    n_modules = sum(1 for _ in m.modules())
    assert n_modules > 5000
    tree = ModelTree.from_model(m)
    assert len(tree) == n_modules
    assert tree.total_params == sum(p.numel() for p in m.parameters())
    assert tree["169.9.0"].type_name == "Linear" and tree["169.9"].row == 9
