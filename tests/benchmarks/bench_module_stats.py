"""Cost of per-module gradient norms and update/weight ratios, side by side with plain steps.

Variants of the same training step (forward, backward, optimizer step) on copies of one model:

- ``off``: no statistics;
- ``every N``: :class:`~workbench.core.training.module_stats.ModuleStatsProbe` measuring
  every N-th step (``--every``, default: the engine's ``DEFAULT_EVERY``);
- ``every 1``: measuring every step (the cost of one measurement, for scale).

Two ways, both printed:

1. interleaved in one process: one step of each variant in turn, ``--steps`` rounds, so load
   from other processes hits all alike; median and mean step time per variant and their
   ratios to ``off`` (the mean carries the cost: only one step in N is measured);
2. each variant alone in a fresh process (``--alone``), the same figures.

It also times one measurement directly (``before_step`` + ``after_step``) and gives its share
of a step at every N (``cost / (N × step)``), which is steadier than a ratio of noisy medians.
Nothing is asserted.

Run::

    python tests/benchmarks/bench_module_stats.py                      # resnet18, 64 px, batch 16
    python tests/benchmarks/bench_module_stats.py --model resnet50 --steps 40
    python tests/benchmarks/bench_module_stats.py --device cuda --model resnet50 --size 224 --batch 64
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import subprocess
import sys
import time
from typing import Any

import torch
from torch import nn

from workbench.core.training.module_stats import DEFAULT_EVERY, ModuleStatsProbe
from workbench.core.training.step import ClassificationLoss, TrainStep


def _model(name: str) -> nn.Module:
    from workbench.core.models.zoo import build_model

    torch.manual_seed(0)
    return build_model(name, weights=None, num_classes=10)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _step(model: nn.Module, every: int | None, device: torch.device) -> tuple[TrainStep, ModuleStatsProbe | None]:
    model = model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    probe = ModuleStatsProbe(model, every) if every else None
    return TrainStep(model, opt, model, ClassificationLoss(), device, stats=probe), probe


def _timed(step: TrainStep, i: int, x: torch.Tensor, y: torch.Tensor, device: torch.device) -> float:
    _sync(device)
    t0 = time.perf_counter()
    out = step(i, x, y)
    _sync(device)
    assert out.failure is None, out.failure
    return time.perf_counter() - t0


def interleaved(args: argparse.Namespace, device: torch.device) -> dict[str, tuple[float, float]]:
    base = _model(args.model)
    variants = {"off": None, f"every {args.every}": args.every, "every 1": 1}
    steps = {k: _step(copy.deepcopy(base), v, device)[0] for k, v in variants.items()}
    x = torch.randn(args.batch, 3, args.size, args.size, device=device)
    y = torch.randint(0, 10, (args.batch,), device=device)
    times: dict[str, list[float]] = {k: [] for k in variants}
    for i in range(args.warmup + args.steps):
        for k, s in steps.items():
            t = _timed(s, i, x, y, device)
            if i >= args.warmup:
                times[k].append(t)
    return {k: (statistics.median(v), statistics.fmean(v)) for k, v in times.items()}


def one_measurement(args: argparse.Namespace, device: torch.device) -> tuple[float, float, int]:
    """Median seconds of before_step + after_step alone, median step, trainable tensors."""
    step, probe = _step(_model(args.model), 1, device)
    assert probe is not None
    x = torch.randn(args.batch, 3, args.size, args.size, device=device)
    y = torch.randint(0, 10, (args.batch,), device=device)
    step.stats = None
    step(0, x, y)
    costs: list[float] = []
    plain: list[float] = []
    for i in range(max(5, args.steps // 4)):
        plain.append(_timed(step, i, x, y, device))
        opt = step.optimizer
        opt.zero_grad(set_to_none=True)
        ClassificationLoss()(step.model(x), y).backward()
        _sync(device)
        t0 = time.perf_counter()
        probe.before_step(i)
        opt.step()  # the optimizer step itself is timed and subtracted below
        _sync(device)
        t1 = time.perf_counter()
        probe.after_step()
        _sync(device)
        t2 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        ClassificationLoss()(step.model(x), y).backward()
        _sync(device)
        t3 = time.perf_counter()
        opt.step()
        _sync(device)
        costs.append((t1 - t0) + (t2 - t1) - (time.perf_counter() - t3))
    return statistics.median(costs), statistics.median(plain), len(probe._params)


def alone(args: argparse.Namespace, device: torch.device, every: int | None) -> tuple[float, float]:
    step, _ = _step(_model(args.model), every, device)
    x = torch.randn(args.batch, 3, args.size, args.size, device=device)
    y = torch.randint(0, 10, (args.batch,), device=device)
    times = [_timed(step, i, x, y, device) for i in range(args.warmup + args.steps)]
    kept = times[args.warmup:]
    return statistics.median(kept), statistics.fmean(kept)


def _table(title: str, rows: dict[str, tuple[float, float]]) -> None:
    """Median and mean step time per variant, each with its ratio to ``off``."""
    med0, mean0 = rows["off"]
    print(f"\n{title}\n   {'variant':<10} {'median':>9} {'ratio':>7} {'mean':>9} {'ratio':>7}")
    for k, (med, mean) in rows.items():
        print(f"   {k:<10} {med * 1e3:6.1f} ms {med / med0:6.3f}x {mean * 1e3:6.1f} ms {mean / mean0:6.3f}x")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet18")
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--every", type=int, default=DEFAULT_EVERY)
    p.add_argument("--device", default="cpu")
    p.add_argument("--alone", default=None, help=argparse.SUPPRESS)  # internal: one variant, JSON out
    p.add_argument("--json", default=None, help="also write the numbers to this file")
    args = p.parse_args()
    device = torch.device(args.device)
    if args.alone is not None:
        every = int(args.alone) or None
        print(json.dumps(alone(args, device, every)))
        return 0
    print(f"{args.model}, {args.size} px, batch {args.batch}, {device}, AdamW, {args.steps} steps per variant")
    inter = interleaved(args, device)
    _table("1. interleaved in one process", inter)
    lone: dict[str, tuple[float, float]] = {}
    for name, every in (("off", 0), (f"every {args.every}", args.every)):
        cmd = [sys.executable, __file__, "--alone", str(every), "--model", args.model, "--size", str(args.size),
               "--batch", str(args.batch), "--steps", str(args.steps), "--warmup", str(args.warmup), "--device", args.device]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
        lone[name] = tuple(json.loads(out))  # type: ignore[assignment]
    _table("2. each variant alone in a fresh process", lone)
    cost, plain, tensors = one_measurement(args, device)
    share = cost / (args.every * plain)
    print(f"\n3. one measurement ({tensors} trainable tensors): {cost * 1e3:.2f} ms = {cost / plain:.1%} of a "
          f"{plain * 1e3:.1f} ms step; every {args.every} steps: {share:.2%} of step time")
    if args.json:
        data: dict[str, Any] = {
            "model": args.model, "size": args.size, "batch": args.batch, "device": str(device), "every": args.every,
            "interleaved_s": inter, "alone_s": lone, "measurement_s": cost, "step_s": plain, "share": share,
        }
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
