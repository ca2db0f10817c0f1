"""``workbench gui``: open the desktop app (also what ``workbench`` with no command does).

Besides opening the window it can:

- ``--screenshot PATH``: start the app headless (Qt's ``offscreen`` platform unless
  ``QT_QPA_PLATFORM`` says otherwise), load the start-up model (and ``--model``/``FILE``),
  render the window to a PNG and exit: 0 on success, 2 when anything went wrong. Settings go
  to a temporary folder, and dialogs are printed instead of shown, so it never blocks. This is
  the smoke test of installed copies and bundles (``packaging/smoke_test.sh``).
- ``--install-desktop`` / ``--uninstall-desktop [--prefix DIR]``: add or remove the
  application-menu entry, icons and AppStream metainfo (freedesktop; see
  :mod:`workbench.resources.install`).
"""

from __future__ import annotations

import argparse
import html
import os
import re
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: Window size of ``--screenshot`` (pixels); the window's minimum size wins where it is larger.
SCREENSHOT_SIZE = (1280, 800)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add ``[FILE]``, ``--model``, ``--screenshot``, ``--install-desktop`` and friends.

    Args:
        p: the subcommand's parser.
    """
    p.add_argument("file", nargs="?", help="a freeze plan (.json) or checkpoint (.safetensors/.pt/.pth/.bin/.ckpt) to open")
    p.add_argument(
        "--model",
        metavar="SPEC",
        help="model to load at start-up instead of resnet18: a torchvision name (vit_b_16), timm:NAME, "
        "hf:FOLDER_OR_CACHED_REPO, or py:FILE.py:FACTORY / py:MODULE:FACTORY (runs that code)",
    )
    p.add_argument(
        "--screenshot",
        metavar="PNG",
        help="render the window to this PNG once the model has loaded, then exit (headless; exit 0 on success)",
    )
    p.add_argument(
        "--screenshot-timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="with --screenshot: give up (exit 2) when loading takes longer than this (default: 600)",
    )
    desktop = p.add_mutually_exclusive_group()
    desktop.add_argument(
        "--install-desktop",
        action="store_true",
        help="add Freeze Workbench to the application menu (desktop entry, icons, metainfo; Linux) and exit",
    )
    desktop.add_argument(
        "--uninstall-desktop", action="store_true", help="remove what --install-desktop added and exit"
    )
    p.add_argument(
        "--prefix",
        metavar="DIR",
        help="with --(un)install-desktop: use DIR/share instead of the user's ~/.local/share",
    )


def run(args: argparse.Namespace) -> int:
    """Start the app (Qt is imported only here, so ``workbench --help`` stays Qt-free).

    Args:
        args: parsed arguments.

    Returns:
        The app's exit code.

    Raises:
        WorkbenchError: bad ``--screenshot`` path, or desktop integration not possible here.
    """
    if getattr(args, "install_desktop", False) or getattr(args, "uninstall_desktop", False):
        return _desktop_integration(args)
    if getattr(args, "screenshot", None):
        return screenshot(
            args.screenshot,
            path=getattr(args, "file", None),
            model=getattr(args, "model", None),
            timeout=getattr(args, "screenshot_timeout", 600.0),
        )
    from workbench.gui.app import main

    return main(path=getattr(args, "file", None), model=getattr(args, "model", None))


def _desktop_integration(args: argparse.Namespace) -> int:
    from workbench.resources.install import install_desktop_entry, uninstall_desktop_entry

    if args.install_desktop:
        files = install_desktop_entry(args.prefix)
        print(f"installed {len(files)} files; Freeze Workbench is in the application menu:")
    else:
        files = uninstall_desktop_entry(args.prefix)
        print(f"removed {len(files)} files")
    for f in files:
        print(f"  {f}")
    return 0


#: Answers of a question that ``--screenshot`` never gives (they write or download).
_UNSAFE_ANSWERS = frozenset({"Download", "Save", "Overwrite", "Replace"})


class _HeadlessDialogs:
    """Stands in for :mod:`workbench.gui.dialogs` during ``--screenshot``: prints, never blocks."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def error(self, parent: Any, title: str, message: str, details: str = "") -> None:
        self.errors.append(f"{title}: {message}")
        print(f"workbench gui: error: {title}: {message}", file=sys.stderr)

    def info(self, parent: Any, title: str, message: str) -> None:
        print(f"workbench gui: {title}: {message}", file=sys.stderr)

    def ask(self, parent: Any, title: str, question: str, choices: Sequence[str], default: str) -> str:
        # never save, download or overwrite anything: unsaved edits are discarded, "weights not
        # cached" gets its default (random initialisation)
        if "Discard" in choices:
            answer = "Discard"
        elif default not in _UNSAFE_ANSWERS:
            answer = default
        else:
            answer = "Cancel" if "Cancel" in choices else default
        text = html.unescape(re.sub(r"<[^>]+>", " ", question))  # a rich-text question, as plain text
        print(f"workbench gui: {title}: {' '.join(text.split())} -> {answer}", file=sys.stderr)
        return answer

    def open_file(self, *args: Any) -> str:
        return ""

    save_file = open_file
    open_dir = open_file

    def choose(self, *args: Any, **kwargs: Any) -> None:
        return None

    def run_dialog(self, dialog: Any) -> bool:
        return False


