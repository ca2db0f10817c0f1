"""``workbench advise --data`` with dict inputs the advisor cannot use: each is one line, exit 2."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.hostile.makers import one_line_exit_2

TASK = '''
import torch
from torch import nn


class Two(nn.Module):
    def __init__(self, num_classes=None):
        super().__init__()
        self.a = nn.Linear(4, 3)

    def forward(self, a, b):
        return self.a(a) + b


def build(num_classes=None):
    return Two()


def items(kind):
    class Items(torch.utils.data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            if kind == "number":
                return {"a": torch.zeros(4), "b": 3}, 0
            if kind == "keys":
                return {"a": torch.zeros(4), "c": torch.zeros(3)}, 0
            return {"a": torch.zeros(4), "b": torch.zeros(3)}, 0
    return Items()


def number():
    return items("number")


def keys():
    return items("keys")


def good():
    return items("good")
'''


@pytest.fixture
def task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "two.py").write_text(textwrap.dedent(TASK))
    monkeypatch.chdir(tmp_path)
    return "two.py"


def _argv(task: str, data: str, *extra: str) -> list[str]:
    return ["advise", f"py:{task}:build", "--data", f"py:{task}:{data}", "--memory", "1GB", "--batch-size", "2",
            "--num-classes", "3", "--device", "cpu", *extra]


def test_a_dict_entry_that_is_not_a_tensor(task: str, capsys: pytest.CaptureFixture[str]) -> None:
    one_line_exit_2(_argv(task, "number"), capsys, "item 0 has a dict input whose 'b' is not a tensor")


def test_keys_the_model_does_not_take(task: str, capsys: pytest.CaptureFixture[str]) -> None:
    one_line_exit_2(_argv(task, "keys"), capsys, "input a 2x4, c 2x3:", "unexpected keyword", "dict inputs")


def test_gradient_signal_ranking_of_dict_inputs(task: str, capsys: pytest.CaptureFixture[str]) -> None:
    one_line_exit_2(_argv(task, "good", "--rank-by", "grad-signal"), capsys, "a 2x4, b 2x3", "--rank-by depth")


def test_image_size_with_dict_data(task: str, capsys: pytest.CaptureFixture[str]) -> None:
    one_line_exit_2(_argv(task, "good", "--image-size", "32"), capsys, "not both")
