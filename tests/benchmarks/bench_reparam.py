"""Benchmark A+B reparameterization on resnet18: step time and peak memory, as ratios to plain training.

Run from the repository root::

    python tests/benchmarks/bench_reparam.py [--device cuda] [--steps N] [--image-size S] [--batch B] [--json out.json]
    python tests/benchmarks/bench_reparam.py --method blocks --threads 2 --image-size 64 --modes exact,fused,floor
    python tests/benchmarks/bench_reparam.py --method fresh --threads 2 --image-size 64 --modes exact,fused,floor

One process, the same batches for every mode, Adam (lr 1e-4), A = the loaded weights and
B = 0 for every A+B mode. Modes:

- ``plain``: full fine-tuning of the unmodified model (the 1.00 reference);
- ``exact``: A+B through ``torch.nn.utils.parametrize`` (B is the parameter);
- ``fused``: A+B training W itself (B = W - A derived on demand);
- ``hand``: the hand-written version of the user report (in-place ``copy_``/``add_`` +
  ``retain_grad`` in ``forward``, Adam over the whole wrapper as in the report;
  ``tests/fixtures/broken_patterns.py``);
- ``floor``: plain training plus the two passes over the weights exact mode needs and nothing
  else (``W = A + B`` written into the weights before the forward, ``dL/dB = dL/dW`` handed over
  after the backward): what exact mode would cost with no framework overhead.

``--method step`` (default): all modes run interleaved step by step (the order rotates each
round), so load from other processes hits every mode alike. ``--method blocks``: alternating
blocks of ``--block`` steps per mode in one process. ``--method fresh``: each mode alone in a
fresh process (this script with ``--method alone``), plain included; the ratio is of medians. The first ``--warmup`` steps are left out. ``× plain`` is the
median over rounds of (mode step time / plain step time of the same round); growth is the
median of the last 10 measured steps over the median of the first 10, raw and on the paired
ratios. Peak memory is measured afterwards, one mode at a time, over one training step: on
CUDA ``torch.cuda.max_memory_allocated``; on CPU torch's ``MemTracker`` (tensor bytes of
parameters, buffers, A, gradients, optimizer state, activations and temporaries; it cannot
follow the hand-written version, whose parameters stop being leaves).

The script measures and prints; it asserts nothing.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torchvision
from torch import nn

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import workbench as wb
from tests.fixtures.broken_patterns import HandWrittenAPlusB

MODES = ("plain", "exact", "fused")


class _Floor:
    """Plain training plus exact mode's two passes over the weights (``floor`` mode)."""

    def __init__(self, model: nn.Module) -> None:
        self.params = list(model.parameters())
        self.a = [p.detach().clone() for p in self.params]
        self.b = [torch.zeros_like(p, requires_grad=True) for p in self.params]

    def before(self) -> None:
        with torch.no_grad():
            for p, a, b in zip(self.params, self.a, self.b):
                torch.add(a, b, out=p)

    def after(self) -> None:
        for p, b in zip(self.params, self.b):
            b.grad, p.grad = p.grad, None


class Runner:
    """One mode: a model, its optimizer, and a training step over the shared batches."""

    def __init__(self, mode: str, device: torch.device, num_classes: int, lr: float) -> None:
        torch.manual_seed(0)
        model = torchvision.models.resnet18(weights=None, num_classes=num_classes).to(device)
        self.mode = mode
        self.model: nn.Module = model
        self.a: list[torch.Tensor] = []
        self.extra: list[torch.Tensor] = []  # tensors outside the model (A) for the memory tracker
        self.floor: _Floor | None = None
        if mode == "plain":
            params: Any = model.parameters()
        elif mode == "floor":
            self.floor = _Floor(model)
            params = self.floor.b
            self.extra = self.floor.a
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
        if self.floor is not None:
            self.floor.before()
        out = self.model(x, self.a) if self.mode == "hand" else self.model(x)
        nn.functional.cross_entropy(out, y).backward()
        if self.floor is not None:
            self.floor.after()
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


