"""FreezePlanCallback with the Trainer's DDP (2 gloo processes on CPU, started as torchrun starts them): after a
stage unfreezes a layer, and after a second one that unfreezes another and freezes part of the
first, the replicas stay identical (and drift apart without the rebuild)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch

from tests.fixtures.ranks import run_ranks

pytest.importorskip("transformers")
pytest.importorskip("accelerate")
pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed not built")

WORKER = textwrap.dedent(
    '''
    import hashlib, json, os, sys
    from pathlib import Path

    import torch
    from transformers import Trainer

    sys.path.insert(0, sys.argv[3])
    from tests.integrations.hf_tiny import TokenData, args, tiny_bert
    import workbench.integrations.transformers as wt
    from workbench.core.training.distributed import ddp_parameter_count

    torch.set_num_threads(1)
    out = Path(sys.argv[1])
    if sys.argv[2] == "no-rebuild":
        wt.rebuild_ddp = lambda ddp: False
    plan = {
        "rules": [{"select": "*", "frozen": True}, {"select": "classifier", "frozen": False}],
        "stages": [{"at_step": 2, "rules": [{"select": "bert.encoder.layer.1", "frozen": False}]},
                   {"at_step": 4, "rules": [{"select": "bert.encoder.layer.0", "frozen": False, "lr_scale": 0.5},
                                            {"select": "bert.encoder.layer.1.attention", "frozen": True}]}],
    }
    model = tiny_bert()
    trainer = Trainer(model=model, args=args(str(out / "run"), max_steps=6, max_grad_norm=1.0),
                      train_dataset=TokenData(n=40), callbacks=[wt.FreezePlanCallback(plan)])
    trainer.train()
    digest = {n: hashlib.sha256(p.detach().numpy().tobytes()).hexdigest() for n, p in model.named_parameters()}
    ddp = trainer.model_wrapped
    (out / f"rank{os.environ['RANK']}.json").write_text(json.dumps({
        "params": digest,
        "ddp": type(ddp).__name__,
        "ddp_params": ddp_parameter_count(ddp),
        "trainable": sum(1 for p in model.parameters() if p.requires_grad),
        "world": torch.distributed.get_world_size(),
    }))
    '''
)


def _run(tmp_path: Path, mode: str) -> tuple[dict, dict]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    out = tmp_path / mode
    out.mkdir()
    root = str(Path(__file__).resolve().parents[2])
    proc = run_ranks(script, [str(out), mode, root], tmp_path)
    assert proc.returncode == 0, proc.stdout[-4000:]
    return json.loads((out / "rank0.json").read_text()), json.loads((out / "rank1.json").read_text())


def test_replicas_identical_after_a_stage_unfreezes(tmp_path):
    r0, r1 = _run(tmp_path, "rebuild")
    assert r0["world"] == 2 and r0["ddp"] == "DistributedDataParallel"
    assert r0["params"] == r1["params"]
    assert r0["ddp_params"] == r0["trainable"] == r1["ddp_params"]  # DDP reduces exactly what trains now
    # without rebuilding the wrapper the unfrozen layer trains on each rank's own gradients
    n0, n1 = _run(tmp_path, "no-rebuild")
    assert n0["ddp_params"] != n0["trainable"]
    differ = {n for n in n0["params"] if n0["params"][n] != n1["params"][n]}
    assert differ and all(n.startswith(("bert.encoder.layer.", "classifier.")) for n in differ)
