"""Package resources: icon sizes, the desktop entry and AppStream metainfo, their validators."""

from __future__ import annotations

import configparser
import importlib.util
import re
import shutil
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from types import ModuleType

import pytest
import tomllib

from workbench import resources
from workbench.resources import APP_ID, ICON_SIZES, ResourceError

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def png_header(path: Path) -> tuple[int, int, int]:
    """``(width, height, color type)`` from a PNG's IHDR chunk."""
    data = path.read_bytes()[:26]
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    width, height, _depth, color = struct.unpack(">IIBB", data[16:26])
    return width, height, color


def desktop_entry(path: Path) -> dict[str, str]:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # keys are case-sensitive
    parser.read(path, encoding="utf-8")
    assert parser.sections()[0] == "Desktop Entry"
    return dict(parser["Desktop Entry"])


def mean_abs_diff(a, b) -> float:
    """Mean absolute difference of two same-size ``QImage`` s per RGBA channel (0–255)."""
    from PySide6.QtGui import QImage

    assert a.size() == b.size()
    x = a.convertToFormat(QImage.Format.Format_RGBA8888).constBits().tobytes()
    y = b.convertToFormat(QImage.Format.Format_RGBA8888).constBits().tobytes()
    return sum(abs(p - q) for p, q in zip(x, y)) / len(x)


