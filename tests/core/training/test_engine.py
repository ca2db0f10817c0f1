"""Tests of workbench.core.training.engine (Trainer) and workbench.core.training.config (TrainConfig)."""

from __future__ import annotations

import json
import math
import multiprocessing
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from workbench.core.errors import WorkbenchError
from workbench.core.plan.rules import FreezePlan, PlanError
from workbench.core.training.config import ConfigError, TrainConfig
from workbench.core.training.data import stop_loader_workers
from workbench.core.training.engine import RunResult, Trainer, TrainError
from workbench.core.training.memory_probe import optimizer_state_bytes
from workbench.core.training.metrics import StepMetrics, load_metrics
from workbench.core.training.optim import sync_optimizer

NAN = float("nan")


class Tiny(nn.Module):
    """conv+bn, a block with its own BN, and a head; ``fail_at``/``nan_at`` inject failures."""

    def __init__(self, num_classes: int = 4, fc_in: int = 8) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.block = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8))
        self.fc = nn.Linear(fc_in, num_classes)
        self.calls = 0
        self.nan_at: set[int] = set()
        self.raise_at: dict[int, BaseException] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        i = self.calls
        self.calls += 1
        if i in self.raise_at:
            raise self.raise_at[i]
        x = torch.relu(self.bn(self.conv(x)))
        x = torch.relu(self.block(x))
        out = self.fc(x.mean((2, 3)))
        return out * NAN if i in self.nan_at else out


def _data(n: int = 32, size: int = 8, classes: int = 4) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 3, size, size, generator=g), torch.randint(0, classes, (n,), generator=g))


def _plan(*rules: dict[str, Any], stages: list[dict[str, Any]] | None = None) -> FreezePlan:
    d: dict[str, Any] = {"format": "freeze-plan", "version": 1, "rules": list(rules)}
    if stages:
        d["stages"] = stages
    return FreezePlan.from_dict(d)


FC_ONLY = ({"select": "*", "frozen": True}, {"select": "fc", "frozen": False})


def _trainer(steps: int = 6, plan: FreezePlan | None = None, model: nn.Module | None = None, **kw: Any) -> tuple[Trainer, list[StepMetrics]]:
    seen: list[StepMetrics] = []
    hook = kw.pop("step_hook", None)
    cfg = TrainConfig(steps=steps, batch_size=4, lr=kw.pop("lr", 1e-2), **{k: kw.pop(k) for k in list(kw) if k in TrainConfig.__dataclass_fields__})
    torch.manual_seed(0)
    t = Trainer(cfg, model=model or Tiny(), dataset=kw.pop("dataset", _data()), plan=plan, on_metrics=seen.append, step_hook=hook, **kw)
    return t, seen


