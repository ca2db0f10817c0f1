"""What the sweep's command-line tests share: a tiny ``py:`` model, plan files, the command."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.preload import python_argv

MODEL = '''
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.block = nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.ReLU())
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(self.block(torch.relu(self.stem(x))).mean((2, 3)))


def build():
    torch.manual_seed(0)
    return Net()
'''

PLANS = {
    "head": [{"select": "*", "frozen": True}, {"select": "fc", "frozen": False}],
    "block": [{"select": "*", "frozen": True}, {"select": "block", "frozen": False}, {"select": "fc", "frozen": False}],
    "full": [{"select": "*", "frozen": False}],
}


def setup_files(tmp: Path) -> list[str]:
    """Write the model and the plans; return the plan paths."""
    (tmp / "tiny.py").write_text(MODEL)
    out = []
    for name, rules in PLANS.items():
        p = tmp / f"{name}.json"
        p.write_text(json.dumps({"format": "freeze-plan", "version": 1, "rules": rules}))
        out.append(str(p))
    return out


def sweep_argv(tmp: Path, folder: Path, *extra: str, steps: int = 4) -> list[str]:
    """The arguments of a small sweep (without the program)."""
    plans = setup_files(tmp)
    return ["sweep", "--model", f"py:{tmp / 'tiny.py'}:build", "--data", "synthetic:64", "--image-size", "8",
            "--batch-size", "8", "--device", "cpu", "--num-classes", "4", "--threads", "1", "--plans", *plans,
            "--steps", str(steps), "--eval-every", "2", "--out", str(folder), "--no-chart", *extra]


def command(argv: list[str], fresh: bool = False) -> list[str]:
    """The command line running ``argv``: in the suite's preloaded interpreter (``tests/preload``),
    or in a fresh one with ``fresh`` (a process the test kills: the kill must reach the sweep itself)."""
    return [sys.executable, "-m", "workbench", *argv] if fresh else python_argv("-m", "workbench", *argv)
