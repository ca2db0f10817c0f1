"""Proof that a freezing setup did what it claims: the public report side.

The snapshot itself (digests, identity and place of every guarded tensor) belongs to the
freezing layer, which takes it when a plan is applied: see
:mod:`workbench.core.freezing.snapshot`. This module is where scripts and the other checks
find the report and the comparison functions; every name keeps its meaning.

Example:
    >>> from workbench.core.checks.verify import VerifyReport
    >>> VerifyReport().summary().startswith("verify OK")
    True
"""

from __future__ import annotations

from workbench.core.freezing.snapshot import (
    DIGEST_CHUNK_BYTES,
    GUARDED,
    MIN_STEPS_FOR_ERROR,
    MIN_STEPS_FOR_UNCHANGED,
    GradSeen,
    GradWatch,
    Place,
    Snapshot,
    VerifyReport,
    Violation,
    check_places,
    compare,
    compare_in_force,
    host_chunks,
    model_places,
    model_tensors,
    tensor_digest,
)

__all__ = [
    "DIGEST_CHUNK_BYTES",
    "GUARDED",
    "MIN_STEPS_FOR_ERROR",
    "MIN_STEPS_FOR_UNCHANGED",
    "GradSeen",
    "GradWatch",
    "Place",
    "Snapshot",
    "VerifyReport",
    "Violation",
    "check_places",
    "compare",
    "compare_in_force",
    "host_chunks",
    "model_places",
    "model_tensors",
    "tensor_digest",
]
