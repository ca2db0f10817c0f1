"""Activation checkpointing from the plan: peak memory and step time with and without it.

The model is a stack of ViT-B encoder blocks (torchvision's ``EncoderBlock``: hidden 768, 12
heads, MLP 3072) on a batch of 197-token sequences, trained with AdamW. Variants:

- ``plain``: no checkpointing;
- ``checkpoint``: the plan rule ``{"select": "layers.*", "checkpoint": true}`` (each block wrapped).

Each variant runs in its own process. Peak memory is tensor bytes, not the process's resident
set (which mixes allocator caches, libraries and Python objects): one extra step runs under
:class:`~workbench.core.advisor.tracking.LiveTensorBytes`, which counts every tensor storage
that forward, backward and the optimizer create and free; the peak is reported above the
parameters and optimizer state that exist before the step (so it is activations plus
gradients). The timed steps run without the counter. Expected: memory down by most of the
blocks' activations, step time up by about one extra forward of the blocks. It asserts nothing.

Run::

    python tests/benchmarks/bench_checkpoint.py                    # 6 blocks, batch 8, 5 steps
    python tests/benchmarks/bench_checkpoint.py --blocks 12 --batch 16 --json ckpt.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import torch
from torch import nn

VARIANTS = ("plain", "checkpoint")


class VitStack(nn.Module):
    """ViT-B encoder blocks and a linear head on the class token."""

    def __init__(self, blocks: int) -> None:
        super().__init__()
        from torchvision.models.vision_transformer import EncoderBlock

        self.layers = nn.Sequential(*(EncoderBlock(12, 768, 3072, 0.0, 0.0) for _ in range(blocks)))
        self.head = nn.Linear(768, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.layers(x)[:, 0])


def run_variant(variant: str, blocks: int, batch: int, steps: int) -> dict[str, float]:
    """One variant in this process.

    Args:
        variant: ``"plain"`` or ``"checkpoint"``.
        blocks: number of encoder blocks.
        batch: sequences per step.
        steps: timed steps (after one warm-up step).

    Returns:
        ``{"peak_bytes": tensor bytes above parameters and optimizer state, "step_s": median seconds}``.
    """
    import workbench as wb
    from workbench.core.advisor.tracking import LiveTensorBytes, storage_bytes

    torch.manual_seed(0)
    model = VitStack(blocks)
    rules = [{"select": "layers.*", "checkpoint": True}] if variant == "checkpoint" else [{"select": "*"}]
    applied = wb.FreezePlan.from_dict({"rules": rules}).apply(model)
    opt = torch.optim.AdamW(applied.param_groups(lr=1e-4))
    x, y = torch.randn(batch, 197, 768), torch.randint(0, 10, (batch,))
    for p in model.parameters():  # optimizer state exists before the baseline is taken
        p.grad = torch.zeros_like(p)
    opt.step()
    opt.zero_grad(set_to_none=True)

    def step() -> None:
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    times = []
    for i in range(steps + 1):
        t0 = time.perf_counter()
        step()
        if i:
            times.append(time.perf_counter() - t0)
    state = [t for s in opt.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    base = storage_bytes([*model.parameters(), *state, x, y])
    with LiveTensorBytes(baseline=base) as live:
        step()
    return {"peak_bytes": float(live.peak - base), "step_s": statistics.median(times)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--blocks", type=int, default=6)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--json", help="write the results to this file")
    ap.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)  # one child process
    a = ap.parse_args(argv)
    if a.variant:
        print(json.dumps(run_variant(a.variant, a.blocks, a.batch, a.steps)))
        return 0
    results: dict[str, dict[str, float]] = {}
    for v in VARIANTS:
        cmd = [sys.executable, __file__, "--variant", v, "--blocks", str(a.blocks), "--batch", str(a.batch),
               "--steps", str(a.steps)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        results[v] = json.loads(out.strip().splitlines()[-1])
    p, c = results["plain"], results["checkpoint"]
    print(f"ViT-B stack: {a.blocks} blocks, batch {a.batch}x197x768, AdamW, median of {a.steps} steps")
    for v in VARIANTS:
        r = results[v]
        print(f"  {v:<11} peak tensor bytes {r['peak_bytes'] / 2**20:8.1f} MiB   step {r['step_s'] * 1000:8.1f} ms")
    print(f"  checkpoint/plain: memory x{c['peak_bytes'] / max(p['peak_bytes'], 1):.2f}, "
          f"step time x{c['step_s'] / p['step_s']:.2f}")
    if a.json:
        from workbench.core.atomic import atomic_write

        atomic_write(a.json, json.dumps({"args": vars(a), "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
