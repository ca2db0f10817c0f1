"""Suggest… ▸ *Train each*: the plan sweep of :mod:`workbench.core.advisor.sweep` over the dialog's candidates.

:class:`TrainEach` runs one sweep on a worker thread: every candidate row of the dialog that
fits the budget and the memory available trains for the same steps, with the training panel's
data, loss, metric and seed, each as a run folder under ``<sweeps>/<time>/runs/``; successive
halving stops the weak ones early. The sweep's events come back to the GUI thread as a queued
signal (:attr:`TrainEach.changed`); the dialog fills each row as its candidate finishes (:func:`learning_cells`) and
redraws the chart. *Cancel* sets a flag the run reads after every step, so it stops within
one step.

A sweep given an existing folder resumes it (:mod:`workbench.gui.advisor.resume`): the
candidates done there are not trained again, and their rows fill at once (a ``resumed``
event with the report); the rest train. Each folder keeps a note of its sweep
(``identity.json``) and its report, written again as each candidate finishes.
"""

from __future__ import annotations

import copy
import datetime as _dt
import importlib.util
import math
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from workbench.core.advisor.auto_freeze_option import AutoFreezeOption
from workbench.core.advisor.profile import InputShape
from workbench.core.advisor.sweep_report import SweepReport, SweepRow
from workbench.core.formatting import fmt_count
from workbench.core.runs.sweeps import sweeps_folder
from workbench.core.training.config import TrainConfig
from workbench.core.training.metrics import fmt_memory

__all__ = ["AUTO_FREEZE", "LEARNING_COLUMNS", "TrainEach", "auto_freeze_cells", "data_input_shape", "learning_cells",
           "optuna_missing", "shape_from_data", "sweep_folder"]

#: The table's learning columns, after the cost columns; the first is named by the sweep's metric.
LEARNING_COLUMNS = ("metric", "retention", "train time", "train peak", "stopped early")
#: Steps per candidate when the training panel's length is in epochs.
DEFAULT_STEPS = 100
#: The table's index of the auto-freeze row (the front's rows index ``advice.assessed``).
AUTO_FREEZE = -1


def optuna_missing() -> str:
    """Why *Train each* cannot run without the ``[sweep]`` extra ("" when Optuna is installed).

    Returns:
        The reason, or "".
    """
    if importlib.util.find_spec("optuna") is None:
        return "Training each candidate needs Optuna: pip install 'freeze-workbench[sweep]'"
    return ""


def sweep_folder(runs_folder: Path) -> Path:
    """A new sweep folder beside the app's runs folder: ``<runs>/../sweeps/<date-time>``.

    Args:
        runs_folder: the folder of the app's run store.

    Returns:
        The folder (not created).
    """
    base = sweeps_folder(runs_folder)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    folder, n = base / stamp, 1
    while folder.exists():
        n += 1
        folder = base / f"{stamp}-{n}"
    return folder


def learning_cells(row: SweepRow | None) -> tuple[list[str], list[str]]:
    """A row's learning texts and tooltips, in :data:`LEARNING_COLUMNS` order.

    Args:
        row: the candidate's sweep row (None: not in the sweep).

    Returns:
        ``(texts, tooltips)``.
    """
    if row is None:
        return [""] * len(LEARNING_COLUMNS), [""] * len(LEARNING_COLUMNS)
    metric = f"{row.metric:.4g}" if row.metric is not None and math.isfinite(row.metric) else ""
    retention = f"{row.retention:.4g}" if row.retention is not None and math.isfinite(row.retention) else ""
    time_s = f"{row.time_s:.1f} s" if row.time_s is not None else ""
    peak = fmt_memory(row.peak_bytes) if row.peak_bytes is not None else ""
    status = {"completed": "no", "pruned": f"at step {row.steps}", "failed": "failed",
              "running": "training …", "waiting": "waiting"}.get(row.status, row.status)
    why = row.reason or {"completed": f"Trained for the whole budget ({row.steps} steps)", "running": "Training now",
                         "waiting": "Waiting for its turn"}.get(row.status, "")
    metric_tip = (f"At the last validation (step {row.steps}); stopped early, so not compared"
                  if row.status == "pruned" and metric else "At the end of the budget" if metric else "")
    tips = [metric_tip, "The metric on the retain data after training (what is left of the original task)"
            if retention else "", "Training time: wall time less validation" if time_s else "",
            f"{row.memory_source} of the candidate's run" if peak else "", why]
    return [metric, retention, time_s, peak, status], tips


def auto_freeze_cells(option: AutoFreezeOption) -> tuple[list[str], list[str]]:
    """The auto-freeze row's cost texts and tooltips, in the dialog's cost column order.

    Args:
        option: the advisor's auto-freeze prediction.

    Returns:
        ``(texts, tooltips)``: name, predicted peak, step ratio at the start and the end, trainable
        parameters at the start and the end, fits; nothing measured (*Measure* leaves it out).
    """
    ratio = f"{option.step_ratio_start:.2f}–{option.step_ratio_end:.2f}"
    trainable = f"{fmt_count(option.trainable_start)}–{fmt_count(option.trainable_end)}"
    texts = [option.name, fmt_memory(option.peak_bytes), ratio, trainable, "yes" if option.fits else "no", "", ""]
    tips = ["Full fine-tuning with auto-freeze on (a training setting, not a plan): Apply makes every parameter "
            f"trainable and turns auto-freeze on in the training options. It stops there: {option.stop_reason}",
            "Full fine-tuning's peak: the first steps reach it before anything freezes",
            "From full fine-tuning's step at the start to the step once the front blocks froze",
            "Trained at the start, and once the front blocks froze", "", "Measure leaves auto-freeze out", ""]
    return texts, tips


