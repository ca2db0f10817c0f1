"""Close-name suggestions for error messages ("did you mean 'layer4'?")."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["close_matches", "did_you_mean"]


def close_matches(word: str, choices: Iterable[str], *, n: int = 1, cutoff: float = 0.6) -> list[str]:
    """The names in ``choices`` closest to ``word``, best first.

    Args:
        word: what the user wrote.
        choices: the valid names.
        n: at most this many names.
        cutoff: similarity in [0, 1] below which a name is not offered.

    Returns:
        Up to ``n`` names (empty when none is close).
    """
    return difflib.get_close_matches(str(word), list(choices), n=n, cutoff=cutoff)


def did_you_mean(word: str, choices: Iterable[str], *, n: int = 1, cutoff: float = 0.6) -> str:
    """``"did you mean 'x'?"`` (or ``"'x', 'y'"`` for several) for the names closest to ``word``.

    Args:
        word: what the user wrote.
        choices: the valid names.
        n: at most this many names.
        cutoff: similarity in [0, 1] below which a name is not offered.

    Returns:
        The question, or ``""`` when no name is close.
    """
    close = close_matches(word, choices, n=n, cutoff=cutoff)
    return f"did you mean {', '.join(repr(c) for c in close)}?" if close else ""
