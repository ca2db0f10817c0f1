"""``workbench advise``: the plans that fit a memory budget, and the one that trains the most.

Predictions come from one shape-only forward pass on the ``meta`` device (no weights, no real
compute); ``--measure STEPS`` then trains each front candidate for a few steps side by side
and prints predicted next to measured peak memory and step time.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
from torch import nn

from workbench.commands.common import (
    CommandError,
    add_task_arguments,
    device_from_arg,
    input_shape_from_arg,
    print_table,
)
from workbench.core.advisor.advice import Advice, advise
from workbench.core.advisor.profile import DictBatch, InputShape, batch_template, batch_text, is_text_model
from workbench.core.advisor.sizes import parse_size
from workbench.core.errors import WorkbenchError
from workbench.core.formatting import fmt_bytes, fmt_count
from workbench.core.models.spec import ModelSpec
from workbench.core.models.zoo import current_num_classes
from workbench.core.training.config import AMP_MODES, OPTIMIZER_NAMES, TrainConfig
from workbench.core.training.data import model_positions
from workbench.core.training.setup import run_image_size


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register the ``advise`` flags."""
    p.add_argument("model", help="model spec: resnet50, timm:NAME, hf:FOLDER_OR_REPO, py:MODULE:FACTORY")
    p.add_argument("--memory", required=True, help="memory budget of the device, e.g. 24GB, 512MiB, 1.5G")
    p.add_argument("--batch-size", type=int, default=32, help="samples per step (default 32)")
    p.add_argument("--image-size", type=int, help="input image side (default: the model's preset, 224 for most)")
    p.add_argument("--seq-len", type=int, help="tokens per sample (text models; required for them)")
    p.add_argument("--num-classes", type=int, help="replace the head for N classes")
    add_task_arguments(p, loss=False)
    p.add_argument("--data", help="read the input shape from the first sample of this data (a --data spec of train, "
                   "e.g. py:FILE.py:FUNC, which runs that code)")
    p.add_argument("--optimizer", default="adamw", choices=OPTIMIZER_NAMES, help="optimizer (default adamw)")
    p.add_argument("--amp", default="off", choices=AMP_MODES, help="mixed precision (default off)")
    p.add_argument("--dtype", choices=sorted(_DTYPES), help="dtype the weights are stored in (default: the model's own)")
    p.add_argument("--rank-by", default="depth", choices=("depth", "grad-signal"),
                   help="order in which blocks are unfrozen: depth (last k, default) or grad-signal "
                        "(a short probe run measures each block's relative gradient norm)")
    p.add_argument("--device", default="auto", help="device the plans are for and --measure runs on: auto, cpu, cuda, cuda:N")
    p.add_argument("--measure", type=int, metavar="STEPS", help="train each front candidate STEPS steps and report measured peak and step time")
    p.add_argument("--json", action="store_true", help="print the advice as JSON")
    p.add_argument("--sweep", type=int, metavar="STEPS",
                   help="train the plans it proposes STEPS steps each, stopping weak ones early, and recommend the "
                        "one that learns best for its cost (workbench sweep; needs the [sweep] extra)")
    p.add_argument("--sweep-out", metavar="FOLDER", default="advise-sweep",
                   help="with --sweep: the sweep folder (default advise-sweep; the same command resumes it)")


_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _check_device(name: str, *, measure: bool) -> None:
    """Refuse a name that is no device (one line); with ``--measure``, also one this machine lacks.

    Raises:
        CommandError: not a device name, or (measuring) not available here.
    """
    from workbench.core.training.config import ConfigError, TrainConfig

    if measure:
        device_from_arg(name)
        return
    try:
        TrainConfig().replace(device=name)
    except ConfigError:
        raise CommandError(f"--device {name!r} is not a device; use auto, cpu, cuda, cuda:N or mps") from None


