"""Per-step overhead of FreezePlanCallback in a transformers Trainer, against the same Trainer
without it.

Two Trainers train copies of one BERT classifier (built from a config, nothing downloaded) on
the same synthetic batches with the same trainable parameters:

- ``without``: the plan applied by hand (``apply_plan``) before ``Trainer(...)``; the Trainer
  builds its own optimizer over what requires grad;
- ``with``: ``Trainer(callbacks=[FreezePlanCallback(plan)])`` (its param groups, its per-step
  stage check, its logging; the plan has a stage that comes in after the run ends, so the
  check runs every step without changing anything).

A timing callback stamps every optimizer step; the median interval of the steps after the
first ``--warmup`` is the step time. The variants alternate for ``--rounds`` rounds (load from
other processes hits both alike); the median of each is printed with their ratio. Nothing is
asserted.

Run::

    python tests/benchmarks/bench_hf_callback.py                   # hidden 128, 4 layers, batch 8 x 64 tokens
    python tests/benchmarks/bench_hf_callback.py --steps 60 --rounds 5 --json out.json
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import statistics
import tempfile
import time
from typing import Any

import torch


def _model(hidden: int, layers: int) -> Any:
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=1000, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4,
                     intermediate_size=4 * hidden, max_position_embeddings=128, num_labels=2)
    return BertForSequenceClassification(cfg)


PLAN = {
    "rules": [
        {"select": "*", "frozen": True},
        {"select": "classifier", "frozen": False},
        {"select": "bert.pooler", "frozen": False},
        {"select": "bert.encoder.layer.3", "frozen": False, "lr_scale": 0.5},
        {"select": "bert.encoder.layer.2", "frozen": False, "lr_scale": 0.25},
    ],
    "stages": [{"at_step": 1_000_000, "rules": [{"select": "bert.encoder.layer.1", "frozen": False}]}],
}


def _hook_cost(cb: Any, trainer: Any, n: int = 2000) -> float:
    """Seconds of the callback's per-step hooks (stage check, step count), timed directly."""
    args, state, control = trainer.args, trainer.state, trainer.control
    t0 = time.perf_counter()
    for _ in range(n):
        cb.on_step_begin(args, state, control)
        cb.on_step_end(args, state, control)
    return (time.perf_counter() - t0) / n


def _run(base: Any, with_callback: bool, steps: int, warmup: int, batch: int, seq: int) -> tuple[float, float]:
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from workbench.core.freezing.apply import apply_plan
    from workbench.core.plan.rules import FreezePlan
    from workbench.integrations.transformers import FreezePlanCallback

    stamps: list[float] = []

    class Stamp(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, *a: Any, **k: Any) -> None:
            stamps.append(time.perf_counter())

    model = copy.deepcopy(base)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 1000, (batch * (steps + 1), seq), generator=g)
    data = [{"input_ids": x, "labels": int(x[0] % 2)} for x in ids]
    callbacks: list[Any] = [Stamp()]
    cb = FreezePlanCallback(PLAN)
    if with_callback:
        callbacks.insert(0, cb)
    else:
        apply_plan(model, FreezePlan.from_dict(PLAN).at(0))
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(out, max_steps=steps, per_device_train_batch_size=batch, learning_rate=1e-4,
                                 weight_decay=0.01, logging_steps=10_000, save_strategy="no", report_to=[],
                                 use_cpu=True, disable_tqdm=True, dataloader_num_workers=0)
        trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=callbacks)
        trainer.train()
    gaps = [b - a for a, b in zip(stamps, stamps[1:])][warmup:]
    return statistics.median(gaps), (_hook_cost(cb, trainer) if with_callback else 0.0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", help="write the numbers to this file")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    logging.getLogger("transformers").setLevel(logging.ERROR)
    base = _model(a.hidden, a.layers)
    times: dict[str, list[float]] = {"without": [], "with": []}
    hooks: list[float] = []
    for _ in range(a.rounds):
        for name in ("without", "with"):
            step, hook = _run(base, name == "with", a.steps, a.warmup, a.batch, a.seq)
            times[name].append(step)
            if name == "with":
                hooks.append(hook)
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["with"] / med["without"]
    hook = statistics.median(hooks)
    print(f"BERT hidden {a.hidden}, {a.layers} layers, batch {a.batch} x {a.seq} tokens, {a.steps} steps x {a.rounds} rounds, "
          f"{a.threads} thread(s)")
    print(f"  without callback : {1000 * med['without']:.2f} ms/step (median)")
    print(f"  with callback    : {1000 * med['with']:.2f} ms/step (median)")
    print(f"  ratio with/without: {ratio:.3f}")
    print(f"  the callback's per-step hooks timed directly: {1e6 * hook:.1f} us/step, "
          f"{100 * hook / med['without']:.4f}% of a step")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"ms_per_step": {k: 1000 * v for k, v in med.items()}, "ratio": ratio,
                       "hook_us_per_step": 1e6 * hook, "args": vars(a)}, f, indent=2)


if __name__ == "__main__":
    main()
