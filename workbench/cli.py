"""Command line entry point: ``workbench [COMMAND] ...``.

With no command (or ``gui``) the desktop app opens; every ``gui`` argument works without the
word ``gui`` (``workbench plan.json``, ``workbench --model vit_b_16 --screenshot out.png``). Each subcommand lives in its own module
under :mod:`workbench.commands` and exposes ``add_arguments(parser)`` and ``run(args) -> int``;
its one-line help is registered in :data:`COMMANDS`. Errors the user can fix are printed as
one line on stderr with a non-zero exit code, never as a traceback.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import sys
import warnings
from collections.abc import Sequence
from typing import NamedTuple

from workbench.commands.arguments import WorkbenchParser
from workbench.core.errors import WorkbenchError


class Command(NamedTuple):
    """A subcommand: the module that implements it and its one-line help."""

    module: str
    help: str


#: Subcommands in the order ``--help`` lists them. Modules are imported only when their
#: command runs, so ``workbench --help`` and ``--version`` stay fast (no torch, no Qt).
COMMANDS: dict[str, Command] = {
    "gui": Command("workbench.commands.gui", "open the desktop app (the default when no command is given)"),
    "inspect": Command("workbench.commands.inspect", "print a model's module tree with parameter counts and a plan's effect (table or --json)"),
    "train": Command("workbench.commands.train", "train a model with a freeze plan and report step time, memory, trainable parameters and verification"),
    "doctor": Command("workbench.commands.doctor", "find freezing pitfalls: static checks plus N real training steps on synthetic data (exit 1 on errors)"),
    "export": Command("workbench.commands.export", "export a plan as a plain PyTorch script (--to x.py, needs only torch and the model's library), as plan JSON (--to x.json) or as a PEFT adapter (--peft DIR)"),
    "bench": Command("workbench.commands.bench", "measure step time and memory of freeze plans against full fine-tuning, side by side"),
    "advise": Command("workbench.commands.advise", "propose the freeze plans that fit a memory budget and choose the one that trains the most (--measure to check them)"),
    "sweep": Command("workbench.commands.sweep", "train candidate plans for one budget, stop the weak ones early, and recommend the cheapest within a share of the best metric (Pareto fronts of metric vs time and memory)"),
    "runs": Command("workbench.commands.runs", "list, show and compare training runs: the app's and `workbench train --save` folders (step time, peak memory, trainable, per plan segment, validation)"),
    "models": Command("workbench.commands.models", "list torchvision classification models with their weights and whether they are cached"),
}


def _command_of(argv: Sequence[str]) -> str | None:
    """The subcommand named in ``argv``: the first token that is not an option."""
    for tok in argv:
        if tok == "--":
            return None
        if not tok.startswith("-"):
            return tok if tok in COMMANDS else None
    return None


def _opens_app(argv: Sequence[str]) -> bool:
    """Whether ``argv`` (no command named) is for the app: ``workbench plan.json``,
    ``workbench --model X``, ``workbench model.safetensors --screenshot out.png``.

    Not ``--help``/``--version``, and not a first word that is neither a file nor has a
    suffix (a mistyped command such as ``workbench trian`` is reported as one).
    """
    if not argv or "--version" in argv:
        return not argv
    first = argv[0]
    if first.startswith("-"):  # options first: a word after them is an option's value or the file
        return not any(tok in ("-h", "--help") for tok in argv)
    return os.path.exists(first) or "." in os.path.basename(first) or os.sep in first


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser, with the arguments of ``command`` (if given) registered.

    Args:
        command: the subcommand whose module is imported to add its arguments.

    Returns:
        The parser.
    """
    from workbench import __version__

    parser = WorkbenchParser(
        prog="workbench",
        description="Freeze Workbench: decide which parts of a pretrained PyTorch model train, "
        "and measure what each choice costs. With no command, the desktop app opens.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"freeze-workbench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, cmd in COMMANDS.items():
        p = sub.add_parser(name, help=cmd.help, description=cmd.help)
        if name == command:
            importlib.import_module(cmd.module).add_arguments(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI.

    Args:
        argv: arguments without the program name (default: ``sys.argv[1:]``).

    Returns:
        The process exit code.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    name = _command_of(argv)
    with warnings.catch_warnings():
        warnings.showwarning = functools.partial(_show_warning, name or "gui")
        return _main(argv, name)


def _main(argv: list[str], name: str | None) -> int:
    try:  # Ctrl+C while torch is imported or the model is built: one line, no traceback
        if name is None:
            if not _opens_app(argv):
                build_parser().parse_args(argv)  # --help, --version, or an unknown command: argparse exits
            name, argv = "gui", ["gui", *argv]
        args = build_parser(name).parse_args(argv)
        return int(importlib.import_module(COMMANDS[name].module).run(args) or 0)
    except KeyboardInterrupt:
        print("workbench: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of stdout closed it (`workbench models | head`): it has what it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())  # the flush at exit writes nowhere instead of raising again
        except (OSError, ValueError):  # stdout is not a file (captured)
            pass
        finally:
            os.close(devnull)
        return 0
    except WorkbenchError as e:
        print(f"workbench {name}: error: {e}", file=sys.stderr)
        return 2
    except (OSError, RecursionError) as e:  # a file or folder the user named, found wanting
        print(f"workbench {name}: error: {type(e).__name__}: {_one_line(e)}", file=sys.stderr)
        return 2


def _show_warning(command: str, message: Warning | str, category: type[Warning], *_args: object, **_kw: object) -> None:
    """Print a warning as one line on stderr (``workbench CMD: warning: ...``), on rank 0 only."""
    if os.environ.get("RANK", "0") not in ("", "0"):
        return
    print(f"workbench {command}: warning: {' '.join(str(message).split())}", file=sys.stderr)


def _one_line(exc: BaseException) -> str:
    """The message of an error, joined onto one line."""
    return " ".join(str(exc).split()) or type(exc).__name__


def gui_main() -> int:
    """Entry point of the ``workbench-gui`` launcher (no console on Windows)."""
    return main(["gui", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
