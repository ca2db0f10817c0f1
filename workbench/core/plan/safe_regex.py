"""Regular expressions from files, matched in time linear in the text: PEFT ``target_modules``.

Python's ``re`` backtracks, and no count of quantifiers bounds its time: ``(.*){30}X``,
``(?>(.*.*)*X)`` or eight ``.*`` then ``X`` take minutes on a 100-character module path.
Counting cannot be made safe, so the match is done by RE2 (``google-re2``, a dependency),
an automaton that takes at most ``O(len(text) * program size)`` steps for every pattern:

* the pattern must be valid for Python's ``re`` (PEFT matches with ``re.fullmatch``) and at
  most :data:`MAX_REGEX_CHARS` characters;
* what RE2 cannot match in linear time is refused, naming it: backreferences, lookaround,
  atomic groups ``(?>...)``, possessive quantifiers ``*+``, conditionals;
* RE2's compiled program may have at most :data:`MAX_REGEX_PROGRAM` instructions (a
  ``{n}`` repeat counts n times), so a 100-character path costs at most 100 x 2,000 steps.

Without ``google-re2`` (installed with ``--no-deps``) no expression is matched at all: each
is refused with one line that names the package, never handed to the backtracking ``re``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

__all__ = ["MAX_REGEX_CHARS", "MAX_REGEX_PROGRAM", "RegexRefusedError", "linear_fullmatch"]

#: Longest expression accepted, in characters.
MAX_REGEX_CHARS = 1000
#: Most instructions of the compiled RE2 program (bounds the steps per character matched).
MAX_REGEX_PROGRAM = 2000
#: RE2's memory for one expression (its default): bytes.
_RE2_MAX_MEM = 8 << 20


class RegexRefusedError(ValueError):
    """An expression that is invalid or has no linear-time match; the message is one line."""


def _features(parsed: Any) -> str | None:
    """The first construct of a parsed Python pattern that RE2 has no linear-time match for."""
    from re import _constants as c  # type: ignore[attr-defined]
    from re import _parser  # type: ignore[attr-defined]

    names = {
        c.GROUPREF: "a backreference",
        c.GROUPREF_EXISTS: "a conditional group (?(1)...)",
        c.ASSERT: "a lookaround (?=...) or (?<=...)",
        c.ASSERT_NOT: "a negative lookaround (?!...) or (?<!...)",
        c.ATOMIC_GROUP: "an atomic group (?>...)",
        c.POSSESSIVE_REPEAT: "a possessive quantifier (*+, ++, ?+)",
    }
    stack = [parsed]
    while stack:  # a stack, not recursion: nesting is as deep as the pattern allows
        for op, av in stack.pop():
            if op in names:
                return names[op]
            for part in av if isinstance(av, (tuple, list)) else [av]:
                if isinstance(part, _parser.SubPattern):
                    stack.append(part)
                elif isinstance(part, list):  # the branches of an alternation
                    stack.extend(x for x in part if isinstance(x, _parser.SubPattern))
    return None


def linear_fullmatch(pattern: str) -> Callable[[str], bool]:
    """A whole-text matcher for ``pattern`` whose time is linear in the text, or a refusal.

    Args:
        pattern: the regular expression (Python syntax, matched against a whole string).

    Returns:
        ``match(text) -> bool``, true when ``pattern`` matches all of ``text``.

    Raises:
        RegexRefusedError: the expression is too long, invalid, uses a construct listed in the
            module docstring, compiles to more than :data:`MAX_REGEX_PROGRAM` instructions,
            or ``google-re2`` is not installed (one line each).
    """
    from re import _parser  # type: ignore[attr-defined]

    if len(pattern) > MAX_REGEX_CHARS:
        raise RegexRefusedError(f"is a regular expression of {len(pattern):,} characters; at most {MAX_REGEX_CHARS} are accepted")
    try:
        re.compile(pattern)  # PEFT's syntax: what Python's re refuses is refused here too
        parsed = _parser.parse(pattern)
    except (re.error, RecursionError, OverflowError) as e:
        raise RegexRefusedError(f"is not a valid regular expression ({e})") from None
    found = _features(parsed)
    if found:
        raise RegexRefusedError(f"has {found}, which no linear-time matcher supports")
    try:
        import re2
    except ImportError:
        raise RegexRefusedError(
            "needs google-re2 to be matched in bounded time (pip install google-re2); without it regular "
            "expressions are refused"
        ) from None
    options = re2.Options()
    options.log_errors = False  # RE2 would print its own lines on stderr
    options.max_mem = _RE2_MAX_MEM
    try:
        compiled = re2.compile(pattern, options)
    except re2.error as e:
        why = e.args[0].decode("utf-8", "replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        raise RegexRefusedError(f"cannot be matched in linear time ({why})") from None
    if compiled.programsize > MAX_REGEX_PROGRAM:
        raise RegexRefusedError(
            f"compiles to {compiled.programsize:,} steps per character, more than the {MAX_REGEX_PROGRAM:,} "
            "accepted (large {n} repeats)"
        )
    return lambda text: compiled.fullmatch(text) is not None
