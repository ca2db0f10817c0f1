"""Your own data, ``--data py:FILE.py:FUNC``: the function's dataset, each item checked.

``FUNC()`` returns a map-style dataset, or a ``(train, val)`` pair of them, whose items are
``(input, target)``: the input a tensor of any shape or a dict of tensors, the target a tensor
or a number. :class:`UserDataset` wraps each: an item that is not such a pair, an input whose
shape differs from the first item's (a batch could not be stacked), a target that is NaN, or
an exception inside ``__getitem__`` becomes a :class:`~workbench.core.training.data_common.DataError`
of one line that names the item's index. A loader fetches a batch's items at once
(``__getitems__``): their floating-point targets are checked for NaN in one pass, and only a batch
that holds one is searched for the item to name.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sized
from typing import Any

import torch
from torch.utils.data import Dataset, TensorDataset

from workbench.core.errors import first_line
from workbench.core.training.data_common import DataError
from workbench.core.training.py_code import load_py_function

__all__ = ["UserDataset", "load_user_data", "sample_shape"]

_NONFINITE = "has a target that is NaN or infinite"


def _nonfinite(y: Any) -> bool:
    """Whether a target is a floating-point tensor holding NaN or infinity."""
    return isinstance(y, torch.Tensor) and y.is_floating_point() and not bool(torch.isfinite(y).all())


def _shape_of(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return tuple(x.shape)
    return {k: tuple(v.shape) for k, v in x.items()}


def sample_shape(x: Any) -> tuple[int, ...] | dict[str, tuple[int, ...]]:
    """The shape of one sample's input: a tuple, or ``{key: shape}`` for a dict input.

    Args:
        x: a tensor, or a mapping of tensors.

    Returns:
        The shape(s).
    """
    return _shape_of(x)


class UserDataset(Dataset[Any]):
    """A user's dataset whose items are checked as they are read (see the module docstring).

    Args:
        dataset: the map-style dataset.
        name: what the messages call it (``"data py:pitch.py:make"``).

    Attributes:
        dataset: the wrapped dataset.
        val: the validation dataset the function returned with it, or None.
    """

    def __init__(self, dataset: Dataset[Any], name: str, val: UserDataset | None = None) -> None:
        self.dataset = dataset
        self.name = name
        self.val = val
        self._first: Any = None
        for attr in ("classes", "num_classes"):
            if hasattr(dataset, attr):
                setattr(self, attr, getattr(dataset, attr))

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    @property
    def deterministic(self) -> bool:
        """The same index gives the same item (a ``TensorDataset``; unknown for other datasets)."""
        return isinstance(self.dataset, TensorDataset)

    def _bad(self, index: int, what: str) -> DataError:
        return DataError(f"{self.name}: item {index} {what}")

    def __getitem__(self, index: int) -> Any:
        x, y = self._item(index)
        if _nonfinite(y):
            raise self._bad(index, _NONFINITE)
        return x, y

    def __getitems__(self, indices: list[int]) -> list[tuple[Any, Any]]:
        """A batch's items, as a ``DataLoader`` fetches them: each checked as by ``dataset[i]``.

        The floating-point target tensors are checked for NaN and infinity together, in one
        pass over their values; only when that fails is each looked at, to name the item.

        Args:
            indices: the batch's indices into this dataset.

        Returns:
            The ``(input, target)`` items, in the order of ``indices``.

        Raises:
            DataError: an item is bad (one line naming its index).
            IndexError: an index is out of range.
        """
        items = [self._item(i) for i in indices]
        floats = [y.reshape(-1) for _, y in items if isinstance(y, torch.Tensor) and y.is_floating_point()]
        if floats and not bool(torch.isfinite(torch.cat(floats)).all()):
            for i, (_, y) in zip(indices, items, strict=True):
                if _nonfinite(y):
                    raise self._bad(i, _NONFINITE)
        return items

    def _item(self, index: int) -> tuple[Any, Any]:
        """Item ``index``, checked except for NaN in a target tensor (the caller's check, alone or batched)."""
        try:
            item = self.dataset[index]
        except IndexError:
            raise
        except Exception as e:
            raise self._bad(index, f"raised {type(e).__name__} in __getitem__: {first_line(e)}") from e
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise self._bad(index, f"is {type(item).__name__}{f' of {len(item)}' if isinstance(item, (tuple, list)) else ''}, "
                            "not an (input, target) pair")
        x, y = item
        if isinstance(x, Mapping):
            bad = [k for k, v in x.items() if not isinstance(v, torch.Tensor)]
            if not x or bad:
                raise self._bad(index, f"has a dict input whose {'entries' if not x else repr(bad[0])} "
                                f"{'are missing' if not x else 'is not a tensor'}; inputs are tensors or dicts of tensors")
        elif not isinstance(x, torch.Tensor):
            raise self._bad(index, f"has an input of type {type(x).__name__}, not a tensor or a dict of tensors")
        shape = _shape_of(x)
        if self._first is None:
            self._first = (index, shape)
        elif shape != self._first[1]:
            raise self._bad(index, f"has an input of shape {shape}, item {self._first[0]} one of {self._first[1]}; "
                            "every item must have the same shape to be batched")
        if isinstance(y, numbers.Number) and not isinstance(y, bool):
            if isinstance(y, float) and not math.isfinite(y):
                raise self._bad(index, _NONFINITE)
        elif not isinstance(y, torch.Tensor):
            raise self._bad(index, f"has a target of type {type(y).__name__}, not a tensor or a number")
        return x, y

    def __repr__(self) -> str:
        return f"UserDataset({self.name}, {len(self) if isinstance(self.dataset, Sized) else '?'} items)"


def _check(ds: Any, spec: str, part: str) -> Dataset[Any]:
    if not hasattr(ds, "__getitem__") or not isinstance(ds, Sized):
        raise DataError(f"data {spec}{part} is {type(ds).__name__}, not a map-style dataset with a length "
                        "(a torch Dataset with __len__ and __getitem__)")
    try:
        n = len(ds)
    except Exception as e:
        raise DataError(f"data {spec}{part}: len() raised {type(e).__name__}: {first_line(e)}") from None
    if not isinstance(n, int) or n < 1:
        raise DataError(f"data {spec}{part} has no items; give a dataset with samples")
    return ds  # type: ignore[return-value]


def load_user_data(spec: str, *, origin: str | None) -> UserDataset:
    """Run a ``py:`` data function and wrap what it returns.

    Args:
        spec: ``py:FILE.py:FUNC`` or ``py:MODULE:FUNC``.
        origin: what file named the spec (it is then refused and nothing runs); None: the caller.

    Returns:
        The training data, its :attr:`UserDataset.val` set when the function returned a pair.

    Raises:
        CodeFromFileError: a file named the spec.
        PyCodeError: the code cannot be loaded.
        DataError: the function raised, or returned something that is not a dataset or a pair.
    """
    fn = load_py_function(spec, what="data", flag="--data", origin=origin)
    try:
        out = fn()
    except Exception as e:
        raise DataError(f"data function {spec} raised {type(e).__name__}: {first_line(e)}") from e
    if isinstance(out, tuple) and len(out) == 2 and all(hasattr(d, "__getitem__") and isinstance(d, Sized) for d in out):
        train, val = _check(out[0], spec, " (train)"), _check(out[1], spec, " (val)")
        return UserDataset(train, f"data {spec} (train)", UserDataset(val, f"data {spec} (val)"))
    return UserDataset(_check(out, spec, ""), f"data {spec}")
