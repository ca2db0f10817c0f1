"""``workbench gui``: open the desktop app (also what ``workbench`` with no command does)."""

from __future__ import annotations

import argparse

HELP = "open the desktop app (the default when no command is given)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add ``[FILE]`` and ``--model``.

    Args:
        p: the subcommand's parser.
    """
    p.add_argument("file", nargs="?", help="a freeze plan (.json) or checkpoint (.pt/.pth/.safetensors) to open")
    p.add_argument("--model", help="torchvision model to load at start-up instead of resnet18 (e.g. vit_b_16)")


def run(args: argparse.Namespace) -> int:
    """Start the app (Qt is imported only here, so ``workbench --help`` stays Qt-free).

    Args:
        args: parsed arguments.

    Returns:
        The app's exit code.
    """
    from workbench.gui.app import main

    return main(path=getattr(args, "file", None), model=getattr(args, "model", None))
