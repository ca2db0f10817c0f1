"""Batches the frozen-prefix cache serves load their labels only: same losses, no image decoded."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
import torchvision
from PIL import Image
from torch.utils.data import Subset, TensorDataset
from torchvision import transforms
from torchvision.datasets import ImageFolder

from workbench.core.training.cache_inputs import LabelOnly, LabelOnlyInputs, reads_labels_alone, sample_label
from workbench.core.training.config import TrainConfig
from workbench.core.training.data import SyntheticImageDataset
from workbench.core.training.engine import Trainer

HEAD = {"format": "freeze-plan", "version": 1, "rules": [{"select": "*", "frozen": True}, {"select": "fc", "frozen": False}]}


class _Counting:
    """An image loader that counts the files it decodes (one process)."""

    def __init__(self) -> None:
        self.loads = 0

    def __call__(self, path: str) -> Image.Image:
        self.loads += 1
        with open(path, "rb") as f:
            return Image.open(f).convert("RGB")


def _folder(root: Path, per_class: int = 8) -> Path:
    for label in ("cat", "dog"):
        (root / label).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            Image.effect_noise((20, 20), 64).convert("RGB").save(root / label / f"{i}.png")
    return root


def _images(root: Path, loader: _Counting | None = None) -> ImageFolder:
    t = transforms.Compose([transforms.Resize(16), transforms.CenterCrop(16), transforms.ToTensor()])
    return ImageFolder(str(root), transform=t, **({"loader": loader} if loader is not None else {}))


def _run(dataset: Any, mode: str, steps: int = 12, **kw: Any) -> tuple[Trainer, list[float]]:
    torch.manual_seed(0)
    cfg = TrainConfig(plan=kw.pop("plan", HEAD), cache_frozen=mode, batch_size=4, steps=steps, device="cpu", seed=0,
                      num_classes=2, **kw)
    t = Trainer(cfg, model=torchvision.models.resnet18(num_classes=2), dataset=dataset)
    losses = [m.loss for m in t.steps()]
    assert t.result is not None and t.result.ok, t.result and t.result.message
    return t, losses


def _same(a: list[float], b: list[float]) -> None:
    assert len(a) == len(b) and all(math.isclose(x, y, rel_tol=1e-5, abs_tol=1e-6) for x, y in zip(a, b)), (a, b)


def test_served_batches_decode_no_image_and_train_the_same(tmp_path: Path) -> None:
    root = _folder(tmp_path / "imgs")
    off_loader, on_loader = _Counting(), _Counting()
    _t, off = _run(_images(root, off_loader), "off")
    t, on = _run(_images(root, on_loader), "on")
    _same(off, on)
    # three epochs of 16 images uncached; cached, the last two decode nothing but the one
    # image that gives the placeholder its shape (both runs read one more sample at setup)
    assert off_loader.loads >= 48 and off_loader.loads - on_loader.loads == 32 - 1
    stats = t.result.summary["frozen_cache"]
    assert stats["hits"] == 8 and stats["inputs_skipped"] == 8 and stats["reloads"] == 0


@pytest.mark.parametrize("channels_last", [False, True])
def test_a_batch_fetched_as_labels_gets_its_inputs_when_a_plan_change_drops_the_rows(tmp_path: Path,
                                                                                     channels_last: bool) -> None:
    root = _folder(tmp_path / "imgs")
    plan = {**HEAD, "stages": [{"at_step": 6, "rules": [{"select": "layer4", "frozen": False}]}]}
    _t, off = _run(_images(root), "off", plan=plan, channels_last=channels_last)
    t, on = _run(_images(root), "on", plan=plan, channels_last=channels_last)
    _same(off, on)  # step 6's batch was fetched as labels, then the stage dropped the rows
    stats = t.result.summary["frozen_cache"]
    assert stats["reloads"] == 1 and stats["invalidations"] == 1 and stats["inputs_skipped"] == 2


def test_loader_workers_answer_label_only_indices(tmp_path: Path) -> None:
    root = _folder(tmp_path / "imgs")
    _t, off = _run(_images(root), "off", num_workers=2)
    t, on = _run(_images(root), "on", num_workers=2)
    _same(off, on)
    assert t.result.summary["frozen_cache"]["inputs_skipped"] == 8


def test_data_without_labels_alone_loads_every_batch_as_before() -> None:
    data = TensorDataset(torch.randn(16, 3, 16, 16), torch.randint(0, 2, (16,)))
    assert not reads_labels_alone(data)
    t, _ = _run(data, "on")
    stats = t.result.summary["frozen_cache"]
    assert stats["hits"] == 8 and stats["inputs_skipped"] == 0


def test_labels_read_alone_equal_the_samples_labels(tmp_path: Path) -> None:
    synthetic = SyntheticImageDataset(40, 8, num_classes=7, seed=3, index_offset=5)
    assert [synthetic.label(i) for i in range(40)] == [synthetic[i][1] for i in range(40)]
    assert synthetic.label(-1) == synthetic[39][1]
    with pytest.raises(IndexError):
        synthetic.label(40)
    folder = _images(_folder(tmp_path / "imgs", per_class=3))
    folder.target_transform = lambda t: 10 + t
    sub = Subset(Subset(folder, [5, 4, 0]), [2, 0])
    assert reads_labels_alone(sub) and [sample_label(sub, i) for i in range(2)] == [sub[0][1], sub[1][1]] == [10, 11]
    with pytest.raises(TypeError, match="TensorDataset"):
        sample_label(TensorDataset(torch.zeros(2)), 0)


def test_label_only_inputs_answer_with_a_zero_placeholder() -> None:
    data = SyntheticImageDataset(6, 8, num_classes=3)
    wrapped = LabelOnlyInputs(data)
    assert len(wrapped) == 6 and torch.equal(wrapped[2][0], data[2][0])  # a plain index: the sample
    x, y = wrapped[LabelOnly(4)]
    assert y == data[4][1] and x.shape == data[4][0].shape and not x.any()
    not_tensors = LabelOnlyInputs(Subset(SyntheticImageDataset(2, 8, transform=lambda t: t.tolist()), [0, 1]))
    with pytest.raises(TypeError, match="tensor inputs"):
        not_tensors[LabelOnly(0)]


def test_the_cache_line_says_how_many_steps_loaded_no_inputs() -> None:
    from workbench.core.training.frozen_cache import cache_line

    stats = {"cut": "fc", "rows": 32, "bytes_memory": 65536, "bytes_disk": 0, "hits": 8, "misses": 4,
             "hit_rate": 8 / 12, "invalidations": 1, "inputs_skipped": 7, "reloads": 1}
    assert cache_line(stats) == ("input of 'fc', 32 samples, 66 kB in memory + 0 B on disk, hit rate 67% (8 of 12 steps), "
                                 "inputs of 7 steps not loaded, 1 loaded late after a plan change")
    # a run folder from before these counts, or hand-edited junk: what cannot be read counts as 0
    assert cache_line({"cut": "fc", "rows": "many", "hit_rate": None, "inputs_skipped": True}) == (
        "input of 'fc', 0 samples, 0 B in memory + 0 B on disk, hit rate – (0 of 0 steps)")
