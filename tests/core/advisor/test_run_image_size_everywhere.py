"""One answer to "what image size will the run use": ``advise``, ``doctor`` and the run all ask
:func:`~workbench.core.training.setup.run_image_size`. A Hugging Face ViT built for 48-px images (its
``config.image_size``) is advised and watched at 48 px, as it trains; a torchvision model's weights preset
(vit_b_16's SWAG end-to-end weights crop 384 px) says the side of a run that names those weights. Nothing
downloads: the ViT is built from its config, the torchvision models on the meta device."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.core.advisor.vit_fixtures import vit_folder
from workbench.cli import main
from workbench.core.models.spec import ModelSpec
from workbench.core.training.setup import run_image_size


@pytest.fixture
def vit48(tmp_path: Path) -> Path:
    """A config-only Hugging Face ViT folder whose position embeddings are sized for 48-px images."""
    pytest.importorskip("transformers")
    return vit_folder(tmp_path / "vit48", 48)


def test_advise_predicts_for_the_side_the_run_takes(capsys: pytest.CaptureFixture[str], vit48: Path) -> None:
    rc = main(["advise", f"hf:{vit48}", "--memory", "1GB", "--batch-size", "2", "--device", "cpu", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    spec = ModelSpec(source="hf", name=str(vit48))
    side = run_image_size(None, spec, spec.build(meta=True))
    assert side == 48 and json.loads(out)["input_shape"] == [2, 3, side, side]


def test_doctor_watches_at_the_side_the_run_takes(capsys: pytest.CaptureFixture[str], vit48: Path) -> None:
    rc = main(["doctor", "--model", f"hf:{vit48}", "--steps", "1", "--batch-size", "2", "--device", "cpu", "--json"])
    out, err = capsys.readouterr()
    assert rc in (0, 1), err
    assert json.loads(out)["watch"] is not None  # the step ran: 48-px images fit the model's position embeddings


@pytest.mark.parametrize(("name", "weights", "side"), [
    ("inception_v3", None, 299),  # the architecture's default weights' crop
    ("vit_b_16", "IMAGENET1K_SWAG_E2E_V1", 384),  # the named weights' crop, not the default's 224
    ("vit_b_16", "IMAGENET1K_SWAG_LINEAR_V1", 224),
])
def test_a_torchvision_side_follows_the_weights_the_spec_names(name: str, weights: str | None, side: int) -> None:
    spec = ModelSpec(name=name, weights=weights)
    assert run_image_size(None, spec, spec.build(meta=True)) == side


def test_doctor_watches_a_nameless_checkpoint_at_its_architectures_side(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dataclasses

    from torchvision.models import squeezenet1_1

    from workbench.core.models.checkpoints import save_checkpoint
    from workbench.core.models.sources import SOURCES
    from workbench.core.training import data_sources

    row = SOURCES["torchvision"]
    monkeypatch.setitem(SOURCES, "torchvision", dataclasses.replace(row, input_size=lambda n: 40 if n == "squeezenet1_1"
                                                                     else row.input_size(n)))  # type: ignore[misc]
    path = save_checkpoint(squeezenet1_1(num_classes=3), tmp_path / "net.pt", arch="squeezenet1_1")  # named in the file only
    sides: list[int] = []
    make = data_sources.make_dataset

    def recording(*args: object, **kwargs: object) -> object:
        sides.append(kwargs["image_size"])  # type: ignore[arg-type]
        return make(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(data_sources, "make_dataset", recording)
    rc = main(["doctor", "--checkpoint", str(path), "--steps", "1", "--batch-size", "2", "--device", "cpu", "--json"])
    out, err = capsys.readouterr()
    assert rc in (0, 1), err
    assert sides == [40] and json.loads(out)["watch"] is not None  # the side a run of squeezenet1_1 takes, not 224
