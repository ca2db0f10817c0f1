"""Property: after any sequence of tampering operations on a model with an applied plan,
verify fails exactly when a frozen tensor's value, identity or place changed.

The oracle is independent of verify: it keeps the frozen objects and clones of their values
from apply time and asks, after the operations, whether each name still holds the same object
(parameters), the same kind and value, under the same set of names.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

import workbench as wb

PLAN = {"rules": [{"select": "*", "frozen": True}, {"select": "head", "frozen": False}]}
PARAMS = [
    "stem.weight", "stem.bias", "bn.weight", "bn.bias", "block.0.weight", "block.0.bias",
    "block.1.weight", "block.1.bias", "head.0.weight", "head.0.bias", "head.1.weight", "head.1.bias",
    "aux.weight", "aux.bias",
]
BUFFERS = ["bn.running_mean", "bn.running_var"]
MODULES = ["stem", "bn", "block", "block.0", "block.1", "head", "head.0", "head.1", "aux"]


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.block = nn.Sequential(nn.Conv2d(4, 4, 3), nn.Conv2d(4, 4, 3))
        self.head = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
        self.aux = nn.Linear(4, 4)


def _parent(model: nn.Module, path: str) -> tuple[nn.Module, str] | None:
    head, _, leaf = path.rpartition(".")
    try:
        parent = model.get_submodule(head) if head else model
    except AttributeError:
        return None
    return (parent, leaf) if leaf in parent._modules or leaf in parent._parameters or leaf in parent._buffers else None


def _get(model: nn.Module, name: str) -> torch.Tensor | None:
    hit = _parent(model, name)
    if hit is None:
        return None
    parent, leaf = hit
    t = parent._parameters.get(leaf)
    return t if t is not None else parent._buffers.get(leaf)


def _do(model: nn.Module, op: tuple[Any, ...]) -> None:
    kind = op[0]
    if kind == "value":
        t = _get(model, op[1])
        if t is not None:
            with torch.no_grad():
                t.add_(1.0)
    elif kind in ("swap", "tie"):
        a, b = _get(model, op[1]), _get(model, op[2])
        if not isinstance(a, nn.Parameter) or not isinstance(b, nn.Parameter) or a.shape != b.shape:
            return
        pa, pb = _parent(model, op[1]), _parent(model, op[2])
        assert pa is not None and pb is not None
        if kind == "swap":
            setattr(pa[0], pa[1], b)
            setattr(pb[0], pb[1], a)
        else:
            setattr(pa[0], pa[1], b)  # op[1] now names op[2]'s tensor
    elif kind == "to_buffer":
        t = _get(model, op[1])
        if not isinstance(t, nn.Parameter):
            return
        hit = _parent(model, op[1])
        assert hit is not None
        delattr(hit[0], hit[1])
        hit[0].register_buffer(hit[1], t.detach().clone())  # same values, now a buffer
    else:
        hit = _parent(model, op[1])
        if hit is None or hit[1] not in hit[0]._modules:
            return
        parent, leaf = hit
        child = parent._modules[leaf]
        if kind == "wrap":
            setattr(parent, leaf, nn.Sequential(child))
        elif kind == "replace_copy":
            setattr(parent, leaf, copy.deepcopy(child))
        elif kind == "replace_identity":
            setattr(parent, leaf, nn.Identity())
        elif kind == "remove":
            delattr(parent, leaf)


def _table(model: nn.Module) -> dict[str, tuple[str, torch.Tensor]]:
    out = {n: ("buffer", t) for n, t in model.named_buffers(remove_duplicate=False)}
    out.update({n: ("parameter", t) for n, t in model.named_parameters(remove_duplicate=False)})
    return out


def _names_of(table: dict[str, tuple[str, torch.Tensor]], t: torch.Tensor) -> frozenset[str]:
    return frozenset(n for n, (_, x) in table.items() if x is t)


OPS = st.one_of(
    st.tuples(st.just("value"), st.sampled_from(PARAMS + BUFFERS)),
    # a trainable parameter made a buffer can no longer train: "plan not in force", not this property
    st.tuples(st.just("to_buffer"), st.sampled_from([n for n in PARAMS if not n.startswith("head.")])),
    st.tuples(st.sampled_from(["swap", "tie"]), st.sampled_from(PARAMS), st.sampled_from(PARAMS)),
    st.tuples(st.sampled_from(["wrap", "replace_copy", "replace_identity", "remove"]), st.sampled_from(MODULES)),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(OPS, max_size=5))
def test_verify_fails_exactly_when_a_frozen_tensor_changed(ops: list[tuple[Any, ...]]) -> None:
    torch.manual_seed(0)
    model = Net()
    applied = wb.apply_plan(model, PLAN)
    before = _table(model)
    guarded = {n: (k, t, t.detach().clone(), _names_of(before, t)) for n, (k, t) in before.items()
               if not n.startswith("head.")}
    for op in ops:
        _do(model, op)
    now = _table(model)
    changed = False
    for name, (kind, obj, value, names) in guarded.items():
        hit = now.get(name)
        if hit is None or hit[0] != kind:
            changed = True
            break
        t = hit[1]
        if (kind == "parameter" and t is not obj) or not torch.equal(t.detach(), value) or _names_of(now, t) != names:
            changed = True
            break
    report = applied.verify()
    assert report.ok == (not changed), f"ops={ops}\n{report}"
