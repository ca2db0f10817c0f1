"""``workbench train``: train with a freeze plan; progress bar, then a summary table.

Exit codes: 0 completed, 1 failed or non-finite loss, 2 bad input (one-line error),
130 interrupted (Ctrl+C stops after the current step and still prints the summary; a second
Ctrl+C aborts at once), 143 terminated (SIGTERM stops the same way as Ctrl+C). Under ``torchrun --nproc_per_node N -m workbench train ...`` every
rank trains (DDP, or FSDP2 with ``--strategy fsdp``) and only rank 0 shows progress, writes
metrics and saves.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any

from workbench.commands.common import CommandError, add_model_arguments, add_task_arguments, checkpoint_key_policy
from workbench.core.checks.lint import lint_plan
from workbench.core.training.config import (
    AMP_MODES,
    CACHE_MODES,
    NONFINITE_MODES,
    OPTIMIZER_NAMES,
    SCHEDULERS,
    STRATEGIES,
    TrainConfig,
)
from workbench.core.training.engine import RunResult, Trainer
from workbench.core.training.frozen_cache import cache_line
from workbench.core.training.metrics import fmt_memory
from workbench.core.training.run_folder import check_save_folder

#: argparse destination -> TrainConfig field, for flags that override a --config file.
_FIELDS = (
    "model", "weights", "checkpoint", "num_classes", "plan", "data", "image_size", "seq_len", "batch_size",
    "optimizer", "lr", "weight_decay", "no_decay", "momentum", "steps", "epochs", "device", "amp",
    "channels_last", "compile", "num_workers", "pin_memory", "seed", "on_nonfinite",
    "torch_threads", "log_every", "save_dir", "metrics_path", "scheduler", "warmup_steps", "val", "val_every",
    "val_fraction", "tensorboard_dir", "strategy", "fsdp_blocks", "text_column", "label_column", "image_column",
    "cache_frozen", "cache_budget",
    "auto_freeze", "auto_freeze_every", "auto_freeze_threshold", "auto_freeze_max",
    "loss", "metric", "input_shape", "input_column", "val_at_start",
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register the ``train`` flags (every one maps onto a :class:`TrainConfig` field)."""
    add_model_arguments(p, positional=False)
    p.add_argument("--config", help="TrainConfig JSON file; flags given on the command line override its fields")
    p.add_argument("--data", help="dataset: synthetic (default), synthetic:N, imagefolder:PATH, cifar10:PATH, text:PATH.jsonl, "
                   "hf-dataset:PATH, py:FILE.py:FUNC (your (input, target) dataset or (train, val) pair: runs that code)")
    add_task_arguments(p)
    p.add_argument("--val-at-start", action="store_true", default=None,
                   help="validate once before the first step too (the pretrained model's score)")
    p.add_argument("--input-column", help="hf-dataset:PATH data: a column of arrays (audio, features) fed as float tensors")
    p.add_argument("--text-column", help="hf-dataset:PATH data: the column of the text (default text)")
    p.add_argument("--label-column", help="hf-dataset:PATH data: the column of the class (default label)")
    p.add_argument("--image-column", help="hf-dataset:PATH data: the column of the image (default image)")
    p.add_argument("--steps", type=int, help="optimizer steps (default 200 unless --epochs)")
    p.add_argument("--epochs", type=int, help="passes over the dataset (with --steps: whichever ends first)")
    p.add_argument("--batch-size", type=int, help="samples per step, per process (default 32)")
    p.add_argument("--image-size", type=int, help="input side in pixels (default: the weights' crop size, 224)")
    p.add_argument("--seq-len", type=int, help="text models: tokens per sample of the data (default 32 for synthetic "
                   "tokens, 128 for text files), capped at the model's position embeddings")
    p.add_argument("--optimizer", help=f"one of {', '.join(OPTIMIZER_NAMES)} (default adamw)")
    p.add_argument("--lr", type=float, help="base learning rate (default 1e-3); groups get lr x lr_scale")
    p.add_argument("--weight-decay", type=float, help="weight decay (default 0)")
    p.add_argument("--no-decay", choices=("auto", "none"),
                   help="auto: no weight decay for biases, 1-D params and the model's no_weight_decay() names")
    p.add_argument("--momentum", type=float, help="momentum of sgd_momentum (default 0.9)")
    p.add_argument("--scheduler", help=f"learning-rate schedule: {', '.join(SCHEDULERS)} (default constant)")
    p.add_argument("--warmup-steps", type=int, help="steps of linear warm-up (onecycle: the rising phase; default 0)")
    p.add_argument("--val", help="validation dataset spec (its val/test split); default: a held-out split of --data")
    p.add_argument("--val-every", type=int, help="validate every N steps and at the end (default: only at the end with --val)")
    p.add_argument("--val-fraction", type=float, help="share of --data held out for validation without --val (default 0.1)")
    p.add_argument("--device", help="auto (cuda > mps > cpu), cpu, cuda, cuda:N, mps")
    p.add_argument("--amp", choices=AMP_MODES, help="mixed precision (fp16 uses a GradScaler)")
    p.add_argument("--channels-last", action="store_true", default=None, help="channels-last memory format")
    p.add_argument("--compile", nargs="?", const=True, default=None, metavar="BACKEND",
                   help="torch.compile the model (optionally name the backend, default inductor)")
    p.add_argument("--workers", dest="num_workers", type=int, help="DataLoader worker processes (default 0)")
    p.add_argument("--pin-memory", action=argparse.BooleanOptionalAction, default=None,
                   help="pin host batches (default: on for CUDA)")
    p.add_argument("--seed", type=int, help="seed of init, data order and synthetic data (default 0)")
    p.add_argument("--on-nonfinite", choices=NONFINITE_MODES, help="a NaN/inf loss stops the run (default) or skips the step")
    p.add_argument("--threads", dest="torch_threads", type=int, help="torch.set_num_threads for the run")
    p.add_argument("--log-every", type=int, help="report metrics every N steps (default 1)")
    p.add_argument("--metrics", dest="metrics_path", help="write per-step metrics to FILE.jsonl or FILE.csv")
    p.add_argument("--save", dest="save_dir", help="folder for the trainable state, B deltas, plan in force, config, metrics")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the earlier run in the --save folder (it is replaced whole when this run ends)")
    p.add_argument("--tensorboard", dest="tensorboard_dir", metavar="DIR",
                   help="also write every metric to TensorBoard event files in DIR (needs the tensorboard extra)")
    p.add_argument("--strategy", help=f"under torchrun: {' or '.join(STRATEGIES)} (default ddp; fsdp shards "
                   "parameters, gradients and optimizer state over the ranks, see docs/scaling.md)")
    p.add_argument("--fsdp-blocks", metavar="PATTERNS",
                   help="with --strategy fsdp: comma-separated module path patterns sharded as units "
                   "(default: the model's repeated blocks)")
    p.add_argument("--cache-frozen", metavar="|".join(CACHE_MODES),
                   help="keep the frozen front layers' output per sample after the first epoch and run only the "
                   "trainable rest: auto (default: when provably exact, else one line says why), on (also when "
                   "the data is not known to be deterministic), off")
    p.add_argument("--cache-budget", metavar="SIZE",
                   help="memory the frozen-prefix cache may hold, e.g. 512M or 2G (default: a quarter of the free "
                   "device memory or RAM); beyond it rows spill to a file in the --save folder")
    p.add_argument("--auto-freeze", action="store_true", default=None,
                   help="freeze the front blocks whose gradient norm has flattened, while training; the decisions "
                   "are written to auto_freeze.plan.json in the --save folder")
    p.add_argument("--auto-freeze-every", type=int, metavar="N", help="with --auto-freeze: decide every N steps (default: 5 %% of the run's steps, at least 10)")
    p.add_argument("--auto-freeze-threshold", type=float, metavar="X",
                   help="with --auto-freeze: a block has flattened when its mean gradient norm changed by less than "
                   "this share between two windows (default 0.1)")
    p.add_argument("--auto-freeze-max", type=float, metavar="F",
                   help="with --auto-freeze: freeze at most this share of the blocks (default 0.75)")
    p.add_argument("--offline", action="store_true", help="never download pretrained weights")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the result as JSON instead of the summary table")
    p.add_argument("--traceback", action="store_true", help="print the full traceback when a step fails")


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The config a command line describes: ``--config`` first, then the flags given.

    Args:
        args: parsed arguments.

    Returns:
        The validated config.

    Raises:
        ConfigError: an invalid field or config file.
    """
    base = TrainConfig.load(args.config) if getattr(args, "config", None) else TrainConfig()
    changes: dict[str, Any] = {}
    for name in _FIELDS:
        v = getattr(args, name, None)
        if v is not None:
            changes[name] = v
    if getattr(args, "offline", False):
        changes["allow_download"] = False
    return base.replace(**changes)


def preflight(cfg: TrainConfig) -> None:
    """Refuse, before anything is built or allocated, what cannot run: an unknown
    ``torch.compile`` backend, and an image size whose input batch alone outgrows the device.

    Args:
        cfg: the run's config.

    Raises:
        CommandError: the backend is unknown, or one batch of inputs (the sample and the
            batch it is collated into, float32) is larger than the device's memory.
    """
    backend = cfg.compile_backend
    if backend is not None:
        from torch._dynamo import list_backends

        if backend not in set(list_backends(exclude_tags=())) | {"inductor"}:
            common = sorted(set(list_backends()) | {"inductor", "eager", "aot_eager"})
            raise CommandError(f"--compile {backend!r} is not a torch.compile backend; use one of {', '.join(common)}")
    if cfg.image_size is not None and cfg.input_shape is None and not cfg.data.strip().lower().startswith(("text:", "py:")):
        from workbench.core.advisor.activations import device_memory

        need = (cfg.batch_size + 1) * 3 * cfg.image_size**2 * 4
        try:
            mem = device_memory(cfg.device)
        except (RuntimeError, ValueError):  # a device that is not there: setup says so
            return
        if need > mem.available:
            raise CommandError(
                f"--image-size {cfg.image_size} needs {fmt_memory(need)} for one batch of inputs alone "
                f"(batch {cfg.batch_size} x 3 x {cfg.image_size}x{cfg.image_size} float32), more than the "
                f"{fmt_memory(mem.available)} of {mem.what} on {mem.device}; use a smaller --image-size or --batch-size"
            )


def run(args: argparse.Namespace) -> int:
    """Train; print progress and the summary on rank 0.

    Returns:
        0 completed, 1 failed / non-finite loss, 130 interrupted.

    Raises:
        WorkbenchError: bad input (printed by the CLI as one line, exit 2).
    """
    from tqdm import tqdm

    cfg = config_from_args(args)
    preflight(cfg)
    if cfg.save_dir:
        note = check_save_folder(cfg.save_dir, overwrite=bool(getattr(args, "overwrite", False)))
        if note:
            print(f"workbench train: {note}", file=sys.stderr)
    trainer = Trainer(cfg, trust_pickle=bool(getattr(args, "trust_pickle", False)))
    with checkpoint_key_policy(args, "train"):
        trainer.setup()
    main = trainer.is_main
    if main and trainer.materialized_from is not None:
        print(f"workbench train: built on meta and sharded; each rank read only its shards from {trainer.materialized_from}",
              file=sys.stderr)
    if main and trainer.head_note:
        print(f"workbench train: {trainer.head_note}", file=sys.stderr)
    if main and trainer.cache_note:
        print(f"workbench train: {trainer.cache_note}", file=sys.stderr)
    if main and trainer.applied is not None:
        for finding in lint_plan(trainer.plan, trainer.applied.tree, cfg.optimizer):
            print(f"workbench train: {finding.one_line()}", file=sys.stderr)
    bar = tqdm(
        total=trainer.total_steps, unit="step", dynamic_ncols=True, file=sys.stderr,
        disable=not main or args.no_progress or args.json, desc="train",
    )
    stop_requests: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if stop_requests:  # the second Ctrl+C: out now, without verifying or saving this run
            bar.close()
            print("workbench train: aborted; this run is not saved", file=sys.stderr, flush=True)
            sys.stdout.flush()
            os._exit(143 if signum == signal.SIGTERM else 130)
        stop_requests.append(signum)
        trainer.stop()
        if main:
            what = "terminated" if signum == signal.SIGTERM else "interrupted"
            bar.write(f"{what}: stopping after the current step (Ctrl+C again to abort)", file=sys.stderr)

    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, on_signal)
    try:
        for m in trainer.steps():
            bar.update(m.step + 1 - bar.n)
            bar.set_postfix(loss=f"{m.loss:.4f}", step_ms=f"{m.step_time_s * 1e3:.1f}", refresh=False)
            if m.events and main:
                bar.write(f"step {m.step}: {'; '.join(m.events)}", file=sys.stderr)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        bar.close()
    result = trainer.result
    assert result is not None
    if stop_requests and result.status == "stopped":
        result.interrupted = True
    if main:
        if args.json:
            json.dump(result.to_dict(), sys.stdout, indent=1)
            print()
        else:
            print_summary(result)
        if result.status in ("failed", "nonfinite"):
            print(f"workbench train: {result.status}: {result.message}", file=sys.stderr)
            if args.traceback and result.error:
                print(result.error, file=sys.stderr)
    if result.status == "completed":
        return 0
    if result.status == "stopped":
        return 143 if stop_requests and stop_requests[0] == signal.SIGTERM else 130
    return 1


def print_summary(result: RunResult) -> None:
    """Print the final summary table.

    Args:
        result: the run's result.
    """
    s = result.summary
    total = s.get("total_params") or 0
    trainable = s.get("trainable_params") or 0
    rows: list[tuple[str, str]] = [
        ("status", f"{result.status}: {result.message}"),
        ("steps", f"{result.steps} of {s.get('total_steps')} (epoch {s.get('epoch', 0)})"),
        ("device", f"{s.get('device')} x{s.get('world_size', 1)}, batch {s.get('batch_size')}, {_input_text(s)}"),
        ("classes", _classes_text(s)),
        ("trainable", f"{trainable:,} of {total:,} params ({100.0 * trainable / total if total else 0:.1f}%)"),
    ]
    peak = s.get("peak_memory_bytes")
    rows.append(("peak memory", f"{fmt_memory(peak)} ({s.get('memory_source')})" if peak is not None else "n/a"))
    if s.get("peak_rss_growth_bytes") is not None and s.get("memory_source") != "peak RSS growth":
        rows.append(("RSS growth", f"{fmt_memory(s['peak_rss_growth_bytes'])} (process, since the run's setup)"))
    if s.get("peak_rss_bytes"):
        rows.append(("peak RSS", f"{fmt_memory(s['peak_rss_bytes'])} (process resident set, absolute)"))
    med = s.get("median_step_time_s")
    if med:
        rate = s.get("median_samples_per_s") or 0.0
        data = s.get("median_data_time_s") or 0.0
        rows.append(("median step", f"{med * 1e3:.1f} ms ({1.0 / med:.1f} steps/s, {rate:.0f} samples/s; data {data * 1e3:.1f} ms)"))
    loss = s.get("final_loss")
    rows.append(("final loss", f"{loss:.4f}" if isinstance(loss, float) and loss == loss else "n/a"))
    if s.get("start_val_loss") is not None:
        rows.append(("before training", _validation_text(s, prefix="start_")))
    if s.get("val_step") is not None:
        rows.append(("validation", _validation_text(s)))
    if s.get("lr"):
        rows.append(("lr", _lr_text(s)))
    if s.get("plan_version"):
        rows.append(("plan changes", str(s["plan_version"])))
    auto = s.get("auto_freeze")
    if isinstance(auto, dict):
        steps = ", ".join(f"{len(d['blocks'])} at step {d['at_step']}" for d in auto.get("decisions", [])) or "none"
        rows.append(("auto-freeze", f"{auto.get('frozen_blocks', 0)} of {auto.get('blocks', 0)} blocks frozen ({steps})"))
    cache = s.get("frozen_cache")
    if isinstance(cache, dict) and cache.get("cut"):
        rows.append(("cache", cache_line(cache)))
    elif s.get("frozen_cache_note"):
        rows.append(("cache", str(s["frozen_cache_note"]).removeprefix("frozen-prefix cache ")))
    if s.get("nonfinite_skipped"):
        rows.append(("skipped", f"{s['nonfinite_skipped']} steps with a non-finite loss"))
    rows.append(("verify", result.verify.summary() if result.verify is not None else "not run"))
    if result.save_dir:
        rows.append(("saved", result.save_dir))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    if result.verify is not None:  # errors, then what should have trained and did not, by name
        shown = [*result.verify.errors, *(v for v in result.verify.warnings if v.kind.startswith("trainable_"))]
        for v in shown[:10]:
            print(f"{'':<{width}}  {v.severity}: {v.name}: {v.message}")
        if len(shown) > 10:
            print(f"{'':<{width}}  ... and {len(shown) - 10} more (--json lists them all)")


def _input_text(s: dict[str, Any]) -> str:
    """The input size of a run: tokens per sample for text data, the image side, or the sample's shape."""
    shape = s.get("input_shape")
    if not s.get("seq_len") and shape is not None and not (isinstance(shape, list) and len(shape) == 3):
        if isinstance(shape, dict):
            return "input " + ", ".join(f"{k} {'x'.join(map(str, v))}" for k, v in shape.items())
        return "input " + "x".join(str(d) for d in shape)
    if not s.get("seq_len"):
        return f"{s.get('image_size')} px"
    capped = " (the model's limit: its position embeddings)" if s["seq_len"] == s.get("max_positions") else ""
    return f"{s['seq_len']} tokens{capped}"


def _classes_text(s: dict[str, Any]) -> str:
    n = s.get("num_classes")
    heads = s.get("new_heads") or []
    text = str(n) if n else "n/a"
    return text + (f" (new head: {', '.join(heads)})" if heads else "")


def _validation_text(s: dict[str, Any], prefix: str = "") -> str:
    """The validation row of the summary: the words of the app's Runs tab (``workbench.core.runs.text``)."""
    from workbench.core.runs.record import Validation
    from workbench.core.runs.text import validation_text

    v = Validation.from_summary(s, prefix)
    return validation_text(v, detail=not prefix) if v is not None else "loss n/a"


def _lr_text(s: dict[str, Any]) -> str:
    scales = s.get("lr_scales") or [1.0] * len(s["lr"])
    per_group = ", ".join(f"{lr:.3g} (x{scale:g})" for lr, scale in zip(s["lr"], scales, strict=False))
    schedule = s.get("scheduler") or "constant"
    if s.get("warmup_steps"):
        schedule += f", {s['warmup_steps']} warm-up steps"
    return f"{per_group} at the end; {schedule}"
