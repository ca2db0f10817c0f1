"""Batches the frozen-prefix cache serves load their labels only, not their inputs.

On a cached step only the trainable suffix runs, on kept activations: the batch's images are
never looked at, yet decoding them is most of such a step (resnet18, head only, 224-px JPEG
files: 27 ms to load a batch of 16 against 1.2 ms to train it). So the loader's batch sampler
asks the cache, batch by batch, whether it will serve every sample of the batch; when it
will, the batch is fetched as :class:`LabelOnly` indices, which :class:`LabelOnlyInputs`
answers with the sample's label and a zero placeholder input of the right shape (the skipped
modules never read it). When the cache cannot serve such a batch after all (a plan change
dropped it between fetching and running the batch), the cache asks for the real inputs again
(:attr:`~workbench.core.training.frozen_cache.FrozenPrefixCache.reload`).

Only datasets whose labels can be read without their inputs take part (:func:`reads_labels_alone`:
image folders, the built-in synthetic images, subsets of them); any other loads as before.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch.utils.data import Dataset, Subset

__all__ = ["LabelOnly", "LabelOnlyInputs", "reads_labels_alone", "sample_label", "unwrap_subsets"]


class LabelOnly(NamedTuple):
    """A sample index whose label alone is wanted (its input is not loaded)."""

    sample: int


def _folder_types() -> tuple[type, ...]:
    from torchvision.datasets import DatasetFolder

    return (DatasetFolder,)


def unwrap_subsets(dataset: Dataset[Any]) -> Dataset[Any]:
    """The dataset under any ``Subset`` wrappers (a train/validation split)."""
    while isinstance(dataset, Subset):
        dataset = dataset.dataset
    return dataset


def reads_labels_alone(dataset: Dataset[Any]) -> bool:
    """Whether :func:`sample_label` can read this dataset's labels without loading inputs.

    Args:
        dataset: a training dataset.

    Returns:
        True for torchvision image folders (``DatasetFolder``, ``ImageFolder``), the built-in
        synthetic images, and subsets of either.
    """
    from workbench.core.training.data import SyntheticImageDataset

    return isinstance(unwrap_subsets(dataset), (SyntheticImageDataset, *_folder_types()))


def sample_label(dataset: Dataset[Any], index: int) -> Any:
    """Sample ``index``'s label, as ``dataset[index][1]`` gives it, without loading its input.

    Args:
        dataset: a dataset :func:`reads_labels_alone` accepts.
        index: the sample.

    Returns:
        The label (``target_transform`` applied where the dataset has one).

    Raises:
        TypeError: the dataset cannot give a label alone.
    """
    from workbench.core.training.data import SyntheticImageDataset

    while isinstance(dataset, Subset):
        index = int(dataset.indices[index])
        dataset = dataset.dataset
    if isinstance(dataset, SyntheticImageDataset):
        return dataset.label(index)
    if isinstance(dataset, _folder_types()):
        target = dataset.targets[index]  # type: ignore[attr-defined]
        transform = getattr(dataset, "target_transform", None)
        return transform(target) if transform is not None else target
    raise TypeError(f"{type(dataset).__name__} cannot give a label without its input")


class LabelOnlyInputs(Dataset[Any]):
    """A dataset that answers :class:`LabelOnly` indices with ``(placeholder, label)``.

    Any other index is passed to the wrapped dataset. The placeholder is a zero tensor shaped
    like the dataset's first input (read once per process: loader workers each read it).

    Args:
        dataset: a dataset of ``(input tensor, label)`` samples that :func:`reads_labels_alone`
            accepts.
    """

    def __init__(self, dataset: Dataset[Any]) -> None:
        self.dataset = dataset
        self._placeholder: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, key: Any) -> Any:
        if not isinstance(key, LabelOnly):
            return self.dataset[key]
        if self._placeholder is None:
            first = self.dataset[0][0]
            if not isinstance(first, torch.Tensor):
                raise TypeError(f"label-only batches need tensor inputs, the dataset gives {type(first).__name__}")
            self._placeholder = torch.zeros_like(first)
        return self._placeholder, sample_label(self.dataset, key.sample)

    def __getstate__(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "_placeholder": None}  # workers read their own
