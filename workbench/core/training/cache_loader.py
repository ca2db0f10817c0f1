"""The loader side of the frozen-prefix cache: which samples each batch holds.

:func:`index_recording_loader` rebuilds a training loader (same sampler, generator and
workers) around a batch sampler that records each batch's sample indices in an
:class:`IndexQueue`, in order, as it hands them out, so worker processes and prefetching are
fine. When the cache says it will serve a batch (:attr:`IndexQueue.serves`), the batch is
fetched as :class:`~workbench.core.training.cache_inputs.LabelOnly` indices: its labels only.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from typing import Any

from torch.utils.data import DataLoader

from workbench.core.training.cache_inputs import LabelOnly, LabelOnlyInputs

__all__ = ["IndexQueue", "index_recording_loader"]


class IndexQueue:
    """The index lists a batch sampler handed out, in order (one per batch the loader yields).

    Attributes:
        serves: set by the cache when batches it will serve may load their labels only:
            called with a batch's indices as the sampler hands them out.
    """

    def __init__(self) -> None:
        self._q: collections.deque[tuple[list[int], bool]] = collections.deque()
        self.serves: Callable[[list[int]], bool] | None = None

    def push(self, idx: list[int], label_only: bool = False) -> None:
        """Record a batch's indices (called by the sampler wrapper), and whether its inputs
        were left out."""
        self._q.append((idx, label_only))

    def pop(self) -> tuple[list[int], bool] | None:
        """The next batch's indices and whether it was fetched without its inputs, or None
        when unknown."""
        return self._q.popleft() if self._q else None

    def clear(self) -> None:
        """Forget everything (a new iterator over the loader)."""
        self._q.clear()


class _RecordingBatchSampler:
    def __init__(self, inner: Any, queue: IndexQueue) -> None:
        self.inner, self.queue = inner, queue

    def __iter__(self) -> Iterator[list[Any]]:
        self.queue.clear()
        for idx in self.inner:
            idx = [int(i) for i in idx]
            serves = self.queue.serves
            if serves is not None and serves(idx):  # the cache serves it: its labels only
                self.queue.push(idx, label_only=True)
                yield [LabelOnly(i) for i in idx]
            else:
                self.queue.push(idx)
                yield idx

    def __len__(self) -> int:
        return len(self.inner)


def index_recording_loader(loader: DataLoader[Any], *, label_only: bool = False) -> tuple[DataLoader[Any], IndexQueue]:
    """The same loader (same sampler, generator and workers) that also records sample indices.

    Args:
        loader: a map-style loader with a batch sampler.
        label_only: batches may be fetched as labels only, when the queue's ``serves`` says so
            (the dataset is wrapped in :class:`~workbench.core.training.cache_inputs.LabelOnlyInputs`).

    Returns:
        The new loader and the queue of its batches' indices.
    """
    queue = IndexQueue()
    kwargs: dict[str, Any] = {}
    if loader.num_workers > 0:
        kwargs.update(persistent_workers=loader.persistent_workers, worker_init_fn=loader.worker_init_fn,
                      prefetch_factor=loader.prefetch_factor)
    new = DataLoader(
        LabelOnlyInputs(loader.dataset) if label_only else loader.dataset,
        batch_sampler=_RecordingBatchSampler(loader.batch_sampler, queue),
        num_workers=loader.num_workers, collate_fn=loader.collate_fn, pin_memory=loader.pin_memory,
        generator=loader.generator, **kwargs,
    )
    return new, queue