def _n(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


# ---------------------------------------------------------------- basic runs
def test_frozen_backbone_run_completes_with_metrics_and_verify():
    bn_modes: list[tuple[bool, bool, bool]] = []
    holder: dict[str, Trainer] = {}

    def hook(step: int) -> None:
        m = holder["t"].model
        bn_modes.append((m.training, m.bn.training, m.block[1].training))

    t, seen = _trainer(6, _plan(*FC_ONLY), step_hook=hook, optimizer="adam")
    holder["t"] = t
    result = t.run()
    assert isinstance(result, RunResult) and result.status == "completed" and result.ok
    assert result.steps == 6 and [m.step for m in seen] == list(range(6))
    model = t.model
    fc = _n(model.fc)
    assert all(m.trainable_params == fc and m.frozen_params == _n(model) - fc for m in seen)
    assert all(m.grad_bytes == fc * 4 for m in seen)
    # the BN eval lock survives the engine's model.train(): frozen BN runs on running stats
    assert bn_modes and all(mode == (True, False, False) for mode in bn_modes)
    # Adam state exists for the head only, and the metrics report its real size
    assert {id(p) for p in t.optimizer.state} == {id(model.fc.weight), id(model.fc.bias)}
    assert seen[0].optimizer_state_bytes == optimizer_state_bytes(t.optimizer) > 2 * fc * 4
    # CPU: mem_allocated is the RSS growth, mem_peak the peak tensor bytes (two quantities, two names)
    assert all(m.mem_allocated is not None and m.mem_peak and m.mem_reserved is None for m in seen)
    assert seen[-1].mem_peak >= (fc * 4) * 2 + seen[0].optimizer_state_bytes  # head weights and grads, Adam state
    assert all(m.mem_rss and m.mem_rss > m.mem_peak for m in seen)  # the absolute RSS, named apart
    assert all(m.device == "cpu" and m.batch_size == 4 and m.step_time_s > 0 and m.samples_per_s > 0 for m in seen)
    assert [m.wall_time for m in seen] == sorted(m.wall_time for m in seen)
    assert result.verify.ok and result.verify.checked["frozen"] == 8 and result.verify.checked["bn_stats"] == 6
    s = result.summary
    # peak memory on the CPU is RSS growth: 0 is a true reading when the run reused freed memory
    assert s["trainable_params"] == fc and s["median_step_time_s"] > 0 and s["peak_memory_bytes"] >= 0
    assert s["final_loss"] == seen[-1].loss and 0 <= s["metrics_overhead_fraction"] < 1
    assert result.plan.to_dict() == _plan(*FC_ONLY).to_dict()
    json.dumps(result.to_dict())  # JSON-ready


def test_no_plan_trains_everything_and_bn_in_train_mode():
    t, seen = _trainer(3)
    t.run()
    assert seen[-1].trainable_params == _n(t.model) and seen[-1].frozen_params == 0
    assert t.model.bn.training and t.model.bn.num_batches_tracked.item() == 3


def test_log_every_reports_windows():
    t, seen = _trainer(7, log_every=3)
    result = t.run()
    assert [m.step for m in seen] == [2, 5, 6] and [m.window for m in seen] == [3, 3, 1]
    assert result.steps == 7


def _loader_workers() -> set[int]:
    return {p.pid for p in multiprocessing.active_children() if p.pid is not None}


@pytest.mark.parametrize("end", ["completed", "stopped"])
def test_the_loader_workers_end_with_the_run(end: str):
    """Persistent loader workers end when the run does: left to the garbage collector (the trainer sits in
    reference cycles), torch's iterator finalizer runs after its queues' and each worker waits out a 5 s
    join timeout before it is killed, on whichever thread collected it."""
    before = _loader_workers()
    t, _ = _trainer(4 if end == "completed" else 50, num_workers=1, val_fraction=0.25, val_every=2)
    gen = t.steps()
    next(gen)
    assert len(_loader_workers() - before) == 1  # the training loader's; validation's start at its first pass
    if end == "stopped":
        gen.close()
    else:
        for _ in gen:
            pass
        assert t.result is not None and t.result.summary.get("val_loss") is not None
    assert t.result is not None and t.result.status == end
    assert _loader_workers() - before == set()
    assert t.loader is not None and t.loader._iterator is None
    if end == "completed":  # the loader is still usable after the run (a sweep evaluates with it)
        assert t.val_loader is not None and len(next(iter(t.val_loader))) == 2
        stop_loader_workers(t.val_loader)
        assert _loader_workers() - before == set()


def test_closing_the_generator_stops_the_run():
    t, _ = _trainer(50)
    gen = t.steps()
    first = next(gen)
    assert first.step == 0
    gen.close()
    assert t.result is not None and t.result.status == "stopped" and t.result.steps == 1
    assert t.result.verify is not None


def test_bf16_autocast_and_channels_last_on_cpu():
    t, seen = _trainer(3, amp="bf16", channels_last=True)
    result = t.run()
    assert result.status == "completed", result.message
    assert all(math.isfinite(m.loss) for m in seen)
    assert t.model.conv.weight.is_contiguous(memory_format=torch.channels_last)


def test_compile_with_eager_backend():
    t, seen = _trainer(2, compile="eager")
    assert t.run().status == "completed"
    assert len(seen) == 2


# ---------------------------------------------------------------- live plan changes
def test_live_plan_change_syncs_optimizer_and_keeps_state():
    start = _plan({"select": "*", "frozen": True}, {"select": "conv", "frozen": False}, {"select": "fc", "frozen": False})
    new = _plan(
        {"select": "*", "frozen": True},
        {"select": "fc", "frozen": False},
        {"select": "block", "frozen": False, "lr_scale": 0.5},
    )
    holder: dict[str, Any] = {}

    def hook(step: int) -> None:
        t = holder["t"]
        if step == 3:
            fc = t.model.fc
            holder["fc_state"] = {n: dict(t.optimizer.state[p]) for n, p in (("w", fc.weight), ("b", fc.bias))}
            t.request_plan(new)
        if step == 4:  # after the boundary that applied the change
            holder["conv_w"] = t.model.conv.weight.detach().clone()

    t, seen = _trainer(8, start, step_hook=hook, optimizer="adamw", lr=1e-2)
    holder["t"] = t
    result = t.run()
    assert result.status == "completed", result.message
    model = t.model
    before = _n(model.conv) + _n(model.fc)
    after = _n(model.block) + _n(model.fc)
    # counts change at the next step, with a labelled event and a new plan version
    assert [m.trainable_params for m in seen] == [before] * 4 + [after] * 4
    assert [m.plan_version for m in seen] == [0] * 4 + [1] * 4
    assert seen[4].events and "froze conv" in seen[4].events[0] and "unfroze block" in seen[4].events[0]
    assert not any(m.events for i, m in enumerate(seen) if i != 4)
    assert sorted(seen[4].lr) == [5e-3, 1e-2]
    opt = t.optimizer
    # newly frozen: out of the optimizer, no state, no grad, weights unchanged since the change
    assert model.conv.weight.grad is None and model.conv.weight not in opt.state
    assert all(model.conv.weight is not p for g in opt.param_groups for p in g["params"])
    assert torch.equal(model.conv.weight, holder["conv_w"])
    # stayed trainable: same state tensors (identity), stepped on
    for name, p in (("w", model.fc.weight), ("b", model.fc.bias)):
        old = holder["fc_state"][name]
        assert opt.state[p]["exp_avg"] is old["exp_avg"] and opt.state[p]["exp_avg_sq"] is old["exp_avg_sq"]
        assert opt.state[p]["step"].item() == 8
    # newly trainable: fresh state, in a group with lr_scale 0.5
    block_w = model.block[0].weight
    assert opt.state[block_w]["step"].item() == 4
    group = next(g for g in opt.param_groups if any(p is block_w for p in g["params"]))
    assert group["lr_scale"] == 0.5 and group["lr"] == pytest.approx(5e-3)
    assert "block.0.weight" in group["param_names"]
    assert model.block[1].training  # unfrozen BN follows frozen: back in train mode
    assert result.plan.to_dict()["rules"] == new.to_dict()["rules"]
    assert result.verify.ok
    assert seen[-1].optimizer_state_bytes == optimizer_state_bytes(opt)


def test_request_plan_refuses_bad_plans_in_the_caller():
    t, _ = _trainer(2, _plan(*FC_ONLY))
    t.setup()
    with pytest.raises(PlanError, match="matches no module"):
        t.request_plan(_plan({"select": "nonexistent", "frozen": False}))
    with pytest.raises(PlanError, match="nothing trainable"):
        t.request_plan(_plan({"select": "*", "frozen": True}))
    assert t.run().summary["plan_version"] == 0


def test_request_plan_hands_over_and_the_training_thread_decides_for_its_step():
    # nothing trains before step 100: accepted by the caller, refused at the boundary of step 2
    staged = _plan({"select": "*", "frozen": True}, stages=[{"at_step": 100, "rules": [{"select": "fc", "frozen": False}]}])
    new = _plan(*FC_ONLY)
    holder: dict[str, Any] = {}

    def hook(step: int) -> None:
        t = holder["t"]
        if step == 1:
            t.request_plan(staged)
        if step == 3:
            t.request_plan(new)

    t, seen = _trainer(5, _plan({"select": "conv", "frozen": True}), step_hook=hook)
    holder["t"] = t
    result = t.run()
    assert result.status == "completed", result.message
    assert seen[2].events == ["plan change refused: the plan leaves nothing trainable; keep at least one module unfrozen"]
    assert seen[4].events and seen[4].events[0].startswith("plan change: froze")
    assert [m.plan_version for m in seen] == [0, 0, 0, 0, 1]
    assert t.full_plan is new  # handed over as it is: plans are replaced, never edited in place


def test_stages_run_through_the_same_path():
    plan = _plan(
        *FC_ONLY,
        stages=[
            {"at_step": 2, "label": "unfreeze block", "rules": [{"select": "block", "frozen": False}]},
            {"at_epoch": 1, "rules": [{"select": "conv", "frozen": False}]},
        ],
    )
    t, seen = _trainer(10, plan, dataset=_data(16))  # 4 steps per epoch: epoch 1 starts at step 4
    result = t.run()
    assert result.status == "completed"
    ev = {m.step: m.events for m in seen if m.events}
    assert list(ev) == [2, 4]
    assert ev[2][0].startswith("stage 0 'unfreeze block': unfroze block")
    assert ev[4][0].startswith("stage 1: unfroze conv")
    assert [m.plan_version for m in seen][:6] == [0, 0, 1, 1, 2, 2]
    assert seen[-1].trainable_params == _n(t.model) - _n(t.model.bn)  # only the first BN stays frozen
    assert result.plan.stages == [] and len(result.plan.rules) == 4  # the plan in force
    assert seen[5].epoch == 1


def test_plan_change_that_reinstalls_a_plus_b_rebuilds_optimizer_entries(tmp_path: Path):
    pytest.importorskip("workbench.core.freezing.reparam")
    base = ({"select": "*", "frozen": True}, {"select": "fc", "frozen": False})
    start = _plan(*base, {"select": "conv", "frozen": False, "reparam": {"kind": "a_plus_b"}})
    new = _plan(*base, {"select": "block.0", "frozen": False, "reparam": {"kind": "a_plus_b"}})
    holder: dict[str, Any] = {}

    def hook(step: int) -> None:
        t = holder["t"]
        if step == 2:
            holder["old"] = [p for n, p in t.model.named_parameters() if p.requires_grad and n.startswith("conv.")]
            t.request_plan(new)

    t, seen = _trainer(5, start, step_hook=hook, optimizer="adam", save_dir=str(tmp_path / "run"))
    holder["t"] = t
    result = t.run()
    assert result.status == "completed", result.message
    opt = t.optimizer
    in_opt = {id(p) for g in opt.param_groups for p in g["params"]}
    assert holder["old"] and all(id(p) not in in_opt and p not in opt.state for p in holder["old"])
    trainable = [p for p in t.model.parameters() if p.requires_grad]
    assert in_opt == {id(p) for p in trainable}
    new_b = [p for n, p in t.model.named_parameters() if p.requires_grad and n.startswith("block.0.")]
    assert new_b and all(opt.state[p]["step"].item() == 2 for p in new_b)  # fresh state at step 3
    assert seen[3].plan_version == 1 and seen[3].events
    assert result.verify.ok
    assert (tmp_path / "run" / "deltas.safetensors").exists()


# ---------------------------------------------------------------- thread controls
def test_stop_from_another_thread_ends_within_one_step():
    at_step_2 = threading.Event()
    stop_called = threading.Event()

    def on_metrics(m: StepMetrics) -> None:
        if m.step == 2:
            at_step_2.set()
            stop_called.wait()  # the training thread waits until stop() was called

    t = Trainer(TrainConfig(steps=1000, batch_size=4), model=Tiny(), dataset=_data(), on_metrics=on_metrics)

    def controller() -> None:
        at_step_2.wait()
        t.stop()
        stop_called.set()

    th = threading.Thread(target=controller)
    th.start()
    result = t.run()
    th.join()
    assert result.status == "stopped" and result.steps == 3 and not result.interrupted
    assert "stopped at step 3" in result.message
    assert result.verify is not None and result.verify.ok


def test_pause_blocks_then_resume_continues_and_stop_ends_a_pause():
    def make(on_metrics):
        return Trainer(TrainConfig(steps=6, batch_size=4), model=Tiny(), dataset=_data(), on_metrics=on_metrics)

    seen: list[int] = []
    holder: dict[str, Trainer] = {}

    def on_metrics(m: StepMetrics) -> None:
        seen.append(m.step)
        if m.step == 1:
            holder["t"].pause()

    t = holder["t"] = make(on_metrics)
    results: list[RunResult] = []
    th = threading.Thread(target=lambda: results.append(t.run()))
    th.start()
    assert t.wait_paused()
    assert t.paused and seen == [0, 1] and th.is_alive()
    t.resume()
    th.join()
    assert results[0].status == "completed" and seen == list(range(6)) and not t.paused

    seen.clear()
    t2 = holder["t"] = make(on_metrics)
    th = threading.Thread(target=lambda: results.append(t2.run()))
    th.start()
    assert t2.wait_paused()
    t2.stop()  # ends the pause too
    th.join()
    assert results[1].status == "stopped" and results[1].steps == 2


# ---------------------------------------------------------------- failures are results
def test_nan_loss_stops_with_the_step_number_and_no_optimizer_step():
    model = Tiny()
    model.nan_at = {3}
    t, seen = _trainer(10, model=model, optimizer="adam")
    result = t.run()
    assert result.status == "nonfinite" and result.failed_step == 3 and result.steps == 3
    assert "loss is nan at step 3" in result.message and "on_nonfinite" in result.message
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert all(p.grad is None for p in model.parameters())
    assert t.optimizer.state[model.fc.weight]["step"].item() == 3  # step 3 was not taken
    assert seen[-1].step == 3 and math.isnan(seen[-1].loss) and "run stopped" in seen[-1].events[0]


def test_nan_loss_skip_mode_counts_and_continues():
    model = Tiny()
    model.nan_at = {2, 4}
    t, seen = _trainer(7, model=model, optimizer="adam", on_nonfinite="skip")
    result = t.run()
    assert result.status == "completed" and result.steps == 7
    assert result.summary["nonfinite_skipped"] == 2
    assert [m.nonfinite_skipped for m in seen] == [0, 0, 1, 1, 2, 2, 2]
    assert math.isnan(seen[2].loss) and seen[2].events == ["loss nan: step skipped"]
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert t.optimizer.state[model.fc.weight]["step"].item() == 5
    assert math.isfinite(result.summary["final_loss"])


def test_exception_in_forward_fails_cleanly():
    model = Tiny()
    model.raise_at = {2: RuntimeError("boom in forward")}
    t, seen = _trainer(10, model=model)
    result = t.run()
    assert result.status == "failed" and result.failed_step == 2 and result.steps == 2
    assert result.message == "step 2 failed: RuntimeError: boom in forward"
    assert "Traceback" in result.error and "boom in forward" in result.error
    assert all(p.grad is None for p in model.parameters())
    assert [m.step for m in seen] == [0, 1] and result.verify is not None


def test_shape_mismatch_fails_with_a_hint():
    t, seen = _trainer(5, model=Tiny(fc_in=7))
    result = t.run()
    assert result.status == "failed" and result.failed_step == 0 and seen == []
    assert "shapes cannot be multiplied" in result.message and "image size" in result.message


def test_out_of_memory_reports_the_batch_size():
    model = Tiny()
    model.raise_at = {1: torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")}
    t, _ = _trainer(5, model=model)
    result = t.run()
    assert result.status == "failed" and result.failed_batch_size == 4 and result.failed_step == 1
    assert "out of memory at step 1 with batch size 4" in result.message
    assert "lower the batch size (e.g. 2)" in result.message


def test_failing_callback_is_a_failed_result():
    def bad(m: StepMetrics) -> None:
        raise ValueError("plot broke")

    t = Trainer(TrainConfig(steps=3, batch_size=4), model=Tiny(), dataset=_data(), on_metrics=bad)
    result = t.run()
    assert result.status == "failed" and "plot broke" in result.message


# ---------------------------------------------------------------- files
@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_metrics_file_well_formed(tmp_path: Path, suffix: str):
    model = Tiny()
    model.nan_at = {1}
    path = tmp_path / f"metrics{suffix}"
    t, seen = _trainer(4, model=model, metrics_path=str(path), on_nonfinite="skip")
    t.run()
    text = path.read_text()
    if suffix == ".jsonl":
        lines = text.splitlines()
        assert len(lines) == 4
        rows = [json.loads(line) for line in lines]  # strict JSON (NaN written as null)
        assert rows[1]["loss"] is None and rows[1]["events"] == ["loss nan: step skipped"]
    back = load_metrics(path)
    assert [m.step for m in back] == [0, 1, 2, 3]
    assert [m.trainable_params for m in back] == [m.trainable_params for m in seen]
    assert back[2].loss == pytest.approx(seen[2].loss) and math.isnan(back[1].loss)


def test_save_dir_holds_trainable_state_plan_config_metrics(tmp_path: Path):
    from safetensors import safe_open

    plan = _plan(*FC_ONLY, {"select": "block", "frozen": False})
    out = tmp_path / "run"
    t, seen = _trainer(3, plan, save_dir=str(out))
    result = t.run()
    assert result.status == "completed" and result.save_dir == str(out)
    with safe_open(str(out / "trainable.safetensors"), framework="pt") as f:
        keys = set(f.keys())
        meta = f.metadata()
        assert torch.equal(f.get_tensor("fc.weight"), t.model.fc.weight.detach())
    params = {n for n, p in t.model.named_parameters() if p.requires_grad}
    assert set(json.loads(meta["params"])) == params
    assert set(json.loads(meta["buffers"])) == {"block.1.running_mean", "block.1.running_var", "block.1.num_batches_tracked"}
    assert keys == params | set(json.loads(meta["buffers"]))
    assert FreezePlan.load(out / "plan.json").to_dict() == t.plan.to_dict()
    assert TrainConfig.load(out / "config.json") == t.config
    assert len(load_metrics(out / "metrics.jsonl")) == 3
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["verify"]["ok"]


# ---------------------------------------------------------------- setup from the zoo
def test_resnet18_from_the_zoo_with_a_new_head():
    cfg = TrainConfig(model="resnet18", num_classes=10, image_size=32, batch_size=2, steps=2, data="synthetic:8",
                      plan={"format": "freeze-plan", "version": 1, "rules": list(FC_ONLY)})
    seen: list[StepMetrics] = []
    t = Trainer(cfg, on_metrics=seen.append)
    result = t.run()
    assert result.status == "completed", result.message
    assert t.new_heads == ["fc"] and t.model.fc.out_features == 10
    assert [m.trainable_params for m in seen] == [5130, 5130]
    assert result.verify.ok and result.verify.checked["bn_stats"] == 20 * 3
    assert all(not m.training for n, m in t.model.named_modules() if isinstance(m, nn.BatchNorm2d))


def test_imagefolder_data_fits_the_head_to_its_classes(tmp_path: Path):
    from PIL import Image

    for c, color in (("cat", (200, 10, 10)), ("dog", (10, 10, 200))):
        (tmp_path / c).mkdir()
        for i in range(4):
            Image.new("RGB", (20, 20), color).save(tmp_path / c / f"{i}.png")
    seen: list[StepMetrics] = []
    t = Trainer(TrainConfig(data=f"imagefolder:{tmp_path}", image_size=16, batch_size=4, steps=3),
                model=Tiny(num_classes=7), on_metrics=seen.append)
    result = t.run()
    assert result.status == "completed", result.message
    assert t.new_heads == ["fc"] and t.model.fc.out_features == 2
    assert seen[0].epoch == 0 and seen[2].epoch == 1  # 8 images = 2 steps per epoch


def test_weights_preset_transforms_follow_the_image_size():
    from workbench.core.models.zoo import crop_size, weights_member
    from workbench.core.training.setup import weights_transform

    member = weights_member("resnet18", "imagenet1k_v1")
    assert member is not None and member.name == "IMAGENET1K_V1"
    assert crop_size(member) == 224 and weights_member("resnet18", None) is None
    assert list(weights_transform(member, 64).crop_size) == [64]
    assert list(weights_transform(member, None).crop_size) == [224]


def test_bad_input_raises_workbench_errors():
    with pytest.raises(TrainError, match="resnet18"):
        Trainer(TrainConfig(model="resnet_18", steps=1)).setup()
    with pytest.raises(TrainError, match="no model given"):
        Trainer(TrainConfig(steps=1)).setup()
    with pytest.raises(PlanError, match="matches no module"):
        Trainer(TrainConfig(steps=1, batch_size=4), model=Tiny(), dataset=_data(), plan=_plan({"select": "fcc", "frozen": True})).setup()
    with pytest.raises(TrainError, match="nothing|no parameter trainable"):
        Trainer(TrainConfig(steps=1, batch_size=4), model=Tiny(), dataset=_data(), plan=_plan({"select": "*", "frozen": True})).setup()
    with pytest.raises(TrainError, match="fewer than batch_size"):
        Trainer(TrainConfig(steps=1, batch_size=64), model=Tiny(), dataset=_data()).setup()
    if not torch.cuda.is_available():
        with pytest.raises(TrainError, match="CUDA is not available"):
            Trainer(TrainConfig(device="cuda", steps=1), model=Tiny(), dataset=_data()).setup()


def test_a_trainer_runs_once():
    t, _ = _trainer(1)
    t.run()
    with pytest.raises(RuntimeError, match="already ran"):
        t.run()


# ---------------------------------------------------------------- sync_optimizer
def test_sync_optimizer_moves_params_between_groups_keeping_state():
    a, b, c = (nn.Parameter(torch.randn(3)) for _ in range(3))
    opt = torch.optim.Adam([{"params": [a, b], "param_names": ["a", "b"], "lr": 0.1, "lr_scale": 1.0, "weight_decay": 0.0}], lr=0.1)
    (a.sum() + b.sum()).backward()
    opt.step()
    state_a = opt.state[a]["exp_avg"]
    target = [
        {"params": [a], "param_names": ["a"], "lr": 0.1, "lr_scale": 1.0, "weight_decay": 0.0},
        {"params": [c], "param_names": ["c"], "lr": 0.01, "lr_scale": 0.1, "weight_decay": 0.0},
    ]
    stats = sync_optimizer(opt, target)
    assert stats == {"removed": 1, "added": 1, "moved": 0, "kept": 1}
    assert b not in opt.state and b.grad is None and opt.state[a]["exp_avg"] is state_a
    assert [g["param_names"] for g in opt.param_groups] == [["a"], ["c"]] and opt.param_groups[1]["lr"] == 0.01
    # a moves to the 0.1 group and keeps its state
    stats = sync_optimizer(opt, [{"params": [a, c], "param_names": ["a", "c"], "lr": 0.01, "lr_scale": 0.1, "weight_decay": 0.0}])
    assert stats["moved"] == 1 and len(opt.param_groups) == 1
    assert opt.state[a]["exp_avg"] is state_a and opt.param_groups[0]["param_names"] == ["c", "a"]


# ---------------------------------------------------------------- TrainConfig
def test_config_round_trip_and_aliases(tmp_path: Path):
    cfg = TrainConfig(model="resnet18", optimizer="AdamW", amp="BF16", steps=10, plan={"rules": []}, compile=True)
    assert cfg.validate().optimizer == "adamw" and cfg.amp == "bf16" and cfg.compile_backend == "inductor"
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg
    cfg.save(tmp_path / "cfg.json")
    assert TrainConfig.load(tmp_path / "cfg.json") == cfg
    assert TrainConfig(plan=_plan(*FC_ONLY)).validate().plan == _plan(*FC_ONLY).to_dict()


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"optimiser": "adam"}, "did you mean 'optimizer'"),
        ({"optimizer": "lion"}, "config field 'optimizer'"),
        ({"amp": "fp8"}, "config field 'amp'"),
        ({"device": "tpu"}, "config field 'device'"),
        ({"batch_size": 0}, "config field 'batch_size'"),
        ({"lr": -1}, "config field 'lr'"),
        ({"metrics_path": "m.txt"}, r"\.jsonl or \.csv"),
        ({"on_nonfinite": "ignore"}, "config field 'on_nonfinite'"),
    ],
)
def test_config_errors_name_the_field(data: dict[str, Any], match: str):
    with pytest.raises(ConfigError, match=match) as e:
        TrainConfig.from_dict(data)
    assert isinstance(e.value, WorkbenchError)


