"""FSDP2 (``--strategy fsdp``): bad input is one line, the block list comes from the model, and
a 2-process gloo job keeps frozen shards bit-identical, trains the rest, refuses plan changes,
verifies across ranks and saves a model the plain library loads."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from tests.fixtures.ranks import run_ranks
from tests.fixtures.torchrun import torchrun
from workbench.core.training.config import ConfigError, TrainConfig
from workbench.core.training.engine import Trainer
from workbench.core.training.fsdp import FsdpError, block_paths, plain_state_dict, resolve_blocks

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed not built")

MODEL = textwrap.dedent(
    '''
    import torch
    from torch import nn


    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(8, 8, 3, padding=1)
            self.bn = nn.BatchNorm2d(8)

        def forward(self, x):
            return torch.relu(self.bn(self.conv(x)))


    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, 8, 3, padding=1)
            self.bn = nn.BatchNorm2d(8)
            self.blocks = nn.Sequential(Block(), Block())
            self.fc = nn.Linear(8, 5)

        def forward(self, x):
            return self.fc(self.blocks(torch.relu(self.bn(self.stem(x)))).mean((2, 3)))


    def tiny(seed):
        torch.manual_seed(seed)
        return Tiny()
    '''
)

WORKER = textwrap.dedent(
    '''
    import json, sys
    from pathlib import Path

    import torch
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.utils.data import TensorDataset

    from tiny_model import tiny
    from workbench.core.plan.rules import FreezePlan
    from workbench.core.training.config import TrainConfig
    from workbench.core.training.engine import Trainer
    from workbench.core.training.fsdp import FsdpError, local

    torch.set_num_threads(1)
    out = Path(sys.argv[1])
    dist.init_process_group("gloo")  # the Trainer joins this group and leaves it open between runs
    rank = dist.get_rank()
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(48, 3, 8, 8, generator=g), torch.randint(0, 5, (48,), generator=g))
    FROZEN = {"rules": [{"select": "*", "frozen": True}, {"select": "blocks.1", "frozen": False, "lr_scale": 0.5},
                        {"select": "fc", "frozen": False}]}
    res = {}


    def full(model):
        return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))


    def cfg(**kw):
        base = dict(steps=4, batch_size=4, lr=0.05, optimizer="adamw", device="cpu", strategy="fsdp")
        base.update(kw)
        return TrainConfig(**base)


    # 1. a plan under FSDP; a live plan change asked at step 2 is refused on every rank
    model = tiny(rank)  # different init per rank: the engine starts every rank from rank 0's weights
    holder, seen = {}, []

    def ask(step):
        if step == 2 and rank == 0:
            holder["t"].request_plan(FreezePlan.from_dict({"rules": [{"select": "*", "frozen": False}]}))

    t = holder["t"] = Trainer(cfg(save_dir=str(out / "run"), val_every=2, val_fraction=0.25), model=model,
                              dataset=ds, plan=FreezePlan.from_dict(FROZEN), step_hook=ask, on_metrics=seen.append)
    r = t.run()
    torch.save(full(model), out / f"end{rank}.pt")
    opt = [p for grp in t.optimizer.param_groups for p in grp["params"]]
    res["plan"] = {
        "status": r.status, "message": r.message, "steps": r.steps, "verify_ok": r.verify.ok,
        "checked": r.verify.checked, "events": {str(m.step): m.events for m in seen if m.events},
        "opt_types": sorted({type(p).__name__ for p in opt}), "opt_all_trainable": all(p.requires_grad for p in opt),
        "opt_numel": sum(p.numel() for p in opt), "trainable": r.summary["trainable_params"],
        "local_fc_rows": local(model.fc.weight).shape[0], "fsdp_units": sorted(n for n, m in model.named_modules()
                                                                          if type(m).__name__.startswith("FSDP")),
        "bn_eval": [model.bn.training, model.blocks[0].bn.training, model.blocks[1].bn.training],
        "val": r.summary["val_step"],
    }

    # 2. stages are refused before anything is sharded: one line
    staged = dict(FROZEN, stages=[{"at_step": 2, "rules": [{"select": "blocks", "frozen": False}]}])
    try:
        Trainer(cfg(), model=tiny(0), dataset=ds, plan=FreezePlan.from_dict(staged)).run()
        res["stages"] = "ran"
    except FsdpError as e:
        res["stages"] = str(e)

    # 3. a frozen shard changed on rank 1 only: every rank's report says so
    model = tiny(0)

    def corrupt(step):
        if step == 1 and rank == 1:
            with torch.no_grad():
                local(model.stem.weight).add_(1.0)

    r = Trainer(cfg(steps=2), model=model, dataset=ds, plan=FreezePlan.from_dict(FROZEN), step_hook=corrupt).run()
    res["corrupt"] = {"ok": r.verify.ok, "errors": [(v.name, v.kind, v.message) for v in r.verify.errors]}

    # 4. A+B under FSDP: full rank on fc, low rank on blocks.1.conv; the save merges W = A + B
    ab = {"rules": [{"select": "*", "frozen": True},
                    {"select": "fc", "frozen": False, "reparam": {"kind": "a_plus_b"}},
                    {"select": "blocks.1.conv", "frozen": False, "reparam": {"kind": "a_plus_b", "rank": 2, "alpha": 4}}]}
    r = Trainer(cfg(save_dir=str(out / "ab")), model=tiny(0), dataset=ds, plan=FreezePlan.from_dict(ab)).run()
    res["ab"] = {"status": r.status, "message": r.message, "verify_ok": r.verify.ok, "checked": r.verify.checked}

    # 5. --amp bf16: FSDP's mixed precision policy
    try:
        r = Trainer(cfg(steps=2, amp="bf16"), model=tiny(0), dataset=ds, plan=FreezePlan.from_dict(FROZEN)).run()
        res["bf16"] = {"status": r.status, "message": r.message, "verify_ok": r.verify.ok}
    except Exception as e:  # recorded, and the test says what failed
        res["bf16"] = {"status": "raised", "message": f"{type(e).__name__}: {e}"}

    # 6. activation checkpointing from the plan inside a sharded block
    ckpt = {"rules": FROZEN["rules"] + [{"select": "blocks.1", "checkpoint": True}]}
    model = tiny(0)
    calls = []
    model.blocks[1].conv.register_forward_hook(lambda *a: calls.append(1))  # recomputed in backward
    r = Trainer(cfg(steps=2), model=model, dataset=ds, plan=FreezePlan.from_dict(ckpt)).run()
    res["checkpoint"] = {"status": r.status, "message": r.message, "verify_ok": r.verify.ok, "calls": len(calls)}
    json.dump(res, open(out / f"rank{rank}.json", "w"))
    dist.barrier()
    dist.destroy_process_group()
    '''
)


def _tiny(tmp_path: Path) -> nn.Module:
    """The worker's model class, imported from the file the job uses."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("tiny_model_test", tmp_path / "tiny_model.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.tiny(0)


