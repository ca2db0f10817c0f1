"""``workbench export``: a run (``--run FOLDER``) or a plan as a standalone plain-PyTorch script
(``.py``) that trains what the workbench trains, a plan as plan JSON, or (``--peft DIR``) a PEFT
LoRA adapter folder."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from workbench.commands.common import add_meta_argument, add_model_arguments, model_spec_from_args, wants_meta
from workbench.core.export import ExportError, export_script, structure_model
from workbench.core.models.spec import ModelSpec
from workbench.core.optimizers import CHOICES
from workbench.core.plan.rules import FreezePlan


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_arguments(p, positional=False)
    add_meta_argument(p)
    p.add_argument("--to", help="destination: a .py script or a .json plan")
    p.add_argument(
        "--run", metavar="FOLDER",
        help="export this saved run (workbench train --save FOLDER, or a folder of the app's runs): the script "
        "trains it again, same data, seed, optimizer, schedule and stages (see docs/export.md)",
    )
    for flag, what in (("--data", "data"), ("--val", "validation data"), ("--loss", "loss"), ("--metric", "metric")):
        p.add_argument(flag, metavar="SPEC", help=f"with --run: the run's {what}, typed here (a py: {what} the run folder "
                       "names is exported only when you name it yourself)")
    p.add_argument(
        "--peft", metavar="DIR",
        help="write the plan's low-rank A+B as a PEFT LoRA adapter folder (adapter_config.json + "
        "adapter_model.safetensors at their initial values) that peft.PeftModel.from_pretrained loads",
    )
    p.add_argument("--lr", type=float, default=1e-3, help="base learning rate of the script's training loop")
    p.add_argument("--weight-decay", type=float, default=0.01, help="weight decay of the script's optimizer")
    p.add_argument(
        "--no-decay", choices=("auto", "none"), default=None,
        help="auto: no weight decay for biases, 1-D parameters and the model's no_weight_decay() names",
    )
    p.add_argument("--optimizer", choices=CHOICES, default="adamw", help="optimizer of the script (sgd: plain SGD, momentum 0)")
    p.add_argument("--batch-size", type=int, default=32, help="default batch size of the script")
    p.add_argument("--image-size", type=int, help="default input side of the script (default: the model's)")


def run(args: argparse.Namespace) -> int:
    if args.run:
        return _export_run(args)
    if not args.plan:
        raise ExportError("give the run to export with --run FOLDER, or the plan with --plan PLAN.json")
    if not args.to and not args.peft:
        raise ExportError("give a destination: --to FILE.py / FILE.json, or --peft DIR")
    plan = FreezePlan.load(args.plan)
    if args.peft:
        model, _ = structure_model(model_spec_from_args(args, plan))  # architecture only
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
    check_destination(dest)
    spec = model_spec_from_args(args, plan)
    try:
        return _write(args, plan, spec, dest)
    except OSError as e:
        raise ExportError(f"cannot write {dest} ({e.strerror or e}); choose a writable folder for --to") from None


def _export_run(args: argparse.Namespace) -> int:
    from workbench.core.export.from_run import load_run

    if not args.to or Path(args.to).suffix != ".py" or args.peft:
        raise ExportError("--run exports a script: give --to FILE.py (and no --peft)")
    dest = Path(args.to)
    check_destination(dest)
    saved = load_run(args.run, plan=FreezePlan.load(args.plan) if args.plan else None)
    spec = model_spec_from_args(args, saved.plan) if args.model else saved.spec  # a model typed here may run code
    typed = {name: getattr(args, name) for name in ("data", "val", "loss", "metric") if getattr(args, name, None)}
    config = saved.config.replace(**typed) if typed else saved.config  # typed here: py: code may be exported
    try:
        export_script(saved.plan, spec, dest, config=config, base_dir=saved.base_dir)
    except OSError as e:
        raise ExportError(f"cannot write {dest} ({e.strerror or e}); choose a writable folder for --to") from None
    print(f"wrote {dest}: `python {dest}` trains the run of {args.run} again (it does not need the workbench)")
    return 0


def check_destination(dest: Path) -> None:
    """Refuse a destination that cannot become the exported file, before any work is done.

    Args:
        dest: the ``--to`` path.

    Raises:
        ExportError: the path is a folder, its folder does not exist, or is not writable.
    """
    if dest.is_dir():
        raise ExportError(f"--to {dest} is a folder; name a file inside it, e.g. {dest / ('plan' + dest.suffix if dest.suffix else 'plan.py')}")
    parent = dest.parent if str(dest.parent) else Path(".")
    if not parent.is_dir():
        raise ExportError(f"the folder of --to {dest} does not exist ({parent}); create it first or choose another path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ExportError(f"the folder {parent} is not writable; choose another path for --to")


def _write(args: argparse.Namespace, plan: FreezePlan, spec: ModelSpec, dest: Path) -> int:
    if dest.suffix == ".json":
        from workbench.core.models.tree import ModelTree

        if wants_meta(args, spec):  # shapes only: nothing allocated, no weights read
            model = ModelSpec.from_dict({**spec.to_dict(), "weights": None}, origin=spec.origin).build(allow_download=False, meta=True)
        else:
            model, _ = structure_model(spec)  # architecture only: random weights, nothing downloaded
        tree = ModelTree.from_model(model)
        plan.validate(tree)
        out = plan.copy()
        described = spec.to_dict()  # the model exported from: a key it leaves unset (weights) is dropped
        info = {k: v for k, v in described.items() if v is not None}
        info["fingerprint"] = tree.fingerprint
        out.model = {**{k: v for k, v in out.model.items() if k not in described}, **info}
        out.save(dest)
        print(f"wrote plan {dest}")
        return 0
    export_script(
        plan,
        spec,
        dest,
        lr=args.lr,
        weight_decay=args.weight_decay,
        no_decay=None if args.no_decay == "none" else args.no_decay,
        optimizer=args.optimizer,
        batch_size=args.batch_size,
        image_size=args.image_size,
        base_dir=Path(args.plan).resolve().parent,
    )
    print(f"wrote {dest}: run it with `python {dest}` (20 steps on synthetic data; it does not need the workbench)")
    return 0
