"""Training inside the desktop app: GUI responsiveness, and step time against a headless run.

1. Event-loop latency: while resnet18 trains in the app (offscreen window, live plots), a
   10 ms ``QTimer`` (precise) records how late each tick fires, over ``--seconds`` of training
   (target: p99 <= 50 ms). The same timer with the app idle gives the floor.
2. Step time: the same config trained in the app (worker thread, plots redrawing) and headless
   (``Trainer.steps()`` in a plain thread of this process, no event loop running), ``--rounds``
   times in turn, so load from other processes hits both alike; the median of the per-round
   ratios, and the ratio of the medians (target: <= 1.05x). Headless runs on a thread, not on
   the main thread: that is the GUI thread, which the app keeps serial
   (:mod:`workbench.core.training.cpu_threads`). A third variant runs the same config headless in a
   fresh process, as ``workbench train`` does (on its main thread, whose allocator arena
   differs: see ``bench_cpu_threads.py``). The table prints the ``OMP_WAIT_POLICY`` in force.

Also reported: metric batches and redraws per second while training (the worker sends at most
about 20 batches a second; the plots redraw up to 15 times a second, once a second when
training takes every core), and the GUI thread's CPU time.

Nothing is asserted: it prints a table, and ``--json out.json`` writes the numbers.

Run: python tests/benchmarks/bench_gui_training.py [--rounds 16] [--device cuda] [--json out.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import torch

_CHILD = """
import json, statistics, sys, torchvision, torch
from workbench.core.training.config import TrainConfig
from workbench.core.training.engine import Trainer
torch.manual_seed(0)
cfg = TrainConfig.from_json(sys.argv[1])
if cfg.torch_threads is None and len(sys.argv) > 3:
    torch.set_num_threads(int(sys.argv[3]))
