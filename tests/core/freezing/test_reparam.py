"""Tests of workbench.core.freezing.reparam: A+B reparameterization (W = A + B, A fixed, B trained)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import torchvision
from safetensors.torch import load_file, save_file
from torch import nn
from torch.nn.utils import parametrize

import workbench as wb
from tests.fixtures.broken_patterns import (
    DataAssignAPlusB,
    HandWrittenAPlusB,
    graph_size,
    graph_sizes,
    make_a_b,
)
from tests.fixtures.models import Tied
from workbench.core.errors import WorkbenchError
from workbench.core.freezing import reparam
from workbench.core.freezing.reparam import ReparamError, parse_spec
from workbench.core.models.tree import ModelTree, canonical_parameters, fingerprint

MODES = ("exact", "fused")


def small(seed: int = 0) -> nn.Sequential:
    """Conv (no bias) + BN + ReLU + Linear: every parameter has a well-defined gradient."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(3, 6, 3, padding=1, bias=False),
        nn.BatchNorm2d(6),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(6 * 6 * 6, 5),
    )


def batch(seed: int = 0, n: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, 6, 6, generator=g), torch.randint(0, 5, (n,), generator=g)


def plan_of(*rules: dict) -> wb.FreezePlan:
    return wb.FreezePlan.from_dict({"rules": list(rules)})


def ab(mode: str = "exact", **kw) -> dict:
    return {"select": "*", "reparam": {"kind": "a_plus_b", "mode": mode, **kw}}


def loss_of(model: nn.Module, seed: int = 0) -> torch.Tensor:
    x, y = batch(seed)
    return nn.functional.cross_entropy(model(x), y)


def params_now(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def train(model: nn.Module, opt: torch.optim.Optimizer, steps: int) -> None:
    for i in range(steps):
        opt.zero_grad()
        loss_of(model, i).backward()
        opt.step()


def is_plain(model: nn.Module) -> bool:
    return not any(parametrize.is_parametrized(m) for m in model.modules())


# ============================================================== spec parsing
def test_parse_spec_fills_defaults():
    want = {"kind": "a_plus_b", "a": "current", "b_init": "zeros", "mode": "exact", "params": None}
    assert parse_spec({"kind": "a_plus_b"}) == want
    assert parse_spec({}) == want
    assert parse_spec(True) == want
    spec = parse_spec({"a": {"random": {"seed": 3}}, "b_init": "random", "mode": "fused", "params": "weight"})
    assert spec["a"] == {"random": {"seed": 3, "dist": "uniform", "scale": 1.0}}
    assert spec["b_init"] == {"random": {"seed": 0, "dist": "uniform", "scale": 1.0}}
    assert spec["params"] == ["weight"] and spec["mode"] == "fused"
    assert parse_spec({"a": {"file": "a.safetensors"}})["a"] == {"file": "a.safetensors"}


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ("yes", "reparam must be an object"),
        ({"kind": "lora"}, "reparam.kind"),
        ({"a": "curent"}, "did you mean 'current'"),
        ({"b_init": "current"}, "reparam.b_init"),
        ({"b_ini": "zeros"}, "did you mean 'b_init'"),
        ({"mode": "fast"}, "reparam.mode"),
        ({"params": []}, "reparam.params"),
        ({"params": ["conv.weight"]}, "reparam.params"),
        ({"a": {"random": {"seed": -1}}}, "reparam.a.random.seed"),
        ({"a": {"random": {"dist": "gauss"}}}, "reparam.a.random.dist"),
        ({"b_init": {"random": {"scale": 0}}}, "reparam.b_init.random.scale"),
        ({"b_init": {"random": {"sead": 1}}}, "did you mean 'seed'"),
        ({"a": {"file": ""}}, "reparam.a.file"),
        ({"a": {"file": "x", "random": {}}}, "reparam.a object"),
        ({"a": 3}, "reparam.a must be"),
    ],
)
def test_parse_spec_rejects_with_the_sub_field(raw, needle):
    with pytest.raises(ReparamError) as ei:
        parse_spec(raw)
    assert needle in str(ei.value)
    assert isinstance(ei.value, ValueError) and isinstance(ei.value, WorkbenchError)


def test_plan_error_names_rule_and_field():
    with pytest.raises(wb.PlanError) as ei:
        plan_of({"select": "*", "frozen": False}, {"select": "4", "reparam": {"mode": "fast"}})
    assert ei.value.rule_index == 1 and ei.value.field == "reparam"
    assert "reparam.mode" in str(ei.value)


def test_plan_json_round_trip_keeps_normalized_spec():
    plan = plan_of(ab("fused", a={"random": {"seed": 2, "dist": "normal"}}, params=["weight"]))
    again = wb.FreezePlan.from_json(plan.to_json())
    assert again.to_dict() == plan.to_dict()
    assert again.rules[0].reparam["a"] == {"random": {"seed": 2, "dist": "normal", "scale": 1.0}}


