"""Hostile input to the frozen-prefix cache: its flags, its budget and its spill file."""

from __future__ import annotations

import json
import os
from pathlib import Path

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
        ["config.json", "metrics.jsonl", "plan.json", "summary.json", "trainable.safetensors"])


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