times = [m.step_time_s for m in Trainer(cfg, model=torchvision.models.resnet18(weights=None)).steps()]
print(json.dumps(statistics.median(times[int(sys.argv[2]):])))
"""


def headless_subprocess(cfg_json: str, warmup: int, threads: int) -> float:
    """Median step time (s) of the config trained headless in a fresh process."""
    import subprocess

    out = subprocess.run(
        [sys.executable, "-c", _CHILD, cfg_json, str(warmup), str(threads)],
        check=True, capture_output=True, text=True, timeout=900,
    )
    return float(out.stdout.strip().splitlines()[-1])


def headless_thread(cfg: Any, model: Any, plan: Any, warmup: int) -> float:
    """Median step time (s) of the config trained by a plain Python thread of this process.

    The thread gets the worker threads' CPU share as the app's training thread does
    (:func:`workbench.core.training.cpu_threads.use_worker_threads`); no event loop runs meanwhile.
    """
    import threading

    from workbench.core.training.cpu_threads import use_worker_threads
    from workbench.core.training.engine import Trainer

    out: list[float] = []

    def body() -> None:
        use_worker_threads(cfg.torch_threads)
        trainer = Trainer(cfg, model=copy.deepcopy(model), plan=plan.copy())
        out.append(statistics.median(step_times([m.to_dict() for m in trainer.steps()], warmup)))

    thread = threading.Thread(target=body, name="headless")
    thread.start()
    thread.join()
    return out[0]


def _percentile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = min(len(s) - 1, max(0, round(q / 100.0 * (len(s) - 1))))
    return s[k]


class LatencyProbe:
    """A 10 ms precise QTimer that records how late each tick fires (ms)."""

    def __init__(self, interval_ms: int = 10) -> None:
        from PySide6.QtCore import Qt, QTimer

        self.interval = interval_ms / 1000.0
        self.late: list[float] = []
        self._last: float | None = None
        self.timer = QTimer()
        self.timer.setTimerType(Qt.TimerType.PreciseTimer)
        self.timer.setInterval(interval_ms)
        self.timer.timeout.connect(self._tick)

    def _tick(self) -> None:
        now = time.perf_counter()
        if self._last is not None:
            self.late.append(max(0.0, (now - self._last - self.interval) * 1000.0))
        self._last = now

    def start(self) -> None:
        self.late.clear()
        self._last = None
        self.timer.start()

    def stop(self) -> dict[str, float]:
        self.timer.stop()
        return {
            "ticks": len(self.late),
            "p50_ms": _percentile(self.late, 50),
            "p99_ms": _percentile(self.late, 99),
            "max_ms": max(self.late) if self.late else float("nan"),
        }


def spin(app: Any, done: Callable[[], bool], timeout: float, signal: Any = None) -> None:
    """Run the event loop (exec, not polling) until ``done()`` or ``timeout`` seconds.

    ``done()`` is checked whenever ``signal`` fires, and every 250 ms: the benchmark itself
    should wake the GUI thread as seldom as it can, since every wake-up takes a core from the
    training step it measures.
    """
    from PySide6.QtCore import QEventLoop, QTimer

    loop = QEventLoop()

    def check(*_: Any) -> None:
        if done():
            loop.quit()

    timer = QTimer()
    timer.setInterval(250)
    timer.timeout.connect(check)
    timer.start()
    if signal is not None:
        signal.connect(check)
    QTimer.singleShot(int(timeout * 1000), loop.quit)
    if not done():
        loop.exec()
    timer.stop()
    if signal is not None:
        signal.disconnect(check)


def step_times(metrics: list[dict[str, Any]], warmup: int) -> list[float]:
    return [m["step_time_s"] for m in metrics[warmup:] if m.get("step_time_s") == m.get("step_time_s")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=6.0, help="training time the latency is measured over")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=12, help="steps per round of the step-time comparison")
    parser.add_argument("--warmup", type=int, default=3, help="first steps of each run left out")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--no-subprocess", action="store_true", help="skip the headless run in a fresh process")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    from PySide6.QtCore import QSettings

    from workbench.core.training.cpu_threads import worker_thread_count
    from workbench.gui.app import create_application

    tmp = tempfile.mkdtemp(prefix="bench-gui-")
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, tmp)
    os.environ["WORKBENCH_RUNS_DIR"] = str(Path(tmp) / "runs")
    app = create_application()  # the GUI thread keeps torch serial from here on
    threads = worker_thread_count()
    from workbench.gui.main_window import MainWindow

    window = MainWindow()
    window.resize(1400, 850)
    window.show()
    c, t = window.controller, window.training
    t.panel.set_values(batch_size=args.batch_size, image_size=args.image_size, device=args.device, data="synthetic")
    probe = LatencyProbe()

    # ---- 1. event-loop latency, idle then training
    probe.start()
    spin(app, lambda: False, 2.0)
    idle = probe.stop()
    t.panel.set_values(steps=1_000_000)
    batches: list[float] = []
    t.runs.metricsReceived.connect(lambda _b: batches.append(time.perf_counter()))
    assert t.panel.start()
    spin(app, lambda: bool(batches), 300.0, t.runs.metricsReceived)  # setup done, first metrics in
    redraws0, t0, n0 = t.plots.redraws, time.perf_counter(), len(batches)
    cpu0 = time.thread_time()
    probe.start()
    spin(app, lambda: time.perf_counter() - t0 >= args.seconds, args.seconds + 60)
    training = probe.stop()
    elapsed = time.perf_counter() - t0
    gui_cpu = (time.thread_time() - cpu0) / elapsed  # share of one core the GUI thread used
    redraw_rate = (t.plots.redraws - redraws0) / elapsed
    batch_rate = (len(batches) - n0) / elapsed
    steps_seen = len(t.runs.current.metrics) if t.runs.current is not None else 0
    t.runs.stop()
    spin(app, lambda: t.runs.state == "idle", 120.0)

    # ---- 2. step time: app vs headless, in turn
    app_medians: list[float] = []
    headless_medians: list[float] = []
    fresh_medians: list[float] = []
    gui_cpu_rounds: list[float] = []
    for _ in range(args.rounds):
        t.panel.set_values(steps=args.steps)
        seen: list[tuple[float, float]] = []  # (GUI thread CPU, wall) at each metric batch
        on_batch = lambda _b: seen.append((time.thread_time(), time.perf_counter()))
        t.runs.metricsReceived.connect(on_batch)
        assert t.panel.start()
        spin(app, lambda: t.runs.state == "idle", 600.0, t.runs.stateChanged)
        t.runs.metricsReceived.disconnect(on_batch)
        if len(seen) > 2 and seen[-1][1] > seen[1][1]:  # from the second batch to the last
            gui_cpu_rounds.append((seen[-1][0] - seen[1][0]) / (seen[-1][1] - seen[1][1]))
        rec = t.runs.records[-1]
        app_medians.append(statistics.median(step_times(rec.metrics, args.warmup)))
        cfg = t.panel.config()
        headless_medians.append(headless_thread(cfg, c.model, c.plan, args.warmup))
        if not args.no_subprocess:
            fresh_medians.append(headless_subprocess(cfg.to_json(), args.warmup, threads))
    c.undo_stack.setClean()
    window.close()

    app_ms = statistics.median(app_medians) * 1000
    headless_ms = statistics.median(headless_medians) * 1000
    fresh_ms = statistics.median(fresh_medians) * 1000 if fresh_medians else float("nan")
    round_ratios = [a / h for a, h in zip(app_medians, headless_medians)]
    results = {
        "config": {
            "model": "resnet18", "batch_size": args.batch_size, "image_size": args.image_size, "device": args.device,
            "torch_threads": threads, "cpu_count": os.cpu_count(),
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(default)"),
        },
        "latency_idle": idle,
        "latency_training": {**training, "seconds": elapsed, "steps": steps_seen},
        "redraws_per_s": redraw_rate,
        "gui_thread_cpu_fraction": gui_cpu,
        "gui_thread_cpu_fraction_step_rounds": statistics.median(gui_cpu_rounds) if gui_cpu_rounds else float("nan"),
        "metric_batches_per_s": batch_rate,
        "step_ms_app": app_ms,
        "step_ms_headless": headless_ms,
        "step_ms_app_rounds": [x * 1000 for x in app_medians],
        "step_ms_headless_rounds": [x * 1000 for x in headless_medians],
        "ratio_app_over_headless": app_ms / headless_ms,
        "ratio_app_over_headless_per_round": round_ratios,
        "ratio_app_over_headless_median_of_rounds": statistics.median(round_ratios),
        "step_ms_fresh_process": fresh_ms,
        "step_ms_fresh_process_rounds": [x * 1000 for x in fresh_medians],
        "ratio_app_over_fresh_process": app_ms / fresh_ms,
    }
    rows = [
        ("event-loop lateness, idle (p50 / p99 / max)", f"{idle['p50_ms']:.2f} / {idle['p99_ms']:.2f} / {idle['max_ms']:.1f} ms", ""),
        (
            f"event-loop lateness, training {elapsed:.1f} s (p50 / p99 / max)",
            f"{training['p50_ms']:.2f} / {training['p99_ms']:.2f} / {training['max_ms']:.1f} ms",
            "p99 <= 50 ms",
        ),
        ("plot redraws per second while training", f"{redraw_rate:.1f}", "<= 15 (one per batch at most)"),
        ("GUI thread CPU while training (incl. the 10 ms probe)", f"{100 * gui_cpu:.1f} % of a core", ""),
        ("metric batches per second", f"{batch_rate:.1f}", "<= about 20"),
        (
            "GUI thread CPU during the step-time rounds (no probe)",
            f"{100 * results['gui_thread_cpu_fraction_step_rounds']:.1f} % of a core", "",
        ),
        ("median step time in the app", f"{app_ms:.1f} ms", ""),
        ("median step time headless, same process", f"{headless_ms:.1f} ms", ""),
        ("app / headless (ratio of the medians)", f"{app_ms / headless_ms:.3f}x", "<= 1.05x"),
        ("app / headless, median of the per-round ratios", f"{statistics.median(round_ratios):.3f}x", ""),
        ("median step time headless, fresh process", f"{fresh_ms:.1f} ms", ""),
        ("app / fresh-process headless", f"{app_ms / fresh_ms:.3f}x", ""),
    ]
    print(f"resnet18 · batch {args.batch_size} · {args.image_size} px · {args.device} · "
          f"{threads} torch threads · OMP_WAIT_POLICY {os.environ.get('OMP_WAIT_POLICY') or 'default'} · "
          f"{args.rounds} rounds of {args.steps} steps")
    width = max(len(r[0]) for r in rows)
    for name, value, target in rows:
        print(f"{name:<{width}}  {value:>24}  {target}")
    if args.json:
        from workbench.core.atomic import atomic_write

        atomic_write(args.json, json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
