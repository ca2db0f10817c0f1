"""App start-up: process start to the first painted window, and to the populated module tree.

Each run is a fresh process, ``python -m workbench --screenshot OUT.png`` (offscreen), started
with ``WORKBENCH_STARTUP_TRACE=1`` so the app prints when it reached each point
(:mod:`workbench.gui.startup`). Times are measured from just before the process is started:

- ``first paint``: the start-up window (model bar, empty tree saying what loads) is painted;
- ``imports done``: torch, torchvision and the library are imported (on a thread, behind it);
- ``full window``: the full window replaced the start-up one;
- ``tree``: the default model is loaded and its tree populated;
- ``exit``: the screenshot is written and the process has ended.

It prints the median and best of ``--runs`` runs and asserts nothing. On a machine shared
with other work, the best time is the steadier figure.

Run::

    python tests/benchmarks/bench_startup.py
    python tests/benchmarks/bench_startup.py --runs 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EVENTS = (("first-paint", "first paint"), ("imports-done", "imports done"), ("window", "full window"), ("tree", "tree"))


def one_run(folder: Path) -> dict[str, float]:
    """Start the app once and time its start-up.

    Args:
        folder: a scratch folder (the screenshot goes there).

    Returns:
        Seconds from process start per event (``first paint`` ... ``exit``).

    Raises:
        RuntimeError: the app failed (its stderr's last lines are in the message).
    """
    env = dict(os.environ, WORKBENCH_STARTUP_TRACE="1", QT_QPA_PLATFORM=os.environ.get("QT_QPA_PLATFORM", "offscreen"))
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    t0 = time.time()
    proc = subprocess.run(
        [sys.executable, "-m", "workbench", "--screenshot", str(folder / "startup.png")],
        env=env, capture_output=True, text=True, check=False,
    )
    t_exit = time.time() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"the app exited with {proc.returncode}: {' | '.join(proc.stderr.splitlines()[-3:])}")
    seen: dict[str, float] = {}
    for line in proc.stderr.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "startup:":
            seen.setdefault(parts[1], float(parts[2]) - t0)
    out = {label: seen[event] for event, label in EVENTS if event in seen}
    out["exit"] = t_exit
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the table.

    Args:
        argv: command-line arguments (``--runs N``).

    Returns:
        0, or 1 when a run failed.
    """
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3, help="fresh processes to start (default: 3)")
    args = p.parse_args(argv)
    rows: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(max(1, args.runs)):
            try:
                rows.append(one_run(Path(tmp)))
            except RuntimeError as e:
                print(f"run {i + 1}: {e}", file=sys.stderr)
                return 1
            print(f"run {i + 1}: " + ", ".join(f"{k} {v:.2f} s" for k, v in rows[-1].items()), flush=True)
    print(f"\nstart-up of `python -m workbench --screenshot` ({len(rows)} fresh processes, {os.cpu_count()} CPUs)")
    print(f"{'':<14}{'median':>9}{'best':>9}")
    for label in [lbl for _e, lbl in EVENTS] + ["exit"]:
        xs = [r[label] for r in rows if label in r]
        if xs:
            print(f"{label:<14}{statistics.median(xs):>8.2f}s{min(xs):>8.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
