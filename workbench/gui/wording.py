"""Small helpers for the wording of messages shown in the window."""

from __future__ import annotations

__all__ = ["sentence"]


def sentence(text: str) -> str:
    """``text`` as a sentence: stripped, ending with one full stop unless it ends with ``.?!``.

    Args:
        text: a message, perhaps ending with ``?`` (``"did you mean 'layer2'?"``).

    Returns:
        The text ending in punctuation, never ``?.``.

    Example:
        >>> sentence("did you mean 'layer2'?")
        "did you mean 'layer2'?"
        >>> sentence("no module 'x'")
        "no module 'x'."
    """
    text = text.strip()
    return text if not text or text[-1] in ".?!…" else text + "."
