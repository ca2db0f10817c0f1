"""The training loop's own state: one :class:`LoopState` per run, one :class:`ReportWindow` per report.

Private to :mod:`workbench.core.training.engine`; kept apart so the loop reads as control flow.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["LoopState", "ReportWindow"]


@dataclass
class ReportWindow:
    """Accumulators of the steps since the last report."""

    n: int = 0
    loss_sum: float = 0.0
    loss_n: int = 0
    step_time: float = 0.0
    data_time: float = 0.0
    events: list[str] = field(default_factory=list)
    cuda_pairs: int = 0
    last_step: int = 0
    val_loss: float | None = None
    val_acc: float | None = None
    val_metric: float | None = None

    def clear(self) -> None:
        self.n = self.loss_n = self.cuda_pairs = 0
        self.loss_sum = self.step_time = self.data_time = 0.0
        self.events = []
        self.val_loss = self.val_acc = self.val_metric = None


@dataclass
class LoopState:
    """State of one run of the loop."""

    step: int = 0
    epoch: int = 0
    it: Iterator[Any] | None = None
    reached: frozenset[int] = frozenset()
    status: str = "completed"
    message: str = ""
    error: str | None = None
    failed_step: int | None = None
    failed_batch_size: int | None = None
    interrupted: bool = False
    skipped: int = 0
    state_dirty: bool = True
    flag_plan: bool = False
    flag_stop: bool = False
    last_loss: float = math.nan
    batch_size: int = 0
    overhead: float = 0.0
    step_time_total: float = 0.0
    report_step_times: list[float] = field(default_factory=list)
    report_data_times: list[float] = field(default_factory=list)
    report_rates: list[float] = field(default_factory=list)
    t_start: float = 0.0
    val_loss: float | None = None
    val_acc: float | None = None
    val_step: int | None = None
    val_samples: int = 0
    val_time: float = 0.0
    best_val_loss: float | None = None
    best_val_step: int | None = None
    best_val_acc: float | None = None
    val_metric: float | None = None
    best_val_metric: float | None = None
    window: ReportWindow = field(default_factory=ReportWindow)
