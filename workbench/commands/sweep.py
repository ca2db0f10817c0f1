"""``workbench sweep``: train every candidate plan for one budget and say which learns best for what it costs.

Candidates are the advisor's plans within ``--memory`` (``--candidates front|all``) or plan
files (``--plans``), crossed with ``--lr`` rates. Each trains ``--steps`` (or ``--seconds``)
with one seed and data order, as a run folder under ``OUT/runs/``; successive halving stops
the weak ones early (``--no-prune``: train each to the end). The study lives in
``OUT/study.db``: the same command run again resumes a killed sweep; ``--workers K`` trains
with K local processes; ``--storage URL`` shares one study between machines. Prints the table,
the fronts, the recommendation, and writes ``OUT/report.json`` and a chart (``OUT/sweep.png``).

Exit codes: 0 a plan is recommended, 1 none is (or the sweep was interrupted), 2 bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import multiprocessing
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from workbench.commands.common import (
    CommandError,
    add_task_arguments,
    input_shape_from_arg,
    optimizer_from_arg,
    print_table,
)
from workbench.core.advisor.sweep_report import COSTS, SweepReport
from workbench.core.advisor.sweep_study import import_optuna
from workbench.core.training.metrics import fmt_memory

#: Seconds the processes of ``--workers K`` wait for each other before the first candidate.
_START_TOGETHER_S = 300.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register the ``sweep`` flags."""
    p.add_argument("--model", required=True, help="model spec: resnet18, timm:NAME, hf:FOLDER, py:FILE.py:FACTORY "
                   "(py: runs that code)")
    p.add_argument("--weights", help="pretrained weights (torchvision name, timm tag)")
    p.add_argument("--checkpoint", help="load weights from a .safetensors/.pt file")
    p.add_argument("--num-classes", type=int, help="classes of the task (the head is replaced when it differs)")
    p.add_argument("--trust-pickle", action="store_true", help="allow a pickled checkpoint (runs code from the file)")
    p.add_argument("--out", required=True, metavar="FOLDER",
                   help="the sweep folder: study.db, runs/ (one run folder per candidate), report.json, sweep.png")
    which = p.add_argument_group("candidates")
    which.add_argument("--memory", metavar="SIZE", help="the advisor's plans that fit this memory budget (24GB, 512MiB)")
    which.add_argument("--candidates", choices=("front", "all"), default="front",
                       help="with --memory: the Pareto front of predicted cost (default) or every plan that fits")
    which.add_argument("--limit", type=int, metavar="N",
                       help="with --memory: at most N of the advisor's plans, spread from the least to the most trained")
    which.add_argument("--plans", nargs="+", metavar="FILE", help="plan files to compare (instead of --memory)")
    which.add_argument("--lr", type=float, nargs="+", metavar="LR", help="learning rates crossed with every plan (default 1e-3)")
    budget = p.add_argument_group("budget and data")
    budget.add_argument("--steps", type=int, help="each candidate's budget in optimizer steps (default 100 unless --seconds)")
    budget.add_argument("--seconds", type=float, help="each candidate's budget in seconds of training")
    budget.add_argument("--eval-every", type=int, default=None, metavar="K",
                        help="validate every K steps, the rungs of the pruner (default: a tenth of --steps, at least 1)")
    budget.add_argument("--data", help="training data (as train --data; default synthetic)")
    budget.add_argument("--val", help="validation data (default: a held-out tenth of --data)")
    budget.add_argument("--retain", metavar="DATA",
                        help="data of the original task: its metric after training is the retention (forgetting)")
    add_task_arguments(p)
    budget.add_argument("--image-size", type=int, help="input side in pixels")
    budget.add_argument("--seq-len", type=int, help="text models: tokens per sample")
    budget.add_argument("--batch-size", type=int, help="samples per step (default 32)")
    budget.add_argument("--optimizer", help="sgd, sgd_momentum, adam or adamw (default)")
    budget.add_argument("--seed", type=int, help="seed of init and data order, the same for every candidate (default 0)")
    budget.add_argument("--device", help="auto (default), cpu, cuda, cuda:N, mps")
    budget.add_argument("--amp", help="mixed precision: off (default), bf16, fp16")
    budget.add_argument("--threads", dest="torch_threads", type=int, help="torch.set_num_threads per process")
    choice = p.add_argument_group("comparison")
    choice.add_argument("--objective", choices=("metric", "loss"), default="metric",
                        help="compare the validation metric (default) or the validation loss")
    choice.add_argument("--within", type=float, default=1.0, metavar="PCT",
                        help="recommend the cheapest plan within PCT %% of the best objective (default 1)")
    choice.add_argument("--min-retention", type=float, metavar="Y", help="and whose retention metric is at least Y")
    choice.add_argument("--by", choices=COSTS, default="time", help="cheapest by training time (default) or peak memory")
    choice.add_argument("--no-prune", action="store_true", help="train every candidate to the end (no successive halving)")
    choice.add_argument("--reduction-factor", type=int, default=3, metavar="ETA",
                        help="the pruner keeps the best 1/ETA at each rung (default 3)")
    run = p.add_argument_group("running")
    run.add_argument("--workers", type=int, default=1, metavar="K", help="local processes sharing the study (default 1)")
    run.add_argument("--storage", metavar="URL", help="a database URL shared by several machines (default: OUT/study.db)")
    run.add_argument("--study", default="sweep", metavar="NAME", help="the study's name in its storage (default sweep)")
    run.add_argument("--chart", metavar="PNG", help="write the chart here (default OUT/sweep.png)")
    run.add_argument("--no-chart", action="store_true", help="write no chart")
    run.add_argument("--json", action="store_true", help="print the report as JSON")
    run.add_argument("--no-progress", action="store_true", help="no progress lines")
    run.add_argument("--join", help=argparse.SUPPRESS)  # a --workers process: the launch it belongs to


