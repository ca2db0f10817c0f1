"""Entry script of the PyInstaller bundle (both executables of the one-folder build).

``workbench`` (a console program) runs the CLI, as the ``workbench`` console script does;
``freeze-workbench`` (``Freeze Workbench.exe`` / the macOS app: no console window) runs
``workbench gui``, as the ``workbench-gui`` launcher does. Which one is chosen from the name
of the running executable, so both share one analysis of torch, Qt and the app.
"""

from __future__ import annotations

import multiprocessing
import sys
from pathlib import Path

#: Executable names (without ``.exe``) that open the desktop app instead of the CLI.
GUI_NAMES = {"freeze-workbench", "Freeze Workbench"}


def run() -> int:
    """Dispatch to the CLI or the desktop app.

    Returns:
        The exit code.
    """
    from workbench.cli import gui_main, main

    if Path(sys.executable).stem in GUI_NAMES:
        return gui_main()
    return main()


if __name__ == "__main__":
    multiprocessing.freeze_support()  # DataLoader workers re-enter the executable on Windows/macOS
    sys.exit(run())
