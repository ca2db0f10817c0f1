"""Benchmark A+B reparameterization on resnet18: step time and peak memory, as ratios to plain training.

Run from the repository root::

    python tests/benchmarks/bench_reparam.py [--device cuda] [--steps N] [--image-size S] [--batch B] [--json out.json]

One process, the same batches for every mode, Adam. Modes:

- ``plain``: full fine-tuning of the unmodified model (the 1.00 reference);
- ``exact``: A+B through ``torch.nn.utils.parametrize`` (B is the parameter);
- ``fused``: A+B training W itself (B = W - A derived on demand);
- ``hand``: the hand-written version of the user report (in-place ``copy_``/``add_`` +
  ``retain_grad`` in ``forward``; ``tests/fixtures/broken_patterns.py``), run last for
  ``--hand-steps`` steps.

plain/exact/fused are interleaved in chunks (rotating their order) so that load from other
processes hits every mode alike; the step time of a mode is the median of its ``--steps``
measured steps after ``--warmup``. Growth is the median of the last 10 measured steps over the
median of the first 10 (for ``hand``: steps 2-11 against the last 10 of ``--hand-steps``).
Peak memory is measured afterwards, one mode at a time, over one training step: on CUDA
``torch.cuda.max_memory_allocated``; on CPU torch's ``MemTracker`` (tensor bytes of
parameters, buffers, A, gradients, optimizer state, activations and temporaries).

The script measures and prints; it asserts nothing.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torchvision
from torch import nn

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import workbench as wb  # noqa: E402
from tests.fixtures.broken_patterns import HandWrittenAPlusB  # noqa: E402

MODES = ("plain", "exact", "fused")


class Runner:
    """One mode: a model, its optimizer, and a training step over the shared batches."""

    def __init__(self, mode: str, device: torch.device, num_classes: int, lr: float) -> None:
        torch.manual_seed(0)
        model = torchvision.models.resnet18(weights=None, num_classes=num_classes).to(device)
        self.mode = mode
        self.model: nn.Module = model
        self.a: list[torch.Tensor] = []
        self.extra: list[torch.Tensor] = []  # tensors outside the model (A) for the memory tracker
        if mode == "plain":
            params: Any = model.parameters()
        elif mode in ("exact", "fused"):
            applied = wb.apply_plan(model, {"rules": [{"select": "*", "reparam": {"kind": "a_plus_b", "mode": mode}}]})
            params = applied.param_groups(lr=lr)
            self.extra = [t for h in applied.installed("reparam").values() for _, t in h.fixed()]
        elif mode == "hand":
            # the user's code with A = the loaded weights and B = 0 (same start as the other modes)
            self.a = [p.detach().clone() for p in model.parameters()]
            b = nn.ParameterList([torch.zeros_like(p) for p in model.parameters()])
            self.model = HandWrittenAPlusB(model, b)
            del model
            params = self.model.parameters()  # as in the report: Adam over the whole wrapper
            self.extra = self.a
        else:
            raise ValueError(f"unknown mode {mode!r}")
        self.opt = torch.optim.Adam(params, lr=lr)
        self.model.train()

    def step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """zero_grad, forward, backward, optimizer step."""
        self.opt.zero_grad(set_to_none=True)
        out = self.model(x, self.a) if self.mode == "hand" else self.model(x)
        nn.functional.cross_entropy(out, y).backward()
        self.opt.step()


def log(msg: str) -> None:
    """Progress on stderr (the table goes to stdout)."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], None], device: torch.device) -> float:
    """Seconds one call takes (CUDA work included)."""
    _sync(device)
    t0 = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - t0


