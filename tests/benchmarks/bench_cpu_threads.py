"""Training on a worker thread: what OpenMP's thread teams cost, and what reserving cores saves.

Three ways to train the same config (resnet18, synthetic images, CPU, torch's default thread
count), each in a fresh process, ``--rounds`` times in turn so load from other processes
hits them alike:

- ``main``: on the main thread (as ``workbench train`` does); the reference.
- ``thread``: on a worker thread, after the main thread ran parallel ops of its own (as a GUI
  thread that built or inspected a model would): two OpenMP teams.
- ``reserved``: on a worker thread, with the main thread kept serial by
  :func:`workbench.core.training.cpu_threads.reserve_cores_for_workers` and the worker given the
  cores by :func:`~workbench.core.training.cpu_threads.use_worker_threads` (what the desktop app
  does).

It prints the median step time of each and their ratios to ``main``; nothing is asserted.

Run: python tests/benchmarks/bench_cpu_threads.py [--rounds 6] [--steps 16] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

_CHILD = """
import json, statistics, sys, threading, torch, torchvision
mode, steps, warmup, batch, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
if mode == "reserved":
    from workbench.core.training.cpu_threads import reserve_cores_for_workers, use_worker_threads
    reserve_cores_for_workers()
from workbench.core.training.config import TrainConfig
from workbench.core.training.engine import Trainer
torch.manual_seed(0)
model = torchvision.models.resnet18(weights=None)
if mode == "thread":
    model(torch.rand(2, 3, 64, 64))  # the main thread runs parallel ops of its own
cfg = TrainConfig(batch_size=batch, image_size=size, steps=steps, data="synthetic", device="cpu")
out = []
def train():
    if mode == "reserved":
        use_worker_threads()
    times = [m.step_time_s for m in Trainer(cfg, model=model).steps()]
    out.append(statistics.median(times[warmup:]))
if mode == "main":
    train()
else:
    t = threading.Thread(target=train); t.start(); t.join()
print(json.dumps({"median_s": out[0], "threads": torch.get_num_threads()}))
"""

MODES = ("main", "thread", "reserved")


def measure(mode: str, args: argparse.Namespace) -> float:
    """Median step time (s) of one fresh process training in ``mode``."""
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, mode, str(args.steps), str(args.warmup), str(args.batch_size), str(args.image_size)],
        check=True, capture_output=True, text=True, timeout=900,
    )
    return float(json.loads(out.stdout.strip().splitlines()[-1])["median_s"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")
    args = parser.parse_args(argv)

    rounds: dict[str, list[float]] = {m: [] for m in MODES}
    for _ in range(args.rounds):
        for mode in MODES:
            rounds[mode].append(measure(mode, args))
    med = {m: statistics.median(v) * 1000 for m, v in rounds.items()}
    import os

    print(f"resnet18 · batch {args.batch_size} · {args.image_size} px · cpu · {os.cpu_count()} cores · "
          f"{args.rounds} rounds of {args.steps} steps (first {args.warmup} left out)")
    for mode in MODES:
        print(f"{mode:<9} median step {med[mode]:7.1f} ms   {med[mode] / med['main']:.3f}x main")
    if args.json:
        from workbench.core.atomic import atomic_write

        results = {
            "config": vars(args) | {"cpu_count": os.cpu_count()},
            "step_ms": med,
            "step_ms_rounds": {m: [x * 1000 for x in v] for m, v in rounds.items()},
            "ratio_to_main": {m: med[m] / med["main"] for m in MODES},
        }
        atomic_write(args.json, json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
