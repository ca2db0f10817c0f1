"""One contract for every installer of the freezing layer (INSTALLERS), and every variant of A+B.

install -> the trainable and fixed tensors are disjoint (by identity) and name real tensors ->
train a step -> remove(merge=False) gives back bit-identical tensors and the very parameter
objects, in the same order; remove(merge=True) keeps identity and order too.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from workbench.core.freezing.plan_handle import INSTALLERS

#: (installer key, module path, spec) cases; every installer has at least one.
CASES: list[tuple[str, str, Any]] = [
    ("partial", "0", {"param": "weight", "dim": 0, "trainable": [[0, 3]]}),
    ("reparam", "0", {"mode": "exact"}),
    ("reparam", "0", {"mode": "fused"}),
    ("reparam", "0", {"mode": "exact", "a": {"random": {"seed": 3, "scale": 0.1}}, "b_init": {"random": {"seed": 4, "scale": 0.01}}}),
    ("reparam", "0", {"mode": "fused", "a": "zeros"}),
    ("reparam", "0", {"rank": 2, "mode": "exact"}),
    ("reparam", "0", {"rank": 2, "mode": "fused", "dropout": 0.1}),
    ("reparam", "0", {"rank": 2, "mode": "exact", "dora": True}),
    ("reparam", "0", {"rank": 2, "mode": "fused", "dora": True}),
    ("reparam", "0", {"rank": 2, "mode": "fused", "a": {"random": {"seed": 5}}}),
    ("checkpoint", "2", True),
]


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 8), nn.Tanh()), nn.Linear(8, 3))


def _ids(case: tuple[str, str, Any]) -> str:
    return f"{case[0]}-{case[2]}"


def test_every_installer_has_a_case():
    assert {i.key for i in INSTALLERS} == {c[0] for c in CASES}


def _install(model: nn.Module, key: str, path: str, spec: Any) -> Any:
    installer = next(i for i in INSTALLERS if i.key == key)
    return installer.install(model, path, spec, base_dir=None)


def _step(model: nn.Module, handle: Any) -> None:
    params = [p for _, p in handle.trainable()]
    for p in model.parameters():
        p.requires_grad_(False)
    for p in params:
        p.requires_grad_(True)
    model.train()
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(1))
    if params:
        opt = torch.optim.SGD(params, lr=0.1)
        model(x).pow(2).mean().backward()
        opt.step()


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_trainable_and_fixed_are_disjoint_real_tensors(case):
    key, path, spec = case
    model = _model()
    handle = _install(model, key, path, spec)
    trainable, fixed = handle.trainable(), handle.fixed()
    assert not {id(t) for _, t in trainable} & {id(t) for _, t in fixed}
    assert len({n for n, _ in trainable}) == len(trainable) and len({n for n, _ in fixed}) == len(fixed)
    named = dict(model.named_parameters())
    for name, p in trainable:  # trainable names are the model's own parameter names
        assert named[name] is p
    if key != "checkpoint":
        assert trainable


@pytest.mark.parametrize("merge", [False, True])
@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_remove_restores_identity_and_order_and_merge_false_restores_values(case, merge):
    key, path, spec = case
    model = _model()
    before = [(n, p, p.detach().clone()) for n, p in model.named_parameters()]
    buffers = {n: b.detach().clone() for n, b in model.named_buffers()}
    handle = _install(model, key, path, spec)
    # plain parameters an installer passes through (partial's bias) train as themselves and keep
    # the step; A+B's own tensors (names) are not pass-through even when their object stays (fused)
    own = {handle.param_path(n) for n in getattr(handle, "names", [])}
    old = {n: id(p) for n, p, _ in before}
    passthrough = {id(t) for n, t in handle.trainable() if old.get(n) == id(t) and n not in own}
    _step(model, handle)
    fixed_before = {n: t.detach().clone() for n, t in handle.fixed()}
    for n, t in handle.fixed():  # fixed tensors did not move in the step
        assert torch.equal(t, fixed_before[n])
    handle.remove(merge=merge)
    handle.remove(merge=merge)  # twice is harmless
    after = list(model.named_parameters())
    assert [n for n, _ in after] == [n for n, _, _ in before]
    for (name, p), (_, p0, v0) in zip(after, before):
        assert p is p0, f"{name} is a new parameter object"
        if not merge and id(p) not in passthrough:
            assert torch.equal(p.detach(), v0), f"{name} changed after remove(merge=False)"
    assert dict(model.named_buffers()).keys() == buffers.keys()
    assert type(model[0]) is nn.Linear and not hasattr(model[0], "parametrizations")


@pytest.mark.parametrize("case", [c for c in CASES if c[0] == "reparam"], ids=_ids)
def test_merge_true_keeps_the_trained_function(case):
    key, path, spec = case
    if isinstance(spec, dict) and spec.get("dropout"):
        pytest.skip("dropout makes the training-mode output random")
    model = _model()
    handle = _install(model, key, path, spec)
    _step(model, handle)
    model.eval()
    x = torch.randn(3, 6, generator=torch.Generator().manual_seed(2))
    trained = model(x).detach()
    handle.remove(merge=True)
    torch.testing.assert_close(model(x), trained, atol=1e-5, rtol=1e-5)
