"""``workbench gui --screenshot``: the headless start-up check installed copies and bundles run."""

from __future__ import annotations

import os
import re
import struct
import subprocess
from pathlib import Path

import pytest

from tests.preload import python_argv
from workbench.cli import main
from workbench.resources import example_plan


def run_gui(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m workbench gui ARGS`` with no display and private config, data and cache folders."""
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY")}
    env.update(XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_DATA_HOME=str(tmp_path / "data"),
               WORKBENCH_CACHE_DIR=str(tmp_path / "cache"))
    return subprocess.run(
        python_argv("-m", "workbench", "gui", *args), capture_output=True, text=True, cwd=tmp_path, env=env
    )


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_screenshot_of_the_default_model_without_a_display(tmp_path):
    out = tmp_path / "shots" / "window.png"
    r = run_gui(tmp_path, "--screenshot", str(out))
    assert r.returncode == 0, r.stderr
    m = re.search(rf"^screenshot: {re.escape(str(out))} \((\d+)x(\d+); model: resnet18, 11,689,512 parameters\)$",
                  r.stdout, re.M)
    assert m, r.stdout
    width, height = int(m[1]), int(m[2])
    assert width >= 1280 and height >= 800  # 1280x800, or the window's minimum size if larger
    assert png_size(out) == (width, height)
    assert not (tmp_path / "config").exists()  # settings went to a temporary folder


def test_screenshot_of_a_plan_for_another_model_loads_it_without_downloading(tmp_path):
    out = tmp_path / "window.png"
    r = run_gui(tmp_path, str(example_plan("mobilenet_v3_small-classifier")), "--screenshot", str(out))
    assert r.returncode == 0, r.stderr
    assert "model: mobilenet_v3_small, 2,542,856 parameters" in r.stdout
    if "Weights not cached" in r.stderr:  # (unless they happen to be in the local cache)
        assert "-> Random Init" in r.stderr and "Download" not in r.stderr.split("->")[-1]
    assert min(png_size(out)) >= 800


def test_screenshot_fails_with_exit_2_when_the_file_is_missing(tmp_path):
    r = run_gui(tmp_path, str(tmp_path / "nope.json"), "--screenshot", str(tmp_path / "w.png"))
    assert r.returncode == 2
    assert "workbench gui: error: Cannot open file:" in r.stderr and "nope.json: no such file" in r.stderr
    assert "Traceback" not in r.stderr


def test_gui_help_lists_the_new_options(capsys):
    with pytest.raises(SystemExit) as e:
        main(["gui", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for option in ("--screenshot PNG", "--install-desktop", "--uninstall-desktop", "--prefix DIR"):
        assert option in out