def shape_from_data(config: TrainConfig | None) -> bool:
    """Whether the advice's input comes from the training settings rather than the image field.

    Args:
        config: the training panel's settings (None: none).

    Returns:
        True for ``py:`` data (audio frames, tables: any sample shape) or an input shape option.
    """
    return config is not None and (config.input_shape is not None or config.data.startswith("py:"))


def data_input_shape(config: TrainConfig, batch_size: int) -> InputShape:
    """The batch shape of the training data: ``(batch, *input_shape)``, or ``(batch, *sample.shape)``.

    Args:
        config: the training settings (its ``py:`` data runs: confirm it first).
        batch_size: samples per step.

    Returns:
        The shape (a dict input's batch for token dicts and the like).

    Raises:
        WorkbenchError: the data cannot be opened or its first sample has no tensor input.
    """
    if config.input_shape is not None:
        return (batch_size, *config.input_shape)
    from workbench.core.advisor.sweep_candidates import sample_input_shape
    from workbench.core.training.data_sources import make_dataset

    ds = make_dataset(config.data, image_size=config.image_size or 224, num_classes=config.num_classes or 10,
                      seed=config.seed, seq_len=config.seq_len)
    return sample_input_shape(ds[0], batch_size)


class TrainEach(QObject):
    """One sweep over candidate plans at a time, on a worker thread.

    Args:
        parent: the dialog.

    Attributes:
        changed: ``(kind, data)``, emitted on the worker thread and received on the GUI thread: ``started`` ({id, name}), ``step`` ({id, step,
            total}), ``finished`` ({id, row, report}), ``resumed`` ({report, queued}: a folder with candidates
            done, once its study is open).
        cancel: set to stop at the next step (the candidate training then is left unfinished).
        report: the last report (None before the first candidate finishes).
        folder: the sweep's folder (None before the first sweep).
    """

    changed = Signal(str, object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.cancel = threading.Event()
        self.report: SweepReport | None = None
        self.folder: Path | None = None

    def work(self, candidates: Sequence[Any], config: TrainConfig, *, steps: int, folder: Path,
             model: Any, model_lock: Any, retain: str | None = None, dataset: Any = None) -> Callable[[], SweepReport]:
        """The function that runs the sweep (to run on a worker thread).

        Args:
            candidates: the :class:`~workbench.core.advisor.sweep.SweepCandidate` list.
            config: the run's settings (data, loss, metric, seed, device, batch ...).
            steps: each candidate's budget in steps.
            folder: the sweep folder.
            model: the loaded model: each candidate trains a copy (it is never modified).
            model_lock: held while the model is copied.
            retain: the data of the original task (a dataset spec), or None.
            dataset: training data given to the app in Python instead of ``config.data``.

        Returns:
            A function of no argument that trains every candidate and returns the report.

        Raises:
            SweepError: bad settings (a budget of 0, no candidate), raised here, before any thread.
        """
        from workbench.core.advisor.sweep import opened
        from workbench.gui.advisor.resume import DONE, write_identity

        def build() -> Any:
            with model_lock:  # a run or a check may be changing the loaded model
                return copy.deepcopy(model)

        sweep = self._sweep(folder, candidates, config, steps, retain, model_factory=build, dataset=dataset)
        emit, cancel = self.changed.emit, self.cancel
        cancel.clear()
        self.folder, self.report = folder, None

        def on_event(kind: str, data: dict[str, Any]) -> None:
            if kind == "finished":
                data = {**data, "report": sweep.report()}
                sweep.write_report(data["report"])  # a kill now still leaves the rows done for a resume
            emit(kind, data)

        def run() -> SweepReport:
            if retain:
                from workbench.core.advisor.sweep_trial import open_retain

                open_retain(retain, config, image_size=config.image_size or 224, num_classes=config.num_classes or 10)
            with opened(sweep) as queued:
                write_identity(folder, sweep.identity())
                before = sweep.report()
                if any(r.status in DONE for r in before.rows):  # a resumed sweep: its done rows fill now
                    emit("resumed", {"report": before, "queued": queued})
                sweep.work(cancel=cancel, on_event=on_event)
                report = sweep.report()
                sweep.write_report(report)
            return report

        return run

    @staticmethod
    def _sweep(folder: Path, candidates: Sequence[Any], config: TrainConfig, steps: int, retain: str | None,
               **kwargs: Any) -> Any:
        from workbench.core.advisor.sweep import Sweep, SweepSettings

        settings = SweepSettings(steps=steps, eval_every=max(1, steps // 10)).validate()
        return Sweep(folder, candidates, config, settings, retain=retain, **kwargs)

    def identity(self, candidates: Sequence[Any], config: TrainConfig, *, steps: int,
                 retain: str | None = None) -> dict[str, Any]:
        """What makes a sweep of these candidates and settings the same sweep (a folder to resume must hold it).

        Args:
            candidates: as :meth:`work`.
            config: as :meth:`work`.
            steps: as :meth:`work`.
            retain: as :meth:`work`.

        Returns:
            :meth:`Sweep.identity <workbench.core.advisor.sweep.Sweep.identity>`.

        Raises:
            SweepError: bad settings or no candidate.
        """
        return dict(self._sweep(Path(), candidates, config, steps, retain).identity())
