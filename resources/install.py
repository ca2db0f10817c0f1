"""Install the desktop entry, icons and AppStream metainfo for the current user (freedesktop).

``pip``/``pipx`` install the ``workbench`` and ``workbench-gui`` launchers but cannot put an
entry in the application menu. ``workbench gui --install-desktop`` does, with
:func:`install_desktop_entry`: it copies

- ``<APP_ID>.desktop`` to ``$XDG_DATA_HOME/applications/`` with ``Exec``/``TryExec`` set to
  the absolute path of this installation's launcher (menus do not search ``~/.local/bin``
  or a virtual environment's ``bin``);
- the icon sizes and the SVG to ``$XDG_DATA_HOME/icons/hicolor/<N>x<N>/apps/``;
- the metainfo to ``$XDG_DATA_HOME/metainfo/``.

``$XDG_DATA_HOME`` defaults to ``~/.local/share``; ``--prefix /usr/local`` installs to
``/usr/local/share`` instead. :func:`uninstall_desktop_entry` removes exactly these files.
Qt-free.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from workbench.core.atomic import atomic_write
from workbench.resources import APP_ID, ResourceError, desktop_file, icon_paths, metainfo_file, svg_icon_path

__all__ = ["data_home", "desktop_exec", "install_desktop_entry", "installed_files", "uninstall_desktop_entry"]

#: Characters that make a desktop-entry ``Exec`` argument need quoting (Desktop Entry spec).
_RESERVED = set(" \t\n\"'\\><~|&;$*?#()`")


def data_home(prefix: str | os.PathLike[str] | None = None) -> Path:
    """The ``share`` folder entries go to.

    Args:
        prefix: an installation prefix (``/usr/local`` → ``/usr/local/share``); None for the
            user's ``$XDG_DATA_HOME`` (default ``~/.local/share``).

    Returns:
        The folder (not created).
    """
    if prefix is not None:
        return Path(prefix).expanduser() / "share"
    xdg = os.environ.get("XDG_DATA_HOME")
    return Path(xdg).expanduser() if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "share"


def _quote(arg: str) -> str:
    """Quote one ``Exec`` argument as the Desktop Entry spec asks (then escape for the file)."""
    arg = arg.replace("%", "%%")  # a literal percent sign; %f etc. are field codes
    if arg and not (set(arg) & _RESERVED):
        return arg
    inner = "".join("\\" + c if c in '"`$\\' else c for c in arg)
    return ('"' + inner + '"').replace("\\", "\\\\")  # string-level escape of the key's value


def desktop_exec() -> list[str]:
    """The command the desktop entry runs for this installation.

    Returns:
        ``[<bundle executable>, "gui"]`` in a PyInstaller bundle, else
        ``[<bin>/workbench-gui]`` when that launcher is next to this Python (a venv, pipx),
        else ``[<python>, "-m", "workbench", "gui"]``.
    """
    if getattr(sys, "frozen", False):
        return [sys.executable, "gui"]
    here = Path(sys.executable).parent
    for name in ("workbench-gui", "workbench-gui.exe"):
        if (here / name).is_file():
            return [str(here / name)]
    found = shutil.which("workbench-gui")
    if found:
        return [str(Path(found).resolve())]
    return [sys.executable, "-m", "workbench", "gui"]


def _desktop_text(command: list[str]) -> str:
    """The packaged ``.desktop`` text with ``Exec``/``TryExec`` set to ``command``."""
    lines = []
    for line in desktop_file().read_text(encoding="utf-8").splitlines():
        if line.startswith("Exec="):
            line = "Exec=" + " ".join(_quote(a) for a in command) + " %f"
        elif line.startswith("TryExec="):
            line = "TryExec=" + command[0]
        lines.append(line)
    return "\n".join(lines) + "\n"


def installed_files(prefix: str | os.PathLike[str] | None = None) -> list[Path]:
    """The files :func:`install_desktop_entry` writes.

    Args:
        prefix: as in :func:`data_home`.

    Returns:
        Their paths (desktop entry, icons, metainfo).
    """
    share = data_home(prefix)
    icons = share / "icons" / "hicolor"
    files = [share / "applications" / f"{APP_ID}.desktop"]
    files += [icons / f"{s}x{s}" / "apps" / f"{APP_ID}.png" for s in icon_paths()]
    files += [icons / "scalable" / "apps" / f"{APP_ID}.svg", share / "metainfo" / f"{APP_ID}.metainfo.xml"]
    return files


def _check_platform() -> None:
    if sys.platform.startswith(("win", "darwin")):
        raise ResourceError(
            "desktop entries are a Linux/BSD (freedesktop) feature; on Windows and macOS build the "
            "app bundle instead (see packaging/README.md)"
        )


def install_desktop_entry(
    prefix: str | os.PathLike[str] | None = None, command: list[str] | None = None
) -> list[Path]:
    """Put Freeze Workbench in the application menu.

    Args:
        prefix: as in :func:`data_home` (default: the user's data folder).
        command: the command to launch (default: :func:`desktop_exec`).

    Returns:
        The written files (:func:`installed_files`).

    Raises:
        ResourceError: not a freedesktop platform, or the package's resources are missing.
        OSError: a folder is not writable (use a prefix you can write to).
    """
    _check_platform()
    command = command or desktop_exec()
    files = installed_files(prefix)
    sources = [None, *icon_paths().values(), svg_icon_path(), metainfo_file()]
    for dest, src in zip(files, sources):
        dest.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(dest, _desktop_text(command) if src is None else src.read_bytes())
    return files


def uninstall_desktop_entry(prefix: str | os.PathLike[str] | None = None) -> list[Path]:
    """Remove what :func:`install_desktop_entry` wrote.

    Args:
        prefix: the prefix it was installed with.

    Returns:
        The files that were removed (missing ones are skipped).

    Raises:
        ResourceError: not a freedesktop platform.
    """
    _check_platform()
    removed = []
    for path in installed_files(prefix):
        if path.is_file():
            path.unlink()
            removed.append(path)
    return removed
