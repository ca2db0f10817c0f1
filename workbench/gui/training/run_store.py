"""The app's training runs on disk: the run record and store of :mod:`workbench.core.runs`.

Runs are kept one folder per run (``run.json`` and ``metrics.csv``); the record, the store,
the numbers runs are compared by and their text live in core, so that ``workbench runs``
reads and compares the same runs with the same numbers. This module names what the window
uses from there.
"""

from __future__ import annotations

from workbench.core.runs.record import (
    MAX_NAME_LENGTH,
    RUN_FORMAT,
    RUN_VERSION,
    RunRecord,
    RunStoreError,
    RunSummary,
    Segment,
    Validation,
    clean_name,
    clean_tags,
)
from workbench.core.runs.store import MAX_KEPT_METRICS_BYTES, RunStore
from workbench.core.runs.text import plan_text, validation_text

__all__ = [
    "MAX_KEPT_METRICS_BYTES",
    "MAX_NAME_LENGTH",
    "RUN_FORMAT",
    "RUN_VERSION",
    "RunRecord",
    "RunStore",
    "RunStoreError",
    "RunSummary",
    "Segment",
    "Validation",
    "clean_name",
    "clean_tags",
    "plan_text",
    "validation_text",
]
