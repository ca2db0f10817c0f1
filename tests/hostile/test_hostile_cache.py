"""Hostile input to the frozen-prefix cache: its flags, its budget and its spill file."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch

from workbench.cli import main
from workbench.core.plan.rules import FreezePlan, Rule
from workbench.core.training.cache_store import SPILL_NAME, RowStore, create_spill_file

QUICK = ["--model", "resnet18", "--num-classes", "10", "--image-size", "16", "--batch-size", "8",
         "--data", "synthetic:16", "--device", "cpu", "--no-progress"]


@pytest.fixture
def plan(tmp_path: Path) -> Path:
    p = tmp_path / "plan.json"
    FreezePlan([Rule("*", frozen=True), Rule("fc", frozen=False)]).save(p)
    return p


def _one_line(argv: list[str], capsys: pytest.CaptureFixture[str], *needles: str) -> None:
    rc = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1, err
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.mark.parametrize("budget", [
    "9" * 5000,                      # huge
    "1" * 19 + "T",                  # a size no machine has
    "-1G",
    "1e9",
    "\u0665\u0661\u0662M",           # non-ASCII digits
    "512M; rm -rf /",                # code that must never run
    "0x10",
])
def test_bad_budget_is_one_line(budget: str, plan: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _one_line(["train", *QUICK, "--plan", str(plan), "--steps", "1", f"--cache-budget={budget}"], capsys, "cache_budget")


@pytest.mark.parametrize("mode", ["always", "", "\udcff", "o" * 10_000])
def test_bad_mode_is_one_line(mode: str, plan: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _one_line(["train", *QUICK, "--plan", str(plan), "--steps", "1", f"--cache-frozen={mode}"], capsys, "cache_frozen")


def test_bad_mode_in_a_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"cache_frozen": {"nested": ["on"]}}))
    _one_line(["train", "--config", str(cfg)], capsys, "cache_frozen")


def test_budget_zero_trains_through_the_spill_file(tmp_path: Path, plan: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save = tmp_path / "run"
    rc = main(["train", *QUICK, "--plan", str(plan), "--steps", "6", "--cache-budget", "0", "--cache-frozen", "on",
               "--save", str(save), "--json"])
    out = capsys.readouterr().out
    assert rc == 0
    summary = json.loads(out)["summary"]
    assert summary["frozen_cache"]["bytes_disk"] > 0 and summary["frozen_cache"]["hits"] == 4
    assert sorted(p.name for p in save.iterdir()) == sorted(
        ["config.json", "metrics.jsonl", "plan.json", "run.json", "summary.json", "trainable.safetensors"])


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="needs POSIX permissions as a normal user")
def test_unwritable_run_folder_keeps_rows_uncached(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        store = RowStore(4, (2,), torch.float32, torch.device("cpu"), budget=0, spill_dir=folder)
        assert store.capacity == 0 and "cannot be created" in store.note
        store.close()
    finally:
        folder.chmod(0o700)


def test_unwritable_spill_folder_as_a_file(tmp_path: Path) -> None:
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("x")
    store = RowStore(4, (2,), torch.float32, torch.device("cpu"), budget=0, spill_dir=not_a_folder)
    assert store.capacity == 0 and "cannot be created" in store.note and not_a_folder.read_text() == "x"


def test_symlinked_spill_path_is_never_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim.bin"
    victim.write_bytes(b"precious")
    link = tmp_path / SPILL_NAME
    link.symlink_to(victim)
    with pytest.raises(FileExistsError):
        create_spill_file(link, 1 << 20)
    assert victim.read_bytes() == b"precious"
    dangling = tmp_path / "dangling.bin"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(FileExistsError):
        create_spill_file(dangling, 16)
    assert not (tmp_path / "nowhere").exists()


def test_spill_fifo_is_never_opened(tmp_path: Path) -> None:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    fifo = tmp_path / SPILL_NAME
    os.mkfifo(fifo)
    store = RowStore(4, (2,), torch.float32, torch.device("cpu"), budget=0, spill_dir=tmp_path)
    assert store.capacity == 0 and "cannot be created" in store.note
    store.close()
    assert fifo.exists()


def _label_only_run(tmp_path: Path, spoil: Any, plan: dict[str, Any]) -> Any:
    """An image-folder run whose cached steps load labels only; ``spoil(root)`` after step 4."""
    import torchvision

    from tests.core.training.test_cache_inputs import _folder, _images
    from workbench.core.training.config import TrainConfig
    from workbench.core.training.engine import Trainer

    root = _folder(tmp_path / "imgs")
    cfg = TrainConfig(plan=plan, cache_frozen="on", batch_size=4, steps=12, device="cpu", seed=0, num_classes=2)
    t = Trainer(cfg, model=torchvision.models.resnet18(num_classes=2), dataset=_images(root))
    for m in t.steps():
        if m.step == 4:
            spoil(root)
    return t.result


HEAD_PLAN = {"rules": [{"select": "*", "frozen": True}, {"select": "fc", "frozen": False}]}


def _garbage(root: Path) -> None:
    for p in root.rglob("*.png"):
        p.write_bytes(b"not a png")


def test_images_spoiled_after_the_first_epoch_are_never_read_by_served_steps(tmp_path: Path) -> None:
    result = _label_only_run(tmp_path, _garbage, HEAD_PLAN)
    assert result.ok and result.summary["frozen_cache"]["inputs_skipped"] == 8


def test_a_reload_of_spoiled_images_fails_the_run_with_one_line_naming_the_file(tmp_path: Path) -> None:
    # the stage drops the rows after step 6's batch was fetched as labels: its images are read then
    plan = {**HEAD_PLAN, "stages": [{"at_step": 6, "rules": [{"select": "layer4", "frozen": False}]}]}
    result = _label_only_run(tmp_path, _garbage, plan)
    assert result.status == "failed" and "\n" not in result.message
    assert result.message.startswith("step 6 failed: UnidentifiedImageError") and ".png" in result.message


def test_images_removed_after_the_first_epoch_fail_a_reload_clearly(tmp_path: Path) -> None:
    def remove(root: Path) -> None:
        for p in root.rglob("*.png"):
            p.unlink()

    plan = {**HEAD_PLAN, "stages": [{"at_step": 6, "rules": [{"select": "layer4", "frozen": False}]}]}
    result = _label_only_run(tmp_path, remove, plan)
    assert result.status == "failed" and "FileNotFoundError" in result.message and "\n" not in result.message
