"""A checkpoint of another architecture is refused; a partial match is named, with counts."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
import torchvision

from tests.hostile.makers import Tiny
from workbench.cli import main
from workbench.core.models.zoo import (
    CheckpointKeyMismatch,
    ModelSourceError,
    load_checkpoint,
)


@pytest.fixture
def mobilenet_ckpt(tmp_path: Path) -> Path:
    path = tmp_path / "mobilenet.pt"
    torch.save(torchvision.models.mobilenet_v3_small(weights=None).state_dict(), path)
    return path


def test_other_architecture_refused(mobilenet_ckpt: Path) -> None:
    with pytest.raises(ModelSourceError, match=r"none of its \d+ keys.*different architecture"):
        load_checkpoint(mobilenet_ckpt, torchvision.models.resnet18(weights=None))


def test_other_architecture_cli_exit_2_one_line(mobilenet_ckpt: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["inspect", "resnet18", "--checkpoint", str(mobilenet_ckpt), "--depth", "0"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "different architecture" in err


def _partial(tmp_path: Path) -> Path:
    state = Tiny().state_dict()
    del state["bn1.running_var"]
    state["extra.weight"] = torch.zeros(2)
    path = tmp_path / "partial.pt"
    torch.save(state, path)
    return path


def test_partial_match_warns_with_counts(tmp_path: Path) -> None:
    with pytest.warns(CheckpointKeyMismatch, match=r"1 missing keys \(bn1.running_var\).*1 unexpected keys \(extra.weight\)"):
        result = load_checkpoint(_partial(tmp_path), Tiny())
    assert result.missing_keys == ["bn1.running_var"] and result.unexpected_keys == ["extra.weight"]


def test_partial_match_strict_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelSourceError, match="missing keys"):
        load_checkpoint(_partial(tmp_path), Tiny(), strict=True)


def test_cli_strict_and_non_strict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = torchvision.models.resnet18(weights=None)
    state = model.state_dict()
    del state["fc.bias"]
    path = tmp_path / "r.pt"
    torch.save(state, path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the CLI prints the mismatch itself, it issues no stray warning
        rc = main(["inspect", "resnet18", "--checkpoint", str(path), "--depth", "0", "--non-strict"])
    err = capsys.readouterr().err
    assert rc == 0 and "warning:" in err and "1 missing keys (fc.bias)" in err
    rc = main(["inspect", "resnet18", "--checkpoint", str(path), "--depth", "0", "--strict"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "fc.bias" in err


def test_train_strict_refuses_partial_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = torchvision.models.resnet18(weights=None, num_classes=10).state_dict()
    del state["fc.bias"]
    path = tmp_path / "r.pt"
    torch.save(state, path)
    quick = ["train", "--model", "resnet18", "--checkpoint", str(path), "--num-classes", "10", "--image-size", "32",
             "--batch-size", "2", "--data", "synthetic:4", "--device", "cpu", "--steps", "1", "--no-progress"]
    rc = main([*quick, "--strict"])
    err = capsys.readouterr().err
    assert rc == 2 and "fc.bias" in err and "Traceback" not in err
    assert main(quick) == 0
    assert "1 missing keys (fc.bias)" in capsys.readouterr().err
