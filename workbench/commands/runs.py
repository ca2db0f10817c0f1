"""``workbench runs list|show|compare [RUNS...]``: the app's runs and ``--save`` folders, side by side.

Each RUN is a run folder (one the app keeps, or one ``workbench train --save`` wrote), a
folder of runs (the app's run store), a sweep folder (``workbench sweep --out``) or a folder
of sweeps; with none, the app's run store (``$WORKBENCH_RUNS_DIR`` when set) and the app's
sweeps beside it. A sweep's candidate runs carry the sweep's tag (``<sweep> · <candidate>``),
the Runs tab's *Sweep* column: ``list`` adds the column when a run has one. ``list`` prints
one row per run with the numbers of the app's Runs tab, ``show`` every detail of each run, ``compare`` the Runs tab's comparison line
of each run against the oldest (step time, peak memory, trainable parameters, per plan
segment, validation). A folder that cannot be read is one line on stderr; the exit code is 2
only when no run can be read (``compare``: fewer than two).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from workbench.core.runs.compare import compare_runs, oldest_first, segments_line
from workbench.core.runs.record import RunRecord, RunStoreError, clean_json
from workbench.core.runs.store import default_runs_dir, load_metrics, read_runs
from workbench.core.runs.sweeps import sweeps_folder
from workbench.core.runs.text import (
    loss_text,
    plan_text,
    setup_text,
    step_time_text,
    trainable_text,
    val_acc_text,
    val_loss_text,
    validation_text,
)
from workbench.core.training.metrics import fmt_memory

__all__ = ["add_arguments", "run"]

_ACTIONS = ("list", "show", "compare")
_COLUMNS = ("Run", "Status", "Steps", "Step time", "Peak memory", "Trainable", "Final loss", "Val loss", "Val acc", "Setup")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=_ACTIONS,
                   help="list: one row per run; show: every detail of each run; compare: each run against the oldest")
    p.add_argument("runs", nargs="*", metavar="RUNS",
                   help="run folders (the app's, or `workbench train --save` folders), folders of runs, sweep "
                   "folders or folders of sweeps; default: the app's runs ($WORKBENCH_RUNS_DIR when set) and sweeps")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _row(r: RunRecord) -> list[str]:
    s = r.summarize()
    return [
        r.name, r.status, str(s.steps), step_time_text(s), fmt_memory(s.peak_memory), trainable_text(s),
        loss_text(s), val_loss_text(s.validation), val_acc_text(s.validation),
        setup_text(r.config, num_classes=r.num_classes(), plan=r.plan, seq_len=r.summary.get("seq_len"),
                   frozen_cache=r.summary.get("frozen_cache")),
    ]


def _print_table(records: Sequence[RunRecord]) -> None:
    sweep = any(r.sweep is not None for r in records)  # the Runs tab's Sweep column, shown when a run has one
    rows = [list(_COLUMNS) + ["Sweep"] * sweep,
            *(_row(r) + [r.sweep.text if r.sweep is not None else ""] * sweep for r in records)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(f"{cell:<{w}}" for cell, w in zip(row, widths, strict=False)) + "  " + row[-1])


def _as_json(r: RunRecord) -> Any:
    return clean_json({
        "name": r.name, "id": r.id, "folder": str(r.folder) if r.folder else None, "status": r.status,
        "message": r.message, "created": r.created, "config": r.config, "plan": r.plan, "notes": r.notes,
        "tags": r.tags, "numbers": dataclasses.asdict(r.summarize()),
        "sweep": {"sweep": r.sweep.sweep, "candidate": r.sweep.candidate, "folder": str(r.sweep.folder)}
        if r.sweep is not None else None,
    })


def _show(r: RunRecord) -> None:
    s = r.summarize()
    peak = fmt_memory(s.peak_memory) + (f" ({s.memory_source})" if s.memory_source and s.peak_memory is not None else "")
    rows = [
        ("run", r.name), ("folder", str(r.folder)), ("status", f"{r.status}: {r.message}" if r.message else r.status),
        ("steps", str(s.steps)), ("step time", step_time_text(s)), ("peak memory", peak),
        ("trainable", trainable_text(s)), ("final loss", loss_text(s)),
        ("validation", validation_text(s.validation) or "none"),
        ("setup", setup_text(r.config, num_classes=r.num_classes(), seq_len=r.summary.get("seq_len"),
                             frozen_cache=r.summary.get("frozen_cache"))),
        ("plan", plan_text(r.plan, most=50)),
        ("segments", segments_line(r.name, s.segments).removeprefix(f"{r.name}: ")),
    ]
    if r.sweep is not None:
        rows.append(("sweep", f"{r.sweep.text} ({r.sweep.folder})"))
    if r.tags:
        rows.append(("tags", ", ".join(r.tags)))
    if r.notes:
        rows.append(("notes", " ".join(r.notes.split())))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")


def _with_metrics(records: Sequence[RunRecord], problems: list[str]) -> list[RunRecord]:
    """The runs with their metrics read (the per-segment numbers need them); a run whose
    metrics cannot be read keeps its summary's numbers, and its problem is said."""
    for r in records:
        try:
            load_metrics(r)
        except RunStoreError as e:
            problems.append(f"{r.folder}: metrics not read ({e}); its summary's numbers are shown")
            r.metrics_loaded = True
    return list(records)


def _kept(folder: os.PathLike[str]) -> bool:
    """Whether the app's runs or sweeps folder is worth reading: it exists and is not an empty folder."""
    if not os.path.isdir(folder):
        return os.path.lexists(folder)  # a file where the folder should be: said in one line
    try:
        with os.scandir(folder) as entries:
            return any(True for _ in entries)
    except OSError:
        return True  # unreadable: said in one line


def run(args: argparse.Namespace) -> int:
    paths = list(args.runs) or [str(p) for p in (default_runs_dir(), sweeps_folder(default_runs_dir())) if _kept(p)]
    if not paths:
        print(f"no runs in {default_runs_dir()}: the app has kept none yet", file=sys.stderr)
        return 0
    records, problems = read_runs(paths)
    if args.action != "list":
        records = _with_metrics(records, problems)
    for line in problems:
        print(f"workbench runs: {line}", file=sys.stderr)
    if args.action == "compare" and len(records) < 2:
        print(f"workbench runs: error: compare needs two runs or more; {len(records)} could be read", file=sys.stderr)
        return 2
    if not records:
        print("workbench runs: error: no run could be read", file=sys.stderr)
        return 2
    if args.action == "list":
        records = oldest_first(records)
        if args.json:
            json.dump([_as_json(r) for r in records], sys.stdout, indent=1)
            print()
        else:
            _print_table(records)
    elif args.action == "show":
        if args.json:
            json.dump([_as_json(r) for r in records], sys.stdout, indent=1)
            print()
        else:
            for i, r in enumerate(records):
                if i:
                    print()
                _show(r)
    else:
        c = compare_runs(records)
        assert c is not None
        if args.json:
            json.dump({"lines": c.text().splitlines(), "segments": list(c.segments)}, sys.stdout, indent=1)
            print()
            return 0
        print(c.text())
        print("segments:")
        for line in c.segments:
            print(f"  {line}")
    return 0
