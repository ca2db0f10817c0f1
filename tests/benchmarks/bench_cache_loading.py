"""Frozen-prefix cache on image files: the wall time of a step after the first epoch, loading included.

An image folder of JPEG files (noise, 320 px, resized and cropped to 224 px), resnet18 with
only its head trained, batch 16, on the CPU. Three runs of the same seed, data and plan:

* ``off``: no cache: every step decodes its images and runs the whole model;
* ``on, inputs loaded``: the cache serves the steps after the first epoch, but the loader
  still decodes their images (the cache as it was before batches it serves loaded their labels only);
* ``on``: the cache serves those steps and the loader reads their labels only.

The figure is the median of ``step_time_s + data_time_s`` (the engine's clocks: the step, and
the wait for its batch) over the steps after the first epoch. By default the three take their
steps in turn, one of each, in one process; ``--alone`` runs each in a fresh process, one
after the other (interleaving can flatter the variant with the larger memory footprint).

    OMP_NUM_THREADS=2 python tests/benchmarks/bench_cache_loading.py
    OMP_NUM_THREADS=2 python tests/benchmarks/bench_cache_loading.py --alone

Prints ratios; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import torch
import torchvision
from PIL import Image

from workbench.core.training import frozen_cache
from workbench.core.training.config import TrainConfig
from workbench.core.training.engine import Trainer

VARIANTS = {"off": ("off", True), "loaded": ("on", False), "on": ("on", True)}
NAMES = {"off": "off", "loaded": "on, inputs loaded", "on": "on"}
PLAN = {"format": "freeze-plan", "version": 1, "rules": [{"select": "*", "frozen": True}, {"select": "fc", "frozen": False}]}


def _folder(root: Path, n: int) -> Path:
    for c in range(2):
        (root / f"class{c}").mkdir(parents=True, exist_ok=True)
        for i in range(n // 2):
            Image.effect_noise((320, 320), 64).convert("RGB").save(root / f"class{c}" / f"{i}.jpg", quality=90)
    return root


def _run(variant: str, folder: Path, epochs: int, batch: int) -> Iterator[float]:
    """A run's step + data times from the second epoch on, one per ``next``."""
    mode, label_only = VARIANTS[variant]
    torch.manual_seed(0)
    cfg = TrainConfig(plan=PLAN, data=f"imagefolder:{folder}", image_size=224, batch_size=batch, epochs=epochs,
                      device="cpu", cache_frozen=mode, seed=0, num_classes=2)
    t = Trainer(cfg, model=torchvision.models.resnet18(num_classes=2))
    off = mock.patch.object(frozen_cache, "reads_labels_alone", lambda _ds: False)
    with contextlib.nullcontext() if label_only else off:
        t.setup()  # the loader is decided here

    def times() -> Iterator[float]:
        for m in t.steps():
            if m.epoch >= 1 and m.window == 1:
                yield m.step_time_s + m.data_time_s
        assert t.result is not None and t.result.ok, t.result

    return times()


def _alone(variant: str, folder: Path, args: argparse.Namespace) -> float:
    cmd = [sys.executable, __file__, "--variant", variant, "--folder", str(folder), "--epochs", str(args.epochs),
           "--batch", str(args.batch)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return float(json.loads(out.strip().splitlines()[-1])["median_s"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=64, help="JPEG files in the folder")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--alone", action="store_true", help="each variant alone in a fresh process")
    ap.add_argument("--variant", choices=tuple(VARIANTS), help=argparse.SUPPRESS)  # one variant, for --alone
    ap.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.variant:
        times = list(_run(args.variant, args.folder, args.epochs, args.batch))
        print(json.dumps({"median_s": statistics.median(times)}))
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = _folder(Path(tmp) / "imgs", args.images)
        if args.alone:
            medians = {v: _alone(v, folder, args) for v in VARIANTS}
        else:
            runs = {v: _run(v, folder, args.epochs, args.batch) for v in VARIANTS}
            seen: dict[str, list[float]] = {v: [] for v in VARIANTS}
            with contextlib.suppress(StopIteration):
                while True:
                    for v, gen in runs.items():
                        seen[v].append(next(gen))
            medians = {v: statistics.median(xs) for v, xs in seen.items() if xs}
    how = "each alone in a fresh process" if args.alone else "steps in turn, one process"
    print(f"resnet18 head only, {args.images} JPEG files at 224 px, batch {args.batch}, {args.epochs} epochs ({how})")
    for v, s in medians.items():
        print(f"  {NAMES[v]:<18} {1e3 * s:8.1f} ms per step   {s / medians['off']:.3f}x")


if __name__ == "__main__":
    main()
