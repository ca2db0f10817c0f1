"""``workbench bench``: the measured cost of freeze plans, side by side with full fine-tuning.

Every variant (full fine-tuning, then each ``--plan``) gets its own model and
:class:`~workbench.core.training.engine.Trainer` with the same config and data; their steps are
interleaved round-robin in one process, so machine load affects all variants alike. Step time
is the median after warm-up. Memory: the bytes of params + grads + optimizer state each
variant really holds, and its measured peak over its first two steps, run alone (CUDA:
``torch.cuda.max_memory_allocated``; CPU: live tensor bytes, not process RSS), next to the plan
advisor's predicted peak (``--json``: ``measured_peak_bytes``, ``predicted_peak_bytes``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from workbench.commands.common import add_task_arguments, check_positive, input_shape_from_arg, print_table
from workbench.core.advisor.measure import measure_peak
from workbench.core.errors import WorkbenchError
from workbench.core.formatting import fmt_bytes, fmt_count
from workbench.core.models.spec import ModelSpec
from workbench.core.models.zoo import current_num_classes, replace_head
from workbench.core.training.config import AMP_MODES, OPTIMIZER_NAMES, TrainConfig
from workbench.core.training.engine import Trainer


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register the ``bench`` flags."""
    p.add_argument("model", nargs="?", default="resnet18", help="torchvision model name (default resnet18)")
    p.add_argument("--plan", action="append", default=[], help="plan file to measure (repeat for several)")
    p.add_argument("--weights", help="torchvision weights (default: random init; timing does not depend on values)")
    p.add_argument("--num-classes", type=int, help="replace the head for N classes")
    p.add_argument("--steps", type=int, default=20, help="measured steps per variant (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up steps per variant, not measured (default 3)")
    p.add_argument("--batch-size", type=int, default=16, help="samples per step (default 16)")
    p.add_argument("--image-size", type=int, default=96, help="synthetic image side (default 96)")
    p.add_argument("--data", help="train on this data instead of synthetic images (a train --data spec, e.g. "
                   "py:FILE.py:FUNC, which runs that code)")
    add_task_arguments(p)
    p.add_argument("--optimizer", default="adamw", help=f"one of {', '.join(OPTIMIZER_NAMES)}")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N, mps")
    p.add_argument("--amp", default="off", choices=AMP_MODES, help="mixed precision")
    p.add_argument("--json", action="store_true", help="print results as JSON")