def paired(times: dict[str, list[float]], mode: str, sl: slice = slice(None)) -> float:
    """Median over steps of ``mode``'s time divided by plain's time in the same round."""
    return statistics.median(t / p for t, p in zip(times[mode][sl], times["plain"][sl]))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark, print the table, return the results."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:N] (default cpu)")
    ap.add_argument("--steps", type=int, default=100, help="steps per mode, warm-up included (>= 40; default 100)")
    ap.add_argument("--warmup", type=int, default=5, help="first steps left out of every statistic (default 5)")
    ap.add_argument("--image-size", type=int, default=96)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: steadier on a shared machine)")
    ap.add_argument("--modes", default="plain,exact,fused,hand", help="comma-separated; plain is always run")
    ap.add_argument("--no-memory", action="store_true", help="skip the peak memory pass")
    ap.add_argument("--json", type=Path, help="also write the results to this JSON file")
    ap.add_argument("--method", choices=("step", "blocks", "fresh", "alone"), default="step",
                    help="step: interleaved step by step; blocks: alternating blocks of --block steps; "
                         "fresh: each mode alone in a fresh process (alone: one such process)")
    ap.add_argument("--block", type=int, default=10, help="steps per block with --method blocks (default 10)")
    args = ap.parse_args(argv)
    if args.method in ("blocks", "fresh", "alone"):
        return _by_blocks_or_processes(args)
    if args.steps - args.warmup < 30:
        ap.error("--steps minus --warmup must be at least 30 (the medians need them)")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda given but CUDA is not available")
    if args.threads:
        torch.set_num_threads(args.threads)
    modes = ["plain"] + [m for m in args.modes.split(",") if m and m != "plain"]
    num_classes, lr = 10, 1e-4
    g = torch.Generator().manual_seed(0)
    batches = [
        (
            torch.randn(args.batch, 3, args.image_size, args.image_size, generator=g).to(device),
            torch.randint(0, num_classes, (args.batch,), generator=g).to(device),
        )
        for _ in range(4)
    ]

    log(f"timing {', '.join(modes)}: {args.steps} steps each, interleaved step by step")
    runners = {m: Runner(m, device, num_classes, lr) for m in modes}
    times: dict[str, list[float]] = {m: [] for m in modes}
    for i in range(args.steps):
        x, y = batches[i % len(batches)]
        order = modes[i % len(modes):] + modes[: i % len(modes)]  # rotate: no mode always runs first
        for m in order:
            times[m].append(timed(lambda: runners[m].step(x, y), device))  # noqa: F821 - called at once
        if (i + 1) % 20 == 0:
            log(f"step {i + 1}/{args.steps}")
    del runners
    gc.collect()
    times = {m: t[args.warmup:] for m, t in times.items()}

    res: dict[str, Any] = {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "batch": args.batch,
        "image_size": args.image_size,
        "steps": args.steps,
        "warmup": args.warmup,
        "modes": {},
    }
    first, last = slice(0, 10), slice(-10, None)
    for m in modes:
        res["modes"][m] = {
            "median_ms": 1000 * statistics.median(times[m]),
            "ratio": paired(times, m),
            "growth": growth(times[m]),
            "growth_vs_plain": paired(times, m, last) / paired(times, m, first),
        }
    if not args.no_memory:
        log("peak memory, one mode at a time")
        for m in modes:
            peak = peak_memory(m, device, num_classes, lr, batches[0])
            if peak is not None:
                res["modes"][m]["peak_mib"] = peak / 2**20
        base = res["modes"]["plain"]["peak_mib"]
        for r in res["modes"].values():
            if "peak_mib" in r:
                r["peak_ratio"] = r["peak_mib"] / base

    print(
        f"A+B benchmark: resnet18, {res['device_name']}, batch {args.batch}, {args.image_size}px, "
        f"torch {torch.__version__}, {res['threads']} CPU threads; {args.steps} steps per mode, "
        f"first {args.warmup} left out"
    )
    print(
        f"{'mode':<7}{'median ms':>10}{'× plain':>9}{'last10/first10':>16}{'(vs plain)':>12}"
        f"{'peak MiB':>10}{'× plain':>9}"
    )
    for m, r in res["modes"].items():
        mem = f"{r['peak_mib']:>10.1f}{r['peak_ratio']:>9.2f}" if "peak_mib" in r else f"{'n/a':>10}{'':>9}"
        print(f"{m:<7}{r['median_ms']:>10.1f}{r['ratio']:>9.2f}{r['growth']:>16.2f}{r['growth_vs_plain']:>12.2f}{mem}")
    print(
        "× plain: median over steps of (mode time / plain time in the same round). last10/first10: "
        "median of the last 10 measured steps over the first 10; (vs plain): the same on the paired ratios, "
        "which cancels load changes on a shared machine. hand: the report's hand-written version."
    )
    if args.json:
        from workbench.core.atomic import atomic_write

        atomic_write(args.json, json.dumps(res, indent=2) + "\n")
    return res


