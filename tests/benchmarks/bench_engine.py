"""The training engine against hand-written loops, side by side in one process.

1. Engine overhead: ``Trainer`` vs a minimal hand-written loop with the same model, plan,
   data, loader and optimizer (target: engine/hand median iteration time <= 1.03x).
2. Frozen-backbone speedup: resnet18 with only ``fc`` trainable and BN in eval vs full
   fine-tuning, compared with the ideal: backbone forward under ``torch.no_grad`` + head
   (target: >= 0.95 of the ideal speedup).
3. Metrics overhead: the engine's own measurement of the time it spends on metrics
   (target: <= 2% of step time).

Variants run interleaved step by step (one step of each in turn, so load from other processes
hits all of them alike), ``--rounds`` times; medians are reported; nothing is asserted.

Run: python tests/benchmarks/bench_engine.py [--device cuda] [--json out.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torchvision
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from workbench.core.atomic import atomic_write
from workbench.core.plan.rules import FreezePlan, Rule
from workbench.core.training.config import TrainConfig
from workbench.core.training.data import SyntheticImageDataset, make_loader
from workbench.core.training.engine import Trainer, resolve_device

FC_BN_EVAL = FreezePlan([Rule("*", frozen=True), Rule("fc", frozen=False)])  # BN follows frozen: eval


def _sync(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    if device.type == "mps":
        return torch.mps.synchronize
    return lambda: None


def _batches(loader: DataLoader[Any]) -> Iterator[Any]:
    while True:
        yield from loader


Step = Iterator[float]  # each next() runs one training step and yields its compute time


def hand_loop(base: nn.Module, plan: FreezePlan | None, ds: TensorDataset, args: argparse.Namespace, device: torch.device) -> Step:
    """A minimal loop: same plan, loader and optimizer as the engine; sync per step on GPUs."""
    model = copy.deepcopy(base).to(device)
    applied = (plan or FreezePlan()).apply(model)
    opt = torch.optim.AdamW(applied.param_groups(args.lr), lr=args.lr)
    loader = make_loader(ds, args.batch_size, seed=0, pin_memory=device.type == "cuda")
    crit = nn.CrossEntropyLoss()
    sync = _sync(device)
    model.train()
    for x, y in _batches(loader):
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        ts = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = crit(model(x), y)
        loss.backward()
        loss.item()
        opt.step()
        sync()
        yield time.perf_counter() - ts


def ideal_loop(base: nn.Module, ds: TensorDataset, args: argparse.Namespace, device: torch.device) -> Step:
    """The best a frozen backbone can do: its forward under no_grad, then the head trains."""
    backbone = copy.deepcopy(base).to(device)
    head = backbone.fc
    backbone.fc = nn.Identity()
    backbone.eval()
    for p in backbone.parameters():
        p.requires_grad_(False)
    opt = torch.optim.AdamW(head.parameters(), lr=args.lr)
    loader = make_loader(ds, args.batch_size, seed=0, pin_memory=device.type == "cuda")
    crit = nn.CrossEntropyLoss()
    sync = _sync(device)
    for x, y in _batches(loader):
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        ts = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.no_grad():
            feats = backbone(x)
        loss = crit(head(feats), y)
        loss.backward()
        loss.item()
        opt.step()
        sync()
        yield time.perf_counter() - ts


def engine_loop(base: nn.Module, plan: FreezePlan | None, ds: TensorDataset, args: argparse.Namespace,
                device: torch.device, total: int, results: list[Any]) -> Step:
    """The Trainer, one StepMetrics per next(); the run's result is appended to ``results``."""
    cfg = TrainConfig(steps=total, batch_size=args.batch_size, optimizer="adamw", lr=args.lr, device=str(device), seed=0)
    trainer = Trainer(cfg, model=copy.deepcopy(base), dataset=ds, plan=plan)
    for m in trainer.steps():
        yield m.step_time_s
    results.append(trainer.result)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, mps or auto")
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--image-size", type=int, default=96)
    ap.add_argument("--steps", type=int, default=20, help="timed steps per variant and round")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved repetitions of every variant")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (CPU)")
    ap.add_argument("--json", help="also write the numbers to this JSON file")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    torch.manual_seed(0)
    base = torchvision.models.get_model(args.model, weights=None, num_classes=10)
    n = args.batch_size * 8
    synth = SyntheticImageDataset(n, args.image_size, 10, seed=0)
    xs, ys = zip(*(synth[i] for i in range(n)))
    ds = TensorDataset(torch.stack(xs), torch.tensor(ys))  # materialized: data loading is not measured noise

    total = args.warmup + args.steps
    engine_results: dict[str, list[Any]] = {"full": [], "fc": []}
    makers: dict[str, Callable[[], Step]] = {
        "hand loop, full FT": lambda: hand_loop(base, None, ds, args, device),
        "engine, full FT": lambda: engine_loop(base, None, ds, args, device, total, engine_results["full"]),
        "hand loop, fc only + BN eval": lambda: hand_loop(base, FC_BN_EVAL, ds, args, device),
        "engine, fc only + BN eval": lambda: engine_loop(base, FC_BN_EVAL, ds, args, device, total, engine_results["fc"]),
        "ideal: no_grad backbone + fc": lambda: ideal_loop(base, ds, args, device),
    }
    runs: dict[str, dict[str, list[float]]] = {k: {"iter": [], "step": []} for k in makers}
    print(
        f"engine benchmark: {args.model}, batch {args.batch_size}, {args.image_size} px, adamw, {device}, "
        f"{torch.get_num_threads()} threads, {args.steps} steps x {args.rounds} rounds (+{args.warmup} warm-up), "
        "variants interleaved step by step",
        flush=True,
    )
    for r in range(args.rounds):
        gens = {name: make() for name, make in makers.items()}
        for i in range(total):
            for name, gen in gens.items():  # one step of each variant in turn: load changes hit all alike
                t = time.perf_counter()
                step = next(gen)
                it = time.perf_counter() - t  # the whole iteration: data, step, bookkeeping, metrics
                if i >= args.warmup:
                    runs[name]["iter"].append(it)
                    runs[name]["step"].append(step)
        for name, gen in gens.items():
            if name.startswith("engine"):
                for _ in gen:  # the engine has run all its steps: this finishes it (verify, result)
                    pass
            else:
                gen.close()  # hand loops run until closed
        print(f"  round {r + 1} done", flush=True)
    med = {name: {k: statistics.median(v) for k, v in d.items()} for name, d in runs.items()}
    for key, name in (("full", "engine, full FT"), ("fc", "engine, fc only + BN eval")):
        res = engine_results[key]
        med[name]["overhead_fraction"] = statistics.median(r.summary["metrics_overhead_fraction"] for r in res)
        med[name]["overhead_per_step_us"] = statistics.median(1e6 * r.summary["metrics_overhead_s"] / r.steps for r in res)

    print(f"\n{'variant':32} {'step ms':>9} {'iteration ms':>13}")
    for name, d in med.items():
        print(f"{name:32} {1e3 * d['step']:9.1f} {1e3 * d['iter']:13.1f}")
    ratio_full = med["engine, full FT"]["iter"] / med["hand loop, full FT"]["iter"]
    ratio_fc = med["engine, fc only + BN eval"]["iter"] / med["hand loop, fc only + BN eval"]["iter"]
    full = med["engine, full FT"]["step"]
    speed_engine = full / med["engine, fc only + BN eval"]["step"]
    speed_ideal = full / med["ideal: no_grad backbone + fc"]["step"]
    of_ideal = speed_engine / speed_ideal
    overhead = max(med["engine, full FT"]["overhead_fraction"], med["engine, fc only + BN eval"]["overhead_fraction"])
    per_step = max(med["engine, full FT"]["overhead_per_step_us"], med["engine, fc only + BN eval"]["overhead_per_step_us"])

    def verdict(ok: bool) -> str:
        return "meets target" if ok else "misses target"

    print()
    print(f"engine / hand loop, iteration time: full FT {ratio_full:.3f}x, fc only + BN eval {ratio_fc:.3f}x "
          f"(target <= 1.03x: {verdict(max(ratio_full, ratio_fc) <= 1.03)})")
    print(f"frozen-backbone speedup over full FT: engine {speed_engine:.2f}x, ideal no_grad backbone {speed_ideal:.2f}x "
          f"-> {of_ideal:.2f} of ideal (target >= 0.95: {verdict(of_ideal >= 0.95)})")
    print(f"metrics overhead: {100 * overhead:.3f}% of step time, {per_step:.1f} us per step "
          f"(target <= 2%: {verdict(overhead <= 0.02)})")
    report = {
        "config": {k: v for k, v in vars(args).items() if k != "json"} | {"device": str(device), "threads": torch.get_num_threads(),
                                                                          "torch": torch.__version__},
        "median_s": med,
        "engine_over_hand": {"full_ft": ratio_full, "fc_bn_eval": ratio_fc},
        "frozen_speedup": {"engine": speed_engine, "ideal": speed_ideal, "fraction_of_ideal": of_ideal},
        "metrics_overhead_fraction": overhead,
        "metrics_overhead_per_step_us": per_step,
    }
    if args.json:
        atomic_write(args.json, json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
