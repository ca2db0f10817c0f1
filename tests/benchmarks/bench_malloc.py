"""CPU training and glibc's allocator: the same run with the default and with tuned malloc settings.

glibc serves large blocks (torch's activations and gradients) with ``mmap`` and returns freed
memory to the OS, so a training step can fault the same pages in again at every step.
``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` set high keep them in the heap.
Each mode trains resnet18 (synthetic images, CPU, torch's default thread count) on the main
thread of a fresh process, ``--rounds`` times in turn; it prints the median step time and
peak RSS of each and their ratios to the default. Nothing is asserted.

- ``default``: glibc as it comes.
- ``no-trim-no-mmap``: ``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` = 1 GB.
- ``no-trim``: ``MALLOC_TRIM_THRESHOLD_`` alone (it also freezes the mmap threshold).

Run: python tests/benchmarks/bench_malloc.py [--rounds 4] [--steps 16] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

_CHILD = """
import json, statistics, sys, psutil, torch, torchvision
from workbench.core.training.config import TrainConfig
from workbench.core.training.engine import Trainer
steps, warmup, batch, size = (int(a) for a in sys.argv[1:5])
torch.manual_seed(0)
cfg = TrainConfig(batch_size=batch, image_size=size, steps=steps, data="synthetic", device="cpu")
times = [m.step_time_s for m in Trainer(cfg, model=torchvision.models.resnet18(weights=None)).steps()]
rss = psutil.Process().memory_info()
print(json.dumps({"median_s": statistics.median(times[warmup:]), "rss": rss.rss}))
"""

GB = str(1 << 30)
MODES: dict[str, dict[str, str]] = {
    "default": {},
    "no-trim-no-mmap": {"MALLOC_MMAP_THRESHOLD_": GB, "MALLOC_TRIM_THRESHOLD_": GB},
    "no-trim": {"MALLOC_TRIM_THRESHOLD_": GB},
}


def measure(env: dict[str, str], args: argparse.Namespace) -> tuple[float, int]:
    """(median step time in s, RSS at the end in bytes) of one fresh process."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(args.steps), str(args.warmup), str(args.batch_size), str(args.image_size)],
        check=True, capture_output=True, text=True, timeout=900, env=clean | env,
    )
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return float(r["median_s"]), int(r["rss"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")
    args = parser.parse_args(argv)

    times: dict[str, list[float]] = {m: [] for m in MODES}
    rss: dict[str, list[int]] = {m: [] for m in MODES}
    for _ in range(args.rounds):
        for mode, env in MODES.items():
            t, r = measure(env, args)
            times[mode].append(t)
            rss[mode].append(r)
    med = {m: statistics.median(v) * 1000 for m, v in times.items()}
    mem = {m: statistics.median(v) / 2**20 for m, v in rss.items()}
    print(f"resnet18 · batch {args.batch_size} · {args.image_size} px · cpu · {os.cpu_count()} cores · "
          f"{args.rounds} rounds of {args.steps} steps (first {args.warmup} left out)")
    for mode in MODES:
        print(f"{mode:<16} median step {med[mode]:7.1f} ms  {med[mode] / med['default']:.3f}x   "
              f"RSS at the end {mem[mode]:7.0f} MB  {mem[mode] / mem['default']:.2f}x")
    if args.json:
        from workbench.core.atomic import atomic_write

        results = {
            "config": vars(args) | {"cpu_count": os.cpu_count()},
            "step_ms": med, "rss_mb": mem,
            "step_ms_rounds": {m: [x * 1000 for x in v] for m, v in times.items()},
            "ratio_to_default": {m: med[m] / med["default"] for m in MODES},
        }
        atomic_write(args.json, json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