def _variants(args: argparse.Namespace) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = [("full fine-tuning", None)]
    for p in args.plan:
        out.append((Path(p).name, p))
    return out


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Run the variants interleaved and return one result row per variant.

    Raises:
        WorkbenchError: bad model, plan or settings; or a variant failed to train.
    """
    memory_steps = 2  # the optimizer state appears after the first step
    total = memory_steps + args.warmup + args.steps
    # the model as it is: its own head, not the 10-class head a training run gives synthetic data
    classes = args.num_classes or ModelSpec(name=args.model, weights=args.weights).head_classes()
    trainers: list[tuple[str, Trainer]] = []
    for label, plan in _variants(args):
        cfg = TrainConfig(
            model=args.model, weights=args.weights, num_classes=classes, plan=plan,
            data=args.data or "synthetic", image_size=args.image_size, batch_size=args.batch_size,
            input_shape=input_shape_from_arg(args.input_shape), loss=args.loss or "cross_entropy",
            metric=args.metric or "accuracy",
            optimizer=args.optimizer, steps=total, device=args.device, amp=args.amp,
            allow_download=False,
        ).validate()
        trainers.append((label, Trainer(cfg)))
    gens = [(label, t, t.steps()) for label, t in trainers]
    for _, trainer, _ in gens:
        trainer.setup()
    # peak memory: each variant alone for its first steps (a process-wide peak of interleaved
    # variants could not be split between them)
    peaks = {label: measure_peak(trainer, gen, memory_steps, label) for label, trainer, gen in gens}
    times: dict[str, list[float]] = {label: [] for label, _ in trainers}
    last: dict[str, Any] = {}
    for i in range(args.warmup + args.steps):
        for label, trainer, gen in gens:
            m = next(gen, None)
            if m is None:
                result = trainer.result
                msg = result.message if result is not None else "ended early"
                raise WorkbenchError(f"variant {label!r} stopped at step {memory_steps + i}: {msg}")
            if i >= args.warmup:
                times[label].append(m.step_time_s)
            last[label] = m
    for _, _, gen in gens:
        for _ in gen:  # let each run finish (verify, summary)
            pass
    rows = []
    base = statistics.median(times[trainers[0][0]])
    for label, trainer in trainers:
        m = last[label]
        med = statistics.median(times[label])
        assert trainer.applied is not None and trainer.optimizer is not None  # set up by the runs above
        counts = trainer.applied.counts(trainer.optimizer)
        rows.append(
            {
                "variant": label,
                "median_step_ms": med * 1e3,
                "ratio": med / base,
                "trainable_params": m.trainable_params,
                "total_params": m.trainable_params + m.frozen_params,
                "grad_bytes": m.grad_bytes,
                "optimizer_state_bytes": m.optimizer_state_bytes,
                "training_bytes": counts.param_bytes + m.grad_bytes + m.optimizer_state_bytes + counts.fixed_bytes,
                "verify_ok": bool(trainer.result and trainer.result.verify and trainer.result.verify.ok),
                "device": m.device,
                "measured_peak_bytes": peaks[label],
                "predicted_peak_bytes": _predicted_peak(trainer, args),
                "input_shape": list(trainer.input_shape) if isinstance(trainer.input_shape, tuple)
                and len(trainer.input_shape) != 3 else None,
            }
        )
    return rows


def _predicted_peak(trainer: Trainer, args: argparse.Namespace) -> int | None:
    """The advisor's predicted peak for a variant's plan (None when it cannot be predicted)."""
    from workbench.core.advisor.advice import predict_plan
    from workbench.core.advisor.profile import is_text_model

    model, applied, device = trainer.model, trainer.applied, trainer.device
    assert model is not None and applied is not None and device is not None
    base = trainer.config.model
    origin = trainer.config.model_origin
    spec = (ModelSpec.from_dict(base, origin=origin) if isinstance(base, dict)
            else ModelSpec(name=base, num_classes=trainer.config.num_classes, origin=origin))
    try:
        meta = spec.build(allow_download=False, meta=True)
        classes = current_num_classes(model)
        if classes is not None and classes != current_num_classes(meta):
            replace_head(meta, classes)
        if is_text_model(meta):  # the token batches the run trained on: (batch, tokens per sample)
            if not trainer.seq_len:
                return None
            shape: tuple[int, ...] = (args.batch_size, trainer.seq_len)
        elif isinstance(trainer.input_shape, tuple):  # the shape of the data's first sample
            shape = (args.batch_size, *trainer.input_shape)
        else:
            shape = (args.batch_size, 3, args.image_size, args.image_size)
        return predict_plan(meta, applied.plan, shape, optimizer=args.optimizer, amp=args.amp,
                            device_type=device.type).peak
    except WorkbenchError:
        return None


def run(args: argparse.Namespace) -> int:
    """Measure and print the comparison table."""
    for flag, value in (("--steps", args.steps), ("--batch-size", args.batch_size), ("--image-size", args.image_size)):
        check_positive(value, flag)  # before the model is built: one line for a negative or zero
    check_positive(args.warmup, "--warmup", zero_ok=True)
    rows = measure(args)
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
        return 0
    head = ("variant", "step ms", "× full", "trainable", "params+grads+state", "peak", "predicted", "verify")
    table = [
        (r["variant"], f"{r['median_step_ms']:.1f}", f"{r['ratio']:.2f}", fmt_count(r["trainable_params"]),
         fmt_bytes(r["training_bytes"]), fmt_bytes(r["measured_peak_bytes"]),
         fmt_bytes(r["predicted_peak_bytes"]) if r["predicted_peak_bytes"] is not None else "-",
         "ok" if r["verify_ok"] else "FAILED")
        for r in rows
    ]
    shape = rows[0].get("input_shape")
    size = f"input {'x'.join(map(str, shape))}" if shape else f"{args.image_size}px"
    print(f"{args.model}, batch {args.batch_size}, {size}, {args.optimizer}, device {rows[0]['device']}; "
          f"median of {args.steps} interleaved steps after {args.warmup} warm-up")
    print_table(head, table, left=1)
    return 0
