"""Datasets for the workbench: synthetic (the default), ImageFolder, local torchvision sets.

Nothing here downloads anything: torchvision datasets are opened with ``download=False``
and a missing dataset is a :class:`DataError` that names the folder layout expected.

Spec strings accepted by :func:`workbench.core.training.data_sources.make_dataset` (one row
of its table each)::

    synthetic                 1024 generated images (no files); for text models,
                              :func:`synthetic_for_model` gives token ids instead
    synthetic:N               N generated images
    imagefolder:PATH          PATH/<class>/<image>.jpg  (or PATH/train/<class>/..., PATH/val/...)
    cifar10:PATH  cifar100:PATH  mnist:PATH  fashionmnist:PATH  svhn:PATH  stl10:PATH
    text:PATH.jsonl           {"text": ..., "label": ...} per line, tokenized with the tokenizer of
                              the Hugging Face model's folder (text models only)
    hf-dataset:PATH           a folder written by datasets' save_to_disk (text, image or array
                              columns; see :mod:`workbench.core.training.hf_dataset`)
    py:FILE.py:FUNC           your own (input, target) dataset, or a (train, val) pair: runs
                              that code (see :mod:`workbench.core.training.user_data`)

Text models: :func:`synthetic_for_model` (token ids within the model's vocabulary), and
``text:PATH.jsonl`` (:mod:`workbench.core.training.text_jsonl`).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Sized
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, Sampler, Subset

from workbench.core.training.data_common import TEXT_TASKS, DataError
from workbench.core.training.text_jsonl import TEXT_FILE_SEQ_LEN, open_text_dataset, tokenizer_folder

__all__ = [
    "run_seq_len",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "SYNTHETIC_DEFAULT_CLASSES",
    "SYNTHETIC_DEFAULT_LENGTH",
    "DataError",
    "SyntheticImageDataset",
    "SyntheticTensorDataset",
    "SyntheticTextDataset",
    "dataset_num_classes",
    "stop_loader_workers",
    "capped_seq_len",
    "dataset_seq_len",
    "default_transform",
    "make_loader",
    "model_positions",
    "synthetic_for_model",
    "text_task_of",
]

IMAGENET_MEAN: tuple[float, float, float] = (0.485, 0.456, 0.406)
IMAGENET_STD: tuple[float, float, float] = (0.229, 0.224, 0.225)

#: Default number of samples of ``synthetic``.
SYNTHETIC_DEFAULT_LENGTH = 1024
#: Classes of ``synthetic`` when the run names no class count (learnable in a few dozen steps).
SYNTHETIC_DEFAULT_CLASSES = 10
#: Offset added to sample indices of the validation split of ``synthetic`` so that its
#: images differ from the training ones (same class patterns, other noise).
_VAL_INDEX_OFFSET = 1 << 30
_PATTERN_CELLS = 8

_SPEC_FORMS = (
    "synthetic, synthetic:N, imagefolder:PATH, cifar10:PATH, cifar100:PATH, mnist:PATH, "
    "fashionmnist:PATH, svhn:PATH, stl10:PATH, text:PATH.jsonl, hf-dataset:PATH, py:FILE.py:FUNC"
)




# --------------------------------------------------------------------------------------
# synthetic data
# --------------------------------------------------------------------------------------


class SyntheticImageDataset(Dataset[tuple[torch.Tensor, int]]):
    """Deterministic generated images with a learnable class signal; no files.

    Sample ``i`` is produced from a ``torch.Generator`` seeded with
    ``seed * 1_000_003 + index_offset + i``: its label is drawn uniformly, and its image is
    ``signal * pattern[label] + noise * N(0, 1)`` where ``pattern[c]`` is a fixed, smooth,
    class-specific image (a random 8x8 grid per channel, upsampled). A model can therefore
    learn it, so loss curves go down in demos and benchmarks.

    Args:
        length: Number of samples.
        image_size: Side of the square image, or ``(height, width)``.
        num_classes: Number of classes (labels are ``0..num_classes-1``).
        channels: Image channels (3 for RGB-like, 1 for MNIST-like).
        seed: Seed of the class patterns and of the samples.
        signal: Amplitude of the class pattern.
        noise: Standard deviation of the per-sample noise.
        index_offset: Added to the index when seeding a sample (a validation split uses
            another offset to get different samples of the same classes).
        transform: Optional callable applied to the image tensor.

    Raises:
        DataError: Non-positive sizes.
    """

    def __init__(
        self,
        length: int = SYNTHETIC_DEFAULT_LENGTH,
        image_size: int | tuple[int, int] = 224,
        num_classes: int = 10,
        *,
        channels: int = 3,
        seed: int = 0,
        signal: float = 1.0,
        noise: float = 1.0,
        index_offset: int = 0,
        transform: Callable[[torch.Tensor], Any] | None = None,
    ) -> None:
        height, width = (image_size, image_size) if isinstance(image_size, int) else image_size
        for label, value in (
            ("length", length),
            ("image_size", min(height, width)),
            ("num_classes", num_classes),
            ("channels", channels),
        ):
            if not isinstance(value, int) or value < 1:
                raise DataError(
                    f"synthetic dataset: {label} must be a positive integer, got {value!r}"
                )
        self.length = length
        self.image_size = (height, width)
        self.num_classes = num_classes
        self.channels = channels
        self.seed = seed
        self.signal = signal
        self.noise = noise
        self.index_offset = index_offset
        self.transform = transform
        self.classes = [f"class_{i}" for i in range(num_classes)]
        gen = torch.Generator().manual_seed(seed)
        # Small per-class grids; upsampled per sample so memory stays tiny for many classes.
        self._patterns = torch.randn(
            num_classes, channels, _PATTERN_CELLS, _PATTERN_CELLS, generator=gen
        )

    def __len__(self) -> int:
        return self.length

    def _generator(self, index: int) -> torch.Generator:
        """Sample ``index``'s generator: its label is the first draw, its noise the next."""
        if index < 0:
            index += self.length
        if not 0 <= index < self.length:
            raise IndexError(f"index {index} out of range for {self.length} synthetic samples")
        return torch.Generator().manual_seed(self.seed * 1_000_003 + self.index_offset + index)

    def _label(self, gen: torch.Generator) -> int:
        return int(torch.randint(self.num_classes, (1,), generator=gen))

    def label(self, index: int) -> int:
        """Sample ``index``'s label, without making its image.

        Args:
            index: the sample.

        Returns:
            The label ``self[index][1]`` has.

        Raises:
            IndexError: no such sample.
        """
        return self._label(self._generator(index))

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        gen = self._generator(index)
        label = self._label(gen)
        pattern = F.interpolate(
            self._patterns[label : label + 1], size=self.image_size, mode="nearest"
        )[0]
        image = self.signal * pattern + self.noise * torch.randn(
            self.channels, *self.image_size, generator=gen
        )
        if self.transform is not None:
            image = self.transform(image)
        return image, label

    def __repr__(self) -> str:
        return (
            f"SyntheticImageDataset(length={self.length}, image_size={self.image_size}, "
            f"num_classes={self.num_classes}, channels={self.channels}, seed={self.seed})"
        )


