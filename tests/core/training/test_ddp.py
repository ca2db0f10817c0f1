"""DDP on CPU: 2 gloo processes, through the Trainer (ranks forked from a preloaded server) and
through the CLI (launched by torchrun)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch

from tests.fixtures.ranks import run_ranks
from tests.fixtures.torchrun import torchrun as _torchrun
from workbench.core.plan.rules import FreezePlan, Rule
from workbench.core.training.distributed import DistInfo, env_info
from workbench.core.training.metrics import load_metrics

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed not built")

WORKER = textwrap.dedent(
    '''
    import json, os, sys
    from pathlib import Path

    import torch
    from torch import nn
    from torch.utils.data import TensorDataset

    from workbench.core.training.config import TrainConfig
    from workbench.core.training.distributed import ddp_parameter_count
    from workbench.core.training.engine import Trainer
    from workbench.core.plan.rules import FreezePlan

    torch.set_num_threads(1)
    out = Path(sys.argv[1])
    rank = int(os.environ["RANK"])


    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)
            self.bn = nn.BatchNorm2d(8)
            self.block = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8))
            self.fc = nn.Linear(8, 4)

        def forward(self, x):
            x = torch.relu(self.bn(self.conv(x)))
            return self.fc(torch.relu(self.block(x)).mean((2, 3)))


    torch.manual_seed(rank)  # different init per rank: DDP must broadcast rank 0's weights
    model = Tiny()
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(64, 3, 8, 8, generator=g), torch.randint(0, 4, (64,), generator=g))
    start = FreezePlan.from_dict({"rules": [{"select": "*", "frozen": True}, {"select": "fc", "frozen": False}]})
    new = FreezePlan.from_dict({"rules": [{"select": "*", "frozen": True}, {"select": "fc", "frozen": False},
                                          {"select": "block", "frozen": False, "lr_scale": 0.5}]})
    holder, counts, bn_modes, seen = {}, [], [], []


    def hook(step):
        t = holder["t"]
        counts.append(ddp_parameter_count(t.ddp))
        bn_modes.append((t.ddp.training, t.model.bn.training))
        if step == 0:
            holder["fc0"] = t.model.fc.weight.detach().clone()
        if step == 2 and rank == 0:
            t.request_plan(new)  # only rank 0 is asked; every rank must apply it at step 3


    cfg = TrainConfig(steps=6, batch_size=4, lr=0.05, optimizer="sgd_momentum", device="cpu",
                      metrics_path=str(out / "metrics.jsonl"))
    t = Trainer(cfg, model=model, dataset=ds, plan=start, step_hook=hook, on_metrics=seen.append)
    holder["t"] = t
    r = t.run()
    torch.save({n: p.detach() for n, p in model.named_parameters()}, out / f"rank{rank}.pt")
    json.dump({
        "status": r.status, "message": r.message, "steps": r.steps, "world": r.summary["world_size"],
        "counts": counts, "bn_modes": bn_modes, "verify_ok": r.verify.ok, "violations": [v.__dict__ for v in r.verify.violations], "is_main": t.is_main,
        "events": {str(m.step): m.events for m in seen if m.events},
        "losses": [m.loss for m in seen], "trainable": [m.trainable_params for m in seen],
        "fc_changed": not torch.equal(holder["fc0"], model.fc.weight.detach()),
        "bn_frozen_stats_moved": bool(t.model.bn.num_batches_tracked.item()),
    }, open(out / f"rank{rank}.json", "w"))
    '''
)


def test_env_info_defaults_to_one_process(monkeypatch: pytest.MonkeyPatch):
    for var in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    assert env_info() == DistInfo(1, 0, 0) and not env_info().distributed
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert env_info() == DistInfo(4, 3, 1) and not env_info().is_main


def test_two_process_gloo_ddp_with_a_live_plan_change(tmp_path: Path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    proc = run_ranks(script, [str(tmp_path)], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r0, r1 = (json.loads((tmp_path / f"rank{i}.json").read_text()) for i in range(2))
    for r in (r0, r1):
        assert r["status"] == "completed" and r["steps"] == 6 and r["world"] == 2, r["message"]
        # DDP registers only trainable params: fc (2 tensors), then fc + block (6) after the change
        assert r["counts"] == [2, 2, 2, 6, 6, 6]
        assert list(r["events"]) == ["3"] and "unfroze block" in r["events"]["3"][0]
        assert r["trainable"] == [36] * 3 + [36 + (8 * 8 * 9 + 8) + 16] * 3
        # the BN eval lock survives DDP's train(): frozen BN never ran in train mode
        assert all(ddp_training and not bn_training for ddp_training, bn_training in r["bn_modes"])
        assert r["verify_ok"] and not r["bn_frozen_stats_moved"] and r["fc_changed"]
    assert r0["is_main"] and not r1["is_main"]
    assert r0["losses"][0] != r1["losses"][0]  # each rank trains on its own shard
    w0, w1 = (torch.load(tmp_path / f"rank{i}.pt") for i in range(2))
    assert w0.keys() == w1.keys()
    for name in w0:  # ranks started from different inits; DDP keeps them bit-identical
        assert torch.equal(w0[name], w1[name]), name
    # only rank 0 wrote the metrics file (and no temporary file of rank 1 is left over)
    assert len(load_metrics(tmp_path / "metrics.jsonl")) == 6
    # (the OS lock's empty file may stay: the lock itself ends with its process)
    assert [p.name for p in tmp_path.glob(".metrics.jsonl.*")] in ([], [".metrics.jsonl.lock"])


def test_torchrun_cli(tmp_path: Path):
    """One torchrun job through the CLI: plan, schedule, validation, metrics and save."""
    plan = tmp_path / "plan.json"
    FreezePlan([Rule("*", frozen=True), Rule("fc", frozen=False)]).save(plan)
    proc = _torchrun(
        ["-m", "workbench", "train", "--model", "resnet18", "--num-classes", "10", "--image-size", "32",
         "--batch-size", "2", "--steps", "2", "--data", "synthetic:20", "--plan", str(plan), "--device", "cpu",
         "--scheduler", "cosine", "--val-every", "1", "--val-fraction", "0.2",
         "--metrics", str(tmp_path / "m.jsonl"), "--save", str(tmp_path / "run"), "--no-progress"],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("verify OK") == 1  # the summary is printed by rank 0 only
    assert "x2" in proc.stdout  # world size in the device line
    metrics = load_metrics(tmp_path / "m.jsonl")
    assert [m.trainable_params for m in metrics] == [5130, 5130]
    assert all(m.val_loss is not None and m.val_acc is not None for m in metrics)
    assert metrics[0].lr[0] == pytest.approx(1e-3) and metrics[1].lr[0] == pytest.approx(0.5e-3)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())["summary"]  # the RunResult, saved
    assert summary["world_size"] == 2 and summary["val_step"] == 1 and summary["val_samples"] == 4
    assert (tmp_path / "run" / "trainable.safetensors").exists()
    assert FreezePlan.load(tmp_path / "run" / "plan.json").to_dict()["rules"] == FreezePlan.load(plan).to_dict()["rules"]
