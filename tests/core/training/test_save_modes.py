"""A saved run follows one permission policy: the umask's modes for the folder and every file in it."""

from __future__ import annotations

import os
import stat

from workbench.cli import main


def test_the_run_folder_and_all_its_files_get_the_umask_modes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    old = os.umask(0o022)
    try:
        assert main(["train", "--model", "resnet18", "--steps", "1", "--image-size", "32", "--batch-size", "2",
                     "--save", "run"]) == 0
    finally:
        os.umask(old)
    run = tmp_path / "run"
    assert stat.S_IMODE(run.stat().st_mode) == 0o755
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in run.iterdir()}
    assert "trainable.safetensors" in modes and "plan.json" in modes
    assert set(modes.values()) == {0o644}, modes
