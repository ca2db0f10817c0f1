"""The packaging scripts: argument errors, the bundle launcher's dispatch, the spec's essentials."""

from __future__ import annotations

import ast
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGING = ROOT / "packaging"
needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="bash scripts")


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"packaging_{name}", PACKAGING / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@needs_bash
@pytest.mark.parametrize("script", ["build.sh", "smoke_test.sh"])
def test_shell_scripts_parse_and_are_executable(script):
    path = PACKAGING / script
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
    assert path.stat().st_mode & 0o111, f"chmod +x packaging/{script}"


@needs_bash
@pytest.mark.parametrize(
    "args, message",
    [
        (["--cpu-torch"], "--cpu-torch installs torch into a new venv: add --venv DIR"),
        (["--python", "a", "--venv", "b"], "give --python or --venv, not both"),
        (["--bogus"], "unknown option --bogus"),
        (["--python", "/nonexistent/python3"], "build.sh"),
    ],
)
def test_build_sh_refuses_bad_arguments_before_building(args, message, tmp_path):
    r = subprocess.run(["bash", str(PACKAGING / "build.sh"), *args, "--dist", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode != 0 and message in r.stderr
    assert not any(tmp_path.iterdir())


@needs_bash
def test_build_sh_help():
    r = subprocess.run(["bash", str(PACKAGING / "build.sh"), "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--cpu-torch" in r.stdout and "packaging/README.md" in r.stdout


@needs_bash
def test_smoke_test_needs_a_bundle(tmp_path):
    r = subprocess.run(["bash", str(PACKAGING / "smoke_test.sh"), str(tmp_path / "nope")], capture_output=True, text=True)
    assert r.returncode == 2 and "build it with packaging/build.sh" in r.stderr
    r = subprocess.run(["bash", str(PACKAGING / "smoke_test.sh"), str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 2 and "workbench is missing" in r.stderr


@pytest.mark.parametrize(
    "exe, expected", [("freeze-workbench", "gui"), ("Freeze Workbench.exe", "gui"), ("workbench", "cli")]
)
def test_bundle_launcher_dispatches_on_its_name(exe, expected, monkeypatch, tmp_path):
    import workbench.cli

    launcher = load("launcher")
    monkeypatch.setattr(sys, "executable", str(tmp_path / exe))
    monkeypatch.setattr(workbench.cli, "gui_main", lambda: "gui")
    monkeypatch.setattr(workbench.cli, "main", lambda: "cli")
    assert launcher.run() == expected


def test_spec_names_what_pyinstaller_cannot_find():
    text = (PACKAGING / "freeze-workbench.spec").read_text(encoding="utf-8")
    ast.parse(text)
    for needed in (
        'collect_submodules("workbench")',  # commands are imported by name
        'collect_data_files("workbench.resources"',  # icons, desktop entry, example plans
        'collect_dynamic_libs("torchvision"',  # operators loaded by path
        '"freeze-workbench", "torch", "torchvision", "pyqtgraph"',  # importlib.metadata versions
        "launcher.py",
        "freeze-workbench.ico",
        "freeze-workbench.icns",
    ):
        assert needed in text, needed
    assert (PACKAGING / "icons" / "freeze-workbench.ico").is_file()