# ---------------------------------------------------------------- bad input, block list
def test_fsdp_without_torchrun_is_one_line(monkeypatch: pytest.MonkeyPatch):
    for var in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 2))
    ds = torch.utils.data.TensorDataset(torch.randn(8, 3, 2, 2), torch.randint(0, 2, (8,)))
    trainer = Trainer(TrainConfig(device="cpu", steps=1, batch_size=2, strategy="fsdp"), model=model, dataset=ds)
    with pytest.raises(FsdpError) as e:
        list(trainer.steps())
    assert "torchrun" in str(e.value) and "\n" not in str(e.value)
    assert all(p.requires_grad for p in model.parameters())  # nothing was applied


def test_unknown_strategy_is_one_line():
    with pytest.raises(ConfigError, match="strategy.*'zero3' is not one of ddp, fsdp"):
        TrainConfig(strategy="zero3").validate()
    assert TrainConfig(strategy="FSDP").validate().strategy == "fsdp"
    assert TrainConfig(fsdp_blocks="layer1.*, fc").validate().fsdp_blocks == ["layer1.*", "fc"]
    with pytest.raises(ConfigError, match="fsdp_blocks"):
        TrainConfig(fsdp_blocks=[]).validate()


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--strategy", "fsdp"], "needs torchrun"),
        (["--strategy", "zero"], "'zero' is not one of ddp, fsdp"),
    ],
)
def test_cli_bad_strategy_exits_2_with_one_line(argv: list[str], words: str, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch):
    from workbench.cli import main

    for var in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    code = main(["train", "--model", "resnet18", "--steps", "1", "--image-size", "32", "--batch-size", "2",
                 "--data", "synthetic:4", "--device", "cpu", "--no-progress", *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and words in err and len(err.splitlines()) == 1, err


def test_block_list_comes_from_the_model():
    from torchvision.models import resnet18, vit_b_16

    class Vit(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Linear(4, 4)
            self.blocks = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
            self.head = nn.Linear(4, 2)

    assert block_paths(Vit()) == ["blocks.0", "blocks.1"]
    # no repeated blocks: the top-level children that hold parameters
    assert block_paths(nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Conv2d(2, 2, 1))) == ["0", "2"]
    # residual stages of a ResNet, transformer layers of a ViT
    assert block_paths(resnet18()) == [f"layer{i}.{j}" for i in range(1, 5) for j in range(2)]
    assert block_paths(vit_b_16(image_size=32)) == [f"encoder.layers.encoder_layer_{i}" for i in range(12)]


def test_block_list_from_a_hugging_face_decoder():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(n_layer=3, n_embd=16, n_head=2, vocab_size=50, n_positions=16)
    assert block_paths(transformers.GPT2LMHeadModel(cfg)) == ["transformer.h.0", "transformer.h.1", "transformer.h.2"]


def test_block_patterns_override_deepest_first():
    from torchvision.models import resnet18

    m = resnet18()
    assert resolve_blocks(m, ["layer4", "layer4.?"]) == ["layer4.0", "layer4.1", "layer4"]
    with pytest.raises(FsdpError, match="'nothing.*' matches no module"):
        resolve_blocks(m, ["nothing.*"])


def test_plain_state_dict_merges_a_plus_b():
    from workbench.core.freezing.apply import apply_plan

    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 6), nn.Linear(6, 3))
    plain = {k: v.clone() for k, v in m.state_dict().items()}
    applied = apply_plan(m, {"rules": [{"select": "0", "reparam": {"kind": "a_plus_b"}},
                                       {"select": "1", "reparam": {"kind": "a_plus_b", "rank": 2, "alpha": 4}}]})
    with torch.no_grad():
        for _, p in applied.named_trainable():
            p.add_(0.1)
    x = torch.randn(5, 4)
    want = m(x)
    merged = plain_state_dict(m, m.state_dict())
    fresh = nn.Sequential(nn.Linear(4, 6), nn.Linear(6, 3))
    fresh.load_state_dict(merged)  # strict: the plain names, nothing else
    assert torch.allclose(fresh(x), want, atol=1e-6)
    assert not torch.equal(merged["0.weight"], plain["0.weight"])