class SyntheticTensorDataset(Dataset[tuple[torch.Tensor, int]]):
    """Deterministic generated tensors of any per-sample shape (audio frames, features), with a
    learnable class signal: ``signal * pattern[label] + noise * N(0, 1)``; no files.

    Args:
        length: Number of samples.
        shape: One sample's shape, e.g. ``(1024,)``.
        num_classes: Number of classes.
        seed: Seed of the patterns and samples.
        signal: Amplitude of the class pattern.
        noise: Standard deviation of the noise.
        index_offset: Added to the index when seeding a sample (another split).

    Raises:
        DataError: Non-positive sizes.
    """

    def __init__(self, length: int, shape: tuple[int, ...], num_classes: int = 10, *, seed: int = 0,
                 signal: float = 1.0, noise: float = 1.0, index_offset: int = 0) -> None:
        if not isinstance(length, int) or length < 1 or not isinstance(num_classes, int) or num_classes < 1:
            raise DataError(f"synthetic dataset: length and num_classes must be positive integers, got {length!r}, {num_classes!r}")
        if not shape or not all(isinstance(d, int) and d > 0 for d in shape):
            raise DataError(f"synthetic dataset: the input shape must be positive integers, got {shape!r}")
        self.length, self.shape, self.num_classes = length, tuple(shape), num_classes
        self.seed, self.signal, self.noise, self.index_offset = seed, signal, noise, index_offset
        self.classes = [f"class_{i}" for i in range(num_classes)]
        self.transform = None  # no transform: the same index gives the same sample
        self._seed = seed

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if index < 0:
            index += self.length
        if not 0 <= index < self.length:
            raise IndexError(f"index {index} out of range for {self.length} synthetic samples")
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.index_offset + index)
        label = int(torch.randint(self.num_classes, (1,), generator=gen))
        pattern = torch.randn(self.shape, generator=torch.Generator().manual_seed(self._seed * 7919 + label))
        return self.signal * pattern + self.noise * torch.randn(self.shape, generator=gen), label

    def __repr__(self) -> str:
        return f"SyntheticTensorDataset(length={self.length}, shape={self.shape}, num_classes={self.num_classes})"


