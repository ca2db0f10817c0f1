"""DDP against FSDP2 for the same plan: tensor bytes each rank holds, and step time.

Two CPU processes (``torchrun --nproc_per_node 2``, gloo) train the same model with the same
plan through the workbench's :class:`~workbench.core.training.engine.Trainer`, once with
``strategy="ddp"`` and once with ``strategy="fsdp"``. After the last step each rank counts the
bytes of the storages behind its parameters, its gradients and its optimizer state (the local
shards under FSDP; storage bytes, not the process's resident set, which mixes allocator caches
and libraries). DDP's gradient buckets (one more copy of the trainable gradients) are not
counted. Expected: FSDP's bytes about 1/world size of DDP's; its step time higher on CPU (every
unit is gathered in forward and again in backward, and gradients are reduce-scattered).

Models: torchvision ``resnet50`` (frozen: stem, layer1, layer2) and ``vit_b_16`` at a small
image size (frozen: patch embedding, class token, position embedding, encoder layers 0-5).
AdamW, synthetic data. It asserts nothing.

Run::

    python tests/benchmarks/bench_fsdp.py                          # both models, 3 steps
    python tests/benchmarks/bench_fsdp.py --models resnet50 --steps 5 --json fsdp.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

MODELS = ("resnet50", "vit_b_16")
STRATEGIES = ("ddp", "fsdp")
PLANS: dict[str, dict[str, Any]] = {
    "resnet50": {"rules": [{"select": "*", "frozen": True}, {"select": "layer3", "frozen": False},
                           {"select": "layer4", "frozen": False}, {"select": "fc", "frozen": False}]},
    "vit_b_16": {"rules": [{"select": "*", "frozen": True}]
                 + [{"select": f"encoder.layers.encoder_layer_{i}", "frozen": False} for i in range(6, 12)]
                 + [{"select": "encoder.ln", "frozen": False}, {"select": "heads", "frozen": False}]},
}


def _build(name: str, image_size: int) -> Any:
    import torchvision

    if name == "vit_b_16":
        return torchvision.models.vit_b_16(image_size=image_size, num_classes=10)
    return getattr(torchvision.models, name)(num_classes=10)


def worker(model_name: str, strategy: str, steps: int, batch: int, image_size: int, out: Path) -> None:
    """One rank of one job: train, then count this rank's bytes (run by torchrun)."""
    import torch
    import torch.distributed as dist

    from workbench.core.advisor.tracking import storage_bytes
    from workbench.core.training.config import TrainConfig
    from workbench.core.training.engine import Trainer
    from workbench.core.training.fsdp import local

    torch.set_num_threads(1)
    dist.init_process_group("gloo")  # the Trainer joins it and leaves it open for the counting
    rank = dist.get_rank()
    model = _build(model_name, image_size)
    cfg = TrainConfig(steps=steps + 1, batch_size=batch, image_size=image_size, data=f"synthetic:{8 * batch}",
                      optimizer="adamw", device="cpu", strategy=strategy, log_every=1)
    trainer = Trainer(cfg, model=model, plan=PLANS[model_name])
    times: list[float] = []
    for m in trainer.steps():
        if m.step > 0:  # the first step builds the optimizer state: not timed
            times.append(m.step_time_s)
    r = trainer.result
    assert r is not None and r.ok, r.message if r is not None else "no result"
    assert trainer.optimizer is not None
    params = [local(p.detach()) for p in model.parameters()]
    grads = [local(p.grad) for p in model.parameters() if p.grad is not None]
    state = [local(v) for s in trainer.optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    row = {
        "param_bytes": storage_bytes(params),
        "grad_bytes": storage_bytes(grads),
        "optimizer_bytes": storage_bytes(state),
        "step_s": sorted(times)[len(times) // 2],
        "trainable": r.summary["trainable_params"],
        "total": r.summary["total_params"],
        "verify_ok": bool(r.verify is not None and r.verify.ok),
    }
    (out / f"{model_name}-{strategy}-rank{rank}.json").write_text(json.dumps(row))
    dist.barrier()
    dist.destroy_process_group()


def _job(model_name: str, strategy: str, a: argparse.Namespace, out: Path) -> list[dict[str, Any]]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    for var in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        env.pop(var, None)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", __file__,
           "--worker", model_name, strategy, "--steps", str(a.steps), "--batch", str(a.batch),
           "--image-size", str(a.image_size), "--out", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{model_name} {strategy} failed:\n{proc.stderr[-3000:]}")
    return [json.loads((out / f"{model_name}-{strategy}-rank{r}.json").read_text()) for r in range(2)]


def _mib(n: float) -> str:
    return f"{n / 2**20:8.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated: {', '.join(MODELS)}")
    ap.add_argument("--steps", type=int, default=3, help="timed steps (after one untimed step)")
    ap.add_argument("--batch", type=int, default=2, help="images per step per rank")
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--json", help="write the results to this file")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)  # MODEL STRATEGY: one rank under torchrun
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        worker(a.worker[0], a.worker[1], a.steps, a.batch, a.image_size, Path(a.out))
        return 0
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in [m.strip() for m in a.models.split(",") if m.strip()]:
            results[name] = {s: _job(name, s, a, Path(tmp)) for s in STRATEGIES}
    print(f"DDP vs FSDP2, 2 CPU processes (gloo), AdamW, batch {a.batch}/rank, {a.image_size} px, "
          f"median of {a.steps} steps; MiB per rank (rank 0 / rank 1)")
    for name, by in results.items():
        t = by["ddp"][0]
        print(f"{name}: {t['trainable']:,} of {t['total']:,} parameters train")
        for s in STRATEGIES:
            for rank, r in enumerate(by[s]):
                total = r["param_bytes"] + r["grad_bytes"] + r["optimizer_bytes"]
                print(f"  {s:<4} rank {rank}: params {_mib(r['param_bytes'])}  grads {_mib(r['grad_bytes'])}  "
                      f"optimizer {_mib(r['optimizer_bytes'])}  total {_mib(total)}  step {r['step_s'] * 1e3:7.1f} ms"
                      f"  verify {'OK' if r['verify_ok'] else 'FAILED'}")
        d = [sum(r[k] for k in ("param_bytes", "grad_bytes", "optimizer_bytes")) for r in by["ddp"]]
        f = [sum(r[k] for k in ("param_bytes", "grad_bytes", "optimizer_bytes")) for r in by["fsdp"]]
        ds, fs = max(r["step_s"] for r in by["ddp"]), max(r["step_s"] for r in by["fsdp"])
        print(f"  fsdp/ddp: bytes per rank x{max(f) / max(d):.2f} (params x{by['fsdp'][0]['param_bytes'] / by['ddp'][0]['param_bytes']:.2f}, "
              f"grads x{by['fsdp'][0]['grad_bytes'] / max(by['ddp'][0]['grad_bytes'], 1):.2f}, "
              f"optimizer x{by['fsdp'][0]['optimizer_bytes'] / max(by['ddp'][0]['optimizer_bytes'], 1):.2f}), "
              f"step time x{fs / ds:.2f}")
    if a.json:
        from workbench.core.atomic import atomic_write

        atomic_write(a.json, json.dumps({"args": vars(a), "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
