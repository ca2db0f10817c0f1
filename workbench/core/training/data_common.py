"""What the dataset modules share: :class:`DataError` and the tasks of text data.

:mod:`workbench.core.training.data` (synthetic and image data, :func:`make_dataset`) and
:mod:`workbench.core.training.text_jsonl` (``text:PATH.jsonl``) both raise :class:`DataError`;
keeping it here lets ``make_dataset`` open text files without an import cycle.
"""

from __future__ import annotations

from workbench.core.errors import WorkbenchError

__all__ = ["TEXT_TASKS", "DataError"]

#: Tasks of text data: what the labels of a sample are.
TEXT_TASKS: tuple[str, ...] = ("classification", "causal_lm", "masked_lm")


class DataError(WorkbenchError):
    """A dataset could not be provided; the message says why and what to do."""
