"""FreezePlanCallback against real PyTorch Lightning: apply, BN eval, stages, resume."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

L = pytest.importorskip("lightning")

from tests.fixtures.ranks import run_ranks
from workbench.core.checks import doctor
from workbench.core.plan.rules import FreezePlan, PlanError
from workbench.integrations.lightning import FreezePlanCallback, sync_param_groups

pytestmark = [
    # Lightning notes the BatchNorm modules the plan keeps in eval: that is the point
    pytest.mark.filterwarnings(r"ignore:Found \d+ module\(s\) in eval mode"),
    pytest.mark.filterwarnings("ignore:Be aware that when using `ckpt_path`"),
    pytest.mark.filterwarnings("ignore:You're resuming from a checkpoint that ended before the epoch ended"),
    pytest.mark.filterwarnings("ignore:You defined a `validation_step` but have no `val_dataloader`"),
    pytest.mark.filterwarnings("ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated"),
]

PLAN = {
    "rules": [{"select": "*", "frozen": True}, {"select": "head", "frozen": False}],
    "stages": [{"at_step": 3, "rules": [{"select": "features.3", "frozen": False, "lr_scale": 0.1}]}],
}


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
            nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.pool(self.features(x)).flatten(1))


class Lit(L.LightningModule):
    def __init__(self, freeze) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.model = Net()
        self.freeze = [freeze]  # a list: not registered as a submodule or hyperparameter
        self.bn_training: list[tuple[bool, bool]] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.bn_training.append((self.model.features[1].training, self.model.features[4].training))
        return nn.functional.cross_entropy(self.model(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.model(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.freeze[0].param_groups(lr=1e-2, weight_decay=0.01))


def _loader():
    g = torch.Generator().manual_seed(0)
    ds = torch.utils.data.TensorDataset(torch.randn(16, 3, 8, 8, generator=g), torch.randint(0, 4, (16,), generator=g))
    return torch.utils.data.DataLoader(ds, batch_size=4)


def _trainer(tmp_path: Path, **kw):
    opts = {
        "accelerator": "cpu", "devices": 1, "logger": False, "enable_progress_bar": False, "enable_model_summary": False,
        "enable_checkpointing": False, "default_root_dir": str(tmp_path), "limit_val_batches": 1, "num_sanity_val_steps": 1,
    }
    opts.update(kw)
    return L.Trainer(**opts)


def _group_names(opt):
    return [list(g["param_names"]) for g in opt.param_groups]


def test_fit_applies_plan_keeps_bn_eval_and_runs_stages(tmp_path):
    cb = FreezePlanCallback(PLAN)
    lit = Lit(cb)
    bn = lit.model.features[1]
    stats0 = bn.running_mean.clone()
    w0 = lit.model.features[0].weight.detach().clone()
    w3 = lit.model.features[3].weight.detach().clone()
    trainer = _trainer(tmp_path, max_epochs=2, callbacks=[cb])
    trainer.fit(lit, _loader(), _loader())
    assert cb.module == "model"  # found by fingerprint-free matching of the plan's selectors
    # frozen BatchNorm stayed in eval through Lightning's train/eval switches (sanity check, validation)
    assert len(lit.bn_training) == 8 and not any(a or b for a, b in lit.bn_training)
    assert torch.equal(bn.running_mean, stats0)
    assert torch.equal(lit.model.features[0].weight, w0)
    assert not torch.equal(lit.model.features[3].weight, w3)  # unfrozen by the stage at step 3
    opt = trainer.optimizers[0]
    assert _group_names(opt) == [["head.weight", "head.bias"], ["features.3.weight", "features.3.bias"]]
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([1e-2, 1e-3])
    assert opt.state[lit.model.features[3].weight]["step"] == 5  # steps 3..7
    errors = [f for f in doctor.check(lit.model, opt, cb.applied.plan) if f.severity != "info"]
    assert errors == []


def test_resume_restores_stage_and_optimizer_layout(tmp_path):
    ckdir = tmp_path / "ck"
    cb = FreezePlanCallback(PLAN)
    lit = Lit(cb)
    ck = L.pytorch.callbacks.ModelCheckpoint(dirpath=str(ckdir), every_n_train_steps=5, save_top_k=-1)
    _trainer(tmp_path, max_steps=5, enable_checkpointing=True, callbacks=[cb, ck]).fit(lit, _loader(), _loader())
    files = sorted(ckdir.glob("*.ckpt"))
    assert files, "no checkpoint written"
    saved = torch.load(files[-1], map_location="cpu", weights_only=False)
    head_exp_avg = saved["optimizer_states"][0]["state"][0]["exp_avg"]

    cb2 = FreezePlanCallback(PLAN)
    lit2 = Lit(cb2)
    trainer2 = _trainer(tmp_path, max_steps=8, enable_checkpointing=True,
                        callbacks=[cb2, L.pytorch.callbacks.ModelCheckpoint(dirpath=str(tmp_path / "ck2"))])
    seen: dict[str, object] = {}

    class Probe(L.pytorch.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if "groups" not in seen:
                opt = trainer.optimizers[0]
                seen["groups"] = _group_names(opt)
                seen["exp_avg"] = opt.state[pl_module.model.head.weight]["exp_avg"].clone()
                seen["trainable3"] = pl_module.model.features[3].weight.requires_grad

    trainer2.callbacks.append(Probe())
    trainer2.fit(lit2, _loader(), _loader(), ckpt_path=str(files[-1]))
    # the stage reached before the checkpoint is in force again, with the same group layout and state
    assert seen["trainable3"] is True
    assert seen["groups"] == [["head.weight", "head.bias"], ["features.3.weight", "features.3.bias"]]
    assert torch.equal(seen["exp_avg"], head_exp_avg)
    opt = trainer2.optimizers[0]
    assert opt.state[lit2.model.head.weight]["step"] == 8
    assert len(lit2.bn_training) == 3 and not any(a or b for a, b in lit2.bn_training)


def test_resume_with_another_plan_is_refused(tmp_path):
    cb = FreezePlanCallback(PLAN)
    ck = L.pytorch.callbacks.ModelCheckpoint(dirpath=str(tmp_path / "ck"), every_n_train_steps=2, save_top_k=-1)
    _trainer(tmp_path, max_steps=2, enable_checkpointing=True, callbacks=[cb, ck]).fit(Lit(cb), _loader())
    path = sorted((tmp_path / "ck").glob("*.ckpt"))[-1]
    other = FreezePlanCallback({"rules": [{"select": "*", "frozen": True}, {"select": "features", "frozen": False}]})
    with pytest.raises(PlanError, match="different freeze plan"):
        _trainer(tmp_path, max_steps=4, callbacks=[other]).fit(Lit(other), _loader(), ckpt_path=str(path))


def test_explicit_module_and_bad_module(tmp_path):
    cb = FreezePlanCallback(FreezePlan.from_dict(PLAN), module="nope")
    with pytest.raises(PlanError, match="no submodule 'nope'"):
        _trainer(tmp_path, max_steps=1, callbacks=[cb]).fit(Lit(cb), _loader())


def test_sync_param_groups_without_lightning():
    net = Net()
    from workbench.core.freezing.apply import apply_plan

    applied = apply_plan(net, FreezePlan.from_dict(PLAN).at(0))
    opt = torch.optim.SGD(applied.param_groups(lr=0.1, weight_decay=0.0), lr=0.1)
    applied.update(FreezePlan.from_dict(PLAN).at(5))
    change = sync_param_groups(opt, applied)
    assert change["added"] == ["features.3.weight", "features.3.bias"] and not change["removed"]
    assert opt.param_groups[1]["lr"] == pytest.approx(0.01) and opt.param_groups[1]["lr_scale"] == 0.1
    applied.update(FreezePlan.from_dict(PLAN).at(0))  # frozen again: leaves its group and its state
    change = sync_param_groups(opt, applied)
    assert change["removed"] == ["features.3.weight", "features.3.bias"]
    assert opt.param_groups[1]["params"] == []


def test_import_without_lightning_is_lazy(monkeypatch):
    """The module imports without Lightning; the callback class then says how to get it."""
    import workbench.integrations.lightning as mod

    for name in [m for m in sys.modules if m == "lightning" or m.startswith(("lightning.", "pytorch_lightning"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "lightning", None)
    monkeypatch.setitem(sys.modules, "pytorch_lightning", None)
    fresh = importlib.reload(mod)
    assert fresh.sync_param_groups is not None
    with pytest.raises(fresh.LightningMissingError, match="pip install lightning"):
        fresh.FreezePlanCallback  # noqa: B018
    monkeypatch.undo()
    importlib.reload(mod)


DDP_WORKER = '''
import json, os, sys, warnings
from pathlib import Path

import lightning as L
import torch
from torch import nn

from workbench.core.training.distributed import ddp_parameter_count
from workbench.integrations.lightning import FreezePlanCallback

warnings.filterwarnings("ignore")
torch.set_num_threads(1)
out = Path(sys.argv[1])
stage = sys.argv[2] == "stage"
rank = int(os.environ["RANK"])


class Lit(L.LightningModule):
    def __init__(self, freeze):
        super().__init__()
        torch.manual_seed(rank)  # different init per rank: DDP starts every rank from rank 0's weights
        self.backbone = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh())
        self.head = nn.Linear(16, 3)
        self.freeze = [freeze]
        self.wrapped = []

    def training_step(self, batch, batch_idx):
        self.wrapped.append(ddp_parameter_count(self.trainer.strategy.model))
        x, y = batch
        return nn.functional.cross_entropy(self.head(self.backbone(x)), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.freeze[0].param_groups(lr=0.5), lr=0.5)


plan = {"rules": [{"select": "*", "frozen": True}, {"select": "head", "frozen": False}]}
if stage:
    plan["stages"] = [
        {"at_step": 2, "rules": [{"select": "backbone", "frozen": False}]},
        {"at_step": 4, "rules": [{"select": "backbone.0", "frozen": True}]},
    ]
cb = FreezePlanCallback(plan)
lit = Lit(cb)
g = torch.Generator().manual_seed(0)
ds = torch.utils.data.TensorDataset(torch.randn(96, 6, generator=g), torch.randint(0, 3, (96,), generator=g))
trainer = L.Trainer(
    accelerator="cpu", devices=2, strategy="ddp", max_steps=6, logger=False, enable_progress_bar=False,
    enable_model_summary=False, enable_checkpointing=False, default_root_dir=str(out), callbacks=[cb],
)
backbone0 = {n: p.detach().clone() for n, p in lit.backbone.named_parameters()}
trainer.fit(lit, torch.utils.data.DataLoader(ds, batch_size=4))
torch.save({n: p.detach() for n, p in lit.named_parameters()}, out / f"rank{rank}.pt")
changed = any(not torch.equal(backbone0[n], p) for n, p in lit.backbone.named_parameters())
json.dump({"steps": trainer.global_step, "wrapped": lit.wrapped, "backbone_changed": changed},
          open(out / f"rank{rank}.json", "w"))
'''


@pytest.mark.slow
@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed not built")
def test_ddp_stage_keeps_ranks_identical(tmp_path):
    """Stages that unfreeze the backbone, then freeze part of it again, under 2-process gloo DDP.

    The replicas stay bit-identical (without a new DDP wrapper the backbone trained on each rank's
    own gradients), and freezing again does not leave DDP waiting for gradients that never come.
    """
    script = tmp_path / "worker.py"
    script.write_text(DDP_WORKER)
    proc = run_ranks(script, [str(tmp_path), "stage"], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = [json.loads((tmp_path / f"rank{i}.json").read_text()) for i in range(2)]
    w0, w1 = (torch.load(tmp_path / f"rank{i}.pt") for i in range(2))
    drift = {n: (w0[n] - w1[n]).abs().max().item() for n in w0}
    assert all(d == 0 for d in drift.values()), f"replicas drifted apart: {drift}"
    for r in runs:
        assert r["steps"] == 6 and r["backbone_changed"]
        # the DDP wrapper the training step runs through reduces what trains: head (2 tensors),
        # head + backbone (6) from step 2, head + backbone.2 (4) from step 4
        assert r["wrapped"] == [2, 2, 6, 6, 4, 4]


@pytest.fixture
def one_process_group(tmp_path):
    """A 1-process gloo group, so DistributedDataParallel can be built in this process."""
    dist = torch.distributed
    if not dist.is_available() or dist.is_initialized():
        pytest.skip("needs torch.distributed and no process group already running")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_rewrap_ddp_builds_a_wrapper_for_what_trains_now(one_process_group):
    from workbench.core.training.distributed import ddp_parameter_count
    from workbench.integrations.lightning import rewrap_ddp

    class Strategy:  # the two members of Lightning's DDPStrategy that rewrap_ddp uses
        def __init__(self, module):
            self.lightning_module = module
            self.model = module

        def configure_ddp(self):
            self.model = nn.parallel.DistributedDataParallel(self.model)

    net = Net()
    net.features.requires_grad_(False)
    strategy = Strategy(net)
    assert rewrap_ddp(strategy) is False  # not running in DDP: nothing to do
    strategy.configure_ddp()
    first = strategy.model
    first.eval()
    assert ddp_parameter_count(first) == 2
    net.features[3].requires_grad_(True)
    assert rewrap_ddp(strategy) is True
    assert strategy.model is not first and strategy.model.module is net
    assert ddp_parameter_count(strategy.model) == 4 and not strategy.model.training


def test_rewrap_ddp_without_configure_ddp_says_what_to_do(one_process_group):
    from workbench.integrations.lightning import rewrap_ddp

    class Strategy:
        lightning_module = None

        def __init__(self):
            self.model = nn.parallel.DistributedDataParallel(Net())

    with pytest.raises(PlanError, match="no configure_ddp.*strategy=\"ddp\""):
        rewrap_ddp(Strategy())


def test_resume_takes_verify_baseline_from_the_checkpoint(tmp_path):
    """A resumed model whose own init differs from the checkpoint: verify compares against the
    checkpoint's frozen weights (the ones loaded), so it holds, and it still catches a change."""
    ckdir = tmp_path / "ck"
    cb = FreezePlanCallback(PLAN)
    ck = L.pytorch.callbacks.ModelCheckpoint(dirpath=str(ckdir), every_n_train_steps=4, save_top_k=-1)
    _trainer(tmp_path, max_steps=4, enable_checkpointing=True, callbacks=[cb, ck]).fit(Lit(cb), _loader(), _loader())
    cb2 = FreezePlanCallback(PLAN)
    lit2 = Lit(cb2)
    with torch.no_grad():
        lit2.model.features[0].weight.add_(1.0)  # another init: the checkpoint overwrites it
    _trainer(tmp_path, max_steps=6, callbacks=[cb2]).fit(lit2, _loader(), _loader(), ckpt_path=str(sorted(ckdir.glob("*.ckpt"))[-1]))
    assert cb2.applied is not None and cb2.applied.verify().ok
    with torch.no_grad():
        lit2.model.features[0].weight.mul_(2.0)
    assert not cb2.applied.verify().ok


def test_fused_a_plus_b_decays_toward_a_under_lightning(tmp_path):
    """The callback attaches the plan to Lightning's optimizer: fused A+B with weight decay ends
    where exact A+B does (without the attachment fused mode would not decay at all)."""

    def fit(mode: str) -> dict[str, torch.Tensor]:
        plan = {"rules": [{"select": "*", "frozen": True},
                          {"select": "head", "frozen": False, "reparam": {"kind": "a_plus_b", "mode": mode}}]}
        cb = FreezePlanCallback(plan)
        lit = Lit(cb)
        _trainer(tmp_path, max_steps=6, limit_val_batches=0, num_sanity_val_steps=0, callbacks=[cb]).fit(lit, _loader())
        cb.remove(merge=True)
        return {n: p.detach().clone() for n, p in lit.model.head.named_parameters()}

    exact, fused = fit("exact"), fit("fused")
    for n in exact:
        torch.testing.assert_close(fused[n], exact[n], rtol=0, atol=1e-5)