def _settings(args: argparse.Namespace) -> Any:
    from workbench.core.advisor.sweep import SweepSettings

    steps, seconds = args.steps, args.seconds
    if steps is None and seconds is None:
        steps = 100
    for flag, v in (("--steps", steps), ("--eval-every", args.eval_every), ("--workers", args.workers)):
        if v is not None and v < 1:
            raise CommandError(f"{flag} must be a positive integer, got {v}")
    every = args.eval_every if args.eval_every is not None else max(1, (steps or 100) // 10)
    return SweepSettings(steps=steps, seconds=seconds, eval_every=every, prune=not args.no_prune,
                         reduction_factor=args.reduction_factor, objective=args.objective, within=args.within / 100.0,
                         min_retention=args.min_retention, by=args.by, study=args.study,
                         storage=args.storage).validate()


def _config(args: argparse.Namespace) -> Any:
    from workbench.core.training.config import TrainConfig

    changes: dict[str, Any] = {"model": args.model}
    for name in ("weights", "checkpoint", "num_classes", "data", "val", "image_size", "seq_len", "batch_size",
                 "seed", "device", "amp", "torch_threads", "loss", "metric"):
        v = getattr(args, name, None)
        if v is not None:
            changes[name] = v
    if args.optimizer is not None:
        changes["optimizer"] = optimizer_from_arg(args.optimizer)
    shape = input_shape_from_arg(getattr(args, "input_shape", None))
    if shape is not None:
        changes["input_shape"] = shape
    return TrainConfig().replace(**changes, log_every=1)


def _candidates(args: argparse.Namespace, cfg: Any, inputs: Any = None) -> list[Any]:
    from workbench.core.advisor.sweep import cross_learning_rates
    from workbench.core.plan import FreezePlan

    if (args.memory is None) == (args.plans is None):
        raise CommandError("give the candidates as --memory SIZE (the advisor's plans that fit) or --plans FILE ...")
    lrs = args.lr or [cfg.lr]
    if args.plans is not None:
        plans: list[tuple[str, FreezePlan, dict[str, Any]]] = [(Path(f).name.removesuffix(".json").removesuffix(".plan"), FreezePlan.load(f), {}) for f in args.plans]
        return cross_learning_rates(plans, lrs)
    from workbench.core.advisor.sizes import parse_size
    from workbench.core.advisor.sweep_candidates import advised_plans

    _advice, plans = advised_plans(cfg, parse_size(args.memory), front_only=args.candidates == "front",
                                   trust_pickle=args.trust_pickle, inputs=inputs)
    if args.limit is not None:
        if args.limit < 1:
            raise CommandError(f"--limit must be a positive integer, got {args.limit}")
        if args.limit < len(plans):  # evenly spread, the least and the most trained kept
            step = (len(plans) - 1) / max(1, args.limit - 1)
            plans = [plans[round(i * step)] for i in range(args.limit)] if args.limit > 1 else plans[:1]
    return cross_learning_rates(plans, lrs)


def _progress(args: argparse.Namespace) -> Any:
    """The progress lines' callback, or None with ``--no-progress`` or ``--json`` (the sweep then builds
    no row for a finished candidate: nothing would print it)."""
    if args.no_progress or args.json:
        return None
    started = time.perf_counter()
    finished = [0]

    def on_event(kind: str, data: dict[str, Any]) -> None:
        if kind == "started":
            print(f"sweep: {data['id']} {data['name']}: training", file=sys.stderr, flush=True)
        elif kind == "finished" and data.get("row") is not None:
            finished[0] += 1
            r = data["row"]
            what = r.status if r.status != "pruned" else f"pruned: {r.reason}"
            print(f"sweep: {r.id} done ({finished[0]} here, {time.perf_counter() - started:.0f} s): {what}",
                  file=sys.stderr, flush=True)
    return on_event


@contextlib.contextmanager
def _long_lived_left_out() -> Iterator[None]:
    """Within the block, the objects alive at its start are left out of every garbage collection.

    With torch, Optuna and the workbench imported a process holds some 350,000 objects; a full
    collection walks them all, 0.2 to 0.3 s of CPU, and Optuna runs one after each candidate
    (``gc_after_trial``, eight on an eight-candidate sweep, pruned or not). Collected once here
    and then frozen (``gc.freeze``: the modules, the model the candidates copy, the study), they
    are not walked again, and a collection after a candidate walks only what was made since:
    that candidate's run, which is what it is there to free. Thawed when the block ends, however
    it ends, so a caller in the same process (``advise --sweep``, a test) gets its collector
    back as it was; where something else froze objects already, the collector is left as it is.
    The command's process only: the app trains its sweep on a worker thread, where a collection
    must not be the one that finalizes the window's objects.
    """
    if gc.get_freeze_count():
        yield
        return
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _worker(argv_args: dict[str, Any]) -> None:
    """A ``--workers`` process: join the study, take candidates until the queue is empty."""
    args = argparse.Namespace(**argv_args)
    try:
        _train(args, join=True)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as e:  # one line, as the CLI prints errors
        print(f"workbench sweep: worker error: {' '.join(str(e).split())}", file=sys.stderr)
        sys.exit(2)


def _wait_for_peers(folder: Path, launch: str, expected: int) -> None:
    """Each process of one ``--workers`` launch says it is ready; all start their first candidate together."""
    import os

    where = folder / ".workers" / launch
    where.mkdir(parents=True, exist_ok=True)
    (where / str(os.getpid())).touch()
    deadline = time.monotonic() + _START_TOGETHER_S
    while len(list(where.iterdir())) < expected and time.monotonic() < deadline:
        time.sleep(0.1)


def _train(args: argparse.Namespace, *, join: bool) -> tuple[Any, SweepReport | None]:
    from workbench.core.advisor.sweep import Sweep, opened
    from workbench.core.advisor.sweep_trial import SweepInputs, open_retain

    settings = _settings(args)
    cfg = _config(args)
    import_optuna()  # one line naming the extra, before anything is built
    if args.retain is not None and not join:
        open_retain(args.retain, cfg, image_size=cfg.image_size or 224, num_classes=cfg.num_classes or 10)
    inputs = SweepInputs(cfg, trust_pickle=args.trust_pickle)  # the model and data: for the advisor and every candidate
    cands = _candidates(args, cfg, inputs)
    sweep = Sweep(args.out, cands, cfg, settings, retain=args.retain, trust_pickle=args.trust_pickle, inputs=inputs)
    procs: list[Any] = []
    with opened(sweep, join=join) as queued:
        launch = args.join or f"{time.time_ns():x}"
        if not join:
            done = sum(r.status in ("completed", "pruned", "failed") for r in sweep.report().rows)
            if done and not args.json:
                print(f"sweep: resuming {args.out}: {done} of {len(cands)} candidates already done", file=sys.stderr)
            if args.workers > 1 and queued:
                ctx = multiprocessing.get_context("spawn")
                child = {**vars(args), "join": launch}
                procs = [ctx.Process(target=_worker, args=(child,), daemon=False) for _ in range(args.workers - 1)]
                for proc in procs:
                    proc.start()
        if args.workers > 1:
            _wait_for_peers(Path(args.out), launch, args.workers)
        stop = threading.Event()
        with _long_lived_left_out():
            try:
                sweep.work(cancel=stop, on_event=_progress(args))
            finally:
                for proc in procs:
                    proc.join()
            if procs and args.storage is None and sweep.requeue_orphans():  # a worker that died left its candidate
                print("sweep: a worker process ended early; its candidates train here", file=sys.stderr)
                sweep.work(cancel=stop, on_event=_progress(args))
        report = None if join else sweep.report()
        if report is not None:
            sweep.write_report(report)
    return sweep, report


def run(args: argparse.Namespace) -> int:
    """Run (or resume) the sweep, print the table and recommendation, write the report and chart.

    Returns:
        0 when a plan is recommended, 1 when none is.

    Raises:
        WorkbenchError: bad input (one line, exit 2); no earlier study is changed.
    """
    sweep, report = _train(args, join=False)
    assert report is not None
    chart = None
    if not args.no_chart:
        from workbench.gui.advisor.sweep_chart import write_chart

        chart = Path(args.chart) if args.chart else Path(args.out) / "sweep.png"
        write_chart(report, chart)
    if args.json:
        json.dump(report.to_dict(), sys.stdout, indent=1)
        print()
    else:
        print_report(report, sweep.settings)
        if chart is not None:
            print(f"chart: {chart}")
    return 0 if report.recommended is not None else 1


def _pct(v: float | None, objective: str) -> str:
    if v is None:
        return "-"
    return f"{v:.4f}" if objective == "validation loss" else f"{v:.4g}"


def print_report(report: SweepReport, settings: Any) -> None:
    """Print the sweep's table, fronts and recommendation.

    Args:
        report: the report.
        settings: the sweep's settings (budget, pruning).
    """
    budget = f"{settings.steps} steps" if settings.steps is not None else f"{settings.seconds:g} s"
    pruner = f"successive halving, eta {settings.reduction_factor}" if settings.prune else "no pruning"
    print(f"{len(report.rows)} candidates, {budget} each, validation every {settings.eval_every} steps, {pruner}; "
          f"objective: {report.objective}")
    head = ["", "candidate", "status", "steps", report.objective, "val loss", "retention", "time", "peak", "trainable",
            "front"]
    rows = []
    for i, r in enumerate(report.rows):
        front = "+".join(w for w, on in (("time", r.on_time_front), ("memory", r.on_memory_front)) if on)
        rows.append(["→" if i == report.recommended else "", r.name, r.status, str(r.steps),
                     _pct(r.metric, report.objective), _pct(r.val_loss, "validation loss"),
                     _pct(r.retention, report.objective), f"{r.time_s:.1f} s" if r.time_s is not None else "-",
                     fmt_memory(r.peak_bytes) if r.peak_bytes is not None else "-",
                     f"{r.trainable:,}" if r.trainable is not None else "-", front or "-"])
    print_table(head, rows, left=3)
    sources = sorted({r.memory_source for r in report.rows if r.memory_source})
    if sources:
        print(f"  peak: {', '.join(sources)}; time: training wall time less validation")
    if report.retention_before is not None:
        print(f"  retention before training: {report.retention_before:.4g}")
    for r in report.rows:
        if r.status in ("pruned", "failed") and r.reason:
            print(f"  {r.name}: {r.status}: {r.reason}")
    print(report.recommendation)