#: Default sequence length of synthetic text.
SYNTHETIC_SEQ_LEN = 32


class SyntheticTextDataset(Dataset[dict[str, torch.Tensor]]):
    """Deterministic token sequences with a learnable signal, for text models; no files.

    Each sample is a dict ``{"input_ids", "attention_mask", "labels"}`` of token ids within
    ``vocab_size``:

    * ``classification``: the label is drawn uniformly; ``signal`` of the tokens come from
      the label's own band of the vocabulary (``id % num_classes == label``), the rest are
      uniform, so the class can be read from the tokens. ``labels`` is the class id.
    * ``causal_lm``: each token follows from the previous one by a fixed rule
      (``next = (prev * 31 + 7) % vocab``), replaced by a uniform token with probability
      ``1 - signal``; ``labels`` are the ``input_ids`` (models shift them).
    * ``masked_lm``: the same sequences; ``labels`` are the ``input_ids``.

    Args:
        length: Number of samples.
        vocab_size: Token ids are in ``0..vocab_size-1``.
        seq_len: Tokens per sample.
        task: ``"classification"``, ``"causal_lm"`` or ``"masked_lm"``.
        num_classes: Classes of ``classification``.
        seed: Seed of the samples.
        signal: Share of tokens that carry the signal (0..1).
        index_offset: Added to the index when seeding a sample (another split).

    Raises:
        DataError: Non-positive sizes, an unknown task, or fewer tokens than classes.
    """

    def __init__(
        self,
        length: int = SYNTHETIC_DEFAULT_LENGTH,
        vocab_size: int = 1000,
        seq_len: int = SYNTHETIC_SEQ_LEN,
        task: str = "classification",
        num_classes: int = 2,
        *,
        seed: int = 0,
        signal: float = 0.8,
        index_offset: int = 0,
    ) -> None:
        for label, value in (("length", length), ("vocab_size", vocab_size), ("seq_len", seq_len),
                             ("num_classes", num_classes)):
            if not isinstance(value, int) or value < 1:
                raise DataError(f"synthetic text dataset: {label} must be a positive integer, got {value!r}")
        if task not in TEXT_TASKS:
            raise DataError(f"synthetic text dataset: unknown task {task!r}; use one of {', '.join(TEXT_TASKS)}")
        if task == "classification" and vocab_size < num_classes:
            raise DataError(f"synthetic text dataset: {num_classes} classes need at least as many tokens, vocab is {vocab_size}")
        self.length = length
        self.vocab_size = vocab_size
        self.seq_len = seq_len
        self.task = task
        self.num_classes = num_classes
        self.seed = seed
        self.signal = signal
        self.index_offset = index_offset
        self.classes = [f"class_{i}" for i in range(num_classes)]

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if index < 0:
            index += self.length
        if not 0 <= index < self.length:
            raise IndexError(f"index {index} out of range for {self.length} synthetic samples")
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.index_offset + index)
        noise = torch.randint(self.vocab_size, (self.seq_len,), generator=gen)
        keep = torch.rand(self.seq_len, generator=gen) < self.signal
        if self.task == "classification":
            label = int(torch.randint(self.num_classes, (1,), generator=gen))
            band = (self.vocab_size - 1 - label) // self.num_classes + 1  # ids with id % C == label
            ids = torch.where(keep, label + self.num_classes * torch.randint(band, (self.seq_len,), generator=gen), noise)
            labels = torch.tensor(label)
        else:
            ids = noise.clone()
            for t in range(1, self.seq_len):
                if keep[t]:
                    ids[t] = (ids[t - 1] * 31 + 7) % self.vocab_size
            labels = ids.clone()
        return {"input_ids": ids, "attention_mask": torch.ones(self.seq_len, dtype=torch.long), "labels": labels}

    def __repr__(self) -> str:
        return (f"SyntheticTextDataset(length={self.length}, vocab_size={self.vocab_size}, seq_len={self.seq_len}, "
                f"task={self.task!r}, num_classes={self.num_classes}, seed={self.seed})")


