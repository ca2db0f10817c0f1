"""The advisor's own meta kernels (BatchNorm, elementwise arithmetic) give what torch's give, field by field."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn
from torch.utils._pytree import tree_flatten

from workbench.core.advisor import profile as profile_module
from workbench.core.advisor.meta_kernels import batch_norm_on_meta, binary_on_meta, fast_meta_kernel
from workbench.core.advisor.profile import profile_model
from workbench.core.training.memory_probe import tensors_in

_BN = torch.ops.aten.native_batch_norm.default

SHAPES = [(4, 8), (4, 8, 5), (4, 8, 5, 5), (4, 8, 1, 1), (1, 8, 5, 5), (4, 1, 3, 3), (4, 8, 1, 7),
          (2, 8, 3, 4, 5), (2, 8, 1, 1, 1), (1, 4, 1, 1, 2)]
LAYOUTS = {"contiguous": lambda x: x,
           "channels_last": lambda x: x.to(memory_format={4: torch.channels_last, 5: torch.channels_last_3d}[x.dim()])
           if x.dim() in (4, 5) else None,
           "transposed": lambda x: x.transpose(0, -1) if x.dim() > 2 else None}


def _inputs(x: torch.Tensor, affine: bool, stats: bool) -> list[torch.Tensor | None]:
    c = x.shape[1]
    return [torch.empty(c, device="meta", dtype=x.dtype) if on else None for on in (affine, affine, stats, stats)]


def _fields(t: torch.Tensor) -> tuple[object, ...]:
    return t.shape, t.dtype, t.stride(), t.device, t.storage_offset()


def _cases() -> list[tuple[tuple[int, ...], str, torch.dtype, bool, bool, bool]]:
    """Every shape and layout in float32; the 16- and 64-bit dtypes (their statistics' dtype) on two shapes."""
    cases = [(shape, layout, torch.float32, training, k % 2 == 0, stats)
             for k, (shape, layout, training, stats) in enumerate(
                 itertools.product(SHAPES, LAYOUTS, (True, False), (True, False)))]
    cases += [(shape, layout, dtype, training, True, stats) for dtype, shape, layout, training, stats in itertools.product(
        (torch.bfloat16, torch.float16, torch.float64), [(4, 8, 5, 5), (2, 8, 1, 1, 1)], LAYOUTS, (True, False),
        (True, False))]
    return cases


def test_batch_norm_outputs_are_torchs_own() -> None:
    compared = 0
    for case in _cases():
        shape, layout, dtype, training, affine, stats = case
        x = LAYOUTS[layout](torch.empty(shape, device="meta", dtype=dtype))
        if x is None or (not training and not stats):
            continue
        w, b, rm, rv = _inputs(x, affine, stats)
        ref_stats = [torch.empty(x.shape[1], device="meta", dtype=dtype) if stats else None for _ in range(2)]
        expected = _BN(x, w, b, *ref_stats, training, 0.1, 1e-5)
        got = batch_norm_on_meta(x, w, b, rm, rv, training, 0.1, 1e-5)
        assert got is not None, case
        assert [_fields(t) for t in got] == [_fields(t) for t in expected], case
        for mine, theirs in zip((rm, rv), ref_stats):  # the running statistics' version counters as torch's
            assert (None if mine is None else mine._version) == (None if theirs is None else theirs._version), case
        compared += 1
    assert compared > 80


def test_torch_decides_what_the_fast_kernel_does_not_cover() -> None:
    x = torch.empty(1, 8, 1, 1, device="meta")  # one value per channel in training: torch's own error
    _, _, rm, rv = _inputs(x, False, True)
    with pytest.raises(ZeroDivisionError):
        _BN(x, None, None, rm, rv, True, 0.1, 1e-5)
    assert batch_norm_on_meta(x, None, None, rm, rv, True, 0.1, 1e-5) is None
    strided = torch.empty(4, 8, 6, 6, device="meta")[:, :, ::2]  # memory that is not dense
    assert batch_norm_on_meta(strided, None, None, None, None, True, 0.1, 1e-5) is None
    real = torch.randn(4, 8, 3, 3)
    assert batch_norm_on_meta(real, None, None, None, None, True, 0.1, 1e-5) is None
    assert fast_meta_kernel(_BN, (x,), {"training": True}) is None
    assert fast_meta_kernel(torch.ops.aten.relu.default, (x,), {}) is None
    empty = torch.empty(0, 8, 3, 3, device="meta")
    assert batch_norm_on_meta(empty, None, None, None, None, True, 0.1, 1e-5) is None


ATEN = torch.ops.aten
BINARY_SHAPES = [(4, 8, 5, 5), (4, 1, 5), (1, 16, 32), (2, 3), (5,), (), (1,), (4, 8, 1, 1), (1, 8, 1, 1), (3, 1),
                 (2, 1, 3, 1)]
DTYPE_PAIRS = [(torch.float32, torch.float32), (torch.bfloat16, torch.float32), (torch.bfloat16, torch.bfloat16),
               (torch.float16, torch.float64)]


def test_elementwise_outputs_are_torchs_own() -> None:
    compared = 0
    for k, (op, sa, sb) in enumerate(itertools.product((ATEN.add.Tensor, ATEN.sub.Tensor, ATEN.mul.Tensor,
                                                        ATEN.div.Tensor), BINARY_SHAPES, BINARY_SHAPES)):
        da, db = DTYPE_PAIRS[k % len(DTYPE_PAIRS)]
        a, b = torch.empty(sa, device="meta", dtype=da), torch.empty(sb, device="meta", dtype=db)
        try:
            expected = op(a, b)
        except RuntimeError:  # shapes that do not broadcast: torch says so
            assert binary_on_meta(a, b) is None and fast_meta_kernel(op, (a, b), {}) is None
            continue
        got = fast_meta_kernel(op, (a, b), {})
        assert got is not None and _fields(got) == _fields(expected), (op, sa, sb, da, db)
        compared += 1
    assert compared > 300


def test_torch_makes_the_elementwise_outputs_the_fast_kernel_does_not_cover() -> None:
    x = torch.empty(4, 8, device="meta")
    assert fast_meta_kernel(ATEN.add.Tensor, (x, x), {"alpha": 2}) is not None  # alpha changes no field
    assert fast_meta_kernel(ATEN.div.Tensor, (x, x), {"rounding_mode": "floor"}) is None
    assert binary_on_meta(x.t(), x.t()) is None  # laid out other than row-major
    assert binary_on_meta(x, torch.empty(4, 8, device="meta", dtype=torch.int64)) is None
    assert binary_on_meta(x, 2.0) is None and binary_on_meta(x, torch.ones(4, 8)) is None
    assert binary_on_meta(x, torch.empty(0, 8, device="meta")) is None


def _pytree_tensors(tree: object) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def test_tensors_in_are_pytrees_tensor_leaves() -> None:
    a, b, c = torch.empty(1, device="meta"), torch.ones(2), torch.empty(3, 3, device="meta")
    result = torch.ones(2, 3).max(dim=1)  # a structseq, as ops return
    trees = [a, (a, 2, None), ([a, b], {"x": c, "alpha": 1.0}), ((), [], {}), ([[a], (b, [c])], {"k": [a, b]}),
             (result, [torch.float32, "cpu"]), ((a, b), {"y": (c,), "x": a})]
    for tree in trees:
        assert [id(t) for t in tensors_in(tree)] == [id(t) for t in _pytree_tensors(tree)], tree


class _Residual(nn.Module):
    """``x + conv(x) * w - x / s``: meta-tensor arithmetic (one product with a Python number)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 3, padding=1)
        self.w = nn.Parameter(torch.ones(8, 1, 1))
        self.s = nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) * self.w - x / self.s * 0.5


def _net() -> nn.Module:
    """Convolutions with BatchNorm2d (one of them downsampling), a residual, then a Linear with BatchNorm1d."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), _Residual(), nn.Conv2d(8, 8, 3, stride=2),
                         nn.BatchNorm2d(8), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 6), nn.BatchNorm1d(6),
                         nn.Linear(6, 3))


@pytest.mark.parametrize(("bn_eval", "param_dtype"), [(False, None), (True, None), (False, torch.bfloat16)],
                         ids=["train", "bn-eval", "bf16"])
def test_a_profile_is_the_same_with_torchs_kernels_and_pytree(monkeypatch: pytest.MonkeyPatch, bn_eval: bool,
                                                   param_dtype: torch.dtype | None) -> None:
    fast = profile_model(_net(), (2, 3, 12, 12), bn_eval=bn_eval, param_dtype=param_dtype)
    monkeypatch.setattr(profile_module, "fast_meta_kernel", lambda func, args, kwargs: None)
    monkeypatch.setattr(profile_module, "tensors_in", _pytree_tensors)
    slow = profile_model(_net(), (2, 3, 12, 12), bn_eval=bn_eval, param_dtype=param_dtype)
    assert fast == slow
    assert {op.module for op in slow.ops} >= {"1", "3", "5", "9"}  # every BatchNorm and the residual ran