def load_render_icons() -> ModuleType:
    spec = importlib.util.spec_from_file_location("render_icons", ROOT / "packaging" / "render_icons.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ----------------------------------------------------------------------------- accessors
def test_every_icon_size_is_a_square_rgba_png_of_that_size():
    paths = resources.icon_paths()
    assert list(paths) == list(ICON_SIZES) and ICON_SIZES[0] == 16 and ICON_SIZES[-1] == 512
    for size, path in paths.items():
        assert path.name == f"{APP_ID}.png" and path.parent.parent.name == f"{size}x{size}"
        assert png_header(path) == (size, size, 6)  # 6: RGBA (a transparent background)
    svg = resources.svg_icon_path()
    root = ET.parse(svg).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg" and root.get("viewBox") == "0 0 512 512"


def test_unknown_icon_size_and_example_name_say_what_exists():
    with pytest.raises(ResourceError, match=r"no 20 px icon; rendered sizes are 16, 24, .* 512"):
        resources.icon_path(20)
    with pytest.raises(ResourceError, match=r"no example plan named 'nope'; available: .*resnet18-fc-only"):
        resources.example_plan("nope")
    assert resources.example_plan("resnet18-fc-only.json") == resources.example_plans()["resnet18-fc-only"]


def test_missing_resource_names_the_fix():
    with pytest.raises(ResourceError, match="incomplete: reinstall freeze-workbench"):
        resources.resource_path("icons", "nothing.png")


def test_resources_import_no_qt():
    code = "import sys, workbench.resources, workbench.resources.install; " \
           "sys.exit(any(m.split('.')[0] in ('PySide6', 'shiboken6', 'pyqtgraph') for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


# ----------------------------------------------------------------------------- icon rendering
def test_committed_pngs_match_the_svg(qapp):
    """Fails when the SVG was edited without running packaging/render_icons.py."""
    from PySide6.QtGui import QImage

    render_icons = load_render_icons()
    for size, path in resources.icon_paths().items():
        fresh = QImage.fromData(render_icons.render_png(resources.svg_icon_path(), size), "PNG")
        committed = QImage(str(path))
        mean_diff = mean_abs_diff(fresh, committed)
        assert mean_diff < 2.0, f"{path} differs from the SVG (mean {mean_diff:.1f}/255): run packaging/render_icons.py"


def test_icon_shape_transparent_corners_blue_square_white_flake(qapp):
    from PySide6.QtGui import QColor, QImage

    img = QImage(str(resources.icon_path(256)))
    assert img.pixelColor(0, 0).alpha() == 0 and img.pixelColor(255, 255).alpha() == 0  # rounded corners
    edge = img.pixelColor(128, 20)  # the blue square near its top edge
    assert edge.alpha() == 255 and edge.blue() > edge.red() + 60
    centre = img.pixelColor(106, 128)  # the snowflake's centre
    assert centre == QColor(255, 255, 255, 255)


def test_bundle_icon_files_hold_the_sizes():
    from PIL import Image

    ico = Image.open(ROOT / "packaging" / "icons" / "freeze-workbench.ico")
    assert {(16, 16), (32, 32), (48, 48), (256, 256)} <= set(ico.info["sizes"])
    icns = Image.open(ROOT / "packaging" / "icons" / "freeze-workbench.icns")
    assert {(16, 16), (32, 32), (128, 128), (256, 256), (512, 512)} <= {(w, h) for w, h, _ in icns.info["sizes"]}


def test_app_icon_comes_from_the_resources(qapp):
    from PySide6.QtCore import QSize
    from PySide6.QtGui import QImage

    from workbench.gui import app

    icon = app.app_icon()
    assert QSize(512, 512) in icon.availableSizes()  # the code-drawn fallback stops at 256
    got = icon.pixmap(64, 64).toImage()
    assert mean_abs_diff(got, QImage(str(resources.icon_path(64)))) < 1.0
    drawn = app._drawn_icon().pixmap(64, 64).toImage()
    assert mean_abs_diff(got, drawn) > 10  # not the code-drawn fallback


def test_app_icon_falls_back_to_drawing_when_resources_are_broken(qapp, monkeypatch, tmp_path):
    from PySide6.QtCore import QSize

    from workbench.gui import app

    def missing() -> dict[int, Path]:
        raise ResourceError("gone")

    monkeypatch.setattr(app, "icon_paths", missing)
    icon = app.app_icon()
    assert not icon.isNull() and max(s.width() for s in icon.availableSizes()) == 256

    broken = tmp_path / "x.png"
    broken.write_bytes(b"not a png")
    monkeypatch.setattr(app, "icon_paths", lambda: {16: broken})
    assert QSize(256, 256) in app.app_icon().availableSizes()


def test_application_is_named_for_the_desktop_entry(qapp):
    from workbench.gui.app import create_application

    application = create_application()
    assert application.desktopFileName() == APP_ID
    assert max(s.width() for s in application.windowIcon().availableSizes()) == 512


# ----------------------------------------------------------------------------- desktop entry
def test_desktop_entry_essential_keys():
    path = resources.desktop_file()
    assert path.name == f"{APP_ID}.desktop"
    entry = desktop_entry(path)
    gui_scripts = PYPROJECT["project"]["gui-scripts"]
    assert entry["Type"] == "Application"
    assert entry["Name"] == "Freeze Workbench" and entry["Comment"]
    exe, *rest = entry["Exec"].split()
    assert exe in gui_scripts and gui_scripts[exe] == "workbench.cli:gui_main" and rest == ["%f"]
    assert entry["TryExec"] == exe
    assert entry["Icon"] == APP_ID  # a theme icon name, installed under hicolor
    assert entry["Terminal"] == "false"
    for key in ("Categories", "Keywords", "MimeType"):
        assert entry[key].endswith(";"), f"{key} is a list and must end with ';'"
    assert "Science" in entry["Categories"].split(";")


def test_metainfo_essential_elements():
    path = resources.metainfo_file()
    assert path.name == f"{APP_ID}.metainfo.xml"
    root = ET.parse(path).getroot()
    assert root.tag == "component" and root.get("type") == "desktop-application"
    assert root.findtext("id") == APP_ID
    assert root.findtext("metadata_license") == "CC0-1.0"
    assert root.findtext("project_license") == PYPROJECT["project"]["license"]
    assert root.findtext("name") == "Freeze Workbench" and root.findtext("summary")
    assert len(root.findall("description/p")) >= 1
    launchable = root.find("launchable")
    assert launchable is not None and launchable.get("type") == "desktop-id"
    assert launchable.text == resources.desktop_file().name
    binaries = {b.text for b in root.findall("provides/binary")}
    scripts = set(PYPROJECT["project"]["scripts"]) | set(PYPROJECT["project"]["gui-scripts"])
    assert binaries == scripts
    newest = root.find("releases/release")
    assert newest is not None and newest.get("version") == PYPROJECT["project"]["version"], (
        "add a <release> for the new version to the metainfo"
    )
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", newest.get("date", ""))
    assert root.find("content_rating") is not None


@pytest.mark.skipif(shutil.which("desktop-file-validate") is None, reason="desktop-file-utils not installed")
def test_desktop_file_validate():
    r = subprocess.run(["desktop-file-validate", str(resources.desktop_file())], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "", r.stdout + r.stderr  # not even a hint


@pytest.mark.skipif(shutil.which("appstreamcli") is None, reason="appstream not installed")
def test_appstreamcli_validate():
    r = subprocess.run(
        ["appstreamcli", "validate", "--no-net", "--explain", str(resources.metainfo_file())],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert not re.search(r"^[EW]: ", r.stdout, re.M), r.stdout  # errors or warnings; pedantic notes are fine


def test_pyproject_ships_every_resource_file():
    """Every file under resources matches a package-data pattern (or is a module)."""
    import fnmatch

    patterns = PYPROJECT["tool"]["setuptools"]["package-data"]["workbench.resources"]
    folder = ROOT / "resources"
    for path in folder.rglob("*"):
        if not path.is_file() or "__pycache__" in path.parts or path.suffix in (".py", ".pyc"):
            continue
        rel = path.relative_to(folder).as_posix()
        assert any(
            fnmatch.fnmatchcase(rel, p) and rel.count("/") == p.count("/") for p in patterns
        ), f"{rel} would not be in the wheel: add a pattern to [tool.setuptools.package-data]"
