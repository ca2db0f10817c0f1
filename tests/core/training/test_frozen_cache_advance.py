"""The frozen-prefix cache across freezes: rows carried to the new cut, partial hits, a head cut
called alone; the losses stay those of the uncached run step for step."""

from __future__ import annotations

import math
from typing import Any

import torch
import torchvision
from torch import nn

from tests.core.training.test_frozen_cache import run_cached
from workbench.core.training.cache_cut import Cut, Placeholders, batch_part, rows_until, run_from
from workbench.core.training.cache_store import SPILL_NAME, SPILL_NAME_2
from workbench.core.training.frozen_cache import cache_line


def _run(plan: dict[str, Any], mode: str, **kw: Any) -> tuple[dict[str, Any], list[float], list[str]]:
    t, losses, events = run_cached(lambda: torchvision.models.resnet18(num_classes=10), plan, mode,
                                   **{"steps": 14, "image_size": 16, "optimizer": "sgd", **kw})
    assert t.result is not None
    return t.result.summary, losses, events


def _assert_same(a: list[float], b: list[float]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert math.isclose(x, y, rel_tol=1e-5, abs_tol=1e-6), (a, b)


def _frozen(*paths: str) -> list[dict[str, Any]]:
    return [{"select": p, "frozen": True, "eval": True} for p in paths]


def test_stages_that_freeze_more_carry_the_rows_forward() -> None:
    plan = {"format": "freeze-plan", "version": 1, "rules": _frozen("conv1", "bn1", "layer1"),
            "stages": [{"at_step": 6, "rules": _frozen("layer2")}, {"at_step": 10, "rules": _frozen("layer3")}]}
    _, off, _ = _run(plan, "off")
    t, on, events = _run(plan, "on")
    _assert_same(off, on)
    stats = t["frozen_cache"]
    # 4 steps fill the rows at layer2; every later step is served, at layer3 from step 6, layer4 from 10
    assert stats["cut"] == "layer4" and stats["advances"] == 2 and stats["invalidations"] == 0
    assert stats["misses"] == 4 and stats["hits"] == 10 and stats["rows"] == 32
    advanced = [e for e in events if "advanced" in e]
    assert advanced == [
        "frozen-prefix cache advanced from 'layer2' to 'layer3': 32 kept rows carried through the newly frozen modules",
        "frozen-prefix cache advanced from 'layer3' to 'layer4': 32 kept rows carried through the newly frozen modules",
    ]


def test_auto_freeze_decisions_advance_the_cache_and_stay_exact() -> None:
    plan = {"format": "freeze-plan", "version": 1, "rules": _frozen("conv1", "bn1", "layer1.0")}
    kw = {"steps": 16, "auto_freeze": True, "auto_freeze_every": 4, "auto_freeze_threshold": 100.0,
          "auto_freeze_max": 0.5}
    _, off, _ = _run(plan, "off", **kw)
    t, on, _ = _run(plan, "on", **kw)
    _assert_same(off, on)
    decisions = t["auto_freeze"]["decisions"]
    assert decisions and decisions[0]["at_step"] == 8 and decisions[0]["blocks"][-1] == "layer2.1"
    stats = t["frozen_cache"]
    assert stats["cut"] == "layer3" and stats["advances"] == 1 and stats["invalidations"] == 0
    assert stats["hits"] == 12 and stats["misses"] == 4  # no epoch lost to the decision


def test_a_cut_found_mid_epoch_serves_partial_batches() -> None:
    plan = {"format": "freeze-plan", "version": 1, "rules": [],
            "stages": [{"at_step": 2, "rules": _frozen("conv1", "bn1", "layer1", "layer2", "layer3")}]}
    _, off, _ = _run(plan, "off", steps=12)
    t, on, _ = _run(plan, "on", steps=12)
    _assert_same(off, on)
    stats = t["frozen_cache"]
    assert stats["cut"] == "layer4" and stats["partial"] >= 2 and stats["rows"] == 32
    # epoch 2 finds half the rows: its partial steps fill the rest, so epoch 3 is all hits
    assert stats["hits"] >= 4 and stats["hits"] + stats["partial"] + stats["misses"] == 10


def test_unfreezing_before_the_cut_still_drops_the_rows() -> None:
    plan = {"format": "freeze-plan", "version": 1, "rules": _frozen("conv1", "bn1", "layer1", "layer2"),
            "stages": [{"at_step": 6, "rules": [{"select": "layer2", "frozen": False, "eval": False}]}]}
    _, off, _ = _run(plan, "off", steps=10)
    t, on, events = _run(plan, "on", steps=10)
    _assert_same(off, on)
    stats = t["frozen_cache"]
    assert stats["advances"] == 0 and stats["invalidations"] == 1 and stats["cut"] == "layer2"
    assert any("frozen-prefix cache dropped" in e for e in events)


class _Glue(nn.Module):
    """Functional glue between modules, and a head whose output is the model's."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(6, 6)
        self.b = nn.Linear(6, 6)
        self.head = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.a(x)) * scale
        x = torch.relu(self.b(x))
        return self.head(x)


def test_rows_until_stops_at_the_module_and_can_start_from_kept_rows() -> None:
    torch.manual_seed(0)
    m = _Glue()
    x, scale = torch.randn(5, 6), torch.rand(5, 1)
    want_b = (torch.relu(m.a(x)) * scale).detach()
    called: list[str] = []
    m.head.register_forward_pre_hook(lambda *_: called.append("head"))
    got = rows_until(m.b, 0, m, (x, scale), {})
    assert got is not None and torch.allclose(got, want_b) and not called  # nothing after b ran
    assert rows_until(m.b, 0, lambda *_a: None, (x, scale), {}) is None  # never reached
    cut_b = Cut("b", m.b, 0, [("a", m.a, ("T", (5, 6), True, torch.float32, torch.device("cpu")))], (6,), torch.float32)
    want_head = torch.relu(m.b(want_b)).detach()
    got = rows_until(m.head, 0, m, (x, scale), {}, start=(cut_b, want_b, Placeholders()))
    assert got is not None and torch.allclose(got, want_head)
    assert torch.allclose(run_from(cut_b, want_b, m, (x, scale), {}, Placeholders()), m(x, scale))
    head = Cut("head", m.head, 0, [], (6,), torch.float32, direct=True)
    assert torch.allclose(run_from(head, want_head, m, (x, scale), {}, Placeholders()), m(x, scale))
    # a part of the batch: tensors of the batch's size are cut, others kept
    part = batch_part(((x, torch.ones(2)), {"s": scale}), torch.tensor([0, 3]), 5)
    assert part[0][0].shape == (2, 6) and part[0][1].shape == (2,) and torch.equal(part[1]["s"], scale[[0, 3]])
    assert SPILL_NAME != SPILL_NAME_2


def test_the_cache_line_counts_partial_steps_and_advances() -> None:
    stats = {"cut": "layer4", "rows": 32, "bytes_memory": 1024, "bytes_disk": 0, "hits": 6, "partial": 2,
             "misses": 4, "hit_rate": 0.5, "advances": 1}
    line = cache_line(stats)
    assert "hit rate 50% (6 of 12 steps)" in line
    assert ", 2 partly (the prefix ran for the missing samples only), carried to a later cut once" in line
    assert "carried to a later cut 3 times" in cache_line({**stats, "advances": 3})
    assert "partly" not in cache_line({**stats, "partial": 0, "advances": 0})
