"""The plan advisor's predicted peak memory against the measured one, side by side.

For resnet50 and a ViT-B (torchvision ``vit_b_16``), at two batch sizes each, the advisor's
full fine-tuning and last-k candidates (k = 1 and half the blocks) are predicted from one
shape-only pass on the ``meta`` device, then trained for a few real steps by the training
engine while the peak is measured (CUDA: ``torch.cuda.max_memory_allocated``; CPU: live tensor
bytes counted by torch's dispatcher, not process RSS). The script prints a table and the
largest error; it asserts nothing.

On CPU the sizes are small so it finishes in a few minutes on two busy cores; on CUDA pass
real ones. The ViT keeps ViT-B's width and depth; ``--vit-image-size`` only changes the
number of patches.

Run::

    python tests/benchmarks/bench_advisor.py                       # CPU, small sizes
    python tests/benchmarks/bench_advisor.py --optimizer sgd
    python tests/benchmarks/bench_advisor.py --device cuda --resnet-batch 32 64 --vit-batch 16 32 \\
        --resnet-image-size 224 --vit-image-size 224
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch
import torchvision

from workbench.core.advisor.candidates import generate_candidates, trainable_names
from workbench.core.advisor.measure import measure_peak
from workbench.core.advisor.memory import estimate_memory
from workbench.core.advisor.profile import profile_model
from workbench.core.formatting import fmt_bytes
from workbench.core.training.config import TrainConfig
from workbench.core.training.engine import Trainer


def _model(name: str, image_size: int) -> torch.nn.Module:
    torch.manual_seed(0)
    if name == "vit_b_16":
        return torchvision.models.vit_b_16(weights=None, image_size=image_size)
    return torchvision.models.get_model(name, weights=None)


def _case(name: str, image_size: int, batch: int, args: argparse.Namespace) -> list[dict]:
    model = _model(name, image_size)
    device_type = torch.device(args.device).type
    prof = profile_model(model, (batch, 3, image_size, image_size))
    cands = [c for c in generate_candidates(model, prof) if not c.bn_eval]
    lastk = [c for c in cands if c.kind == "last_k"]
    chosen = [next(c for c in cands if c.kind == "full"), lastk[0], lastk[len(lastk) // 2]]
    rows = []
    for cand in chosen:
        names = trainable_names(cand, model)
        predicted = estimate_memory(prof, names, optimizer=args.optimizer, device_type=device_type).peak
        cfg = TrainConfig(plan=cand.plan.to_dict(), data="synthetic", image_size=image_size, batch_size=batch,
                          optimizer=args.optimizer, steps=args.steps, device=args.device, allow_download=False)
        trainer = Trainer(cfg, model=_model(name, image_size))
        trainer.setup()
        gen = trainer.steps()
        t0 = time.perf_counter()
        measured = measure_peak(trainer, gen, args.steps, cand.name)
        elapsed = time.perf_counter() - t0
        for _ in gen:
            pass
        del trainer, gen
        rows.append({"model": name, "image_size": image_size, "batch": batch, "candidate": cand.name,
                     "predicted_bytes": predicted, "measured_bytes": measured,
                     "error": (predicted - measured) / measured, "seconds": elapsed})
        print(f"  {name} {image_size}px batch {batch}: {cand.name}: predicted {fmt_bytes(predicted)}, "
              f"measured {fmt_bytes(measured)} ({rows[-1]['error']:+.1%})", flush=True)
    return rows


def main() -> None:
    """Run the cases and print the table."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    p.add_argument("--optimizer", default="adamw", choices=("sgd", "sgd_momentum", "adam", "adamw"))
    p.add_argument("--steps", type=int, default=2, help="measured steps per candidate (at least 2)")
    p.add_argument("--resnet-image-size", type=int, default=64)
    p.add_argument("--resnet-batch", type=int, nargs=2, default=[4, 8])
    p.add_argument("--vit-image-size", type=int, default=112)
    p.add_argument("--vit-batch", type=int, nargs=2, default=[2, 4])
    p.add_argument("--threads", type=int, default=2, help="torch threads on CPU")
    p.add_argument("--json", help="also write the rows to this file")
    args = p.parse_args()
    if torch.device(args.device).type == "cpu":
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, device {args.device}, "
          f"optimizer {args.optimizer}, {args.steps} steps per candidate")
    rows: list[dict] = []
    for batch in args.resnet_batch:
        rows += _case("resnet50", args.resnet_image_size, batch, args)
    for batch in args.vit_batch:
        rows += _case("vit_b_16", args.vit_image_size, batch, args)
    print()
    print("| model | input | candidate | predicted | measured | error |")
    print("|---|---|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['model']} | {r['batch']}x3x{r['image_size']}x{r['image_size']} | {r['candidate']} | "
              f"{fmt_bytes(r['predicted_bytes'])} | {fmt_bytes(r['measured_bytes'])} | {r['error']:+.1%} |")
    worst = max(rows, key=lambda r: abs(r["error"]))
    print(f"\nlargest error: {worst['error']:+.1%} ({worst['model']}, batch {worst['batch']}, {worst['candidate']})")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