def screenshot(
    png: str | os.PathLike[str],
    *,
    path: str | None = None,
    model: str | None = None,
    timeout: float = 600.0,
    size: tuple[int, int] = SCREENSHOT_SIZE,
) -> int:
    """Start the app headless, wait for loading to finish, save the window as PNG, exit.

    Args:
        png: the PNG file to write (its folder is created).
        path: a plan or checkpoint to open, as ``workbench gui FILE``.
        model: a model spec to load instead of the default, as ``--model`` (``resnet50``,
            ``timm:NAME``, ``hf:FOLDER``, ``py:FILE.py:FACTORY``).
        timeout: seconds to wait for loading before giving up.
        size: window size in pixels (the window's minimum size wins where larger).

    Returns:
        0 when the window rendered with a model loaded and no error was reported, else 2.

    Raises:
        WorkbenchError: the PNG's folder cannot be created.
    """
    from workbench.core.errors import WorkbenchError

    out = Path(png).expanduser().resolve()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise WorkbenchError(f"cannot create the folder of --screenshot {png} ({e}); choose a writable path") from None
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

    import tempfile

    from PySide6.QtCore import QSettings, QTimer
    from PySide6.QtWidgets import QApplication

    from workbench.core.atomic import atomic_path
    from workbench.gui import dialogs
    from workbench.gui.app import create_application
    from workbench.gui.app import main as app_main

    headless = _HeadlessDialogs()
    saved = {
        name: getattr(dialogs, name)
        for name in ("error", "info", "ask", "open_file", "open_dir", "save_file", "choose", "run_dialog")
    }
    result: dict[str, int] = {}
    deadline = time.monotonic() + timeout
    quiet_polls = [0]

    def main_window() -> Any:
        """The full window once it exists (the start-up window comes first; see gui.startup)."""
        return next((w for w in QApplication.topLevelWidgets() if w.objectName() == "MainWindow"), None)

    def finish(code: int, window: Any) -> None:
        result["code"] = code
        if window is not None:
            window.close()
        QApplication.exit(code)

    def poll() -> None:
        window = main_window()
        try:
            c = window.controller if window is not None else None
            idle = c is not None and not c.busy and not c.waiting and not c.checking
            quiet_polls[0] = quiet_polls[0] + 1 if idle else 0
            if quiet_polls[0] < 3:  # idle for three polls in a row: queued loads have started
                if time.monotonic() > deadline:
                    print(f"workbench gui: error: still loading after {timeout:g} s; try a larger "
                          "--screenshot-timeout", file=sys.stderr)
                    finish(2, window)
                else:
                    QTimer.singleShot(50, poll)
                return
            assert window is not None and c is not None
            if c.tree is None:
                headless.errors.append("no model loaded")
                print("workbench gui: error: the window has no model loaded", file=sys.stderr)
            window.resize(*size)
            for _ in range(3):
                QApplication.processEvents()
            image = window.grab()
            with atomic_path(out) as tmp:
                if not image.save(str(tmp), "PNG"):
                    raise OSError(f"Qt could not write {out}")
            out.chmod(0o644)
            counts = c.counts
            params = f", {counts.total:,} parameters" if counts is not None else ""
            print(f"screenshot: {out} ({image.width()}x{image.height()}; model: {c.spec.get('name') or '?'}{params})")
            finish(2 if headless.errors else 0, window)
        except Exception:  # a failure inside a Qt slot must end the run, not vanish
            traceback.print_exc()
            finish(2, window)

    with tempfile.TemporaryDirectory() as tmp:
        QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, tmp)
        for name in saved:
            setattr(dialogs, name, getattr(headless, name))
        try:
            create_application(reserve_cores=False)  # torch is imported behind the full window
            QTimer.singleShot(0, poll)
            rc = app_main(path=path, model=model)
        finally:
            for name, fn in saved.items():
                setattr(dialogs, name, fn)
    return result.get("code", 2 if rc == 0 else rc)
