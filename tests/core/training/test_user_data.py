"""A ``py:`` dataset's batch is checked for NaN targets in one pass, and a bad item is still named by its index."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, Subset, TensorDataset

from workbench.core.training.data_common import DataError
from workbench.core.training.user_data import UserDataset


def _data(n: int = 16, bad: int | None = None, value: float = float("nan")) -> UserDataset:
    y = torch.rand(n, 3)
    if bad is not None:
        y[bad, 1] = value
    return UserDataset(TensorDataset(torch.randn(n, 4), y), "data py:d.py:make")


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_batch_with_a_bad_target_names_the_item(value: float) -> None:
    loader = DataLoader(_data(bad=11, value=value), batch_size=4)
    with pytest.raises(DataError, match=r"^data py:d\.py:make: item 11 has a target that is NaN or infinite$"):
        for _ in loader:
            pass


def test_a_subset_names_the_item_of_the_whole_dataset() -> None:
    loader = DataLoader(Subset(_data(bad=11), [3, 11, 5]), batch_size=3)
    with pytest.raises(DataError, match="item 11 has a target"):
        next(iter(loader))


def test_a_clean_batch_is_one_finiteness_check(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    isfinite = torch.isfinite

    def counted(t: torch.Tensor) -> torch.Tensor:
        calls.append(t.numel())
        return isfinite(t)

    monkeypatch.setattr(torch, "isfinite", counted)
    x, y = next(iter(DataLoader(_data(), batch_size=8)))
    assert calls == [8 * 3] and y.shape == (8, 3) and x.shape == (8, 4)


def test_targets_of_mixed_kinds_in_one_batch() -> None:
    items = [(torch.randn(2), 1), (torch.randn(2), torch.tensor(0.5)), (torch.randn(2), torch.tensor([float("nan")]))]
    ds = UserDataset(items, "data mixed")  # type: ignore[arg-type]
    assert ds.__getitems__([0, 1]) == [items[0], items[1]]
    with pytest.raises(DataError, match="item 2 has a target that is NaN"):
        ds.__getitems__([0, 1, 2])
    with pytest.raises(DataError, match="item 2 has a target that is NaN"):
        ds[2]
