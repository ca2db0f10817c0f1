"""Fixtures of the hostile-input suite (the makers live in ``tests.hostile.makers``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.hostile.makers import Tiny


@pytest.fixture
def tiny() -> Tiny:
    torch.manual_seed(0)
    return Tiny()


@pytest.fixture
def torch_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private torch hub folder (``$TORCH_HOME``), restored afterwards."""
    home = tmp_path / "torch_home"
    monkeypatch.setenv("TORCH_HOME", str(home))
    previous = torch.hub._hub_dir
    torch.hub.set_dir(str(home / "hub"))
    yield home
    torch.hub._hub_dir = previous
