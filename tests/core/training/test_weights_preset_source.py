"""The engine and the exporter ask the model's source for its weights preset (ModelSpec.weights_preset):
a ``timm:`` model whose weights name reads like a torchvision one gets no torchvision transforms or crop
size in the run, as in its exported script; both take the image size from run_image_size. Nothing is
built with weights, nothing downloads."""

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
from workbench.core.training.setup import BuiltModel, build_dataset, run_image_size


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
    assert built.weights_preset() is None and run_image_size(None, built.spec, built.model) == 224


def test_a_hugging_face_vit_runs_and_exports_at_its_configs_image_size(tmp_path: Path) -> None:
    # a ViT's position embeddings are sized for config.image_size: the run and its script both feed 32 px
    pytest.importorskip("transformers")
    from transformers import ViTConfig, ViTForImageClassification

    from tests.core.models.hf_fixtures import save_folder

    config = ViTConfig(image_size=32, patch_size=8, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                       intermediate_size=16, architectures=["ViTForImageClassification"])
    config.num_labels = 3
    model = ViTForImageClassification(config)
    spec = ModelSpec(source="hf", name=str(save_folder(model, tmp_path / "vit", weights="none")))
    run = TrainConfig(model=spec.to_dict(), data="synthetic:4", steps=2)
    dataset, size = build_dataset(run, BuiltModel(model, spec.name, spec=spec))
    assert size == run_image_size(None, spec, model) == 32 and tuple(dataset[0][0].shape) == (3, 32, 32)
    script = render_script(FreezePlan(), spec, config=run, model=model)
    assert re.findall(r"^IMAGE_SIZE = (\d+)", script, re.MULTILINE) == ["32"]
    assert run_image_size(48, spec, model) == 48  # the run's own size first


def test_a_built_model_keeps_its_spec() -> None:
    pytest.importorskip("timm")
    from workbench.core.training.setup import build_model

    built = build_model(TrainConfig(model={"source": "timm", "name": "test_vit"}), FreezePlan())  # random init
    assert built.spec is not None and (built.spec.source, built.spec.name) == ("timm", "test_vit")
    assert built.weights_preset() is None and run_image_size(None, built.spec, built.model) == 160  # its pretrained_cfg



def test_a_checkpoint_without_a_name_runs_and_exports_at_its_architectures_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the file names squeezenet1_1, given 299 px here: the run and its script ask run_image_size with that name
    import dataclasses

    from torchvision.models import squeezenet1_1

    from workbench.core.models.checkpoints import save_checkpoint
    from workbench.core.models.sources import SOURCES
    from workbench.core.training.setup import build_model

    row = SOURCES["torchvision"]
    monkeypatch.setitem(SOURCES, "torchvision", dataclasses.replace(row, input_size=lambda n: 299 if n == "squeezenet1_1"
                                                                     else row.input_size(n)))  # type: ignore[misc]
    path = save_checkpoint(squeezenet1_1(num_classes=3), tmp_path / "net.pt", arch="squeezenet1_1")
    config = TrainConfig(checkpoint=str(path), data="synthetic:4", steps=2)
    built = build_model(config, FreezePlan())
    assert built.spec is not None and built.spec.name is None and built.name == "squeezenet1_1"
    assert build_dataset(config, built)[1] == 299
    script = render_script(FreezePlan(), built.spec, config=config)
    assert re.findall(r"^IMAGE_SIZE = (\d+)", script, re.MULTILINE) == ["299"]


def test_a_checkpoint_spec_without_a_name_builds_with_the_files_architecture_and_the_specs_head(
    tmp_path: Path,
) -> None:
    from torchvision.models import squeezenet1_1

    from workbench.core.models.checkpoints import save_checkpoint
    from workbench.core.training.setup import build_model

    path = save_checkpoint(squeezenet1_1(num_classes=3), tmp_path / "net.pt", arch="squeezenet1_1")
    spec = ModelSpec(source="checkpoint", checkpoint=str(path), num_classes=5)
    model, arch = spec.build_named()
    assert spec.name is None and arch == "squeezenet1_1"
    assert model.classifier[1].out_channels == 5  # the spec's head, as build() fits it
    assert spec.build().classifier[1].out_channels == 5
    built = build_model(TrainConfig(model=spec.to_dict(), data="synthetic:4", steps=2), FreezePlan())
    assert built.name == "squeezenet1_1"  # the head is fitted later, from spec_classes