def text_task_of(model: Any) -> str | None:
    """The synthetic-data task of a text model, from its class name; ``None`` for other models.

    Args:
        model: A model; text models have a ``config`` with a ``vocab_size``.

    Returns:
        ``"classification"``, ``"causal_lm"``, ``"masked_lm"``, or ``None`` (not a text model).

    Raises:
        DataError: A text model without a task head (a base model has nothing to train against).
    """
    config = getattr(model, "config", None)
    if not isinstance(getattr(config, "vocab_size", None), int):
        return None
    name = type(model).__name__
    if name.endswith("ForSequenceClassification"):
        return "classification"
    if name.endswith(("ForCausalLM", "LMHeadModel")):
        return "causal_lm"
    if name.endswith("ForMaskedLM"):
        return "masked_lm"
    raise DataError(
        f"{name} is a text model without a task head, so synthetic data has no target; "
        "open it with a head (its config's architectures: ...ForSequenceClassification, ...ForCausalLM)"
    )


def model_positions(model: Any) -> int | None:
    """The most tokens per sample a Hugging Face text model takes (its position embeddings).

    Args:
        model: any model; a ``config`` with ``max_position_embeddings`` or ``n_positions`` is read.

    Returns:
        The number of positions, or None when the model does not say.
    """
    config = getattr(model, "config", None)
    n = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def synthetic_for_model(
    model: Any,
    length: int = SYNTHETIC_DEFAULT_LENGTH,
    *,
    image_size: int | tuple[int, int] = 224,
    num_classes: int = 10,
    seq_len: int = SYNTHETIC_SEQ_LEN,
    seed: int = 0,
    index_offset: int = 0,
) -> Dataset[Any]:
    """Synthetic data that fits a model: token ids for text models, images otherwise.

    For a text model (a ``config`` with ``vocab_size``) the tokens stay within its vocabulary,
    the sequence within ``max_position_embeddings``, and the classes follow ``num_labels``.

    Args:
        model: The model to feed.
        length: Number of samples.
        image_size: Image side for vision models.
        num_classes: Classes for vision models.
        seq_len: Tokens per sample for text models.
        seed: Seed of the samples.
        index_offset: Added to sample indices (another split).

    Returns:
        A :class:`SyntheticTextDataset` or a :class:`SyntheticImageDataset`.

    Raises:
        DataError: Bad sizes, or a text model without a task head.
    """
    task = text_task_of(model)
    if task is None:
        return SyntheticImageDataset(length, image_size, num_classes, seed=seed, index_offset=index_offset)
    config = model.config
    max_len = model_positions(model)
    if max_len is not None:
        seq_len = min(seq_len, max_len)
    classes = int(getattr(config, "num_labels", 2) or 2)
    return SyntheticTextDataset(length, config.vocab_size, seq_len, task, classes, seed=seed, index_offset=index_offset)


# --------------------------------------------------------------------------------------
# transforms
# --------------------------------------------------------------------------------------