def _by_blocks_or_processes(args: argparse.Namespace) -> dict[str, Any]:
    """``--method blocks`` / ``fresh`` / ``alone``: ms per step and ratios to plain."""
    import subprocess

    modes = ["plain"] + [m for m in args.modes.split(",") if m and m != "plain"]
    if args.method == "fresh":
        ms: dict[str, float] = {}
        for m in modes:
            child = [sys.executable, __file__, "--method", "alone", "--modes", m, "--device", args.device,
                     "--steps", str(args.steps), "--warmup", str(args.warmup), "--block", str(args.block),
                     "--image-size", str(args.image_size), "--batch", str(args.batch), "--threads", str(args.threads)]
            out = subprocess.run(child, check=True, capture_output=True, text=True).stdout
            ms[m] = json.loads(out.strip().splitlines()[-1])["ms"][m]
            log(f"{m}: {ms[m]:.1f} ms per step (its own process)")
        ratios = {m: ms[m] / ms["plain"] for m in modes}
    else:
        if args.threads:
            torch.set_num_threads(args.threads)
        device = torch.device(args.device)
        g = torch.Generator().manual_seed(0)
        batch = (torch.randn(args.batch, 3, args.image_size, args.image_size, generator=g).to(device),
                 torch.randint(0, 10, (args.batch,), generator=g).to(device))
        if args.method == "alone":
            modes = [m for m in args.modes.split(",") if m]
        runners = {m: Runner(m, device, 10, 1e-4) for m in modes}
        for r in runners.values():
            for _ in range(args.warmup):
                r.step(*batch)
        per: dict[str, list[float]] = {m: [] for m in modes}
        rounds = max(1, (args.steps - args.warmup) // args.block)
        for i in range(rounds):
            order = modes[i % len(modes):] + modes[: i % len(modes)]
            for m in order:
                t = timed(lambda: [runners[m].step(*batch) for _ in range(args.block)], device)
                per[m].append(t / args.block)
        ms = {m: 1000 * statistics.median(v) for m, v in per.items()}
        if args.method == "alone":
            print(json.dumps({"ms": ms}))
            return {"ms": ms}
        ratios = {m: statistics.median(t / p for t, p in zip(per[m], per["plain"])) for m in modes}
    res = {"method": args.method, "threads": args.threads, "image_size": args.image_size, "batch": args.batch,
           "ms": ms, "ratio": ratios}
    how = f"alternating blocks of {args.block} steps, one process" if args.method == "blocks" else "each mode alone in a fresh process"
    print(f"A+B benchmark ({how}): resnet18, batch {args.batch}, {args.image_size}px, {args.threads} threads")
    for m in modes:
        print(f"{m:<7}{ms[m]:>10.1f} ms{ratios[m]:>8.3f} x plain")
    if args.json:
        from workbench.core.atomic import atomic_write

        atomic_write(args.json, json.dumps(res, indent=2) + "\n")
    return res


if __name__ == "__main__":
    main()