def test_reparam_false_in_a_later_rule_switches_it_off():
    model = small()
    applied = wb.apply_plan(model, plan_of(ab(), {"select": "4", "reparam": False}))
    assert parametrize.is_parametrized(model[0]) and parametrize.is_parametrized(model[1])
    assert not parametrize.is_parametrized(model[4])
    assert set(applied.installed("reparam")) == {"", "0", "1", "2", "3"}


def test_describe_and_function_change_flags():
    assert reparam.changes_function(parse_spec({})) is False
    assert reparam.changes_function(parse_spec({"a": "zeros"})) is True
    assert reparam.changes_function(parse_spec({"b_init": {"file": "d.safetensors"}})) is None
    assert "training starts at the loaded model" in reparam.describe(parse_spec({}))
    assert "function changes" in reparam.describe(parse_spec({"a": {"random": {}}}))
    model = small()
    assert "function changes" in plan_of(ab(a={"random": {"seed": 1}})).summary(model)
    applied = wb.apply_plan(model, plan_of(ab(a={"random": {"seed": 1}}), {"select": "4", "reparam": {}}))
    hs = applied.installed("reparam")
    assert hs["0"].function_changed == {"weight": True}
    assert hs["4"].function_changed == {"weight": False, "bias": False}


# ============================================================== the tree sees the plain model
def test_exact_mode_keeps_tree_paths_counts_and_fingerprint():
    model = torchvision.models.resnet18(num_classes=10)
    plain_tree = ModelTree.from_model(model)
    plain_fp, plain_canon = fingerprint(model), canonical_parameters(model)
    plain_names = [n for n, _ in model.named_parameters()]
    applied = wb.apply_plan(model, plan_of(ab(), {"select": "fc", "reparam": {"params": ["weight"]}}))
    assert parametrize.is_parametrized(model.layer1[0].conv1, "weight")
    assert not parametrize.is_parametrized(model.fc, "bias")
    tree = ModelTree.from_model(model)
    assert tree.paths() == plain_tree.paths()
    assert tree.total_params == plain_tree.total_params  # each parameter counted once, A not at all
    node = tree.nodes["layer1.0.conv1"]
    assert node.type_name == "Conv2d" and node.param_names == ("weight",)
    assert node.own_params == plain_tree.nodes["layer1.0.conv1"].own_params
    assert canonical_parameters(model) == plain_canon  # fc: bias stays after weight
    assert fingerprint(model) == plain_fp
    applied.remove()
    assert is_plain(model)
    assert [n for n, _ in model.named_parameters()] == plain_names