def default_transform(
    image_size: int,
    weights_transforms: Callable[[Any], torch.Tensor] | None = None,
    *,
    channels: int = 3,
) -> Callable[[Any], torch.Tensor]:
    """The evaluation-style preprocessing for PIL images.

    Args:
        image_size: Side of the square crop fed to the model.
        weights_transforms: A torchvision weights preset (``weights.transforms()``); when
            given it is returned unchanged, so data matches what the weights were trained on.
        channels: Channels of the images the transform receives (3, or 1 for grayscale:
            normalised with the mean of the ImageNet statistics).

    Returns:
        ``weights_transforms``, or Resize(image_size / 0.875) + CenterCrop(image_size) +
        ToTensor + Normalize(ImageNet mean/std, averaged for other channel counts).

    Raises:
        DataError: ``image_size`` is not a positive integer.
    """
    if weights_transforms is not None:
        return weights_transforms
    if not isinstance(image_size, int) or image_size < 1:
        raise DataError(f"image_size must be a positive integer, got {image_size!r}")
    from torchvision import transforms as T

    mean: tuple[float, ...]
    std: tuple[float, ...]
    if channels == 3:
        mean, std = IMAGENET_MEAN, IMAGENET_STD
    else:
        mean = (sum(IMAGENET_MEAN) / 3,) * channels
        std = (sum(IMAGENET_STD) / 3,) * channels
    return T.Compose(
        [
            T.Resize(max(image_size, round(image_size / 0.875))),
            T.CenterCrop(image_size),
            T.ToTensor(),
            T.Normalize(mean, std),
        ]
    )


def _with_channels(
    transform: Callable[[Any], Any], *, source_channels: int, channels: int
) -> Callable[[Any], Any]:
    """Prepend a PIL Grayscale conversion when the data's channels differ from the model's."""
    if source_channels == channels:
        return transform
    from torchvision import transforms as T

    return T.Compose([T.Grayscale(num_output_channels=channels), transform])


# --------------------------------------------------------------------------------------
# dataset specs
# --------------------------------------------------------------------------------------

_IMAGEFOLDER_TRAIN = ("train", "training")
_IMAGEFOLDER_VAL = ("val", "valid", "validation", "test")


def _imagefolder(root: Path, *, train: bool, transform: Callable[[Any], Any]) -> Dataset[Any]:
    from torchvision.datasets import ImageFolder

    layout = f"{root}/<class>/<image>.jpg (or {root}/train/<class>/... and {root}/val/<class>/...)"
    if not root.exists():
        raise DataError(f"image folder {root} does not exist; expected the layout {layout}")
    if not root.is_dir():
        raise DataError(f"image folder {root} is not a directory; expected the layout {layout}")
    names = _IMAGEFOLDER_TRAIN if train else _IMAGEFOLDER_VAL
    folder = next((root / n for n in names if (root / n).is_dir()), root)
    try:
        return ImageFolder(str(folder), transform=transform)
    except FileNotFoundError as exc:
        raise DataError(
            f"no images found in {folder}: {exc}; expected one sub-folder per class with "
            f"images inside, {layout}"
        ) from exc
    except OSError as exc:
        raise DataError(f"cannot read image folder {folder}: {exc}") from exc


# name -> (torchvision class name, uses split= instead of train=, grayscale, expected layout)
_TV_DATASETS: dict[str, tuple[str, bool, bool, str]] = {
    "cifar10": (
        "CIFAR10",
        False,
        False,
        "{root}/cifar-10-batches-py/ (data_batch_1..5, test_batch)",
    ),
    "cifar100": ("CIFAR100", False, False, "{root}/cifar-100-python/ (train, test, meta)"),
    "mnist": (
        "MNIST",
        False,
        True,
        "{root}/MNIST/raw/ (train-images-idx3-ubyte, train-labels-idx1-ubyte, "
        "t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte)",
    ),
    "fashionmnist": (
        "FashionMNIST",
        False,
        True,
        "{root}/FashionMNIST/raw/ (train-images-idx3-ubyte, train-labels-idx1-ubyte, "
        "t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte)",
    ),
    "svhn": ("SVHN", True, False, "{root}/train_32x32.mat and {root}/test_32x32.mat"),
    "stl10": (
        "STL10",
        True,
        False,
        "{root}/stl10_binary/ (train_X.bin, train_y.bin, test_X.bin, test_y.bin)",
    ),
}


