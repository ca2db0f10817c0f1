"""The run a saved run folder holds, as the exporter needs it: plan, model spec and config.

Two folder formats hold a run:

- ``workbench train --save DIR``: ``config.json`` (the :class:`TrainConfig`) beside the run's
  files; the config names the plan (a dict, or a plan file read relative to the working
  directory, then to the folder's parent) and the model;
- the app's run store: ``run.json`` (``format: workbench-run``) with the config, the plan the
  run started with and the model's spec.

A run with auto-freeze is exported from ``auto_freeze.plan.json`` (its decisions as stages)
with auto-freeze off: the same steps, replayed. Files are read through the bounded JSON reader;
nothing in a run folder runs code (a ``py:`` model named there is built only when the caller
names it again).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.core import safe_json
from workbench.core.errors import WorkbenchError
from workbench.core.export.common import ExportError
from workbench.core.models.spec import ModelSpec
from workbench.core.plan.rules import FreezePlan
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


def _read(path: Path, what: str) -> Any:
    try:
        return safe_json.loads(safe_json.read_text(path, what=what), what=what)
    except (safe_json.JsonInputError, ValueError, OSError, UnicodeDecodeError) as e:
        raise ExportError(f"cannot read {what} {path}: {str(e).splitlines()[0][:200]}") from None


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
        ExportError: not a run folder, an unreadable or invalid file, a plan file not found.
    """
    p = Path(folder).expanduser()
    if not p.is_dir():
        raise ExportError(f"--run {p} is not a folder; give a run folder (workbench train --save DIR, or the app's runs)")
    origin = f"run folder {p}"
    model_block: dict[str, Any] | None = None
    if (p / "config.json").is_file():
        try:
            config = TrainConfig.load(p / "config.json")
        except WorkbenchError as e:
            raise ExportError(str(e)) from None
        raw_plan: Any = config.plan
    elif (p / "run.json").is_file():
        record = _read(p / "run.json", "run record")
        if not isinstance(record, dict) or record.get("format") != "workbench-run":
            raise ExportError(f"{p / 'run.json'} is not a workbench run record")
        try:
            config = TrainConfig.from_dict(record.get("config") or {})
        except WorkbenchError as e:
            raise ExportError(f"{p / 'run.json'}: {e}") from None
        named: dict[str, Any] = record["config"] if isinstance(record.get("config"), dict) else {}
        config.__dict__["_code_origins"] = {  # py: data, loss, metric the record names run only when typed
            name: origin for name in CODE_FIELDS[1:] if isinstance(named.get(name), str)}
        raw_plan = record.get("plan")
        model = record.get("model")
        block = model.get("spec") if isinstance(model, dict) else None
        model_block = block if isinstance(block, dict) else None
    else:
        raise ExportError(f"{p} holds no run (no config.json or run.json); give a run folder")
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
