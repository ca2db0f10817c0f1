"""Any input shape on the command line: advise, doctor and bench take ``--input-shape`` (or the first sample
of ``--data``) instead of assuming images, train takes an ``hf-dataset:`` column of arrays
(``--input-column``), and an unknown shape says what to give."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.hostile.makers import one_line_exit_2
from workbench.cli import main

MODEL = '''
import torch
from torch import nn
from torch.utils.data import TensorDataset


class Frames(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(1, 4, 5, padding=2)
        self.bn = nn.BatchNorm1d(4)
        self.head = nn.Linear(4 * 64, 6)

    def forward(self, x):
        return self.head(torch.relu(self.bn(self.conv(x[:, None]))).flatten(1))


def make():
    return Frames()


def data():
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(32, 64, generator=g), torch.randint(0, 6, (32,), generator=g))
'''


@pytest.fixture
def frames(tmp_path: Path) -> Path:
    p = tmp_path / "frames.py"
    p.write_text(MODEL)
    return p


def test_advise_takes_the_input_shape_or_the_data(frames: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for extra in (["--input-shape", "64"], ["--data", f"py:{frames}:data"]):
        rc = main(["advise", f"py:{frames}:make", "--memory", "1GB", "--batch-size", "8", "--json", *extra])
        out, err = capsys.readouterr()
        assert rc == 0, err
        assert json.loads(out)["input_shape"] == [8, 64] and "warning" not in err


def test_advise_without_a_shape_says_which_flag_gives_one(frames: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one_line_exit_2(["advise", f"py:{frames}:make", "--memory", "1GB"], capsys,
                    "could not run a shape-only forward pass with input (32, 3, 224, 224)", "--input-shape", "--data")
    one_line_exit_2(["advise", f"py:{frames}:make", "--memory", "1GB", "--input-shape", "64,a"], capsys,
                    "--input-shape: input shape '64,a' must be positive integers")


def test_doctor_watches_steps_of_the_input_shape_and_of_the_data(frames: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for extra in (["--input-shape", "64"], ["--data", f"py:{frames}:data", "--loss", "cross_entropy"]):
        rc = main(["doctor", "--model", f"py:{frames}:make", "--steps", "2", "--batch-size", "4", "--device", "cpu", "--json", *extra])
        out, err = capsys.readouterr()
        assert rc == 0, err
        assert json.loads(out)["watch"]["steps"] == 2


def test_bench_measures_the_input_shape(frames: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["bench", f"py:{frames}:make", "--input-shape", "64", "--steps", "2", "--warmup", "1", "--batch-size", "4",
               "--device", "cpu"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "input 64," in out and "ok" in out


def test_train_reads_a_column_of_arrays(tmp_path: Path, frames: Path, capsys: pytest.CaptureFixture[str]) -> None:
    datasets = pytest.importorskip("datasets")
    import torch

    g = torch.Generator().manual_seed(0)
    folder = tmp_path / "audio"
    datasets.Dataset.from_dict({"audio": torch.randn(24, 64, generator=g).tolist(), "label": [i % 6 for i in range(24)]}
                               ).save_to_disk(str(folder))
    capsys.readouterr()  # the progress bar of save_to_disk
    base = ["train", "--model", f"py:{frames}:make", "--data", f"hf-dataset:{folder}", "--steps", "2", "--batch-size", "4",
            "--device", "cpu", "--no-progress"]
    one_line_exit_2([*base, "--image-column", "audio"], capsys, "column 'audio' is not an image column but a column of "
                    "arrays; give it to the model with --input-column audio")
    rc = main([*base, "--input-column", "audio", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    s = json.loads(out)["summary"]
    assert s["input_shape"] == [64] and s["num_classes"] == 6 and s["new_heads"] == []
