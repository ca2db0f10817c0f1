"""Memory sizes written by people: ``24GB``, ``512MiB``, ``1.5G``."""

from __future__ import annotations

import re

from workbench.core.advisor.profile import AdvisorError

__all__ = ["parse_size"]

_UNITS = {
    "": 1, "b": 1,
    "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12, "tb": 10**12,
    "ki": 2**10, "kib": 2**10, "mi": 2**20, "mib": 2**20, "gi": 2**30, "gib": 2**30, "ti": 2**40, "tib": 2**40,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """Bytes of a size such as ``24GB`` (decimal units), ``512MiB`` (binary units) or ``1.5G``.

    ``K``/``KB``, ``M``/``MB``, ``G``/``GB``, ``T``/``TB`` are powers of 1000; ``KiB``, ``MiB``,
    ``GiB``, ``TiB`` (or ``Ki`` ...) powers of 1024; a bare number is bytes. Case is ignored.

    Args:
        text: the size.

    Returns:
        The size in bytes (rounded down).

    Raises:
        AdvisorError: not a size, an unknown unit, or zero.
    """
    m = _SIZE_RE.match(text or "")
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in _UNITS:
        raise AdvisorError(f"memory size {text!r} is not understood; write it like 24GB, 512MiB or 1.5G")
    value = int(float(m.group(1)) * _UNITS[unit])
    if value <= 0:
        raise AdvisorError(f"memory size {text!r} is zero; give the memory of the device, like 24GB")
    return value
