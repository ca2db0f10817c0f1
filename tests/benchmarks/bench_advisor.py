"""The plan advisor's predicted peak memory against the measured one, side by side.

For resnet50 and a ViT-B (torchvision ``vit_b_16``), at two batch sizes each, the advisor's
full fine-tuning and last-k candidates (k = 1 and half the blocks), and for a BERT-base-sized
encoder (built from its config, two batch sizes / sequence lengths) also the smallest and
largest low-rank A+B candidates, are predicted from one
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
    python tests/benchmarks/bench_advisor.py --only bert --bert-batch 2 4 --bert-seq-len 64 128
    python tests/benchmarks/bench_advisor.py --only gpt2 --gpt2-batch 2 4 --gpt2-seq-len 64 128
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

from workbench.core.advisor.advice import advise
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
    if args.head_only:  # a frozen backbone: what its forward keeps alive is the whole activation cost
        chosen.append(next(c for c in cands if c.name == "head only"))
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


def _bert() -> torch.nn.Module:
    """A BERT-base-sized encoder (12 layers, hidden 768, 12 heads) from its config: no download."""
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    return BertForSequenceClassification(BertConfig(num_labels=2))


def _gpt2() -> torch.nn.Module:
    """A GPT-2-small-sized classifier (12 layers, hidden 768, 12 heads) from its config: no download.

    The pad token is set (as a fine-tuning script sets it) so batches above 1 are allowed."""
    from transformers import GPT2Config, GPT2ForSequenceClassification

    torch.manual_seed(0)
    return GPT2ForSequenceClassification(GPT2Config(num_labels=2, pad_token_id=50256))  # type: ignore[call-arg]


_TEXT_MODELS = {"bert": ("bert-base", _bert), "gpt2": ("gpt2", _gpt2)}


def _text_case(batch: int, seq_len: int, args: argparse.Namespace, which: str = "bert") -> list[dict]:
    from workbench.core.training.data import synthetic_for_model

    label, build = _TEXT_MODELS[which]
    device_type = torch.device(args.device).type
    advice = advise(build(), 10**13, (batch, seq_len), optimizer=args.optimizer, device_type=device_type)
    lastk = [a for a in advice.assessed if a.candidate.kind == "last_k"]
    low = [a for a in advice.assessed if a.candidate.kind == "low_rank" and a.candidate.name.startswith("low-rank")]
    chosen = [next(a for a in advice.assessed if a.candidate.kind == "full"), lastk[0], lastk[len(lastk) // 2],
              low[0], low[-1]]
    rows = []
    for a in chosen:
        model = build()
        data = synthetic_for_model(model, (args.steps + 1) * batch, seq_len=seq_len)
        cfg = TrainConfig(plan=a.candidate.plan.to_dict(), batch_size=batch, optimizer=args.optimizer,
                          steps=args.steps, device=args.device, allow_download=False)
        trainer = Trainer(cfg, model=model, dataset=data)
        trainer.setup()
        gen = trainer.steps()
        t0 = time.perf_counter()
        measured = measure_peak(trainer, gen, args.steps, a.candidate.name)
        elapsed = time.perf_counter() - t0
        for _ in gen:
            pass
        del trainer, gen, model
        predicted = a.memory.peak
        rows.append({"model": label, "input": f"{batch}x{seq_len} tokens", "candidate": a.candidate.name,
                     "predicted_bytes": predicted, "measured_bytes": measured,
                     "error": (predicted - measured) / measured, "seconds": elapsed})
        print(f"  {label} {batch}x{seq_len}: {a.candidate.name}: predicted {fmt_bytes(predicted)}, "
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
    p.add_argument("--bert-batch", type=int, nargs=2, default=[2, 4], help="batch sizes of the BERT-base encoder")
    p.add_argument("--bert-seq-len", type=int, nargs=2, default=[64, 128], help="sequence lengths (paired with --bert-batch)")
    p.add_argument("--gpt2-batch", type=int, nargs=2, default=[2, 4], help="batch sizes of the GPT-2-small classifier")
    p.add_argument("--gpt2-seq-len", type=int, nargs=2, default=[64, 128], help="sequence lengths (paired with --gpt2-batch)")
    p.add_argument("--only", choices=("resnet50", "vit_b_16", "bert", "gpt2"), action="append",
                   help="run only these models (gpt2 only when asked)")
    p.add_argument("--threads", type=int, default=2, help="torch threads on CPU")
    p.add_argument("--head-only", action="store_true", help="also the head-only candidate (frozen backbone)")
    p.add_argument("--json", help="also write the rows to this file")
    args = p.parse_args()
    if torch.device(args.device).type == "cpu":
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, device {args.device}, "
          f"optimizer {args.optimizer}, {args.steps} steps per candidate")
    rows: list[dict] = []
    only = set(args.only or ("resnet50", "vit_b_16", "bert"))
    if "resnet50" in only:
        for batch in args.resnet_batch:
            rows += _case("resnet50", args.resnet_image_size, batch, args)
    if "vit_b_16" in only:
        for batch in args.vit_batch:
            rows += _case("vit_b_16", args.vit_image_size, batch, args)
    if "bert" in only:
        for batch, seq_len in zip(args.bert_batch, args.bert_seq_len):
            rows += _text_case(batch, seq_len, args)
    if "gpt2" in only:
        for batch, seq_len in zip(args.gpt2_batch, args.gpt2_seq_len):
            rows += _text_case(batch, seq_len, args, "gpt2")
    print()
    print("| model | input | candidate | predicted | measured | error |")
    print("|---|---|---|---:|---:|---:|")
    for r in rows:
        shape = r.get("input") or f"{r['batch']}x3x{r['image_size']}x{r['image_size']}"
        print(f"| {r['model']} | {shape} | {r['candidate']} | "
              f"{fmt_bytes(r['predicted_bytes'])} | {fmt_bytes(r['measured_bytes'])} | {r['error']:+.1%} |")
    worst = max(rows, key=lambda r: abs(r["error"]))
    print(f"\nlargest error: {worst['error']:+.1%} ({worst['model']}, {worst.get('input') or worst['batch']}, {worst['candidate']})")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
