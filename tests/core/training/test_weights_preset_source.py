"""The engine and the exporter ask the model's source for its weights preset (ModelSpec.weights_preset):
a ``timm:`` model whose weights name reads like a torchvision one gets no torchvision transforms or crop
size in the run, as in its exported script. Nothing is built with weights, nothing downloads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from PIL import Image
from torch import nn

from workbench.core.export import render_script
from workbench.core.models.spec import ModelSpec
from workbench.core.plan.rules import FreezePlan
from workbench.core.training.config import TrainConfig
from workbench.core.training.setup import BuiltModel, build_dataset


def _net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2))


@pytest.fixture
def pictures(tmp_path: Path) -> Path:
    """An image folder: two classes of one 8-px picture each."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        Image.new("RGB", (8, 8), (40, 80, 120)).save(tmp_path / name / "0.png")
    return tmp_path


# inception_v3: torchvision's preset crops 299 px; no timm weights are torchvision's
@pytest.mark.parametrize(("source", "side"), [("timm", 224), ("torchvision", 299)])
def test_the_run_and_its_script_take_the_sources_preset(source: str, side: int, pictures: Path) -> None:
    spec = ModelSpec.from_dict({"source": source, "name": "inception_v3", "weights": "DEFAULT"})
    built = BuiltModel(_net(), spec.name, spec.weights, spec=spec)
    assert (built.weights_preset() is None) == (source == "timm")
    assert built.weights_preset() == spec.weights_preset()
    config = TrainConfig(model=spec.to_dict(), data=f"imagefolder:{pictures}", steps=2)
    dataset, size = build_dataset(config, built)
    assert size == side and tuple(dataset[0][0].shape) == (3, side, side)  # the transforms of that preset
    script = render_script(FreezePlan(), spec, config=config, model=_net())
    assert re.search(rf"^IMAGE_SIZE = {side}$", script, re.MULTILINE)
    assert ("No pretrained weights' preset" in script) == (source == "timm")


def test_a_model_handed_in_has_no_preset() -> None:
    built = BuiltModel(_net(), provided=True)
    assert built.weights_preset() is None and built.input_size() is None


def test_a_built_model_keeps_its_spec() -> None:
    pytest.importorskip("timm")
    from workbench.core.training.setup import build_model

    built = build_model(TrainConfig(model={"source": "timm", "name": "test_vit"}), FreezePlan())  # random init
    assert built.spec is not None and (built.spec.source, built.spec.name) == ("timm", "test_vit")
    assert built.weights_preset() is None and built.input_size() is None
