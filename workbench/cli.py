"""Command line entry point: ``workbench [COMMAND] ...``.

With no command (or ``gui``) the desktop app opens. Each subcommand lives in its own module
under :mod:`workbench.commands` and exposes ``HELP`` (one line), ``add_arguments(parser)`` and
``run(args) -> int``. Errors the user can fix are printed as one line on stderr with a
non-zero exit code, never as a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

#: Subcommands in the order ``--help`` lists them: name -> module.
COMMANDS: dict[str, str] = {
    "gui": "workbench.commands.gui",
    "inspect": "workbench.commands.inspect",
    "train": "workbench.commands.train",
    "doctor": "workbench.commands.doctor",
    "export": "workbench.commands.export",
    "bench": "workbench.commands.bench",
    "models": "workbench.commands.models",
}




def _available() -> dict[str, object]:
    mods = {}
    for name, modname in COMMANDS.items():
        try:
            mods[name] = importlib.import_module(modname)
        except ModuleNotFoundError as e:
            if e.name != modname:  # a real missing dependency inside an existing command
                raise
    return mods


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, object]]:
    """The argument parser with every available subcommand.

    Returns:
        ``(parser, {command name: command module})``.
    """
    from workbench import __version__

    mods = _available()
    parser = argparse.ArgumentParser(
        prog="workbench",
        description="Freeze Workbench: decide which parts of a pretrained PyTorch model train, "
        "and measure what each choice costs. With no command, the desktop app opens.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"freeze-workbench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, mod in mods.items():
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
    return parser, mods


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI.

    Args:
        argv: arguments without the program name (default: ``sys.argv[1:]``).

    Returns:
        The process exit code.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, mods = build_parser()
    args = parser.parse_args(argv)
    name = args.command or "gui"
    if args.command is None:
        args = parser.parse_args(["gui", *argv])
    from workbench.core.errors import WorkbenchError

    try:
        return int(mods[name].run(args) or 0)
    except KeyboardInterrupt:
        print("workbench: interrupted", file=sys.stderr)
        return 130
    except WorkbenchError as e:
        print(f"workbench {name}: error: {e}", file=sys.stderr)
        return 2


def gui_main() -> int:
    """Entry point of the ``workbench-gui`` launcher (no console on Windows)."""
    return main(["gui", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