def _torchvision_dataset(
    kind: str, root: Path, *, train: bool, transform: Callable[[Any], Any]
) -> Dataset[Any]:
    import torchvision.datasets as tvd

    cls_name, uses_split, _, layout = _TV_DATASETS[kind]
    expected = layout.format(root=root)
    if not root.is_dir():
        raise DataError(
            f"{kind} root {root} does not exist; expected {expected}. Downloading is not done "
            "by the workbench: fetch the dataset with torchvision (download=True) on a machine "
            "with network and copy it there"
        )
    cls = getattr(tvd, cls_name)
    kwargs: dict[str, Any] = {"transform": transform, "download": False}
    if uses_split:
        kwargs["split"] = "train" if train else "test"
    else:
        kwargs["train"] = train
    try:
        return cls(str(root), **kwargs)
    except ImportError as exc:
        raise DataError(
            f"{kind} needs an extra package ({exc}); install it, e.g. pip install scipy"
        ) from exc
    except (RuntimeError, OSError, ValueError) as exc:
        raise DataError(
            f"{kind} files not found or unreadable under {root} ({str(exc).splitlines()[0]}); "
            f"expected {expected}. Downloading is not done by the workbench: fetch the dataset "
            "with torchvision (download=True) on a machine with network and copy it there"
        ) from exc


def _text_file(spec: str, model: Any, seq_len: int | None = None) -> Dataset[Any]:
    """``text:PATH.jsonl`` for a text model: its task, its folder's tokenizer, its positions."""
    task = text_task_of(model) if model is not None else None
    if task is None:
        raise DataError(
            f"{spec!r} is text data: train a Hugging Face text model with a task head on it "
            "(--model hf:FOLDER, the folder holding its tokenizer)"
        )
    return open_text_dataset(spec, tokenizer_folder(model), seq_len=capped_seq_len(model, seq_len, TEXT_FILE_SEQ_LEN),
                             task=task)


def run_seq_len(model: Any, seq_len: int | None, data: str = "synthetic") -> int | None:
    """Tokens per sample a run on ``data`` feeds ``model`` (None: not a text model).

    Args:
        model: the model, or None.
        seq_len: the run's ``TrainConfig.seq_len`` (None: the data's default).
        data: the run's dataset spec (synthetic tokens default to :data:`SYNTHETIC_SEQ_LEN`,
            text files to ``TEXT_FILE_SEQ_LEN``).

    Returns:
        The length after the model's positions cap it, or None for an image model.
    """
    try:
        if model is None or text_task_of(model) is None:
            return None
    except DataError:
        return None
    default = SYNTHETIC_SEQ_LEN if data.strip().lower().startswith("synthetic") else TEXT_FILE_SEQ_LEN
    return capped_seq_len(model, seq_len, default)


def capped_seq_len(model: Any, seq_len: int | None, default: int) -> int:
    """Tokens per sample for ``model``: ``seq_len`` (or ``default``) capped at its position embeddings.

    Args:
        model: the text model.
        seq_len: the length asked for, or None.
        default: the length when none is asked for.

    Returns:
        The length the data is built with.
    """
    want = seq_len if seq_len is not None else default
    max_len = model_positions(model)
    return min(want, max_len) if max_len is not None and max_len > 1 else want



def _limit(dataset: Dataset[Any], length: int | None, seed: int) -> Dataset[Any]:
    if length is None:
        return dataset
    total = len(dataset)  # type: ignore[arg-type]
    if length >= total:
        return dataset
    gen = torch.Generator().manual_seed(seed)
    indices = torch.randperm(total, generator=gen)[:length].sort().values.tolist()
    return Subset(dataset, indices)


# --------------------------------------------------------------------------------------
# loaders
# --------------------------------------------------------------------------------------


def _seed_worker(worker_id: int) -> None:
    """Seed Python's and NumPy's RNGs in a worker from torch's per-worker seed."""
    worker_seed = torch.initial_seed() % 2**32
    random.seed(worker_seed)
    try:
        import numpy as np

        np.random.seed(worker_seed)
    except ImportError:  # numpy is optional here
        pass


