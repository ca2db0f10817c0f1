"""Tests of workbench.core.training.data: synthetic data, ImageFolder, local torchvision sets, loaders."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image
from torch.utils.data import Subset

from workbench.core.training.data import (
    DataError,
    SyntheticImageDataset,
    dataset_num_classes,
    default_transform,
    make_loader,
)
from workbench.core.training.data_sources import make_dataset

# ---------------------------------------------------------------------------- synthetic


def test_synthetic_is_deterministic_and_shaped() -> None:
    ds = SyntheticImageDataset(16, 32, 4, seed=3)
    again = SyntheticImageDataset(16, 32, 4, seed=3)
    image, label = ds[5]
    assert image.shape == (3, 32, 32) and image.dtype == torch.float32
    assert isinstance(label, int) and 0 <= label < 4
    image2, label2 = again[5]
    assert torch.equal(image, image2) and label == label2
    assert torch.equal(ds[5][0], image)  # same index, same tensor, on every call
    assert not torch.equal(ds[6][0], image)
    other_seed = SyntheticImageDataset(16, 32, 4, seed=4)
    assert not torch.equal(other_seed[5][0], image)
    assert torch.equal(ds[-1][0], ds[15][0])
    with pytest.raises(IndexError):
        ds[16]
    assert len(ds) == 16
    assert dataset_num_classes(ds) == 4


def test_synthetic_uses_the_documented_generator_seed() -> None:
    ds = SyntheticImageDataset(8, 8, 5, seed=2)
    gen = torch.Generator().manual_seed(2 * 1_000_003 + 7)
    assert ds[7][1] == int(torch.randint(5, (1,), generator=gen))


def test_synthetic_channels_and_rectangular_size() -> None:
    ds = SyntheticImageDataset(4, (8, 12), 2, channels=1)
    assert ds[0][0].shape == (1, 8, 12)
    with pytest.raises(DataError, match="num_classes"):
        SyntheticImageDataset(4, 8, 0)


def test_synthetic_is_learnable() -> None:
    """Class means differ far more than the noise of a mean over many pixels."""
    ds = SyntheticImageDataset(64, 16, 2, seed=0)
    by_class: dict[int, list[torch.Tensor]] = {0: [], 1: []}
    for image, label in (ds[i] for i in range(len(ds))):
        by_class[label].append(image)
    assert by_class[0] and by_class[1]
    mean0 = torch.stack(by_class[0]).mean(0)
    mean1 = torch.stack(by_class[1]).mean(0)
    assert (mean0 - mean1).abs().mean() > 0.5


def test_make_dataset_synthetic_specs() -> None:
    ds = make_dataset("synthetic", image_size=16, num_classes=3)
    assert isinstance(ds, SyntheticImageDataset) and len(ds) == 1024
    assert ds[0][0].shape == (3, 16, 16)
    ds = make_dataset("synthetic:40", image_size=8, num_classes=3, seed=1)
    assert len(ds) == 40
    assert len(make_dataset("synthetic", image_size=8, num_classes=3, length=10)) == 10
    val = make_dataset("synthetic:40", image_size=8, num_classes=3, seed=1, train=False)
    assert not torch.equal(val[0][0], ds[0][0])  # other samples for validation
    gray = make_dataset("synthetic:4", image_size=8, num_classes=3, channels=1)
    assert gray[0][0].shape == (1, 8, 8)
    for bad in ("synthetic:abc", "synthetic:0"):
        with pytest.raises(DataError, match="synthetic:N"):
            make_dataset(bad, image_size=8, num_classes=3)


def test_make_dataset_unknown_spec_lists_forms() -> None:
    with pytest.raises(DataError) as info:
        make_dataset("imagenet:/data", image_size=8, num_classes=3)
    message = str(info.value)
    assert "imagenet:/data" in message
    for form in ("synthetic:N", "imagefolder:PATH", "cifar10:PATH", "mnist:PATH"):
        assert form in message
    with pytest.raises(DataError, match="needs a folder"):
        make_dataset("cifar10", image_size=8, num_classes=3)


# ---------------------------------------------------------------------------- image folders


def _write_images(root: Path, classes: dict[str, int], size: int = 10) -> None:
    for index, (name, count) in enumerate(classes.items()):
        folder = root / name
        folder.mkdir(parents=True)
        for i in range(count):
            color = (40 * index, 10 * i, 200)
            Image.new("RGB", (size, size + 2), color).save(folder / f"{i}.png")


def test_imagefolder_loads_tiny_pngs(tmp_path: Path) -> None:
    _write_images(tmp_path / "imgs", {"cat": 2, "dog": 3})
    ds = make_dataset(f"imagefolder:{tmp_path / 'imgs'}", image_size=8, num_classes=99)
    assert len(ds) == 5
    assert dataset_num_classes(ds) == 2
    image, label = ds[0]
    assert image.shape == (3, 8, 8) and image.dtype == torch.float32
    assert label == 0
    assert ds[4][1] == 1
    gray = make_dataset(f"imagefolder:{tmp_path / 'imgs'}", image_size=8, num_classes=2, channels=1)
    assert gray[0][0].shape == (1, 8, 8)
    subset = make_dataset(f"imagefolder:{tmp_path / 'imgs'}", image_size=8, num_classes=2, length=3)
    assert isinstance(subset, Subset) and len(subset) == 3
    assert dataset_num_classes(subset) == 2


def test_imagefolder_train_val_subfolders(tmp_path: Path) -> None:
    _write_images(tmp_path / "d" / "train", {"a": 2, "b": 2, "c": 1})
    _write_images(tmp_path / "d" / "val", {"a": 1, "b": 1, "c": 1})
    train = make_dataset(f"imagefolder:{tmp_path / 'd'}", image_size=8, num_classes=3)
    val = make_dataset(f"imagefolder:{tmp_path / 'd'}", image_size=8, num_classes=3, train=False)
    assert len(train) == 5 and len(val) == 3


def test_imagefolder_missing_or_empty_folder(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(DataError) as info:
        make_dataset(f"imagefolder:{missing}", image_size=8, num_classes=2)
    assert "does not exist" in str(info.value)
    assert f"{missing}/<class>/<image>.jpg" in str(info.value)

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError) as info:
        make_dataset(f"imagefolder:{empty}", image_size=8, num_classes=2)
    assert f"{empty}/<class>/<image>.jpg" in str(info.value)

    (empty / "cls").mkdir()
    (empty / "cls" / "notes.txt").write_text("no images here")
    with pytest.raises(DataError, match="no images"):
        make_dataset(f"imagefolder:{empty}", image_size=8, num_classes=2)


# ---------------------------------------------------------------------------- torchvision sets


def test_cifar10_missing_files_names_layout_and_no_download(tmp_path: Path) -> None:
    with pytest.raises(DataError) as info:
        make_dataset(f"cifar10:{tmp_path}", image_size=32, num_classes=10)
    message = str(info.value)
    assert f"{tmp_path}/cifar-10-batches-py/" in message
    assert "Downloading is not done" in message
    assert not (tmp_path / "cifar-10-batches-py").exists()  # really nothing downloaded


@pytest.mark.parametrize(
    ("kind", "layout"),
    [
        ("mnist", "MNIST/raw/"),
        ("fashionmnist", "FashionMNIST/raw/"),
        ("cifar100", "cifar-100-python/"),
        ("stl10", "stl10_binary/"),
        ("svhn", "train_32x32.mat"),
    ],
)
def test_other_torchvision_sets_missing_files(tmp_path: Path, kind: str, layout: str) -> None:
    with pytest.raises(DataError) as info:
        make_dataset(f"{kind}:{tmp_path}", image_size=32, num_classes=10)
    assert f"{tmp_path}/{layout}" in str(info.value)


def test_torchvision_set_missing_root(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="does not exist"):
        make_dataset(f"cifar10:{tmp_path / 'missing'}", image_size=32, num_classes=10)


# ---------------------------------------------------------------------------- transforms, loaders


def test_default_transform_resizes_and_normalizes() -> None:
    tf = default_transform(8)
    out = tf(Image.new("RGB", (20, 30), (255, 255, 255)))
    assert out.shape == (3, 8, 8)
    assert torch.allclose(out[0], torch.full((8, 8), (1 - 0.485) / 0.229), atol=1e-4)
    marker = object()
    assert default_transform(8, marker) is marker  # type: ignore[arg-type]
    with pytest.raises(DataError):
        default_transform(0)


def test_make_loader_is_seeded_and_drops_last() -> None:
    ds = SyntheticImageDataset(10, 4, 3)
    first = [labels.tolist() for _, labels in make_loader(ds, 4, seed=5)]
    second = [labels.tolist() for _, labels in make_loader(ds, 4, seed=5)]
    assert first == second and len(first) == 2  # 10 // 4 with drop_last
    images, _ = next(iter(make_loader(ds, 4, shuffle=False)))
    assert images.shape == (4, 3, 4, 4)
    assert torch.equal(images[0], ds[0][0])
    assert len(make_loader(ds, 4, drop_last=False)) == 3
    with pytest.raises(DataError, match="batch_size"):
        make_loader(ds, 32)
    with pytest.raises(DataError, match="batch_size"):
        make_loader(ds, 0)


def test_make_loader_with_sampler_and_workers() -> None:
    ds = SyntheticImageDataset(8, 4, 2)
    sampler = torch.utils.data.SequentialSampler(ds)
    loader = make_loader(ds, 4, sampler=sampler)
    assert loader.sampler is sampler
    loader = make_loader(ds, 4, num_workers=1)
    assert loader.persistent_workers is True
    assert make_loader(ds, 4).persistent_workers is False


def test_dataset_num_classes_unknown() -> None:
    assert dataset_num_classes(torch.utils.data.TensorDataset(torch.zeros(2))) is None
