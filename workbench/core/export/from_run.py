"""The run a saved run folder holds, as the exporter needs it: plan, model spec and config.

The folder is read by :func:`workbench.core.runs.store.open_run`, the reader ``workbench runs``
and the app use (an app run's ``run.json``, a ``workbench train --save DIR`` folder's ``run.json``
or, written by an earlier version, its ``summary.json`` and ``config.json``): a folder it refuses
is refused here with its line. The run's config names the plan (a dict, or a plan file read
relative to the working directory, then to the folder's parent, then to the folder); a config
without one exports the plan the record says the run started with.

A run with auto-freeze is exported from ``auto_freeze.plan.json`` (its decisions as stages)
with auto-freeze off: the same steps, replayed. Nothing in a run folder runs code (a ``py:``
model, data, loss or metric named there is used only when the caller names it again).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.core.errors import WorkbenchError
from workbench.core.export.common import ExportError
from workbench.core.models.spec import ModelSpec
from workbench.core.plan.rules import FreezePlan
from workbench.core.runs.record import RunStoreError
from workbench.core.runs.store import open_run
from workbench.core.training.auto_freeze import PLAN_FILE as AUTO_FREEZE_PLAN
from workbench.core.training.config import CODE_FIELDS, TrainConfig

__all__ = ["SavedRun", "load_run"]


@dataclass
class SavedRun:
    """A saved run, ready to export.

    Attributes:
        plan: the plan the run started with (stages included).
        spec: the model's spec (its origin names the run folder).
        config: the run's config (``auto_freeze`` off when its decisions are in ``plan``).
        base_dir: folder relative A+B files of the plan are read from.
    """

    plan: FreezePlan
    spec: ModelSpec
    config: TrainConfig
    base_dir: Path


def _plan_of(raw: Any, folder: Path) -> tuple[FreezePlan, Path]:
    if raw is None:
        return FreezePlan(), folder
    if isinstance(raw, dict):
        return FreezePlan.from_dict(raw), folder
    if isinstance(raw, str):
        for candidate in (Path(raw).expanduser(), folder.parent / raw, folder / raw):
            if candidate.is_file():
                return FreezePlan.load(candidate), candidate.resolve().parent
        raise ExportError(f"the run's plan file {raw!r} is not found (from the working directory or next to "
                          f"{folder}); give it with --plan PLAN.json")
    raise ExportError(f"the run's plan is {type(raw).__name__}, not a plan; give it with --plan PLAN.json")


def _spec_of(config: TrainConfig, plan: FreezePlan, origin: str, model_block: dict[str, Any] | None) -> ModelSpec:
    d: dict[str, Any]
    if isinstance(config.model, dict):
        d = dict(config.model)
    elif isinstance(config.model, str):
        d = {"source": "torchvision", "name": config.model.strip()}
    elif model_block:
        d = dict(model_block)
    elif plan.model.get("name") or plan.model.get("arch") or plan.model.get("checkpoint"):
        d = dict(plan.model)
    else:
        raise ExportError("the run names no model; give it with --model")
    if not d.get("name") and d.get("arch"):
        d["name"] = d["arch"]
    for key in ("weights", "checkpoint"):
        if getattr(config, key) is not None:
            d[key] = getattr(config, key)
    known = {"source", "name", "weights", "checkpoint", "num_classes"}
    try:
        return ModelSpec.from_dict({k: v for k, v in d.items() if k in known}, origin=origin)
    except (WorkbenchError, ValueError, TypeError) as e:
        raise ExportError(f"the run's model cannot be read ({str(e).splitlines()[0][:200]}); give it with --model") from None


def load_run(folder: str | os.PathLike[str], *, plan: FreezePlan | None = None) -> SavedRun:
    """Read a saved run folder (``--save DIR`` or the app's run store).

    Args:
        folder: the run's folder.
        plan: a plan to export instead of the run's (``--plan``).

    Returns:
        The run.

    Raises:
        ExportError: what :func:`~workbench.core.runs.store.open_run` refuses (not a run folder,
            an unreadable run file), an invalid config, a plan file not found.
    """
    p = Path(folder).expanduser()
    try:
        record = open_run(p)
    except RunStoreError as e:
        raise ExportError(f"--run {e}") from None
    origin = f"run folder {p}"
    try:
        config = TrainConfig.from_dict(record.config)
    except WorkbenchError as e:
        raise ExportError(f"{origin}: {e}") from None
    config.__dict__["_code_origins"] = {  # py: data, loss, metric the record names run only when typed
        name: origin for name in CODE_FIELDS[1:] if isinstance(record.config.get(name), str)}
    named_plan = record.config.get("plan")
    raw_plan: Any = named_plan if isinstance(named_plan, (str, dict)) else (record.plan or None)
    block = record.model.get("spec")
    model_block = block if isinstance(block, dict) else None
    if plan is not None:
        the_plan, base = plan, p
    elif config.auto_freeze and (p / AUTO_FREEZE_PLAN).is_file():  # the decisions, replayed as stages
        the_plan, base = FreezePlan.load(p / AUTO_FREEZE_PLAN), p
    else:
        the_plan, base = _plan_of(raw_plan, p)
    if config.auto_freeze and (plan is not None or (p / AUTO_FREEZE_PLAN).is_file()):
        config = config.replace(auto_freeze=False)
    spec = _spec_of(config, the_plan, origin, model_block)
    return SavedRun(the_plan, spec, config.replace(plan=None), base)
