"""How a training run ended: :class:`RunResult`, what :meth:`Trainer.run` returns.

``RunResult.to_dict`` is the ``summary.json`` a saved run folder holds; the Runs tab, the CLI
and the integrations read it back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from workbench.core.plan.rules import FreezePlan

__all__ = ["STATUSES", "RunResult"]

#: Possible ``RunResult.status`` values.
STATUSES: tuple[str, ...] = ("completed", "stopped", "failed", "nonfinite")

@dataclass
class RunResult:
    """How a run ended.

    Attributes:
        status: ``completed``, ``stopped`` (stop() or Ctrl+C), ``failed`` (an exception in a
            step, out of memory, a failure to save) or ``nonfinite`` (loss NaN/inf with
            ``on_nonfinite="stop"``).
        message: one line for the user: what happened and what to do.
        steps: steps done (optimizer steps taken plus non-finite steps skipped).
        summary: final numbers: ``median_step_time_s``, ``peak_memory_bytes``,
            ``trainable_params``, ``final_loss`` and more (see ``docs/training.md``).
        verify: the plan's verification report (frozen tensors bit-identical ...), or None
            when the run never started.
        plan: the plan in force at the end (stages and live changes included).
        error: for failures, the exception with its traceback.
        failed_step: the step that failed or had a non-finite loss.
        failed_batch_size: the batch size of the failed step (for out-of-memory hints).
        save_dir: where the trainable state was saved, if it was.
        interrupted: the run was stopped by Ctrl+C (KeyboardInterrupt or SIGINT handler).
    """

    status: str
    message: str
    steps: int = 0
    summary: dict[str, Any] = field(default_factory=dict)
    verify: Any = None
    plan: FreezePlan | None = None
    error: str | None = None
    failed_step: int | None = None
    failed_batch_size: int | None = None
    save_dir: str | None = None
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        """The run completed."""
        return self.status == "completed"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (non-finite numbers as None)."""
        def clean(v: Any) -> Any:
            if isinstance(v, float) and not math.isfinite(v):
                return None
            if isinstance(v, dict):
                return {k: clean(x) for k, x in v.items()}
            if isinstance(v, (list, tuple)):
                return [clean(x) for x in v]
            return v

        return clean(
            {
                "status": self.status,
                "message": self.message,
                "steps": self.steps,
                "summary": dict(self.summary),
                "verify": self.verify.to_dict() if self.verify is not None else None,
                "plan": self.plan.to_dict() if self.plan is not None else None,
                "error": self.error,
                "failed_step": self.failed_step,
                "failed_batch_size": self.failed_batch_size,
                "save_dir": self.save_dir,
                "interrupted": self.interrupted,
            }
        )
