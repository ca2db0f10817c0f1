"""The built wheel works on its own: installed into a fresh venv, used from outside the source tree.

The venv is made from the base interpreter without pip's help for dependencies: torch,
PySide6 and the rest are reused from the environment running the tests through a ``.pth``
file that lists that environment's ``site-packages`` folders as plain paths. Plain paths are
added to ``sys.path`` but the ``.pth`` files inside them are not run, so the project's
editable-install finder (``__editable___freeze_workbench_*_finder``) stays inactive and
``import workbench`` can only find the installed wheel. The test proves it (and that the app's icon
comes from the installed resources), then runs the installed launchers: ``packaging/smoke_test.sh
<venv>/bin`` (version, help, a model, the desktop entry from the installed resources, the window
with the default model rendered offscreen, whose size the test checks).
"""

from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import sys
import textwrap
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX venv layout and bash smoke test")

#: Checks run by the venv's Python, from a folder outside the source tree.
PROBE = textwrap.dedent(
    """
    import os, sys, tempfile
    from pathlib import Path
    src, venv = Path(sys.argv[1]).resolve(), Path(sys.prefix).resolve()

    import workbench
    where = Path(workbench.__file__).resolve()
    assert venv in where.parents, f"workbench imported from {where}, not from the venv {venv}"
    import sysconfig
    purelib = Path(sysconfig.get_paths()["purelib"]).resolve()
    providers = [Path(p or ".").resolve() for p in sys.path if (Path(p or ".") / "workbench" / "__init__.py").is_file()]
    assert providers == [purelib], f"a workbench package outside the venv is importable: {providers}"
    assert src not in [Path(p or ".").resolve() for p in sys.path], f"the source tree is on sys.path: {sys.path}"
    assert not [f for f in sys.meta_path if "editable" in type(f).__module__.lower()], sys.meta_path

    from importlib import metadata, resources
    assert metadata.version("freeze-workbench") == workbench.__version__
    root = resources.files("workbench.resources")
    assert root.joinpath("plans").is_dir()
    from workbench import resources as wr
    found = [wr.svg_icon_path(), *wr.icon_paths().values(), wr.desktop_file(), wr.metainfo_file(),
             *wr.example_plans().values()]
    assert len(wr.example_plans()) >= 3
    for p in found:
        assert venv in p.resolve().parents and p.stat().st_size > 0, p

    os.environ["QT_QPA_PLATFORM"] = "offscreen"
    from PySide6.QtCore import QSettings
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, tempfile.mkdtemp())
    from workbench.gui.app import create_application
    app = create_application()
    assert max(s.width() for s in app.windowIcon().availableSizes()) == 512, "icon not from the resources"
    print("probe ok", where)
    """
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built from a clean copy of the sources (the checkout stays untouched)."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for folder in ("workbench", "resources"):
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path / "wheelhouse"
    setuptools_version = tuple(int(x) for x in metadata.version("setuptools").split(".")[:2])
    # pyproject.toml asks for setuptools >= 77 (an SPDX license string): build with this one,
    # offline, when it is that new; else pip's isolated build environment fetches one (network).
    isolation = ["--no-build-isolation"] if setuptools_version >= (77, 0) else []
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation, str(src), "-w", str(out)],
        capture_output=True,
        text=True,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    (built,) = out.glob("freeze_workbench-*.whl")
    return built


def _venv_with_parent_packages(tmp_path: Path) -> Path:
    """A fresh venv of the base interpreter that sees this environment's packages, not the project."""
    venv = tmp_path / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    purelib = Path(subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    parents = [*site.getsitepackages()]
    if site.ENABLE_USER_SITE and site.getusersitepackages():
        parents.append(site.getusersitepackages())
    parents = [p for p in parents if Path(p).is_dir()]
    (purelib / "_workbench_test_parent_env.pth").write_text("\n".join(parents) + "\n", encoding="utf-8")
    return venv


def test_wheel_contains_every_resource(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    folder = ROOT / "resources"
    expected = {
        "workbench/resources/" + p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert expected <= names, f"missing from the wheel: {sorted(expected - names)}"
    assert "workbench/py.typed" in names, "PEP 561 marker: type checkers read the package's hints"
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "[gui_scripts]\nworkbench-gui = workbench.cli:gui_main" in text
    assert "[console_scripts]\nworkbench = workbench.cli:main" in text


def test_building_again_over_the_last_build_warns_of_nothing(wheel):
    """A build in a folder that holds an earlier build's ``*.egg-info`` (an editable install's checkout)
    reads that manifest: with setuptools' ``include-package-data``, every data folder under
    resources/ (plans, trees, icons/hicolor) was then reported as a package missing from ``packages``."""
    src = wheel.parent.parent / "src"
    assert list(src.glob("*.egg-info")), "the first build left no egg-info: this test checks nothing"
    r = subprocess.run([sys.executable, "-c", "from setuptools import build_meta as b; b.build_wheel('again')"],
                       capture_output=True, text=True, cwd=src)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Warning" not in r.stdout + r.stderr, r.stdout + r.stderr


def test_pyproject_lists_every_package():
    """pyproject.toml lists packages explicitly (workbench.resources maps to resources/): none missing."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "workbench").rglob("__init__.py")}
    assert found | {"workbench.resources"} == listed


@pytest.mark.skipif(shutil.which("bash") is None, reason="the smoke test is a bash script")
def test_installed_wheel_runs_from_a_fresh_venv(wheel, tmp_path):
    venv = _venv_with_parent_packages(tmp_path)
    py = venv / "bin" / "python"
    r = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    for launcher in ("workbench", "workbench-gui"):
        assert (venv / "bin" / launcher).is_file(), f"pip did not create the {launcher} launcher"

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    env.update(QT_QPA_PLATFORM="offscreen", XDG_CONFIG_HOME=str(tmp_path / "config"))
    r = subprocess.run([py, "-c", PROBE, str(ROOT)], capture_output=True, text=True, cwd=outside, env=env)
    assert r.returncode == 0 and "probe ok" in r.stdout, r.stdout + r.stderr

    r = subprocess.run(
        ["bash", str(ROOT / "packaging" / "smoke_test.sh"), str(venv / "bin")],
        capture_output=True,
        text=True,
        cwd=outside,
        env=env,
    )
    assert r.returncode == 0 and "smoke test passed" in r.stdout, r.stdout + r.stderr
    assert sum(line.startswith("ok ") for line in r.stdout.splitlines()) == 6, r.stdout
    # the window the installed desktop launcher rendered (with the default model: smoke_test.sh checks its line)
    size = re.search(r"^ok +window\.png is a PNG of (\d+) x (\d+) pixels", r.stdout, re.M)
    assert size and int(size[1]) >= 1280 and int(size[2]) >= 800, r.stdout


def test_the_all_extra_names_every_other_extra():
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    bare = {d.split(">")[0].split("=")[0].split("[")[0].strip() for d in extras["all"]}
    for name, deps in extras.items():
        if name in ("all", "test"):
            continue
        for d in deps:
            assert d.split(">")[0].split("=")[0].split("[")[0].strip() in bare, f"[all] lacks {d} of [{name}]"