def _device_type(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name.split(":")[0]


def _print_table(advice: Advice, args: argparse.Namespace) -> None:
    measured = any(a.measured is not None for a in advice.front_assessed)
    head = ["", "candidate", "peak", "fits", "trainable", "step × full", "cached"]
    if measured:
        head += ["measured peak", "error", "measured × full"]
    rows = []
    for i in advice.front:
        a = advice.assessed[i]
        row = ["→" if i == advice.chosen else "", a.candidate.name, fmt_bytes(a.memory.peak),
               "yes" if a.fits else "no", fmt_count(a.trainable_params), f"{a.step_ratio:.2f}",
               f"{a.cached_step_ratio:.2f}" if a.cached_step_ratio is not None else "-"]
        if a.measured is not None:
            err = (a.memory.peak - a.measured.peak_bytes) / a.measured.peak_bytes
            row += [fmt_bytes(a.measured.peak_bytes), f"{err:+.0%}", f"{a.measured.step_ratio:.2f}"]
        rows.append(row)
    af = advice.auto_freeze
    if af is not None:
        cached = f"{af.cached_step_ratio_end:.2f}" if af.cached_step_ratio_end is not None else "-"
        rows.append(["", af.name, fmt_bytes(af.peak_bytes), "yes" if af.fits else "no",
                     f"{fmt_count(af.trainable_start)} → {fmt_count(af.trainable_end)}",
                     f"{af.step_ratio_start:.2f} → {af.step_ratio_end:.2f}", cached])
    rows = [row + ["-"] * (len(head) - len(row)) for row in rows]  # not measured (auto-freeze is never)
    shape = batch_text(advice.input_shape)
    print(f"{args.model}, input {shape}, {args.optimizer}, amp {args.amp}, budget {fmt_bytes(advice.budget_bytes)}; "
          f"Pareto front: {len(advice.front)} of {len(advice.assessed)} candidates "
          "(predicted peak, trainable, step time)" + (", and auto-freeze" if af is not None else ""))
    print_table(head, rows, left=2)
    sources = sorted({a.measured.memory_source for a in advice.front_assessed if a.measured is not None})
    if sources:
        print(f"  measured peak: {', '.join(sources)} of a few real steps per candidate (the run's own peak memory, "
              "as training reports it; never the prediction)")
    print("  cached: step time once the frozen-prefix cache serves (after the first epoch; --cache-frozen, on where "
          "the frozen part runs in eval mode)")
    if af is not None:
        print("  auto-freeze (train --auto-freeze): starts as full fine-tuning (its peak) and freezes converged front "
              f"blocks, up to {af.max_frozen} of {af.blocks} ({af.stop_reason}); trainable and step time fall from "
              "the first figure to the second at most, and to the cached one once the cache serves the frozen front")
    signal = advice.settings.get("grad_signal")
    if signal:
        ranked = ", ".join(f"{b} {signal['signal'][b]:.2g}" for b in signal["order"])
        print(f"blocks by relative gradient norm ‖g‖/‖w‖ ({signal['steps']} probe steps): {ranked}")
    if advice.chosen is not None:
        print(f"chosen: {advice.assessed[advice.chosen].candidate.name} (the most trainable parameters within the budget)")


def _data_batch(args: argparse.Namespace) -> InputShape | None:
    """The batch of ``--batch-size`` samples like the first sample of ``--data`` (None without it):
    ``(batch, *shape)`` for a tensor input, each key's shape and dtype for a dict input."""
    if not getattr(args, "data", None):
        return None
    from workbench.core.training.data import DataError
    from workbench.core.training.data_sources import make_dataset
    from workbench.core.training.setup import first_input_shape

    try:
        ds = make_dataset(args.data, image_size=args.image_size or 224, num_classes=args.num_classes or 10, length=None)
    except DataError as e:
        raise CommandError(f"--data: {e}") from None
    if first_input_shape(ds) is None:
        raise CommandError(f"--data {args.data}: its first sample is not (input tensor, target); give --input-shape")
    return batch_template(ds[0], args.batch_size)


def _input_shape(args: argparse.Namespace, spec: ModelSpec, model: nn.Module) -> InputShape:
    """The batch shape the advice is for: ``(batch, seq_len)`` for text models, ``--input-shape`` or the
    first sample of ``--data`` (its keys and shapes for dict inputs), else images of the model's size."""
    if args.batch_size < 1:
        raise WorkbenchError(f"--batch-size must be at least 1, got {args.batch_size}")
    if is_text_model(model):
        if args.image_size is not None:
            raise WorkbenchError(f"{args.model} is a text model: give --seq-len, not --image-size")
        if args.seq_len is None or args.seq_len < 2:
            raise WorkbenchError(f"{args.model} is a text model: give --seq-len L (tokens per sample, at least 2)")
        limit = model_positions(model)
        if limit is not None and args.seq_len > limit:
            raise WorkbenchError(
                f"--seq-len {args.seq_len} is more than {args.model} takes: its position embeddings hold {limit} "
                f"tokens; give --seq-len {limit} or less"
            )
        return (args.batch_size, args.seq_len)
    if args.seq_len is not None:
        raise WorkbenchError(f"{args.model} is not a text model: give --image-size, not --seq-len")
    sample = input_shape_from_arg(args.input_shape)
    batch = (args.batch_size, *sample) if sample is not None else _data_batch(args)
    if batch is not None:
        if args.image_size is not None:
            raise CommandError("give --image-size or the input shape (--input-shape, --data), not both")
        return batch
    size = run_image_size(args.image_size, spec, model)  # the side the run takes
    return (args.batch_size, 3, size, size)


def _sweep(args: argparse.Namespace) -> int:
    """``advise --sweep STEPS``: ``workbench sweep`` over the plans the advisor proposes (its front)."""
    from workbench.commands import sweep

    argv = ["--model", args.model, "--memory", args.memory, "--steps", str(args.sweep),
            "--out", args.sweep_out, "--batch-size", str(args.batch_size), "--optimizer", args.optimizer,
            "--amp", args.amp, "--device", args.device]
    for flag, value in (("--image-size", args.image_size), ("--seq-len", args.seq_len),
                        ("--num-classes", args.num_classes), ("--data", args.data),
                        ("--input-shape", getattr(args, "input_shape", None))):
        if value is not None:
            argv += [flag, str(value)]
    if args.json:
        argv.append("--json")
    parser = argparse.ArgumentParser(prog="workbench advise --sweep")
    sweep.add_arguments(parser)
    return sweep.run(parser.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Advise and print the front (table or ``--json``).

    Returns:
        0 when a plan fits the budget, 1 when none does.

    Raises:
        WorkbenchError: a bad size, model or setting; a budget below the model's weights.
    """
    if args.sweep is not None:
        return _sweep(args)
    budget = parse_size(args.memory)
    for flag, value in (("--image-size", args.image_size), ("--seq-len", args.seq_len),
                        ("--batch-size", args.batch_size), ("--num-classes", args.num_classes),
                        ("--measure", args.measure)):
        if value is not None and value < 1:
            raise CommandError(f"{flag} must be a positive integer, got {value}")
    _check_device(args.device, measure=bool(args.measure))
    spec = ModelSpec(name=args.model, num_classes=args.num_classes)
    model = spec.build(allow_download=False, meta=True)  # structure only: no weights, no memory
    shape = _input_shape(args, spec, model)
    device_type = _device_type(args.device)
    dtype = _DTYPES[args.dtype] if args.dtype else None
    signal = None
    if args.rank_by == "grad-signal":
        from workbench.core.advisor.grad_signal import probe_signal

        if isinstance(shape, DictBatch):
            raise CommandError(f"--rank-by grad-signal probes with generated images or tokens, not the dict inputs of "
                               f"--data {args.data} ({batch_text(shape)}); use --rank-by depth")
        signal = probe_signal(spec, shape, device=args.device)
    advice = advise(model, budget, shape, optimizer=args.optimizer, amp=args.amp, device_type=device_type,
                    param_dtype=dtype, block_order=signal.order if signal is not None else None)
    if signal is not None:
        advice.settings["grad_signal"] = signal.to_dict()
    if args.measure is not None:
        from workbench.core.advisor.measure import measure_front

        # the head the prediction assumed (the engine would otherwise give synthetic data a new 10-class head)
        classes = args.num_classes or current_num_classes(model)
        if isinstance(shape, DictBatch):  # generated data has no keys: each candidate steps on the data itself
            config = TrainConfig(model=spec.to_dict(), num_classes=classes, data=args.data, batch_size=args.batch_size,
                                 optimizer=args.optimizer, amp=args.amp, device=args.device, allow_download=False)
            measure_front(advice, config, args.measure, param_dtype=dtype)
        else:
            image = len(shape) == 4 and shape[-1] == shape[-2] and not (args.input_shape or args.data)
            config = TrainConfig(model=spec.to_dict(), num_classes=classes, data="synthetic",
                                 image_size=shape[-1] if image else None,
                                 input_shape=None if image or len(shape) == 2 and is_text_model(model) else shape[1:],
                                 batch_size=args.batch_size, optimizer=args.optimizer, amp=args.amp,
                                 device=args.device, allow_download=False)
            measure_front(advice, config, args.measure, seq_len=shape[1] if len(shape) == 2 else None,
                          param_dtype=dtype)
    if args.json:
        json.dump(advice.to_dict(), sys.stdout, indent=1)
        print()
    else:
        _print_table(advice, args)
    if advice.chosen is None:
        print(f"workbench advise: no candidate fits in {fmt_bytes(budget)}; the smallest needs about "
              f"{fmt_bytes(advice.smallest_peak)}: raise --memory or lower --batch-size", file=sys.stderr)
        return 1
    return 0
