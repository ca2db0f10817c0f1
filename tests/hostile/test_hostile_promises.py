"""Bad input that was already handled: kept as promises (one line, exit 2, no traceback)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.hostile.makers import Tiny
from workbench.cli import main
from workbench.core.models.zoo import ModelSourceError, load_checkpoint, save_checkpoint
from workbench.core.plan.rules import FreezePlan, PlanError


def _one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err, err
    assert len([ln for ln in err.splitlines() if ln.strip()]) == 1, err
    return err


@pytest.mark.parametrize(
    "plan, needle",
    [
        ({"rules": [{"select": "fc", "frozen": "yes"}]}, "frozen"),
        ({"rules": [{"select": "nope", "frozen": True}]}, "nope"),
        ({"rules": [{"select": "fc", "colour": 1}]}, "colour"),
        ({"format": "freeze-plan", "version": 99, "rules": []}, "version"),
        ({"rules": [], "stages": [{"at_step": 9, "rules": [{"select": "fc", "frozen": True}]},
                                  {"at_step": 3, "rules": [{"select": "fc", "frozen": False}]}]}, "order they are reached"),
    ],
)
def test_plan_schema_errors_one_line(tmp_path: Path, plan: dict, needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "p.json"
    p.write_text(json.dumps(plan))
    assert needle in _one_line_exit_2(["inspect", "resnet18", "--plan", str(p), "--depth", "0"], capsys)


def test_unknown_model_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert "resnet181" in _one_line_exit_2(["inspect", "resnet181"], capsys)


@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_truncated_checkpoint(tmp_path: Path, suffix: str, capsys: pytest.CaptureFixture[str]) -> None:
    full = save_checkpoint(Tiny(), tmp_path / f"full{suffix}", arch="resnet18")
    cut = tmp_path / f"cut{suffix}"
    cut.write_bytes(full.read_bytes()[: full.stat().st_size // 2])
    with pytest.raises(ModelSourceError, match="corrupt|truncated"):
        load_checkpoint(cut, Tiny())
    _one_line_exit_2(["inspect", "resnet18", "--checkpoint", str(cut), "--depth", "0"], capsys)


def test_empty_checkpoint(tmp_path: Path) -> None:
    p = tmp_path / "empty.pt"
    p.write_bytes(b"")
    with pytest.raises(ModelSourceError, match="empty"):
        load_checkpoint(p, Tiny())


def test_non_finite_lr_scale_refused() -> None:
    with pytest.raises(PlanError):
        FreezePlan.from_dict({"rules": [{"select": "*", "lr_scale": float("nan")}]})


def test_trusted_pickle_still_loads(tmp_path: Path) -> None:
    p = tmp_path / "whole.pt"
    torch.save(Tiny(), p)
    result = load_checkpoint(p, trust_pickle=True)
    assert isinstance(result.model, Tiny)
