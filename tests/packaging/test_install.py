"""Desktop integration: ``workbench gui --install-desktop`` writes a valid menu entry and icons."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.cli import main
from workbench.resources import APP_ID, ICON_SIZES, ResourceError, desktop_file, install

pytestmark = pytest.mark.skipif(sys.platform.startswith(("win", "darwin")), reason="freedesktop only")


def entry(path: Path) -> dict[str, str]:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str
    parser.read(path, encoding="utf-8")
    return dict(parser["Desktop Entry"])


def test_install_and_uninstall_under_a_prefix(tmp_path):
    files = install.install_desktop_entry(tmp_path, command=["/opt/fw/bin/workbench-gui"])
    share = tmp_path / "share"
    assert files == install.installed_files(tmp_path)
    assert share / "applications" / f"{APP_ID}.desktop" in files
    for size in ICON_SIZES:
        png = share / "icons" / "hicolor" / f"{size}x{size}" / "apps" / f"{APP_ID}.png"
        assert png.read_bytes()[:4] == b"\x89PNG"
    assert (share / "icons" / "hicolor" / "scalable" / "apps" / f"{APP_ID}.svg").is_file()
    assert (share / "metainfo" / f"{APP_ID}.metainfo.xml").is_file()
    installed = entry(share / "applications" / f"{APP_ID}.desktop")
    packaged = entry(desktop_file())
    assert installed["Exec"] == "/opt/fw/bin/workbench-gui %f" and installed["TryExec"] == "/opt/fw/bin/workbench-gui"
    assert {k: v for k, v in installed.items() if k not in ("Exec", "TryExec")} == {
        k: v for k, v in packaged.items() if k not in ("Exec", "TryExec")
    }
    assert sorted(install.uninstall_desktop_entry(tmp_path)) == sorted(files)
    assert not any(f.exists() for f in files)
    assert install.uninstall_desktop_entry(tmp_path) == []


def test_default_location_is_xdg_data_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert install.data_home() == tmp_path / "xdg"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/ignored")  # the spec says: ignore relative paths
    assert install.data_home() == Path.home() / ".local" / "share"


def test_exec_is_this_installations_launcher():
    command = install.desktop_exec()
    here = Path(sys.executable).parent / "workbench-gui"
    if here.is_file():
        assert command == [str(here)]
    else:
        assert command[0] == sys.executable or Path(command[0]).name == "workbench-gui"


@pytest.mark.skipif(shutil.which("desktop-file-validate") is None, reason="desktop-file-utils not installed")
def test_installed_entry_with_awkward_path_validates(tmp_path):
    awkward = ["/opt/My Apps/fw $1/workbench-gui", "--flag=50%"]
    install.install_desktop_entry(tmp_path, command=awkward)
    path = tmp_path / "share" / "applications" / f"{APP_ID}.desktop"
    r = subprocess.run(["desktop-file-validate", str(path)], capture_output=True, text=True)
    assert r.returncode == 0 and not r.stdout.strip(), r.stdout
    assert entry(path)["Exec"] == '"/opt/My Apps/fw \\\\$1/workbench-gui" --flag=50%% %f'


def test_cli_install_desktop(tmp_path, capsys):
    assert main(["gui", "--install-desktop", "--prefix", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"installed {len(install.installed_files(tmp_path))} files")
    assert str(tmp_path / "share" / "applications" / f"{APP_ID}.desktop") in out
    assert main(["gui", "--uninstall-desktop", "--prefix", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith(f"removed {len(install.installed_files(tmp_path))} files")


def test_refused_on_windows_with_what_to_do(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(sys, "platform", "win32")
    with pytest.raises(ResourceError, match="build the app bundle instead"):
        install.install_desktop_entry(tmp_path)
    assert main(["gui", "--install-desktop", "--prefix", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Linux/BSD (freedesktop) feature" in err
