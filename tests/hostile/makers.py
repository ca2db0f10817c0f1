"""Makers of hostile files for the tests: pickles with a payload, nested JSON, a tiny model."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from workbench.cli import main


class _Touch:
    """Unpickling this object creates the marker file: proof that code from a file ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.marker, "w"))


def write_payload_pickle(path: Path, marker: Path) -> Path:
    """A ``torch.save`` file whose unpickling touches ``marker`` (a hostile checkpoint)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": {"w": torch.zeros(1)}, "payload": _Touch(marker)}, path)
    return path


def write_raw_payload_pickle(path: Path, marker: Path) -> Path:
    """A plain pickle (not a torch zip) whose unpickling touches ``marker``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(_Touch(marker), protocol=2))
    return path


def nested_json(depth: int, inner: str = "1") -> str:
    """``[[[...]]]`` nested ``depth`` deep."""
    return "[" * depth + inner + "]" * depth


class Tiny(nn.Module):
    """conv -> BN -> pool -> fc: a model with every kind of module the checks look at."""

    def __init__(self, num_classes: int = 3) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(4)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(torch.relu(self.bn1(self.conv1(x)))).flatten(1))


def one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str], *needles: str) -> None:
    """Run the CLI: exit code 2, exactly one line on stderr, no traceback, holding each needle."""
    rc = main(argv)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in lines[0], lines[0]
