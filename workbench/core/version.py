"""The installed version of Freeze Workbench (``workbench.__version__``), for modules below the top-level package."""

from __future__ import annotations

from importlib import metadata as _metadata

__all__ = ["__version__"]

try:
    __version__ = _metadata.version("freeze-workbench")
except _metadata.PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.1.0"
