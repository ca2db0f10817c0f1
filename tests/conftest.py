"""Test-suite-wide settings: small thread counts so the suite behaves on 2-core CI machines."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
import torch

torch.set_num_threads(min(2, torch.get_num_threads()))


@pytest.fixture
def resnet18():
    """A fresh resnet18 with random weights (no download)."""
    import torchvision

    torch.manual_seed(0)
    return torchvision.models.resnet18(weights=None)
