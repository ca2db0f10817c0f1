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

from workbench.commands.common import print_table
from workbench.core.advisor.advice import Advice, advise
from workbench.core.advisor.sizes import parse_size
from workbench.core.formatting import fmt_bytes, fmt_count
from workbench.core.models.zoo import build_model, current_num_classes, model_input_size
from workbench.core.training.config import AMP_MODES, OPTIMIZERS, TrainConfig


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register the ``advise`` flags."""
    p.add_argument("model", help="torchvision model name (e.g. resnet50, vit_b_16)")
    p.add_argument("--memory", required=True, help="memory budget of the device, e.g. 24GB, 512MiB, 1.5G")
    p.add_argument("--batch-size", type=int, default=32, help="samples per step (default 32)")
    p.add_argument("--image-size", type=int, help="input image side (default: the model's preset, 224 for most)")
    p.add_argument("--num-classes", type=int, help="replace the head for N classes")
    p.add_argument("--optimizer", default="adamw", choices=OPTIMIZERS, help="optimizer (default adamw)")
    p.add_argument("--amp", default="off", choices=AMP_MODES, help="mixed precision (default off)")
    p.add_argument("--device", default="auto", help="device the plans are for and --measure runs on: auto, cpu, cuda, cuda:N")
    p.add_argument("--measure", type=int, metavar="STEPS", help="train each front candidate STEPS steps and report measured peak and step time")
    p.add_argument("--json", action="store_true", help="print the advice as JSON")


def _device_type(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name.split(":")[0]


def _print_table(advice: Advice, args: argparse.Namespace) -> None:
    measured = any(a.measured is not None for a in advice.front_assessed)
    head = ["", "candidate", "peak", "fits", "trainable", "step × full"]
    if measured:
        head += ["measured peak", "error", "measured × full"]
    rows = []
    for i in advice.front:
        a = advice.assessed[i]
        row = ["→" if i == advice.chosen else "", a.candidate.name, fmt_bytes(a.memory.peak),
               "yes" if a.fits else "no", fmt_count(a.trainable_params), f"{a.step_ratio:.2f}"]
        if measured and a.measured is not None:
            err = (a.memory.peak - a.measured.peak_bytes) / a.measured.peak_bytes
            row += [fmt_bytes(a.measured.peak_bytes), f"{err:+.0%}", f"{a.measured.step_ratio:.2f}"]
        rows.append(row)
    shape = "x".join(str(s) for s in advice.input_shape)
    print(f"{args.model}, input {shape}, {args.optimizer}, amp {args.amp}, budget {fmt_bytes(advice.budget_bytes)}; "
          f"Pareto front of {len(advice.assessed)} candidates (predicted peak, trainable, step time)")
    print_table(head, rows, left=2)
    if advice.chosen is not None:
        print(f"chosen: {advice.assessed[advice.chosen].candidate.name} (the most trainable parameters within the budget)")


def run(args: argparse.Namespace) -> int:
    """Advise and print the front (table or ``--json``).

    Returns:
        0 when a plan fits the budget, 1 when none does.

    Raises:
        WorkbenchError: a bad size, model or setting; a budget below the model's weights.
    """
    budget = parse_size(args.memory)
    size = args.image_size or model_input_size(args.model)
    with torch.device("meta"):  # structure only: no weights, no memory
        model = build_model(args.model, None, args.num_classes, allow_download=False)
    device_type = _device_type(args.device)
    advice = advise(model, budget, (args.batch_size, 3, size, size), optimizer=args.optimizer,
                    amp=args.amp, device_type=device_type)
    if args.measure is not None:
        from workbench.core.advisor.measure import measure_front

        # the head the prediction assumed (the engine would otherwise give synthetic data a new 10-class head)
        classes = args.num_classes or current_num_classes(model)
        config = TrainConfig(model=args.model, num_classes=classes, data="synthetic", image_size=size,
                             batch_size=args.batch_size, optimizer=args.optimizer, amp=args.amp,
                             device=args.device, allow_download=False)
        measure_front(advice, config, args.measure)
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
