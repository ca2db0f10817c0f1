"""The command line's argument parser: every bad value is one line, and negative values are values.

``argparse`` takes a token that starts with ``-`` for an option unless it looks like a plain
negative number: ``--memory -5GB`` or ``--steps -1e3`` then fails with "expected one
argument" under nine lines of usage. :class:`WorkbenchParser` (used for every subcommand):

* takes any token that starts with ``-`` and a digit (``-5``, ``-5GB``, ``-1e26``, ``-.5``)
  as a value (no option of the workbench starts with a digit);
* prints every parse error as one line, ``workbench CMD: error: ...``, and exits 2.

Each command checks the range of its values (a negative ``--steps``, ``--memory`` or
``--lr`` is one line naming the option); ``tests/hostile/test_hostile_negative_args.py`` gives
``-5`` to every number option and ``-5GB`` to every size option of every command.
"""

from __future__ import annotations

import argparse
import re
from typing import Any, NoReturn

__all__ = ["WorkbenchParser"]

_VALUE_WITH_MINUS = re.compile(r"^-\.?\d")


class WorkbenchParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line and that reads ``-5GB`` as a value."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _VALUE_WITH_MINUS  # argparse's hook: "-5GB" is a value, not an option

    def error(self, message: str) -> NoReturn:
        """Print ``PROG: error: MESSAGE`` as one line and exit 2 (no usage block).

        Args:
            message: argparse's message.
        """
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} --help)\n")
