"""``workbench export``: a plan as a standalone plain-PyTorch script (``.py``), as plan JSON, or
(``--peft DIR``) as a PEFT LoRA adapter folder."""

from __future__ import annotations

import argparse
from pathlib import Path

from workbench.commands.common import add_model_arguments, model_spec_from_args
from workbench.core.export import OPTIMIZERS, ExportError, export_script
from workbench.core.plan.rules import FreezePlan


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_arguments(p, positional=False)
    p.add_argument("--to", help="destination: a .py script or a .json plan")
    p.add_argument(
        "--peft", metavar="DIR",
        help="write the plan's low-rank A+B as a PEFT LoRA adapter folder (adapter_config.json + "
        "adapter_model.safetensors at their initial values) that peft.PeftModel.from_pretrained loads",
    )
    p.add_argument("--lr", type=float, default=1e-3, help="base learning rate of the script's training loop")
    p.add_argument("--weight-decay", type=float, default=0.01, help="weight decay of the script's optimizer")
    p.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default="adamw", help="optimizer of the script")
    p.add_argument("--batch-size", type=int, default=32, help="default batch size of the script")
    p.add_argument("--image-size", type=int, help="default input side of the script (default: the model's)")


def run(args: argparse.Namespace) -> int:
    if not args.plan:
        raise ExportError("give the plan to export with --plan PLAN.json")
    if not args.to and not args.peft:
        raise ExportError("give a destination: --to FILE.py / FILE.json, or --peft DIR")
    plan = FreezePlan.load(args.plan)
    if args.peft:
        from workbench.core.export import _structure_model

        model, _ = _structure_model(model_spec_from_args(args, plan))  # architecture only
        try:
            folder = plan.apply(model, base_dir=Path(args.plan).resolve().parent).to_peft(args.peft)
        except ValueError as e:
            raise ExportError(f"cannot write a PEFT adapter: {e}") from None
        print(f"wrote PEFT adapter {folder}: load it with peft.PeftModel.from_pretrained(base_model, {str(folder)!r})")
        if not args.to:
            return 0
    dest = Path(args.to)
    if dest.suffix not in (".py", ".json"):
        raise ExportError(f"--to must end in .py (script) or .json (plan), got {dest.name!r}")
    spec = model_spec_from_args(args, plan)
    if dest.suffix == ".json":
        from workbench.core.export import _structure_model
        from workbench.core.models.tree import ModelTree

        model, _ = _structure_model(spec)  # architecture only: random weights, nothing downloaded
        tree = ModelTree.from_model(model)
        plan.validate(tree)
        out = plan.copy()
        info = {k: v for k, v in spec.to_dict().items() if v is not None}
        info["fingerprint"] = tree.fingerprint
        out.model = {**out.model, **info}
        out.save(dest)
        print(f"wrote plan {dest}")
        return 0
    export_script(
        plan,
        spec,
        dest,
        lr=args.lr,
        weight_decay=args.weight_decay,
        optimizer=args.optimizer,
        batch_size=args.batch_size,
        image_size=args.image_size,
        base_dir=Path(args.plan).resolve().parent,
    )
    print(f"wrote {dest}: run it with `python {dest} --steps 100` (needs only torch and torchvision)")
    return 0
