"""App start-up: process start to the first painted window, to the cached tree, and to the live tree.

Each run is a fresh process, ``python -m workbench --screenshot OUT.png`` (offscreen), started
with ``WORKBENCH_STARTUP_TRACE=1`` so the app prints when it reached each point
(:mod:`workbench.gui.startup`). Each round starts the app three times in a private cache folder
(``WORKBENCH_CACHE_DIR``): first with the folder empty (the first start ever: the tree the app
ships of resnet18), then with the description that start wrote (every later start), then on
another model the folder has no description of (``--model resnet34``: the empty tree saying
what loads, until the live tree). Times are measured from just before the process is started:

- ``first paint``: the start-up window (model bar, the described tree or the empty one) is painted;
- ``described tree``: the start-up window painted the model's described tree, whose checkboxes
  edit the plan (the same paint as ``first paint``; not without a description);
- ``window modules``: the full window's modules (pyqtgraph, the panels; no torch) are imported;
- ``full window``: the full window replaced the start-up one, the described tree in it (before
  torch is imported);
- ``torch``, ``torchvision``: each imported (on a thread, behind the full window);
- ``imports done``: torch and torchvision are imported;
- ``live tree``: the default model is loaded and its live tree populated;
- ``exit``: the screenshot is written and the process has ended.

It prints, over ``--runs`` rounds, for the first start and for later starts side by side, the
median wall time to each event, the median CPU time the process had used by then (user +
system, all threads; ``exit``: the whole process), the machine's load average before and
after, and asserts nothing. On a machine shared with other work the wall times stretch with
the load; the CPU times are the steadier figures.

Run::

    python tests/benchmarks/bench_startup.py
    python tests/benchmarks/bench_startup.py --runs 5
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EVENTS = (
    ("first-paint", "first paint"),
    ("cached-tree", "described tree"),
    ("window-modules", "window modules"),
    ("window", "full window"),
    ("imported-torch", "torch"),
    ("imported-torchvision", "torchvision"),
    ("imports-done", "imports done"),
    ("tree", "live tree"),
)


def one_run(folder: Path, model: str | None = None) -> dict[str, float]:
    """Start the app once and time its start-up.

    Args:
        folder: a scratch folder (the screenshot goes there; ``cache`` in it is the app's cache folder).
        model: the model to start on (``--model``), or None for the default (resnet18).

    Returns:
        Seconds from process start per event (``first paint`` ... ``exit``), and the CPU
        seconds the process had used by then as ``"<event> cpu"`` (``exit cpu``: user +
        system of the whole process).

    Raises:
        RuntimeError: the app failed (its stderr's last lines are in the message).
    """
    env = dict(os.environ, WORKBENCH_STARTUP_TRACE="1", QT_QPA_PLATFORM=os.environ.get("QT_QPA_PLATFORM", "offscreen"),
               WORKBENCH_CACHE_DIR=str(folder / "cache"))
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    proc = subprocess.run(
        [sys.executable, "-m", "workbench", "--screenshot", str(folder / "startup.png"),
         *(["--model", model] if model else [])],
        env=env, capture_output=True, text=True, check=False,
    )
    t_exit = time.time() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"the app exited with {proc.returncode}: {' | '.join(proc.stderr.splitlines()[-3:])}")
    out: dict[str, float] = {}
    labels = dict(EVENTS)
    for line in proc.stderr.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == "startup:" and parts[1] in labels and labels[parts[1]] not in out:
            out[labels[parts[1]]] = float(parts[2]) - t0
            out[f"{labels[parts[1]]} cpu"] = float(parts[3])
    out["exit"] = t_exit
    out["exit cpu"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out


def load_average() -> str:
    """The machine's 1-minute load average and its core count, as ``uptime`` says them.

    Returns:
        ``"load 1.32 on 2 CPUs"``.
    """
    return f"load {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the table.

    Args:
        argv: command-line arguments (``--runs N``).

    Returns:
        0, or 1 when a run failed.
    """
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3, help="rounds, each a first, a later and an undescribed start (default: 3)")
    args = p.parse_args(argv)
    kinds: dict[str, str | None] = {"first start": None, "later start": None, "resnet34": "resnet34"}
    rows: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
    load_before = load_average()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(max(1, args.runs)):
            folder = Path(tmp) / f"round{i + 1}"  # empty for the first start; its description for the later
            folder.mkdir()
            for kind in rows:
                try:
                    rows[kind].append(one_run(folder, kinds[kind]))
                except RuntimeError as e:
                    print(f"round {i + 1}, {kind}: {e}", file=sys.stderr)
                    return 1
                print(f"round {i + 1}, {kind}: " + ", ".join(f"{k} {v:.2f} s" for k, v in rows[kind][-1].items()),
                      flush=True)
    print(f"\nstart-up of `python -m workbench --screenshot` ({args.runs} rounds of three fresh processes; "
          f"{load_before} before, {load_average()} after); medians")
    print(f"{'':<16}" + "".join(f"{kind + ' wall':>18}{'CPU':>8}" for kind in rows))
    for label in [lbl for _e, lbl in EVENTS] + ["exit"]:
        cells = []
        for runs in rows.values():
            xs = [r[label] for r in runs if label in r]
            cpu = [r[f"{label} cpu"] for r in runs if f"{label} cpu" in r]
            cells.append(f"{statistics.median(xs):>17.2f}s{statistics.median(cpu):>7.2f}s" if xs and cpu else f"{'—':>18}{'—':>8}")
        print(f"{label:<16}" + "".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
