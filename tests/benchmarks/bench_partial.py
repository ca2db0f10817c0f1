"""Sub-tensor freezing: step time of five ways to train part of a weight, side by side.

The ``linear`` case is the user report of ``docs/partial.md`` (seed 001): a 4096x4096 Linear
``fc1`` with 10 trainable input columns, then ``fc2`` 4096x4096 and ``fc3`` 4096x10, batch 64,
SGD. Variants, all in one process with steps interleaved round-robin so that load from other
processes hits every variant alike:

- ``full``: nothing frozen (the baseline);
- ``mask_hook``: ``weight.register_hook`` zeroing the frozen part of the gradient;
- ``cat_split``: trainable and frozen ``nn.Parameter`` concatenated in ``forward``;
- ``hand_split``: the computation split by hand (``x[:, :k] @ Wt.T + x[:, k:] @ Wf.T + b``);
- ``workbench``: a plain model with ``{"select": "fc1", "partial": {...}}`` applied.

``conv`` (Conv2d input channels) and ``embedding`` (trainable rows) cases use the same variants.
The script reports median step times and ratios; it asserts nothing.

Run::

    python tests/benchmarks/bench_partial.py                     # the issue's case, 20 steps
    python tests/benchmarks/bench_partial.py --case all --steps 30 --json partial.json
    python tests/benchmarks/bench_partial.py --device cuda
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

import workbench as wb
from workbench.core.atomic import atomic_write

VARIANTS = ("full", "mask_hook", "cat_split", "hand_split", "workbench")


# ---------------------------------------------------------------- layers of each variant
class CatSplitLinear(nn.Module):
    """The slow fix of the user report: ``torch.cat`` of a trainable and a frozen slice."""

    def __init__(self, w: torch.Tensor, b: torch.Tensor, k: int) -> None:
        super().__init__()
        self.wt = nn.Parameter(w[:, :k].clone())
        self.wf = nn.Parameter(w[:, k:].clone(), requires_grad=False)
        self.b = nn.Parameter(b.clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, torch.cat([self.wt, self.wf], 1), self.b)


class HandSplitLinear(nn.Module):
    """The computation split by hand, as one would write it for this one case."""

    def __init__(self, w: torch.Tensor, b: torch.Tensor, k: int) -> None:
        super().__init__()
        self.k = k
        self.wt = nn.Parameter(w[:, :k].clone())
        self.wf = nn.Parameter(w[:, k:].clone(), requires_grad=False)
        self.b = nn.Parameter(b.clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, : self.k] @ self.wt.T + x[:, self.k :] @ self.wf.T + self.b


class CatSplitConv(nn.Module):
    def __init__(self, conv: nn.Conv2d, k: int) -> None:
        super().__init__()
        self.conv = conv
        w = conv.weight.detach()
        del conv.weight
        self.wt = nn.Parameter(w[:, :k].clone())
        self.wf = nn.Parameter(w[:, k:].clone(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv._conv_forward(x, torch.cat([self.wt, self.wf], 1), self.conv.bias)


class HandSplitConv(nn.Module):
    def __init__(self, conv: nn.Conv2d, k: int) -> None:
        super().__init__()
        self.conv, self.k = conv, k
        w = conv.weight.detach()
        del conv.weight
        self.wt = nn.Parameter(w[:, :k].clone())
        self.wf = nn.Parameter(w[:, k:].clone(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.conv
        return c._conv_forward(x[:, : self.k], self.wt, c.bias) + c._conv_forward(x[:, self.k :], self.wf, None)


class CatSplitEmbedding(nn.Module):
    def __init__(self, w: torch.Tensor, k: int) -> None:
        super().__init__()
        self.wt = nn.Parameter(w[:k].clone())
        self.wf = nn.Parameter(w[k:].clone(), requires_grad=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, torch.cat([self.wt, self.wf], 0))


class HandSplitEmbedding(nn.Module):
    """Rows ``< k`` looked up in the trainable table, the others in the frozen one."""

    def __init__(self, w: torch.Tensor, k: int) -> None:
        super().__init__()
        self.k = k
        self.wt = nn.Parameter(w[:k].clone())
        self.wf = nn.Parameter(w[k:].clone(), requires_grad=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        is_t = ids < self.k
        rows_t = F.embedding(torch.where(is_t, ids, 0), self.wt)
        rows_f = F.embedding(torch.where(is_t, 0, ids - self.k), self.wf)
        return torch.where(is_t.unsqueeze(-1), rows_t, rows_f)


def _mask_hook(param: nn.Parameter, dim: int, k: int) -> None:
    mask = torch.zeros_like(param)
    mask.narrow(dim, 0, k).fill_(1)
    param.register_hook(lambda g: g * mask)


# ---------------------------------------------------------------- cases
@dataclass
class Case:
    name: str
    what: str
    build: Callable[[str], nn.Module]
    batch: Callable[[torch.Generator], tuple[torch.Tensor, torch.Tensor]]
    plan: dict


def _linear_case(width: int, batch: int, k: int, classes: int = 10) -> Case:
    def build(variant: str) -> nn.Module:
        torch.manual_seed(0)
        fc1 = nn.Linear(width, width)
        layers: dict[str, nn.Module] = {"fc1": fc1}
        if variant == "mask_hook":
            _mask_hook(fc1.weight, 1, k)
        elif variant == "cat_split":
            layers["fc1"] = CatSplitLinear(fc1.weight.detach(), fc1.bias.detach(), k)
        elif variant == "hand_split":
            layers["fc1"] = HandSplitLinear(fc1.weight.detach(), fc1.bias.detach(), k)
        return nn.Sequential(
            *[layers["fc1"], nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, classes)]
        )

    def make_batch(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(batch, width, generator=g), torch.randint(0, classes, (batch,), generator=g)

    plan = {"rules": [{"select": "0", "partial": {"param": "weight", "dim": 1, "trainable": [[0, k]]}}]}
    what = f"Linear {width}x{width} (+ {width}x{width}, {width}x{classes}), batch {batch}, {k} trainable input columns"
    return Case("linear", what, build, make_batch, plan)


def _conv_case(channels: int, size: int, batch: int, k: int, classes: int = 10) -> Case:
    def build(variant: str) -> nn.Module:
        torch.manual_seed(0)
        conv = nn.Conv2d(channels, channels, 3, padding=1)
        if variant == "mask_hook":
            _mask_hook(conv.weight, 1, k)
        elif variant == "cat_split":
            conv = CatSplitConv(conv, k)
        elif variant == "hand_split":
            conv = HandSplitConv(conv, k)
        return nn.Sequential(conv, nn.ReLU(), nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU(),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, classes))

    def make_batch(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(batch, channels, size, size, generator=g), torch.randint(0, classes, (batch,), generator=g)

    plan = {"rules": [{"select": "0", "partial": {"param": "weight", "dim": 1, "trainable": [[0, k]]}}]}
    what = f"Conv2d {channels}->{channels} 3x3 on {size}x{size} (+ one more), batch {batch}, {k} trainable input channels"
    return Case("conv", what, build, make_batch, plan)


def _embedding_case(vocab: int, dim: int, batch: int, seq: int, k: int, classes: int = 10) -> Case:
    class Bag(nn.Module):
        def __init__(self, emb: nn.Module) -> None:
            super().__init__()
            self.emb = emb
            self.head = nn.Linear(dim, classes)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.head(self.emb(ids).mean(1))

    def build(variant: str) -> nn.Module:
        torch.manual_seed(0)
        emb = nn.Embedding(vocab, dim)
        if variant == "mask_hook":
            _mask_hook(emb.weight, 0, k)
        elif variant == "cat_split":
            emb = CatSplitEmbedding(emb.weight.detach(), k)
        elif variant == "hand_split":
            emb = HandSplitEmbedding(emb.weight.detach(), k)
        return Bag(emb)

    def make_batch(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randint(0, vocab, (batch, seq), generator=g), torch.randint(0, classes, (batch,), generator=g)

    plan = {"rules": [{"select": "emb", "partial": {"param": "weight", "dim": 0, "trainable": [[0, k]]}}]}
    what = f"Embedding {vocab}x{dim}, batch {batch}x{seq} ids, {k} trainable rows"
    return Case("embedding", what, build, make_batch, plan)


# ---------------------------------------------------------------- timing
def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_case(case: Case, steps: int, warmup: int, device: torch.device, lr: float = 0.01) -> dict:
    """Train every variant ``steps`` steps, interleaved; return median step times (ms)."""
    setups = {}
    g = torch.Generator().manual_seed(0)
    batches = [tuple(t.to(device) for t in case.batch(g)) for _ in range(4)]
    for v in VARIANTS:
        model = case.build(v)
        if v == "workbench":
            applied = wb.apply_plan(model, case.plan)
            model.to(device)
            params = applied.trainable_parameters()
        else:
            model.to(device)
            params = [p for p in model.parameters() if p.requires_grad]
        setups[v] = (model, torch.optim.SGD(params, lr=lr))
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    peak: dict[str, int] = {}
    for i in range(warmup + steps):
        for v in VARIANTS:
            model, opt = setups[v]
            x, y = batches[i % len(batches)]
            if device.type == "cuda" and i == warmup:
                torch.cuda.reset_peak_memory_stats(device)
            _sync(device)
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            _sync(device)
            if i >= warmup:
                times[v].append(time.perf_counter() - t0)
    if device.type == "cuda":
        peak["all"] = torch.cuda.max_memory_allocated(device)
    med = {v: statistics.median(ts) * 1e3 for v, ts in times.items()}
    return {
        "case": case.name,
        "what": case.what,
        "steps": steps,
        "ms_per_step": med,
        "ratio_to_full": {v: med[v] / med["full"] for v in VARIANTS},
        "ratio_to_hand_split": {v: med[v] / med["hand_split"] for v in VARIANTS},
        "cuda_peak_bytes": peak.get("all"),
    }


def _print(res: dict) -> None:
    print(f"\n[{res['case']}] {res['what']}  (median of {res['steps']} steps)")
    print(f"  {'variant':12} {'ms/step':>9} {'x full':>8} {'x hand split':>13}")
    for v in VARIANTS:
        print(f"  {v:12} {res['ms_per_step'][v]:9.2f} {res['ratio_to_full'][v]:8.2f} {res['ratio_to_hand_split'][v]:13.2f}")
    rf, rh = res["ratio_to_full"]["workbench"], res["ratio_to_hand_split"]["workbench"]
    if res["case"] != "linear":  # the targets are set for the reported Linear case
        return
    print(f"  target: workbench <= 0.80x full: {rf:.2f} ({'met' if rf <= 0.80 else 'NOT met'}); "
          f"<= 1.05x hand split: {rh:.2f} ({'met' if rh <= 1.05 else 'NOT met'})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Step time of partial-freezing variants, side by side.")
    ap.add_argument("--case", choices=("linear", "conv", "embedding", "all"), default="linear")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per variant (default 20)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--width", type=int, default=4096, help="Linear width (default 4096, as in the report)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--columns", type=int, default=10, help="trainable input columns of fc1 (default 10)")
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1 ...")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0 = leave as is)")
    ap.add_argument("--json", help="also write the results to this JSON file")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda but CUDA is not available")
    cases = {
        "linear": lambda: _linear_case(args.width, args.batch, args.columns),
        "conv": lambda: _conv_case(128, 16, 8, 8),
        "embedding": lambda: _embedding_case(100_000, 256, 32, 64, 1000),
    }
    names = list(cases) if args.case == "all" else [args.case]
    env = {
        "torch": torch.__version__,
        "device": str(device) + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""),
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    print(f"torch {env['torch']} on {env['device']}, {env['threads']} threads")
    results = []
    for n in names:
        res = run_case(cases[n](), args.steps, args.warmup, device)
        _print(res)
        results.append(res)
    if args.json:
        atomic_write(args.json, json.dumps({"env": env, "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