def test_config_from_bad_json(tmp_path: Path):
    p = tmp_path / "cfg.json"
    p.write_text("{bad")
    with pytest.raises(ConfigError, match="not valid JSON"):
        TrainConfig.load(p)


# ---------------------------------------------------------------- CUDA (run on a GPU machine)
cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@cuda_only
def test_cuda_fp16_run_reports_device_memory_and_synced_step_times():
    t, seen = _trainer(4, _plan(*FC_ONLY), device="cuda", amp="fp16", channels_last=True)
    result = t.run()
    assert result.status == "completed", result.message
    assert t._scaler is not None and t.device.type == "cuda"
    for m in seen:
        assert m.device.startswith("cuda") and m.step_time_s > 0
        assert m.mem_reserved >= m.mem_allocated > 0 and m.mem_peak >= m.mem_allocated
    assert result.summary["memory_source"] == "CUDA allocated"


@cuda_only
def test_real_cuda_out_of_memory_is_a_result_and_frees_memory():
    class Hog(Tiny):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.calls == 1:
                self.calls += 1
                free, _ = torch.cuda.mem_get_info()
                torch.empty(int(free * 4), dtype=torch.uint8, device=x.device)  # more than the GPU has
            return super().forward(x)

    t, _ = _trainer(5, model=Hog(), device="cuda")
    before = None

    def hook(step: int) -> None:
        nonlocal before
        if step == 1:
            before = torch.cuda.memory_allocated()

    t.step_hook = hook
    result = t.run()
    assert result.status == "failed" and result.failed_step == 1 and result.failed_batch_size == 4
    assert "out of memory at step 1 with batch size 4" in result.message
    assert torch.cuda.memory_allocated() <= before