# ---------------------------------------------------------------- 2 processes, gloo
@pytest.mark.slow
def test_two_process_gloo_fsdp(tmp_path: Path):
    from safetensors.torch import load_file

    (tmp_path / "tiny_model.py").write_text(MODEL)
    (tmp_path / "worker.py").write_text(WORKER)
    proc = run_ranks(tmp_path / "worker.py", [str(tmp_path)], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r0, r1 = (json.loads((tmp_path / f"rank{i}.json").read_text()) for i in range(2))
    start = _tiny(tmp_path).state_dict()  # rank 0's initial weights
    end0, end1 = (torch.load(tmp_path / f"end{i}.pt") for i in range(2))
    trained = ("blocks.1.", "fc.")
    for name, t0 in start.items():
        assert torch.equal(end0[name], end1[name]), f"{name} differs between the ranks"
        if name.startswith(trained) and "running" not in name and "num_batches" not in name:
            assert not torch.equal(end0[name], t0), f"{name} did not train"
        elif not name.startswith("blocks.1.bn"):  # frozen tensors and eval-BN statistics: bit-identical
            assert torch.equal(end0[name], t0), f"frozen {name} changed"
    for r in (r0, r1):
        p = r["plan"]
        assert p["status"] == "completed" and p["steps"] == 4 and p["verify_ok"], p["message"]
        assert p["checked"]["frozen"] == 8 and p["checked"]["trainable"] == 6 and p["checked"]["bn_stats"] == 6
        assert list(p["events"]) == ["3"] and "refused" in p["events"]["3"][0] and "--strategy ddp" in p["events"]["3"][0]
        # the optimizer holds the trainable shards only: fc and blocks.1 (conv + bn), as DTensors
        assert p["opt_types"] == ["DTensor"] and p["opt_all_trainable"]
        assert p["opt_numel"] == p["trainable"] == (8 * 5 + 5) + (8 * 8 * 9 + 8) + 16
        assert p["fsdp_units"] == ["", "blocks.0", "blocks.1"]
        assert p["bn_eval"] == [False, False, True] and p["val"] == 3  # validated after the last step (0-based 3)
        assert "stage(s)" in r["stages"] and "--strategy ddp" in r["stages"] and "\n" not in r["stages"]
        # rank 1 changed its shard of a frozen tensor: both ranks report it, once
        c = r["corrupt"]
        assert not c["ok"] and [e[:2] for e in c["errors"]] == [["stem.weight", "frozen_changed"]]
        assert "rank 1's shard" in c["errors"][0][2]
        assert r["ab"]["status"] == "completed" and r["ab"]["verify_ok"], r["ab"]["message"]
        assert r["bf16"]["status"] == "completed" and r["bf16"]["verify_ok"], r["bf16"]["message"]
        assert r["checkpoint"]["status"] == "completed" and r["checkpoint"]["verify_ok"], r["checkpoint"]["message"]
        assert r["checkpoint"]["calls"] == 4  # 2 steps: each forward once more in backward
    assert p["local_fc_rows"] in (2, 3) and r0["plan"]["local_fc_rows"] + r1["plan"]["local_fc_rows"] == 5
    # the save: the full model loads into a fresh one; the trainable file as without FSDP
    saved = load_file(str(tmp_path / "run" / "model.safetensors"))
    fresh = _tiny(tmp_path)
    fresh.load_state_dict(saved)
    assert all(torch.equal(saved[k], end0[k]) for k in end0)
    trainable = load_file(str(tmp_path / "run" / "trainable.safetensors"))
    assert sorted(k for k in trainable if "running" not in k and "num_batches" not in k) == sorted(
        k for k in start if k.startswith(trained) and "running" not in k and "num_batches" not in k)
    # A+B: model.safetensors holds W = A + B; deltas.safetensors holds B; A is the start weight
    ab = load_file(str(tmp_path / "ab" / "model.safetensors"))
    deltas = load_file(str(tmp_path / "ab" / "deltas.safetensors"))
    assert sorted(deltas) == ["blocks.1.conv.weight", "fc.bias", "fc.weight"]
    for k, b in deltas.items():
        assert b.abs().sum() > 0 and torch.allclose(ab[k], start[k] + b, atol=1e-6), k
    _tiny(tmp_path).load_state_dict(ab)


FAILING_WORKER = textwrap.dedent(
    '''
    import json, os, sys
    from pathlib import Path

    import torch
    from torch.utils.data import TensorDataset

    from tiny_model import tiny
    from workbench.core.training.config import TrainConfig
    from workbench.core.training.engine import Trainer

    torch.set_num_threads(1)
    out = Path(sys.argv[1])
    rank = int(os.environ["RANK"])
    # rank 1 has less data: the ranks still agree on the steps they run
    n = 48 if rank == 0 else 40
    ds = TensorDataset(torch.randn(n, 3, 8, 8), torch.randint(0, 5, (n,)))


    def hook(step):
        if step == 1 and rank == 1:
            raise RuntimeError("this rank's step fails")


    t = Trainer(TrainConfig(epochs=1, batch_size=4, device="cpu", strategy="fsdp", save_dir=str(out / "run")),
                model=tiny(0), dataset=ds, plan={"rules": [{"select": "*", "frozen": True}, {"select": "fc", "frozen": False}]},
                step_hook=hook)
    r = t.run()
    json.dump({"status": r.status, "message": r.message, "total": t.total_steps, "verify": r.verify is not None},
              open(out / f"rank{rank}.json", "w"))
    sys.exit(0 if r.ok else 1)
    '''
)


@pytest.mark.slow
def test_a_step_failing_on_one_rank_ends_the_job(tmp_path: Path):
    """The failing rank skips the end's collectives and leaves the group; the rank waiting for it
    fails too (or the launcher stops it, as torchrun does): the job ends, nothing hangs, nothing half-gathered is saved."""
    (tmp_path / "tiny_model.py").write_text(MODEL)
    (tmp_path / "worker.py").write_text(FAILING_WORKER)
    proc = run_ranks(tmp_path / "worker.py", [str(tmp_path)], tmp_path)
    assert proc.returncode != 0
    r1 = json.loads((tmp_path / "rank1.json").read_text())
    assert r1["status"] == "failed" and "this rank's step fails" in r1["message"]
    assert "verify and saving skipped" in r1["message"] and not r1["verify"]
    # rank 1's 40 samples make 5 steps of 4 per rank, rank 0's 48 would make 6: both run 5
    assert r1["total"] == 5
    if (tmp_path / "rank0.json").exists():  # else the launcher stopped rank 0 in its collective
        r0 = json.loads((tmp_path / "rank0.json").read_text())
        assert r0["status"] == "failed" and r0["total"] == 5 and "verify and saving skipped" in r0["message"]
    assert not (tmp_path / "run" / "model.safetensors").exists()


@pytest.mark.slow
def test_torchrun_cli_fsdp_saves_a_model_torchvision_loads_and_resumes_from_it(tmp_path: Path):
    from safetensors.torch import load_file
    from torchvision.models import resnet18

    from workbench.core.plan.rules import FreezePlan, Rule

    plan = tmp_path / "plan.json"
    FreezePlan([Rule("*", frozen=True), Rule("layer4", frozen=False), Rule("fc", frozen=False)]).save(plan)
    common = ["-m", "workbench", "train", "--model", "resnet18", "--num-classes", "10", "--image-size", "32",
              "--batch-size", "2", "--data", "synthetic:16", "--plan", str(plan), "--device", "cpu",
              "--strategy", "fsdp", "--no-progress"]
    proc = torchrun([*common, "--steps", "2", "--save", str(tmp_path / "run")], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("verify OK") == 1 and "x2" in proc.stdout  # rank 0 reports, once
    saved = load_file(str(tmp_path / "run" / "model.safetensors"))
    fresh = resnet18(num_classes=10)
    fresh.load_state_dict(saved)  # strict: the plain torchvision names, unsharded shapes
    trainable = load_file(str(tmp_path / "run" / "trainable.safetensors"))
    assert trainable and all(k.startswith(("layer4.", "fc.")) for k in trainable)
    assert all(torch.equal(trainable[k], saved[k]) for k in trainable)
    # resume: the saved model is the checkpoint of the next run (lr 0: it must come back bit for bit)
    proc = torchrun([*common, "--steps", "1", "--lr", "0", "--checkpoint", str(tmp_path / "run" / "model.safetensors"),
                     "--save", str(tmp_path / "again")], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    again = load_file(str(tmp_path / "again" / "model.safetensors"))
    assert again.keys() == saved.keys()
    assert all(torch.equal(again[k], saved[k]) for k in saved if "running" not in k and "num_batches" not in k)


@pytest.mark.parametrize(
    "rule, amp, meta, words",
    [
        ({"select": "0", "frozen": False, "partial": {"param": "weight", "dim": 0, "trainable": [[0, 2]]}}, "off", False,
         "sub-tensor freezing ('partial' on '0')"),
        ({"select": "0", "reparam": {"kind": "a_plus_b", "mode": "fused"}}, "off", False, "mode 'fused' (on '0')"),
        ({"select": "0", "reparam": {"kind": "a_plus_b", "rank": 2}}, "off", True, "built on the meta device"),
        ({"select": "0"}, "fp16", False, "--amp fp16 is not supported with --strategy fsdp"),
    ],
)
def test_what_fsdp_cannot_run_is_refused_in_one_line(rule: dict, amp: str, meta: bool, words: str):
    from workbench.core.freezing.apply import apply_plan
    from workbench.core.plan.rules import FreezePlan
    from workbench.core.training.fsdp import check_plan_supported

    model = nn.Sequential(nn.Linear(4, 6), nn.Linear(6, 3))
    plan = FreezePlan.from_dict({"rules": [rule]})
    applied = apply_plan(model, plan)
    with pytest.raises(FsdpError) as e:
        check_plan_supported(plan, applied, amp, meta=meta)
    assert words in str(e.value) and "\n" not in str(e.value)
    check_plan_supported(FreezePlan.from_dict({"rules": [{"select": "0", "frozen": True}]}), apply_plan(
        nn.Sequential(nn.Linear(4, 6)), {"rules": [{"select": "0", "frozen": True}]}), "bf16")  # fine


def test_block_list_of_timm_models():
    timm = pytest.importorskip("timm")
    vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, depth=3)
    assert block_paths(vit) == ["blocks.0", "blocks.1", "blocks.2"]
    convnext = timm.create_model("convnext_atto", pretrained=False)
    # the outermost list of repeated blocks wins: the 4 stages (finer units: --fsdp-blocks 'stages.*.blocks.*')
    assert block_paths(convnext) == ["stages.0", "stages.1", "stages.2", "stages.3"]
    assert resolve_blocks(convnext, ["stages.*.blocks.*"])[:2] == ["stages.0.blocks.0", "stages.0.blocks.1"]