def make_loader(
    dataset: Dataset[Any],
    batch_size: int,
    *,
    shuffle: bool = True,
    num_workers: int = 0,
    pin_memory: bool = False,
    seed: int = 0,
    sampler: Sampler[Any] | None = None,
    drop_last: bool = True,
) -> DataLoader[Any]:
    """A reproducible ``DataLoader`` (seeded shuffling and worker seeds).

    Args:
        dataset: The dataset.
        batch_size: Samples per batch.
        shuffle: Shuffle each epoch (ignored when ``sampler`` is given).
        num_workers: Worker processes; when > 0 workers are persistent across epochs.
        pin_memory: Pin batches for faster host-to-GPU copies.
        seed: Seed of the shuffling generator.
        sampler: Custom sampler (e.g. ``DistributedSampler``); disables ``shuffle``.
        drop_last: Drop the last incomplete batch (keeps step times comparable).

    Returns:
        The loader.

    Raises:
        DataError: Invalid ``batch_size``/``num_workers``, or ``drop_last`` with fewer
            samples than one batch (the loader would yield nothing).
    """
    if not isinstance(batch_size, int) or batch_size < 1:
        raise DataError(f"batch_size must be a positive integer, got {batch_size!r}")
    if not isinstance(num_workers, int) or num_workers < 0:
        raise DataError(f"num_workers must be a non-negative integer, got {num_workers!r}")
    if drop_last and isinstance(dataset, Sized) and len(dataset) < batch_size:
        raise DataError(
            f"the dataset has {len(dataset)} samples, fewer than batch_size={batch_size}, and "
            "drop_last=True would leave no batch; lower batch_size or pass drop_last=False"
        )
    generator = torch.Generator().manual_seed(seed)
    kwargs: dict[str, Any] = {}
    if num_workers > 0:
        kwargs["persistent_workers"] = True
        kwargs["worker_init_fn"] = _seed_worker
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle if sampler is None else False,
        sampler=sampler,
        num_workers=num_workers,
        pin_memory=pin_memory,
        drop_last=drop_last,
        generator=generator,
        **kwargs,
    )


def stop_loader_workers(loader: DataLoader[Any] | None, iterator: object = None) -> None:
    """End the worker processes of ``loader`` (and of ``iterator``, one of its iterators) now.

    A loader with persistent workers keeps them as long as its iterator lives. Left to the
    garbage collector (a run's trainer sits in reference cycles), the iterator is finalized
    after its queues' own finalizers have stopped their feeder threads: each worker never gets
    the message to stop and is killed after torch's 5 s join timeout, 10 s for two workers, on
    whichever thread happened to collect them (a notebook cell long after the run, say).
    Lightning ends its loaders' workers the same way when a loop ends. The loader stays usable:
    the next ``iter()`` starts new workers.

    Args:
        loader: a loader, or None.
        iterator: an iterator over it still referenced elsewhere (a run's current one), or None.

    Never raises: it is clean-up, run when a run ends however it ended.
    """
    for it in (iterator, getattr(loader, "_iterator", None)):
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None:
            with contextlib.suppress(Exception):  # clean-up: a worker already gone is not the run's failure
                shutdown()
    if loader is not None and getattr(loader, "_iterator", None) is not None:
        loader._iterator = None


_KNOWN_CLASS_COUNTS = {"SVHN": 10}


def dataset_seq_len(ds: Dataset[Any]) -> int | None:
    """Tokens per sample of a text dataset (dict samples with ``input_ids``), from its first sample.

    Args:
        ds: Any map-style dataset.

    Returns:
        The sequence length, or ``None`` for image data (or an empty dataset).
    """
    try:
        sample = ds[0]
    except (IndexError, KeyError, TypeError):
        return None
    ids = sample.get("input_ids") if isinstance(sample, dict) else None
    return int(ids.shape[-1]) if isinstance(ids, torch.Tensor) and ids.dim() else None


def dataset_num_classes(ds: Dataset[Any]) -> int | None:
    """Number of classes of a dataset, when it says so.

    Looks at ``.classes`` (torchvision datasets, ImageFolder, synthetic), then an int
    ``.num_classes``; unwraps ``Subset``.

    Args:
        ds: The dataset.

    Returns:
        The count, or ``None`` if unknown or none (language-modelling text).
    """
    while isinstance(ds, Subset):
        ds = ds.dataset
    classes = getattr(ds, "classes", None)
    if classes is not None:
        try:
            return len(classes) or None  # language-modelling text has no classes
        except TypeError:
            pass
    n = getattr(ds, "num_classes", None)
    if isinstance(n, int) and not isinstance(n, bool):
        return n or None
    return _KNOWN_CLASS_COUNTS.get(type(ds).__name__)