def growth(times: list[float], k: int = 10) -> float:
    """Median of the last ``k`` steps over the median of the first ``k``."""
    k = min(k, len(times) // 2)
    return statistics.median(times[-k:]) / statistics.median(times[:k])


def peak_memory(
    mode: str, device: torch.device, num_classes: int, lr: float, batch: tuple[torch.Tensor, torch.Tensor]
) -> int | None:
    """Peak tensor bytes of one training step (after one warm-up step), this mode alone.

    Returns None for the hand-written version on CPU (the tracker needs leaf parameters).
    """
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        r = Runner(mode, device, num_classes, lr)
        r.step(*batch)
        torch.cuda.reset_peak_memory_stats(device)
        r.step(*batch)
        _sync(device)
        peak = torch.cuda.max_memory_allocated(device)
        del r
        return peak
    if mode == "hand":  # MemTracker hooks parameters; the hand-written ones are not leaves any more
        return None
    from torch.distributed._tools.mem_tracker import MemTracker

    r = Runner(mode, device, num_classes, lr)
    r.step(*batch)
    mt = MemTracker()
    mt.track_external(r.model, r.opt, *r.extra, *batch)
    with mt:
        r.step(*batch)
    snap = mt.get_tracker_snapshot("peak")
    del r, mt
    return int(sum(v.get("Total", 0) for v in snap.values()))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark, print the table, return the results."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:N] (default cpu)")
    ap.add_argument("--steps", type=int, default=30, help="measured steps per mode (>= 20; default 30)")
    ap.add_argument("--warmup", type=int, default=5, help="unmeasured steps per mode first (default 5)")
    ap.add_argument("--hand-steps", type=int, default=100, help="steps of the hand-written version (default 100)")
    ap.add_argument("--image-size", type=int, default=96)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: leave torch's default)")
    ap.add_argument("--chunk", type=int, default=5, help="steps per mode before switching modes (default 5)")
    ap.add_argument("--no-memory", action="store_true", help="skip the peak memory pass")
    ap.add_argument("--json", type=Path, help="also write the results to this JSON file")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda given but CUDA is not available")
    if args.threads:
        torch.set_num_threads(args.threads)
    num_classes, lr = 10, 1e-4
    g = torch.Generator().manual_seed(0)
    batches = [
        (
            torch.randn(args.batch, 3, args.image_size, args.image_size, generator=g).to(device),
            torch.randint(0, num_classes, (args.batch,), generator=g).to(device),
        )
        for _ in range(4)
    ]

    log(f"timing {', '.join(MODES)} interleaved: {args.warmup} + {args.steps} steps each")
    runners = {m: Runner(m, device, num_classes, lr) for m in MODES}
    times: dict[str, list[float]] = {m: [] for m in MODES}
    total = args.warmup + args.steps
    done = dict.fromkeys(MODES, 0)
    rnd = 0
    while any(done[m] < total for m in MODES):
        order = MODES[rnd % len(MODES):] + MODES[: rnd % len(MODES)]
        for m in order:
            for _ in range(min(args.chunk, total - done[m])):
                i = done[m]
                t = timed(lambda: runners[m].step(*batches[i % len(batches)]), device)
                if i >= args.warmup:
                    times[m].append(t)
                done[m] += 1
        rnd += 1
    del runners
    gc.collect()

    log(f"timing the hand-written version: {args.hand_steps} steps")
    hand = Runner("hand", device, num_classes, lr)
    hand_times = [timed(lambda i=i: hand.step(*batches[i % len(batches)]), device) for i in range(args.hand_steps)]
    del hand
    gc.collect()

    med = {m: statistics.median(times[m]) for m in MODES}
    hand_first = hand_times[1:11]
    res: dict[str, Any] = {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "batch": args.batch,
        "image_size": args.image_size,
        "steps": args.steps,
        "hand_steps": args.hand_steps,
        "modes": {},
    }
    for m in MODES:
        res["modes"][m] = {
            "median_ms": 1000 * med[m],
            "ratio": med[m] / med["plain"],
            "growth": growth(times[m]),
        }
    res["modes"]["hand"] = {
        "median_ms": 1000 * statistics.median(hand_first),
        "ratio": statistics.median(hand_first) / med["plain"],
        "growth": statistics.median(hand_times[-10:]) / statistics.median(hand_first),
        "last10_ratio": statistics.median(hand_times[-10:]) / med["plain"],
    }
    if not args.no_memory:
        log("peak memory, one mode at a time")
        for m in (*MODES, "hand"):
            peak = peak_memory(m, device, num_classes, lr, batches[0])
            if peak is not None:
                res["modes"][m]["peak_mib"] = peak / 2**20
        base = res["modes"]["plain"]["peak_mib"]
        for r in res["modes"].values():
            if "peak_mib" in r:
                r["peak_ratio"] = r["peak_mib"] / base

    print(
        f"A+B benchmark: resnet18, {res['device_name']}, batch {args.batch}, {args.image_size}px, "
        f"torch {torch.__version__}, {res['threads']} threads; median of {args.steps} steps after {args.warmup} warm-up"
    )
    print(f"{'mode':<8}{'step ms':>10}{'× plain':>10}{'last10/first10':>16}{'peak MiB':>11}{'× plain':>9}")
    for m, r in res["modes"].items():
        mem = f"{r['peak_mib']:>11.1f}{r['peak_ratio']:>9.2f}" if "peak_mib" in r else f"{'n/a':>11}{'':>9}"
        label = m if m != "hand" else "hand*"
        print(f"{label:<8}{r['median_ms']:>10.1f}{r['ratio']:>10.2f}{r['growth']:>16.2f}{mem}")
    print(
        f"* hand-written version of the report: steps 2-11 of {args.hand_steps}; its last 10 steps take "
        f"{res['modes']['hand']['last10_ratio']:.2f}× a plain step"
    )
    if args.json:
        from workbench.core.atomic import atomic_write

        atomic_write(args.json, json.dumps(res, indent=2) + "\n")
    return res


if __name__ == "__main__":
    main()
