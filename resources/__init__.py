"""Package data: the application icon, the desktop entry, AppStream metainfo, example plans, the
start-up model's described tree.

Everything is found through :mod:`importlib.resources`, so it works the same from a source
checkout, an installed wheel and a PyInstaller bundle. The accessors return real file paths
(a resource inside a zip archive is extracted once, to a temporary file kept until exit).
This module never imports Qt.

Layout::

    resources/
      io.github.freezeworkbench.FreezeWorkbench.desktop         freedesktop launcher entry
      io.github.freezeworkbench.FreezeWorkbench.metainfo.xml    AppStream metainfo
      icons/hicolor/scalable/apps/<APP_ID>.svg                  icon source
      icons/hicolor/<N>x<N>/apps/<APP_ID>.png                   rendered sizes (ICON_SIZES)
      plans/*.json                                              example freeze plans
      trees/<source>-<name>.json                                the start-up model's tree, described
                                                                (shown before torch is imported)

The icon folder mirrors the freedesktop ``hicolor`` theme, so installing the desktop entry
(:mod:`workbench.resources.install`) is a plain copy.
"""

from __future__ import annotations

import atexit
import contextlib
from importlib import resources as _resources
from pathlib import Path

from workbench.core.errors import WorkbenchError

try:
    from importlib.resources.abc import Traversable
except ImportError:  # Python 3.10
    from importlib.abc import Traversable

__all__ = [
    "APP_ID",
    "ICON_SIZES",
    "ResourceError",
    "desktop_file",
    "example_plan",
    "example_plans",
    "icon_path",
    "icon_paths",
    "metainfo_file",
    "resource_path",
    "svg_icon_path",
]

#: Reverse-DNS application id: the desktop file's name, the icon name, the AppStream id and
#: the Qt desktop file name (which Wayland compositors use to find the window's icon).
APP_ID = "io.github.freezeworkbench.FreezeWorkbench"
#: The rendered PNG sizes of the icon (pixels, square).
ICON_SIZES: tuple[int, ...] = (16, 24, 32, 48, 64, 128, 256, 512)

_extracted = contextlib.ExitStack()
atexit.register(_extracted.close)


class ResourceError(WorkbenchError, LookupError):
    """A resource the installation should contain is missing or unknown."""


def _root() -> Traversable:
    return _resources.files(__name__)


def resource_path(*parts: str) -> Path:
    """The file system path of a packaged resource.

    Args:
        parts: path components below ``resources`` (``"plans", "x.json"``).

    Returns:
        An existing file's path (extracted to a temporary file when the package is zipped).

    Raises:
        ResourceError: no such resource; the message says how to repair the installation.
    """
    item = _root().joinpath(*parts)
    if not item.is_file():
        raise ResourceError(
            f"resource {'/'.join(parts)!r} is missing from {_root()}; the installation is "
            "incomplete: reinstall freeze-workbench (pip install --force-reinstall freeze-workbench)"
        )
    if isinstance(item, Path):
        return item
    return _extracted.enter_context(_resources.as_file(item))


def svg_icon_path() -> Path:
    """The scalable application icon.

    Returns:
        Path of ``icons/hicolor/scalable/apps/<APP_ID>.svg``.

    Raises:
        ResourceError: the file is missing.
    """
    return resource_path("icons", "hicolor", "scalable", "apps", f"{APP_ID}.svg")


def icon_path(size: int) -> Path:
    """The application icon rendered at ``size`` pixels.

    Args:
        size: one of :data:`ICON_SIZES`.

    Returns:
        Path of ``icons/hicolor/<size>x<size>/apps/<APP_ID>.png``.

    Raises:
        ResourceError: ``size`` is not rendered (the message lists the sizes), or the file
            is missing.
    """
    if size not in ICON_SIZES:
        raise ResourceError(
            f"no {size} px icon; rendered sizes are {', '.join(map(str, ICON_SIZES))}: "
            "pick one of them, or use svg_icon_path() and scale it"
        )
    return resource_path("icons", "hicolor", f"{size}x{size}", "apps", f"{APP_ID}.png")


def icon_paths() -> dict[int, Path]:
    """Every rendered icon size.

    Returns:
        ``{size: path}`` for :data:`ICON_SIZES`, smallest first.

    Raises:
        ResourceError: a size is missing.
    """
    return {size: icon_path(size) for size in ICON_SIZES}


def desktop_file() -> Path:
    """The freedesktop ``.desktop`` entry as packaged (``Exec=workbench-gui %f``).

    :func:`workbench.resources.install.install_desktop_entry` installs it with the launcher's
    absolute path.

    Returns:
        Path of ``<APP_ID>.desktop``.

    Raises:
        ResourceError: the file is missing.
    """
    return resource_path(f"{APP_ID}.desktop")


def metainfo_file() -> Path:
    """The AppStream metainfo (software centers read it).

    Returns:
        Path of ``<APP_ID>.metainfo.xml``.

    Raises:
        ResourceError: the file is missing.
    """
    return resource_path(f"{APP_ID}.metainfo.xml")


def example_plans() -> dict[str, Path]:
    """The example freeze plans shipped with the package.

    Returns:
        ``{name: path}`` sorted by name; the name is the file name without ``.json``
        (``"resnet18-fc-only"``).
    """
    folder = _root().joinpath("plans")
    if not folder.is_dir():
        return {}
    names = sorted(item.name for item in folder.iterdir() if item.name.endswith(".json") and item.is_file())
    return {name[: -len(".json")]: resource_path("plans", name) for name in names}


def example_plan(name: str) -> Path:
    """One example plan by name.

    Args:
        name: a key of :func:`example_plans` (``"resnet18-fc-only"``; ``.json`` may be given).

    Returns:
        The plan file's path (load it with ``FreezePlan.load``).

    Raises:
        ResourceError: unknown name; the message lists the examples.
    """
    plans = example_plans()
    key = name[: -len(".json")] if name.endswith(".json") else name
    if key not in plans:
        raise ResourceError(
            f"no example plan named {name!r}; available: {', '.join(plans) or 'none'}"
        )
    return plans[key]
