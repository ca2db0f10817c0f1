"""Benchmark low-rank A+B against PEFT LoRA on the same model and targets: step time and peak memory.

Run from the repository root::

    python tests/benchmarks/bench_lora.py [--device cuda] [--models bert,gpt2] [--full-size]
        [--steps N] [--batch B] [--seq L] [--rank R] [--isolated] [--json out.json]

Models are built from configs with random weights (nothing is downloaded): a BERT encoder
(``BertModel``; LoRA on ``query`` and ``value``) and a GPT-2 decoder (``GPT2Model``; LoRA on
``c_attn``, a ``Conv1D``). The default sizes are small (hidden 256, 4 layers, sequence 64,
batch 8) so the run takes about two minutes on two busy CPU cores; ``--full-size`` uses
BERT-base / GPT-2 small (hidden 768, 12 layers). Variants, each from the same initial weights:

- ``peft``: ``peft.get_peft_model`` with ``LoraConfig(r, lora_alpha=2r, target_modules)`` (the 1.00 reference);
- ``fused``: the plan :meth:`FreezePlan.from_peft` makes of the same config (``mode: "fused"``);
- ``exact``: the same plan with ``mode: "exact"`` (parametrize, ``A + s U V`` built per step);
- ``full_exact`` / ``full_fused``: full-rank A+B on the same targets (no ``rank``).

Timing is interleaved step by step (the order rotates each round), so load from other
processes hits every variant alike; ``× peft`` is the median over rounds of (variant time /
peft time in the same round). ``--isolated`` also times each variant alone in a fresh
process and reports the ratio of the medians. Peak memory is measured afterwards, one
variant at a time, over one training step (CUDA: ``max_memory_allocated``; CPU: tensor bytes of parameters, gradients, optimizer state and the
tensors autograd saves for backward, each storage once).

The script measures and prints; it asserts nothing.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from workbench.core.plan.reparam_spec import ReparamSpec
from workbench.core.plan.rules import FreezePlan

VARIANTS = ("peft", "fused", "exact", "full_exact", "full_fused")
TARGETS = {"bert": ["query", "value"], "gpt2": ["c_attn"]}


def build(name: str, full: bool) -> nn.Module:
    """The model from its config, random weights (seeded)."""
    import transformers

    torch.manual_seed(0)
    hidden, layers, heads = (768, 12, 12) if full else (256, 4, 4)
    if name == "bert":
        cfg = transformers.BertConfig(
            hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=4 * hidden,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        )
        return transformers.BertModel(cfg, add_pooling_layer=False)
    cfg = transformers.GPT2Config(n_embd=hidden, n_layer=layers, n_head=heads, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return transformers.GPT2Model(cfg)


def lora_config(model_name: str, rank: int) -> Any:
    """The PEFT config every variant is made from."""
    import peft

    return peft.LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=TARGETS[model_name])


class Runner:
    """One variant: a model, its optimizer and a training step."""

    def __init__(self, variant: str, model_name: str, full: bool, rank: int, device: torch.device) -> None:
        model = build(model_name, full)
        config = lora_config(model_name, rank)
        if variant == "peft":
            import peft

            model = peft.get_peft_model(model, config)
            params: Any = [p for p in model.parameters() if p.requires_grad]
        else:
            plan = FreezePlan.from_peft(config, model=model)
            for r in plan.rules:
                if r.reparam is not None:
                    raw = r.reparam.to_json()
                    if variant.startswith("full"):
                        raw = {k: raw[k] for k in ("kind", "a", "b_init", "params")}
                    raw["mode"] = variant.rsplit("_", 1)[-1]
                    r.reparam = ReparamSpec.parse(raw)
            params = plan.apply(model).param_groups(lr=1e-4)
        self.model = model.to(device)
        self.model.train()
        self.opt = torch.optim.AdamW(params, lr=1e-4)
        self.trainable = sum(p.numel() for p in self.model.parameters() if p.requires_grad)

    def step(self, x: torch.Tensor) -> None:
        """zero_grad, forward, backward, optimizer step."""
        self.opt.zero_grad(set_to_none=True)
        self.model(input_ids=x).last_hidden_state.float().pow(2).mean().backward()
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


def batches(args: argparse.Namespace, device: torch.device) -> list[torch.Tensor]:
    """The shared input batches (token ids)."""
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, 1000, (args.batch, args.seq), generator=g).to(device) for _ in range(2)]


def peak_memory(variant: str, model_name: str, args: argparse.Namespace, device: torch.device, x: torch.Tensor) -> int | None:
    """Peak tensor bytes of one training step (after a warm-up step), this variant alone."""
    gc.collect()
    r = Runner(variant, model_name, args.full_size, args.rank, device)
    r.step(x)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        r.step(x)
        _sync(device)
        return int(torch.cuda.max_memory_allocated(device))
    return step_bytes(r, x)


def step_bytes(r: Runner, x: torch.Tensor) -> int:
    """Tensor bytes of one CPU training step: parameters and buffers, gradients, optimizer
    state, and the tensors autograd saves for backward (each storage once)."""
    seen: set[int] = set()

    def add(t: torch.Tensor | None) -> int:
        if t is None:
            return 0
        st = t.untyped_storage()
        if st.data_ptr() in seen:
            return 0
        seen.add(st.data_ptr())
        return st.nbytes()

    total = sum(add(t) for t in list(r.model.parameters()) + list(r.model.buffers()))
    saved = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal saved
        saved += add(t)
        return t

    r.opt.zero_grad(set_to_none=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = r.model(input_ids=x).last_hidden_state.float().pow(2).mean()
    loss.backward()
    r.opt.step()
    total += sum(add(p.grad) for p in r.model.parameters())
    total += sum(add(v) for state in r.opt.state.values() for v in state.values() if isinstance(v, torch.Tensor))
    return total + saved


def time_alone(variant: str, model_name: str, args: argparse.Namespace) -> float:
    """Median step seconds of one variant timed alone in a fresh process."""
    cmd = [
        sys.executable, __file__, "--only", variant, "--models", model_name, "--steps", str(args.steps),
        "--warmup", str(args.warmup), "--batch", str(args.batch), "--seq", str(args.seq), "--rank", str(args.rank),
        "--device", args.device, "--threads", str(args.threads),
    ] + (["--full-size"] if args.full_size else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return float(json.loads(out.strip().splitlines()[-1])["median_s"])


def run_model(model_name: str, variants: list[str], args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """Interleaved timing, then memory (and isolated timing) for one model."""
    xs = batches(args, device)
    log(f"{model_name}: timing {', '.join(variants)}, {args.steps} steps each, interleaved")
    runners = {v: Runner(v, model_name, args.full_size, args.rank, device) for v in variants}
    trainable = {v: r.trainable for v, r in runners.items()}
    times: dict[str, list[float]] = {v: [] for v in variants}
    for i in range(args.steps):
        x = xs[i % len(xs)]
        for v in variants[i % len(variants):] + variants[: i % len(variants)]:
            times[v].append(timed(functools.partial(runners[v].step, x), device))
    del runners
    gc.collect()
    times = {v: t[args.warmup:] for v, t in times.items()}
    out: dict[str, Any] = {}
    for v in variants:
        out[v] = {
            "trainable": trainable[v],
            "median_ms": 1000 * statistics.median(times[v]),
            "ratio": statistics.median(t / p for t, p in zip(times[v], times["peft"], strict=True)),
        }
    if not args.no_memory:
        log(f"{model_name}: peak memory, one variant at a time")
        for v in variants:
            peak = peak_memory(v, model_name, args, device, xs[0])
            if peak is not None:
                out[v]["peak_mib"] = peak / 2**20
        base = out["peft"].get("peak_mib")
        for r in out.values():
            if base and "peak_mib" in r:
                r["peak_ratio"] = r["peak_mib"] / base
    if args.isolated:
        log(f"{model_name}: each variant alone in a fresh process")
        alone = {v: time_alone(v, model_name, args) for v in variants}
        for v in variants:
            out[v]["isolated_ms"] = 1000 * alone[v]
            out[v]["isolated_ratio"] = alone[v] / alone["peft"]
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark, print the table, return the results."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:N] (default cpu)")
    ap.add_argument("--models", default="bert,gpt2", help="comma-separated: bert, gpt2")
    ap.add_argument("--full-size", action="store_true", help="BERT-base / GPT-2 small sizes (hidden 768, 12 layers)")
    ap.add_argument("--steps", type=int, default=20, help="steps per variant, warm-up included (default 20)")
    ap.add_argument("--warmup", type=int, default=4, help="first steps left out (default 4)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: steadier on a shared machine)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated; peft is always run")
    ap.add_argument("--isolated", action="store_true", help="also time each variant alone in a fresh process")
    ap.add_argument("--no-memory", action="store_true", help="skip the peak memory pass")
    ap.add_argument("--only", choices=VARIANTS, help=argparse.SUPPRESS)  # internal: one variant, JSON out
    ap.add_argument("--json", type=Path, help="also write the results to this JSON file")
    args = ap.parse_args(argv)
    if args.steps - args.warmup < 10:
        ap.error("--steps minus --warmup must be at least 10")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda given but CUDA is not available")
    if args.threads:
        torch.set_num_threads(args.threads)
    models = [m for m in args.models.split(",") if m]
    if args.only:
        r = Runner(args.only, models[0], args.full_size, args.rank, device)
        xs = batches(args, device)
        ts = [timed(functools.partial(r.step, xs[i % 2]), device) for i in range(args.steps)][args.warmup:]
        print(json.dumps({"median_s": statistics.median(ts)}))
        return {}
    variants = ["peft"] + [v for v in args.variants.split(",") if v and v != "peft"]
    res: dict[str, Any] = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__, "threads": torch.get_num_threads(), "batch": args.batch, "seq": args.seq,
        "rank": args.rank, "full_size": args.full_size, "steps": args.steps, "warmup": args.warmup, "models": {},
    }
    for m in models:
        res["models"][m] = run_model(m, variants, args, device)
    size = "full size (hidden 768, 12 layers)" if args.full_size else "small (hidden 256, 4 layers)"
    print(
        f"low-rank A+B vs PEFT LoRA: {res['device']}, torch {torch.__version__}, {res['threads']} CPU threads, "
        f"{size}, batch {args.batch} x {args.seq} tokens, r={args.rank}, alpha={2 * args.rank}, AdamW; "
        f"{args.steps} steps, first {args.warmup} left out"
    )
    head = f"{'model':<6}{'variant':<12}{'trainable':>11}{'median ms':>11}{'× peft':>8}{'peak MiB':>10}{'× peft':>8}"
    print(head + (f"{'alone ms':>10}{'× peft':>8}" if args.isolated else ""))
    for m, rows in res["models"].items():
        for v, r in rows.items():
            mem = f"{r['peak_mib']:>10.1f}{r.get('peak_ratio', float('nan')):>8.2f}" if "peak_mib" in r else f"{'n/a':>10}{'':>8}"
            line = f"{m:<6}{v:<12}{r['trainable']:>11,}{r['median_ms']:>11.1f}{r['ratio']:>8.2f}{mem}"
            if args.isolated:
                line += f"{r['isolated_ms']:>10.1f}{r['isolated_ratio']:>8.2f}"
            print(line)
    print(
        "× peft: median over rounds of (variant time / peft time in the same round); alone: each variant in a "
        "fresh process, ratio of the medians; peak: tensor bytes of one training step."
    )
    if args.json:
        from workbench.core.atomic import atomic_write

        atomic_write(args.json, json.dumps(res, indent=2) + "\n")
    return res


if __name__ == "__main__":
    main()
