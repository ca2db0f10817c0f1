"""TensorBoard as a metrics sink: every reported step written with ``SummaryWriter``.

:class:`TensorBoardWriter` has the interface of
:class:`~workbench.core.training.metrics.MetricsWriter` (``path``, ``write``, ``close``); the
engine opens one on rank 0 when :attr:`TrainConfig.tensorboard_dir` is set
(``workbench train --tensorboard DIR``). Every number of a :class:`StepMetrics` becomes a
scalar (a field added to ``StepMetrics`` later is written too, under ``metrics/`` or, for
``val_*`` fields, ``val/``); the learning rate of each param group is ``lr/group<i>``; the
step's events (plan changes, skipped steps) are text under ``events``.

TensorBoard is an optional extra: ``pip install 'freeze-workbench[tensorboard]'``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.core.training.metrics import MetricsError, StepMetrics

if TYPE_CHECKING:  # pragma: no cover - typing only
    from workbench.core.plan.rules import FreezePlan

__all__ = [
    "INSTALL_HINT", "SCALAR_TAGS", "TensorBoardWriter", "open_tensorboard", "require_tensorboard", "scalars_of",
    "tensorboard_available",
]

INSTALL_HINT = "pip install 'freeze-workbench[tensorboard]' (or pip install tensorboard)"

#: StepMetrics field -> TensorBoard tag, for the fields with a fixed place.
SCALAR_TAGS: dict[str, str] = {
    "loss": "loss/train",
    "step_time_s": "time/step_s",
    "data_time_s": "time/data_s",
    "samples_per_s": "time/samples_per_s",
    "mem_allocated": "memory/allocated_bytes",
    "mem_peak": "memory/peak_bytes",
    "mem_reserved": "memory/reserved_bytes",
    "mem_rss": "memory/process_rss_bytes",
    "grad_bytes": "memory/grad_bytes",
    "optimizer_state_bytes": "memory/optimizer_state_bytes",
    "trainable_params": "params/trainable",
    "frozen_params": "params/frozen",
    "plan_version": "plan/version",
    "nonfinite_skipped": "loss/nonfinite_skipped",
    "batch_size": "time/batch_size",
    "epoch": "time/epoch",
}
#: Fields that are not a metric of their own (the x axis, clock time, the window size).
_NOT_SCALARS = frozenset({"step", "wall_time", "window"})


def tensorboard_available() -> bool:
    """Whether the tensorboard package is installed (found without importing it).

    Returns:
        True when ``--tensorboard`` can write event files.
    """
    return importlib.util.find_spec("tensorboard") is not None


def require_tensorboard() -> Any:
    """``torch.utils.tensorboard.SummaryWriter``, or a one-line error naming the pip command.

    Returns:
        The ``SummaryWriter`` class.

    Raises:
        MetricsError: the tensorboard package is not installed.
    """
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise MetricsError(f"--tensorboard needs the tensorboard package; install it with {INSTALL_HINT}") from None
    return SummaryWriter


def scalars_of(m: StepMetrics) -> dict[str, float]:
    """The TensorBoard scalars of one step.

    Args:
        m: the step's metrics.

    Returns:
        ``{tag: value}``; fields that are None (no such probe on this device) are left out.
    """
    out: dict[str, float] = {}
    for f in dataclasses.fields(m):
        name = f.name
        v = getattr(m, name)
        if name in _NOT_SCALARS or isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if isinstance(v, float) and math.isnan(v) and name != "loss":
            continue
        tag = SCALAR_TAGS.get(name) or (f"val/{name[4:]}" if name.startswith("val_") else f"metrics/{name}")
        out[tag] = float(v)
    for i, lr in enumerate(m.lr):
        out[f"lr/group{i}"] = float(lr)
    return out


class TensorBoardWriter:
    """Writes each step's metrics as TensorBoard scalars and its events as text.

    Attributes:
        path: the log folder (event files appear in it).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Open the log folder.

        Args:
            path: folder for the event files (created if missing).

        Raises:
            MetricsError: tensorboard is not installed, or the folder cannot be written.
        """
        summary_writer = require_tensorboard()
        self.path = Path(path)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self._w = summary_writer(log_dir=str(self.path))
        except OSError as e:
            raise MetricsError(f"cannot write TensorBoard logs to {self.path} ({e}); check the folder and permissions") from None

    def write(self, m: StepMetrics) -> None:
        """Write one reported step.

        Args:
            m: the step's metrics.
        """
        for tag, value in scalars_of(m).items():
            self._w.add_scalar(tag, value, global_step=m.step, walltime=m.wall_time)
        if m.events:
            self._w.add_text("events", "\n\n".join(m.events), global_step=m.step, walltime=m.wall_time)

    def write_text(self, tag: str, text: str, step: int) -> None:
        """Write a note (the plan in force at the start, a summary).

        Args:
            tag: TensorBoard tag.
            text: markdown text.
            step: the step it belongs to.
        """
        self._w.add_text(tag, text, global_step=step)

    def close(self) -> None:
        """Flush and close the event file."""
        self._w.flush()
        self._w.close()


def open_tensorboard(path: str | os.PathLike[str], plan: FreezePlan | None) -> TensorBoardWriter:
    """A :class:`TensorBoardWriter` that starts with the plan in force as text.

    Args:
        path: the log folder.
        plan: the plan at the start of the run (None: no plan note).

    Returns:
        The open writer.

    Raises:
        MetricsError: tensorboard is not installed, or the folder cannot be written.
    """
    w = TensorBoardWriter(path)
    if plan is not None:
        w.write_text("plan", "```\n" + plan.to_json() + "\n```", 0)
    return w
