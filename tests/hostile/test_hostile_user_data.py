"""Bad items of your own data (``--data py:...``) are one line naming the item: a wrong type, shapes that
differ within a batch, a NaN target, an exception inside ``__getitem__`` (with its index). The first
item is checked before anything trains (exit 2); a later one ends the run as failed (exit 1) at the
step that loads it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hostile.makers import one_line_exit_2
from workbench.cli import main

DATA = '''
import math
import torch
from torch.utils.data import Dataset


class Items(Dataset):
    def __init__(self, bad_at, kind):
        self.bad_at, self.kind = bad_at, kind

    def __len__(self):
        return 16

    def __getitem__(self, i):
        x, y = torch.randn(4), i % 2
        if i != self.bad_at:
            return x, y
        if self.kind == "raises":
            raise ValueError(f"corrupt record {i}")
        if self.kind == "type":
            return "a string", y
        if self.kind == "shape":
            return torch.randn(5), y
        if self.kind == "nan":
            return x, torch.tensor(float("nan"))
        if self.kind == "nan_number":
            return x, math.nan
        if self.kind == "triple":
            return x, y, y
        if self.kind == "target":
            return x, [y]
        if self.kind == "dict":
            return {"a": x, "b": [1, 2]}, y
        raise AssertionError(self.kind)


def first(kind):
    return Items(0, kind)


def later(kind):
    return Items(11, kind)
'''

CASES = {
    "raises": "raised ValueError in __getitem__: corrupt record {i}",
    "type": "has an input of type str, not a tensor or a dict of tensors",
    "shape": "has an input of shape (5,), item 0 one of (4,)",
    "nan": "has a target that is NaN or infinite",
    "nan_number": "has a target that is NaN or infinite",
    "triple": "is tuple of 3, not an (input, target) pair",
    "target": "has a target of type list, not a tensor or a number",
    "dict": "has a dict input whose 'b' is not a tensor",
}


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    data = tmp_path / "items.py"
    data.write_text(DATA)
    model = tmp_path / "tiny.py"
    model.write_text("from torch import nn\n\ndef make():\n    return nn.Linear(4, 2)\n")
    return data, model


def _argv(model: Path, spec: str) -> list[str]:
    return ["train", "--model", f"py:{model}:make", "--data", spec, "--steps", "4", "--batch-size", "4",
            "--device", "cpu", "--no-progress"]


def _with_kind(tmp_path: Path, data: Path, func: str, kind: str) -> str:
    wrapper = tmp_path / f"w_{func}_{kind}.py"
    wrapper.write_text(f"import runpy\n_m = runpy.run_path({str(data)!r})\n\ndef make():\n    return _m[{func!r}]({kind!r})\n")
    return f"py:{wrapper}:make"


@pytest.mark.parametrize("kind", [k for k in CASES if k != "shape"])
def test_a_bad_first_item_is_refused_before_training(tmp_path: Path, files: tuple[Path, Path], kind: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    data, model = files
    spec = _with_kind(tmp_path, data, "first", kind)
    one_line_exit_2(_argv(model, spec), capsys, f"data {spec}: item 0 ", CASES[kind].format(i=0))


@pytest.mark.parametrize("kind", list(CASES))
def test_a_bad_later_item_fails_the_run_in_one_line_naming_it(tmp_path: Path, files: tuple[Path, Path], kind: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    data, model = files
    spec = _with_kind(tmp_path, data, "later", kind)
    rc = main([*_argv(model, spec), "--seed", "3"])
    err = capsys.readouterr().err
    failed = [ln for ln in err.splitlines() if "failed" in ln]
    assert rc == 1 and "Traceback" not in err and len(failed) == 1, err
    assert f"item 11 {CASES[kind].format(i=11)}" in failed[0], failed[0]
