"""Short human-readable numbers: ``11.7M`` parameters, ``52 MB``.

One set of formats for the window, the command line and the doctor's messages.
"""

from __future__ import annotations

__all__ = ["fmt_bytes", "fmt_count", "fmt_lr", "fmt_percent"]


def _three_digits(value: float) -> str:
    """``9.4``, ``51.3``, ``513``: about three significant digits, no trailing ``.0``."""
    if value >= 100:
        return f"{value:.0f}"
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def fmt_count(n: int) -> str:
    """Format a parameter count.

    Args:
        n: number of elements (>= 0).

    Returns:
        ``"0"``, ``"512"``, ``"9.4k"``, ``"513k"``, ``"11.7M"``, ``"1.2B"``.
    """
    if n < 1000:
        return str(int(n))
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale * 0.9995 or unit == "k":
            value = n / scale
            if value >= 999.5 and unit != "B":
                continue
            return _three_digits(value) + unit
    return str(int(n))  # pragma: no cover - the loop always returns


def fmt_bytes(n: int) -> str:
    """Format a byte count with decimal units (1 MB = 10^6 bytes).

    Args:
        n: bytes (>= 0).

    Returns:
        ``"512 B"``, ``"9.4 kB"``, ``"52 MB"``, ``"5.2 MB"``, ``"1.2 GB"``.
    """
    if n < 1000:
        return f"{int(n)} B"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        value = n / scale
        if value >= 0.9995:
            text = f"{value:.1f}" if value < 9.95 else f"{value:.0f}"
            if text.endswith(".0"):
                text = text[:-2]
            return f"{text} {unit}"
    return f"{int(n)} B"  # pragma: no cover


def fmt_percent(part: float, whole: float) -> str:
    """``part`` as a percentage of ``whole``: ``"4.4%"``, ``"<0.1%"``, ``"100%"``.

    Args:
        part: the share.
        whole: the total (0 gives ``"0%"``).

    Returns:
        The percentage text.
    """
    if whole <= 0 or part <= 0:
        return "0%"
    pct = 100.0 * part / whole
    if pct >= 99.95:
        return "100%" if part >= whole else "99.9%"
    if pct < 0.05:
        return "<0.1%"
    return f"{pct:.1f}%"


def fmt_lr(scale: float) -> str:
    """An lr_scale for the LR × column: ``"1"``, ``"0.1"``, ``"1e-05"``.

    Args:
        scale: the multiplier.

    Returns:
        The shortest text that reads back as the same float.
    """
    return f"{scale:g}" if float(f"{scale:g}") == scale else repr(float(scale))