class RootParams(nn.Module):
    """Parameters on a module that also has children (like a ViT's class token)."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(3))
        self.lin = nn.Linear(3, 3)
        self.offset = nn.Parameter(torch.zeros(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x * self.scale) + self.offset


@pytest.mark.parametrize("params", [None, ["offset"]])
def test_fingerprint_holds_for_root_parameters_and_subsets(params):
    model = RootParams()
    fp, names = fingerprint(model), [n for n, _ in model.named_parameters()]
    applied = wb.apply_plan(model, plan_of({"select": "*", "reparam": {"params": params}}))
    assert fingerprint(model) == fp
    applied.remove(merge=False)
    assert [n for n, _ in model.named_parameters()] == names


def test_fused_mode_leaves_the_model_plain():
    model = small()
    keys = list(model.state_dict())
    wb.apply_plan(model, plan_of(ab("fused")))
    assert is_plain(model) and list(model.state_dict()) == keys


# ============================================================== gradients
@pytest.mark.parametrize("mode", MODES)
def test_gradient_of_b_equals_gradient_of_plain_weight_resnet18(mode):
    torch.manual_seed(0)
    plain = torchvision.models.resnet18(num_classes=4)
    model = copy.deepcopy(plain)
    applied = wb.apply_plan(model, plan_of(ab(mode)))
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    y = torch.tensor([1, 3])
    nn.functional.cross_entropy(plain(x), y).backward()
    nn.functional.cross_entropy(model(x), y).backward()
    plain_params = dict(plain.named_parameters())
    n = 0
    for h in applied.installed("reparam").values():
        for (_, b), name in zip(h.trainable(), h.names):
            torch.testing.assert_close(b.grad, plain_params[h.param_path(name)].grad, rtol=1e-5, atol=1e-7)
            n += 1
        for _, a in h.fixed():
            assert a.grad is None and not a.requires_grad
    assert n == len(plain_params)


@pytest.mark.parametrize("mode", MODES)
def test_gradient_with_random_a_and_b_equals_plain_model_at_a_plus_b(mode):
    model = small()
    applied = wb.apply_plan(
        model, plan_of(ab(mode, a={"random": {"seed": 1, "dist": "normal", "scale": 0.1}}, b_init={"random": {"seed": 2, "scale": 0.01}}))
    )
    plain = small()
    with torch.no_grad():
        for h in applied.installed("reparam").values():
            for n in h.names:
                plain.get_submodule(h.path).get_parameter(n).copy_(h.a(n) + h.b(n))
    loss_of(plain).backward()
    loss_of(model).backward()
    plain_params = dict(plain.named_parameters())
    for h in applied.installed("reparam").values():
        for (_, b), n in zip(h.trainable(), h.names):
            torch.testing.assert_close(b.grad, plain_params[h.param_path(n)].grad, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("mode", MODES)
def test_training_keeps_a_bit_identical_and_moves_b(mode):
    model = small()
    applied = wb.apply_plan(model, plan_of(ab(mode, a={"random": {"seed": 5}})))
    a_before = {k: a.clone() for h in applied.installed("reparam").values() for k, a in h.fixed()}
    opt = torch.optim.Adam(applied.param_groups(lr=1e-2))
    train(model, opt, 5)
    report = applied.verify()
    assert report.ok, str(report)
    assert report.checked["fixed"] == len(a_before) == 5
    assert not report.warnings  # every trainable tensor (B or W) changed
    for h in applied.installed("reparam").values():
        for k, a in h.fixed():
            assert torch.equal(a, a_before[k])
    assert all(s["b_norm"] > 0 for s in applied.reparam_stats().values())


@pytest.mark.parametrize(
    ("opt_name", "kw"),
    [
        ("Adam", {}),
        ("AdamW", {"weight_decay": 1.0}),  # decoupled
        ("Adam", {"weight_decay": 0.1}),  # coupled L2
        ("SGD", {"weight_decay": 0.1, "momentum": 0.9}),
    ],
)
def test_exact_and_fused_reach_the_same_weights(opt_name, kw):
    """20 steps, lr 1e-3: the modes agree within 1e-5 (fp32 rounding of A + B; measured ~2e-6)."""

    def run(mode: str, wd: float) -> dict[str, torch.Tensor]:
        model = small()
        spec = ab(mode, a={"random": {"seed": 1, "scale": 0.1}}, b_init={"random": {"seed": 2, "scale": 0.01}})
        applied = wb.apply_plan(model, plan_of(spec))
        extra = {k: v for k, v in kw.items() if k != "weight_decay"}
        opt = getattr(torch.optim, opt_name)(applied.param_groups(lr=1e-3, weight_decay=wd, **extra))
        applied.attach_optimizer(opt)
        train(model, opt, 20)
        applied.remove(merge=True)
        return params_now(model)

    wd = kw.get("weight_decay", 0.0)
    exact, fused = run("exact", wd), run("fused", wd)
    for n in exact:
        torch.testing.assert_close(fused[n], exact[n], rtol=0, atol=1e-5)
    if wd:  # the decay did something, far beyond the tolerance: fused implements it, toward A
        no_decay = run("exact", 0.0)
        assert max((exact[n] - no_decay[n]).abs().max().item() for n in exact) > 1e-4


def test_fused_groups_carry_the_decay_toward_a():
    model = small()
    applied = wb.apply_plan(model, plan_of(ab("fused"), {"select": "4", "reparam": False}))
    groups = applied.param_groups(lr=1e-3, weight_decay=0.05)
    decay = [g for g in groups if g.get(reparam.DECAY_KEY)]
    assert len(decay) == 1 and decay[0]["weight_decay"] == 0.0 and decay[0][reparam.DECAY_KEY] == 0.05
    assert set(decay[0]["param_names"]) == {"0.weight", "1.weight", "1.bias"}
    others = [g for g in groups if not g.get(reparam.DECAY_KEY)]
    assert others[0]["weight_decay"] == 0.05 and set(others[0]["param_names"]) == {"4.weight", "4.bias"}
    assert not any(g.get(reparam.DECAY_KEY) for g in applied.param_groups(lr=1e-3))  # no decay: no split


def test_fused_decay_is_scoped_to_attached_optimizers():
    """The decay hook is per optimizer: an optimizer not attached, or one after remove(), is untouched."""
    from torch.optim.optimizer import _global_optimizer_pre_hooks

    spec = ab("fused", a={"random": {"seed": 1, "scale": 0.1}})
    model = small()
    applied = wb.apply_plan(model, plan_of(spec))
    hooks_before = len(_global_optimizer_pre_hooks)
    attached = torch.optim.AdamW(applied.param_groups(lr=1e-2, weight_decay=1.0))
    plain = torch.optim.AdamW(applied.param_groups(lr=1e-2, weight_decay=1.0))
    assert applied.attach_optimizer(attached) is applied.attach_optimizer(attached)  # idempotent
    assert len(_global_optimizer_pre_hooks) == hooks_before  # nothing process-wide
    h = applied.installed("reparam")["4"]
    b0 = h.b("weight").clone()
    for opt in (attached, plain):
        opt.zero_grad()
        model(batch()[0]).sum().backward()
    plain.step()  # no decay: with a zero-decay group, AdamW moves W by the gradient only
    after_plain = h.b("weight").clone()
    attached.step()
    assert not torch.equal(after_plain, b0)
    applied.remove()
    w = model[4].weight.detach().clone()
    attached.zero_grad()
    model(batch()[0]).sum().backward()
    for g in attached.param_groups:
        g["lr"] = 0.0  # a step with lr 0 changes nothing unless a leftover hook decays
    attached.step()
    assert torch.equal(model[4].weight, w)


def test_precision_trade_off_in_bf16():
    """Fused stores W = A + B: bf16 updates below half an ulp of |A| (~1.2e-4 at 0.05) vanish.

    Exact stores B itself, near zero, where bf16 resolves them (docs/reparam.md).
    """
    b_mean = {}
    for mode in MODES:
        lin = nn.Linear(16, 16, bias=False).to(torch.bfloat16)
        with torch.no_grad():
            lin.weight.fill_(0.05)
        applied = wb.apply_plan(lin, plan_of(ab(mode)))
        opt = torch.optim.SGD(applied.param_groups(lr=1e-5))
        for _ in range(10):
            opt.zero_grad()
            lin.weight.float().sum().backward()  # dL/dW = 1: each step moves B by -1e-5
            opt.step()
        b_mean[mode] = applied.installed("reparam")[""].b("weight").detach().float().mean().item()
    assert b_mean["exact"] == pytest.approx(-1e-4, rel=0.01)
    assert b_mean["fused"] == 0.0


# ============================================================== no growth; the broken patterns
@pytest.mark.parametrize("mode", MODES)
def test_graph_size_is_constant_over_200_steps(mode):
    model = small()
    applied = wb.apply_plan(model, plan_of(ab(mode, a={"random": {"seed": 1}})))
    opt = torch.optim.SGD(applied.param_groups(lr=1e-3))
    x, y = batch()

    def step() -> torch.Tensor:
        opt.zero_grad()
        return nn.functional.cross_entropy(model(x), y)

    sizes = graph_sizes(step, 200, opt.step)
    assert len(set(sizes)) == 1, sizes[:5] + sizes[-5:]


def test_hand_written_version_grows_the_graph_every_step():
    model = small()
    a, b = make_a_b(model)
    hw = HandWrittenAPlusB(model, b)
    opt = torch.optim.Adam(hw.B.parameters(), lr=1e-3)
    x, y = batch()

    def step() -> torch.Tensor:
        opt.zero_grad()
        return nn.functional.cross_entropy(hw(x, a), y)

    sizes = graph_sizes(step, 6, opt.step)
    growth = [s1 - s0 for s0, s1 in zip(sizes, sizes[1:])]
    assert all(g > 0 for g in growth) and len(set(growth)) == 1, sizes  # linear growth
    assert all(p.grad is not None for p in hw.B)  # it does train B, just ever slower


def test_data_assign_version_never_trains_b():
    model = small()
    a, b = make_a_b(model)
    broken = DataAssignAPlusB(model, a, b)
    x, y = batch()
    with pytest.raises(RuntimeError, match="does not require grad"):
        nn.functional.cross_entropy(broken(x), y).backward()
    head = nn.Linear(5, 5)  # something else trainable: backward runs, B still gets nothing
    loss = nn.functional.cross_entropy(head(broken(x)), y)
    loss.backward()
    assert all(p.grad is None for p in broken.B) and head.weight.grad is not None
    assert graph_size(loss) > 0


# ============================================================== merge / reset / remove
@pytest.mark.parametrize("mode", MODES)
def test_merge_bakes_w_keeps_identity_and_outputs(mode):
    model = small()
    fp = fingerprint(model)
    applied = wb.apply_plan(model, plan_of(ab(mode, a={"random": {"seed": 1, "scale": 0.1}}, b_init={"random": {"seed": 2, "scale": 0.01}})))
    opt = torch.optim.Adam(applied.param_groups(lr=1e-2))
    train(model, opt, 3)
    model.eval()
    x, _ = batch(9)
    with torch.no_grad():
        before = model(x)
    ids = [id(p) for p in opt.param_groups[0]["params"]]
    diff = applied.merge()
    assert is_plain(model) and not applied.installed("reparam")
    assert [id(p) for p in model.parameters()] == ids  # the optimizer still holds the model's parameters
    with torch.no_grad():
        assert torch.equal(model(x), before)
    assert all(r.reparam is None for r in applied.plan.rules)
    assert fingerprint(model) == fp
    if mode == "exact":
        assert "0.weight" in diff.newly_trainable
    model.train()
    w0 = model[0].weight.detach().clone()
    train(model, opt, 1)
    assert not torch.equal(model[0].weight, w0)
    assert applied.verify().ok


@pytest.mark.parametrize("mode", MODES)
def test_remove_without_merge_restores_the_loaded_weights(mode):
    model = small()
    before = params_now(model)
    applied = wb.apply_plan(model, plan_of(ab(mode, a={"random": {"seed": 1}}, b_init={"random": {"seed": 2}})))
    train(model, torch.optim.SGD(applied.param_groups(lr=1e-2)), 2)
    applied.remove(merge=False)
    assert is_plain(model)
    after = params_now(model)
    assert list(after) == list(before)
    assert all(torch.equal(after[n], before[n]) for n in before)


@pytest.mark.parametrize("mode", MODES)
def test_reset_b_returns_to_the_start(mode):
    model = small()
    start = params_now(model)
    applied = wb.apply_plan(model, plan_of(ab(mode)))
    train(model, torch.optim.Adam(applied.param_groups(lr=1e-2)), 3)
    applied.reset_b(["0"])
    hs = applied.installed("reparam")
    assert float(hs["0"].b("weight").detach().abs().max()) == 0.0
    assert float(hs["4"].b("weight").detach().abs().max()) > 0.0
    applied.reset_b()
    for h in hs.values():
        for n in h.names:
            assert torch.equal(h.weight(n), start[h.param_path(n)])
    with pytest.raises(ReparamError, match="has no A\\+B"):
        applied.reset_b(["nope"])


@pytest.mark.parametrize("mode", MODES)
def test_reset_b_to_a_random_init_regenerates_it(mode):
    model = small()
    applied = wb.apply_plan(model, plan_of(ab(mode, b_init={"random": {"seed": 4, "scale": 0.01}})))
    h = applied.installed("reparam")["4"]
    b0 = h.b("bias").detach().clone()
    train(model, torch.optim.Adam(applied.param_groups(lr=1e-2)), 2)
    applied.reset_b(["4.bias"])
    assert torch.equal(h.b("bias").detach(), b0) or mode == "fused"
    torch.testing.assert_close(h.b("bias").detach(), b0, rtol=0, atol=1e-7)
    assert not torch.equal(h.b("weight").detach(), applied.installed("reparam")["4"].initial_b("weight"))


def test_update_switching_reparam_off_merges():
    model = small()
    applied = wb.apply_plan(model, plan_of(ab(b_init={"random": {"seed": 1, "scale": 0.01}})))
    model.eval()
    x, _ = batch(1)
    with torch.no_grad():
        before = model(x)
    diff = applied.update(plan_of(ab(), {"select": "*", "reparam": False}))
    assert is_plain(model) and set(diff.reinstalled) >= {"0", "4"}
    with torch.no_grad():
        assert torch.equal(model(x), before)


# ============================================================== files
def _trained(mode: str, **kw) -> tuple[nn.Module, wb.AppliedPlan]:
    model = small()
    applied = wb.apply_plan(model, plan_of(ab(mode, **kw)))
    train(model, torch.optim.Adam(applied.param_groups(lr=1e-2)), 3)
    return model, applied


@pytest.mark.parametrize("mode", MODES)
def test_export_and_load_deltas_round_trip(mode, tmp_path):
    model, applied = _trained(mode)
    f = tmp_path / "deltas.safetensors"
    applied.export_deltas(f)
    stored = load_file(str(f))
    assert set(stored) == {"0.weight", "1.weight", "1.bias", "4.weight", "4.bias"}
    fresh = small()
    again = wb.apply_plan(fresh, plan_of(ab(mode)))
    again.load_deltas(f)
    for h in again.installed("reparam").values():
        for n in h.names:
            if mode == "exact":
                assert torch.equal(h.b(n), stored[h.param_path(n)])
            else:  # B = W - A is only known to the precision of W
                torch.testing.assert_close(h.b(n), stored[h.param_path(n)], rtol=0, atol=1e-6)
    x, _ = batch(4)
    with torch.no_grad():  # train-mode BN (batch statistics): outputs depend on the weights only
        torch.testing.assert_close(fresh(x), model(x), rtol=0, atol=1e-6)
    # a delta file as B's initial value: same model again, through the plan and base_dir
    third = small()
    wb.apply_plan(third, plan_of(ab(mode, b_init={"file": "deltas.safetensors"})), base_dir=tmp_path)
    with torch.no_grad():
        torch.testing.assert_close(third(x), model(x), rtol=0, atol=1e-6)


def test_a_from_file_next_to_the_plan(tmp_path):
    donor = small(seed=7)
    save_file({k: v.detach().contiguous() for k, v in donor.named_parameters()}, str(tmp_path / "a.safetensors"))
    plan = plan_of(ab(a={"file": "a.safetensors"}))
    plan.save(tmp_path / "p.json")
    model = small()
    start = params_now(model)
    applied = wb.apply_plan(model, tmp_path / "p.json")  # base_dir = the plan's folder
    donor_params = dict(donor.named_parameters())
    for h in applied.installed("reparam").values():
        for n in h.names:
            key = h.param_path(n)
            assert torch.equal(h.a(n), donor_params[key])
            # BatchNorm's ones/zeros are the same in both models: no change there
            assert h.function_changed[n] == (not torch.equal(donor_params[key], start[key]))
    assert applied.installed("reparam")["0"].function_changed == {"weight": True}


def _bad_file(kind: str, tmp_path: Path) -> Path:
    f = tmp_path / "a.safetensors"
    good = {k: v.detach().contiguous() for k, v in small().named_parameters()}
    if kind == "missing_key":
        del good["4.weight"]
        save_file(good, str(f))
    elif kind == "wrong_shape":
        good["4.weight"] = torch.zeros(3, 7)
        save_file(good, str(f))
    elif kind == "not_safetensors":
        torch.save(good, f)
    return f


@pytest.mark.parametrize(
    ("kind", "needles"),
    [
        ("missing_key", ["no tensor for parameter '4.weight'", "a.safetensors"]),
        ("wrong_shape", ["'4.weight'", "shape (3, 7)", "(5, 216)"]),
        ("not_safetensors", ["not a readable safetensors file"]),
        ("no_file", ["not found"]),
    ],
)
def test_bad_a_file_is_refused_and_leaves_the_model_untouched(kind, needles, tmp_path):
    _bad_file(kind, tmp_path)
    model = small()
    before, fp = params_now(model), fingerprint(model)
    with pytest.raises(wb.PlanError) as ei:
        wb.apply_plan(model, plan_of(ab(a={"file": "a.safetensors"})), base_dir=tmp_path)
    for needle in needles:
        assert needle in str(ei.value)
    assert is_plain(model) and fingerprint(model) == fp
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


@pytest.mark.parametrize("mode", MODES)
def test_load_deltas_errors_name_the_parameter_and_change_nothing(mode, tmp_path):
    model, applied = _trained(mode)
    f = tmp_path / "d.safetensors"
    applied.export_deltas(f)
    bs = {k: v.clone() for k, v in load_file(str(f)).items()}
    target = wb.apply_plan(small(), plan_of(ab(mode), {"select": "4", "reparam": False}))
    with pytest.raises(ReparamError, match="without A\\+B in this plan: 4.bias, 4.weight"):
        target.load_deltas(f)
    target.load_deltas(f, strict=False)  # strict is the default
    assert torch.equal(target.installed("reparam")["0"].b("weight"), bs["0.weight"]) or mode == "fused"
    full = wb.apply_plan(small(), plan_of(ab(mode)))
    partial = {k: v for k, v in bs.items() if k != "1.bias"}
    save_file(partial, str(tmp_path / "p.safetensors"))
    with pytest.raises(ReparamError, match="no B for 1 parameter.*1.bias"):
        full.load_deltas(tmp_path / "p.safetensors")
    bad = dict(bs)
    bad["0.weight"] = torch.zeros(1)
    save_file(bad, str(tmp_path / "s.safetensors"))
    with pytest.raises(ReparamError, match="'0.weight'.*shape \\(1,\\)"):
        full.load_deltas(tmp_path / "s.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"not a tensor file")
    with pytest.raises(ReparamError, match="not a readable safetensors"):
        full.load_deltas(tmp_path / "junk.safetensors")
    assert all(s["b_norm"] == 0.0 for s in full.reparam_stats().values())  # nothing was half-loaded


def test_operations_need_a_plus_b(tmp_path):
    applied = wb.apply_plan(small(), plan_of({"select": "*", "frozen": False}))
    with pytest.raises(ReparamError, match="puts A\\+B on no parameter"):
        applied.export_deltas(tmp_path / "x.safetensors")
    assert not (tmp_path / "x.safetensors").exists()


# ============================================================== state_dict round trip
@pytest.mark.parametrize("mode", MODES)
def test_state_dict_round_trip_is_bit_identical(mode, tmp_path):
    plan = plan_of(ab(mode, b_init={"random": {"seed": 3, "scale": 0.01}}))
    model = small(seed=0)
    applied = wb.apply_plan(model, plan)
    train(model, torch.optim.Adam(applied.param_groups(lr=1e-2)), 3)
    torch.save(model.state_dict(), tmp_path / "ck.pt")
    rebuilt = small(seed=1)  # other initial weights: A ("current") must come from the checkpoint
    wb.apply_plan(rebuilt, plan)
    rebuilt.load_state_dict(torch.load(tmp_path / "ck.pt", weights_only=True))
    model.eval(), rebuilt.eval()
    x, _ = batch(5)
    with torch.no_grad():
        assert torch.equal(rebuilt(x), model(x))
    if mode == "exact":  # A is a persistent buffer
        assert any(k.endswith("parametrizations.weight.0.A") for k in model.state_dict())


# ============================================================== with the other switches
@pytest.mark.parametrize("mode", MODES)
def test_frozen_module_freezes_b_and_lr_scale_applies_to_b(mode):
    model = small()
    applied = wb.apply_plan(
        model,
        plan_of(ab(mode), {"select": "0", "frozen": True}, {"select": "4", "lr_scale": 0.1}),
    )
    hs = applied.installed("reparam")
    assert all(not p.requires_grad for _, p in hs["0"].trainable())
    assert all(p.requires_grad for _, p in hs["4"].trainable())
    groups = applied.param_groups(lr=1.0)
    by_name = {n: g["lr"] for g in groups for n in g["param_names"]}
    for name, _ in hs["0"].trainable():
        assert name not in by_name
    for name, _ in hs["4"].trainable():
        assert by_name[name] == pytest.approx(0.1)
    train(model, torch.optim.SGD(groups), 2)
    assert applied.verify().ok


def test_stats_report_norms_and_ratio():
    model = small()
    applied = wb.apply_plan(model, plan_of(ab(params=["weight"]), {"select": "1", "reparam": {}}))
    h = applied.installed("reparam")["4"]
    h.set_b("weight", torch.full_like(h.a("weight"), 0.5))
    s = applied.reparam_stats()["4.weight"]
    a_norm = float(torch.linalg.vector_norm(model[4].parametrizations.weight[0].A))
    assert s["b_norm"] == pytest.approx(0.5 * (5 * 216) ** 0.5)
    assert s["ratio"] == pytest.approx(s["b_norm"] / a_norm)
    assert applied.reparam_stats()["0.weight"]["b_norm"] == 0.0
    assert "4.bias" not in applied.reparam_stats()
    per_module = applied.reparam_module_stats()
    assert per_module["4"]["b_norm"] == pytest.approx(s["b_norm"])  # one tensor: the same numbers
    h1 = applied.installed("reparam")["1"]  # BatchNorm: weight and bias together
    h1.set_b("weight", torch.full((6,), 3.0))
    h1.set_b("bias", torch.full((6,), 4.0))
    assert per_module != applied.reparam_module_stats()
    assert applied.reparam_module_stats()["1"]["b_norm"] == pytest.approx(5.0 * 6**0.5)


def test_tied_weights_are_refused():
    with pytest.raises(wb.PlanError, match="tied weights"):
        wb.apply_plan(Tied(), plan_of({"select": "out", "reparam": {}}))


# ============================================================== AMP, compile, DDP, CUDA
@pytest.mark.parametrize("mode", MODES)
def test_autocast_bf16_trains_b(mode):
    model = small()
    applied = wb.apply_plan(model, plan_of(ab(mode)))
    x, y = batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x)
        loss = nn.functional.cross_entropy(out, y)
    assert out.dtype == torch.bfloat16
    loss.backward()
    for h in applied.installed("reparam").values():
        for _, b in h.trainable():
            assert b.grad is not None and b.grad.dtype == torch.float32 and b.grad.abs().sum() > 0


def test_torch_compile_traces_the_parametrization():
    """aot_eager: dynamo + AOT autograd trace A + B (inductor's C++ build takes ~20 s here)."""
    torch._dynamo.reset()
    eager, model = small(), small()
    ea = wb.apply_plan(eager, plan_of(ab(a={"random": {"seed": 1, "scale": 0.1}})))
    ca = wb.apply_plan(model, plan_of(ab(a={"random": {"seed": 1, "scale": 0.1}})))
    compiled = torch.compile(model, backend="aot_eager")
    loss_of(eager).backward()
    loss_of(compiled).backward()
    for he, hc in zip(ea.installed("reparam").values(), ca.installed("reparam").values()):
        for (_, be), (_, bc) in zip(he.trainable(), hc.trainable()):
            torch.testing.assert_close(bc.grad, be.grad, rtol=1e-5, atol=1e-6)
    torch._dynamo.reset()


def test_ddp_sees_b_as_a_parameter_and_can_skip_a(tmp_path):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available in this build")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        model = small()
        applied = wb.apply_plan(model, plan_of(ab()))
        names = applied.ddp_ignore_names()
        assert len(names) == 5 and all(n.endswith(".0.A") for n in names)
        DDP._set_params_and_buffers_to_ignore_for_model(model, names)
        ddp = DDP(model)
        assert not set(names) & set(ddp.named_module_buffers)
        assert "1.running_mean" in ddp.named_module_buffers  # BatchNorm stats still synced
        x, y = batch()
        nn.functional.cross_entropy(ddp(x), y).backward()
        assert all(b.grad is not None for h in applied.installed("reparam").values() for _, b in h.trainable())
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("mode", MODES)
def test_cuda_gradients_match_plain(mode):
    plain = small().cuda()
    model = copy.deepcopy(plain)
    applied = wb.apply_plan(model, plan_of(ab(mode, b_init={"random": {"seed": 1, "scale": 1e-3}})))
    with torch.no_grad():
        for h in applied.installed("reparam").values():
            for n in h.names:
                assert h.a(n).device.type == "cuda"
                plain.get_submodule(h.path).get_parameter(n).copy_(h.a(n) + h.b(n))
    x, y = (t.cuda() for t in batch())
    nn.functional.cross_entropy(plain(x), y).backward()
    nn.functional.cross_entropy(model(x), y).backward()
    plain_params = dict(plain.named_parameters())
    for h in applied.installed("reparam").values():
        for (_, b), n in zip(h.trainable(), h.names):
            torch.testing.assert_close(b.grad, plain_params[h.param_path(n)].grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("mode", ["exact", "fused"])
def test_model_moved_after_apply_keeps_a_with_the_weights(mode):
    """``plan.apply(model); model.to(...)``: A follows the model (dtype here; devices alike)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3))
    plan = wb.FreezePlan.from_dict({"rules": [{"select": "0", "reparam": {"kind": "a_plus_b", "mode": mode}}]})
    applied = plan.apply(model)
    model.to(torch.float64)
    handle = applied.installed("reparam")["0"]
    assert handle.a("weight").dtype == torch.float64 and handle.b("weight").dtype == torch.float64
    opt = torch.optim.AdamW(applied.param_groups(lr=0.1, weight_decay=0.1))
    model(torch.randn(2, 4, dtype=torch.float64)).sum().backward()
    opt.step()  # the fused decay hook reads A on W's device and dtype
    assert torch.allclose(handle.weight("weight"), handle.a("weight") + handle.b("weight"))
    assert handle.b("weight").abs().sum() > 0


def test_reset_b_takes_a_subtree_a_module_or_a_parameter():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4)), nn.Linear(4, 2))
    applied = wb.apply_plan(model, plan_of(ab()))
    hs = applied.installed("reparam")
    for h in hs.values():
        for n in h.names:
            h.set_b(n, torch.ones_like(h.a(n)))
    applied.reset_b(["0"])  # no A+B on "0" itself: every A+B inside it
    norms = {k: s["b_norm"] for k, s in applied.reparam_stats().items()}
    assert norms["0.0.weight"] == norms["0.1.bias"] == 0.0 and norms["1.weight"] > 0
    applied.reset_b(["1.bias"])
    assert applied.reparam_stats()["1.bias"]["b_norm"] == 0.0 and applied.reparam_stats()["1.weight"]["b_norm"] > 0
    with pytest.raises(ReparamError, match="'2' has no A\\+B in it"):
        applied.reset_b(["2"])


def test_exact_writes_w_into_one_buffer_and_a_layer_used_twice_stays_exact():
    """Exact mode reuses one W buffer per tensor across steps; a layer called twice in one
    forward gets a fresh W for the second call (the first is still in the graph), so the
    gradient equals that of the plain model."""
    torch.manual_seed(0)
    lin = nn.Linear(4, 4)
    ref = nn.Linear(4, 4)
    ref.load_state_dict(lin.state_dict())

    class Twice(nn.Module):
        def __init__(self, layer: nn.Module) -> None:
            super().__init__()
            self.layer = layer

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.layer(torch.tanh(self.layer(x)))

    model = Twice(lin)
    wb.apply_plan(model, plan_of(ab()))
    x = torch.randn(3, 4)
    ptrs = set()
    for _ in range(3):
        model(x).sum().backward()
        Twice(ref)(x).sum().backward()
        torch.testing.assert_close(lin.parametrizations.weight.original.grad, ref.weight.grad, rtol=0, atol=1e-6)
        lin.zero_grad()
        ref.zero_grad()
        ptrs.add(lin.parametrizations.weight[0]._w.data_ptr())
    assert len(ptrs) == 1
