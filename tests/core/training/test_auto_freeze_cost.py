"""Auto-freeze weighs what a freeze saves: blocks' compute shares, counted on the first forward, and
the rule that freezes a flattened block only when it, or a block it opens the way to, saves compute."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from workbench.core.plan.rules import FreezePlan
from workbench.core.training.auto_freeze import WORTH_SHARE, AutoFreezer
from workbench.core.training.auto_freeze_cost import BlockCosts, module_macs
from workbench.core.training.module_stats import ModuleStats


def _stats(step: int, norms: dict[str, float]) -> ModuleStats:
    paths = tuple(norms)
    return ModuleStats(step, paths, tuple(v * v for v in norms.values()), (0.0,) * len(paths), (1.0,) * len(paths))


def test_module_macs_of_convolutions_and_linear_layers() -> None:
    conv = nn.Conv2d(4, 6, kernel_size=3, groups=2)
    x = torch.zeros(2, 4, 8, 8)
    assert module_macs(conv, (x,), conv(x)) == 2 * 6 * 6 * 6 * (2 * 3 * 3)  # output elements x (in / groups) x kernel
    up = nn.ConvTranspose1d(3, 5, kernel_size=4)
    y = torch.zeros(2, 3, 7)
    assert module_macs(up, (y,), up(y)) == 2 * 3 * 7 * (5 * 4)  # input elements x out channels x kernel
    lin = nn.Linear(10, 3)
    z = torch.zeros(4, 10)
    assert module_macs(lin, (z,), lin(z)) == 4 * 3 * 10
    assert module_macs(nn.ReLU(), (z,), z) == 40 and module_macs(nn.Identity(), (z,), None) == 0
    emb = nn.Embedding(100, 6)
    ids = torch.zeros(2, 5, dtype=torch.long)
    assert module_macs(emb, (ids,), emb(ids)) == 2 * 5 * 6  # a lookup: one per output element


def test_recurrent_and_attention_layers_count_their_own_matrices() -> None:
    lstm = nn.LSTM(4, 8, batch_first=True)
    x = torch.zeros(3, 5, 4)
    assert module_macs(lstm, (x,), lstm(x)) == 3 * 5 * (4 * 8 * 4 + 4 * 8 * 8)  # 4 gates, per time step and sample
    attn = nn.MultiheadAttention(8, 2, batch_first=True)
    q = torch.zeros(2, 5, 8)
    # the input projection only (its out_proj is a Linear child, counted as one)
    assert module_macs(attn, (q, q, q), attn(q, q, q)) == 2 * 5 * 3 * 8 * 8
    model = nn.Sequential(nn.Linear(4, 4), nn.LSTM(4, 8, batch_first=True))
    costs = BlockCosts(model, ["0", "1"])
    model(torch.zeros(3, 5, 4))
    assert costs.macs == {"0": 3 * 5 * 16, "1": 3 * 5 * (4 * 32 + 8 * 32)}


def test_shares_are_counted_on_the_first_forward_then_the_hooks_go() -> None:
    model = nn.Sequential(nn.Linear(8, 8), nn.Sequential(nn.Linear(8, 16), nn.ReLU()), nn.Linear(16, 2))
    costs = BlockCosts(model, ["1", "2"], front=["0"])
    assert not costs.known and costs.shares() == {}
    model(torch.zeros(3, 8))
    total = 3 * (64 + 128 + 16 + 32)
    assert costs.total == total and costs.macs == {"1": 3 * (128 + 16), "2": 3 * 32}
    assert costs.front_share() == pytest.approx(3 * 64 / total)
    assert sum(costs.shares().values()) + costs.front_share() == pytest.approx(1.0)
    model(torch.zeros(5, 8))  # counted once: the next passes cost nothing and change nothing
    assert costs.total == total
    assert all(not m._forward_hooks for m in model.modules())


def _uneven() -> tuple[nn.Module, list[str]]:
    """Five blocks as CREPE tiny's layers: two heavy convolutions, each followed by a cheap
    normalisation, and a light one after them (the heavy ones hold 98 % of the compute)."""
    model = nn.Sequential(nn.Conv1d(4, 16, 17, padding=8), nn.BatchNorm1d(16), nn.Conv1d(16, 8, 17, padding=8),
                          nn.BatchNorm1d(8), nn.Conv1d(8, 2, 3, padding=1))
    return model, ["0", "1", "2", "3", "4"]


def _first_forward(model: nn.Module) -> None:
    """The run's first forward pass: the freezer counts the costs on it."""
    model(torch.zeros(2, 4, 32))


def _decide(auto: AutoFreezer, step: int, plan: FreezePlan, norms: dict[str, float]) -> FreezePlan | None:
    """One window of measurements and an evaluation at its end; a freeze is applied as the engine would."""
    auto.observe(_stats(step, norms))
    new = auto.decide(step + 1, plan)
    if new is not None:
        for b in auto.decisions[-1].blocks:
            auto.model.get_submodule(b).requires_grad_(False)
    return new


def test_auto_freeze_stops_after_the_last_block_worth_freezing() -> None:
    model, blocks = _uneven()
    auto = AutoFreezer(model, blocks, every=2, threshold=0.1, max_fraction=1.0)
    _first_forward(model)
    shares = auto.costs.shares()
    assert shares["0"] > 0.3 and shares["2"] > 0.6 and max(shares["1"], shares["3"], shares["4"]) < 0.02
    assert auto.min_share == pytest.approx(WORTH_SHARE / 5)
    plan = FreezePlan()
    flat = dict.fromkeys(blocks, 1.0)
    assert _decide(auto, 0, plan, flat) is None  # the first window
    moving = dict(flat, **{"2": 2.0})  # 0 and 1 flattened, 2 not: 1, cheap, is on the way to 2
    plan = _decide(auto, 2, plan, moving) or plan
    assert [d.blocks for d in auto.decisions] == [["0", "1"]]
    assert auto.take_events()[-1] == ("auto-freeze, step 4: 0 .. 1 flattened (change 0 %, 0 %, threshold 10 %): "
                                      "frozen from step 5, saving 33 % of the step's compute")
    later = dict(flat, **{"2": 3.0})
    plan = _decide(auto, 4, plan, later) or plan  # 2 still moving: it waits, and so do 3 and 4
    assert len(auto.decisions) == 1
    plan = _decide(auto, 6, plan, later) or plan  # 2 flattened: the last block worth freezing
    assert [d.blocks for d in auto.decisions] == [["0", "1"], ["2"]]
    assert auto.decisions[1].saves == pytest.approx(shares["2"])
    assert auto.take_events()[-1].endswith("; the last worth freezing: 3 .. 4 would save 2 % (a block is worth "
                                           "freezing from 10 %, half an even share)")
    # 3 and 4, flattened, would save 2 % of a step: auto-freeze stops
    assert _decide(auto, 8, plan, later) is None
    assert auto.take_events()[-1] == ("auto-freeze, step 10: nothing more worth freezing: 3 .. 4 would save 2 % of "
                                      "the step's compute (a block is worth freezing from 10 %, half an even share)")
    assert len(plan.stages) == 2 and auto.summary()["frozen_blocks"] == 3


def test_the_old_rule_froze_every_flattened_block_up_to_the_cap() -> None:
    """What the rule replaces: without counted costs (none known before the first forward) the whole
    flattened run freezes, the cheap tail included."""
    model, blocks = _uneven()
    auto = AutoFreezer(model, blocks, every=2, threshold=0.1, max_fraction=1.0)  # no forward pass yet
    flat = dict.fromkeys(blocks, 1.0)
    plan = FreezePlan()
    _decide(auto, 0, plan, flat)
    assert _decide(auto, 2, plan, flat) is not None and auto.decisions[0].blocks == blocks
    assert auto.decisions[0].saves is None and auto.summary()["compute_shares"] == {}
    model, blocks = _uneven()
    priced = AutoFreezer(model, blocks, every=2, threshold=0.1, max_fraction=1.0)
    _first_forward(model)
    _decide(priced, 0, plan, flat)
    assert _decide(priced, 2, plan, flat) is not None and priced.decisions[0].blocks == ["0", "1", "2"]


def test_equal_blocks_all_stay_worth_freezing() -> None:
    """A model of identical blocks (a transformer's layers, a ResNet's stages) is frozen as before: each
    block holds an even share."""
    model = nn.Sequential(*(nn.Linear(8, 8) for _ in range(6)))
    blocks = [str(i) for i in range(6)]
    auto = AutoFreezer(model, blocks, every=2, threshold=0.1, max_fraction=0.5)
    model(torch.zeros(1, 8))
    flat = dict.fromkeys(blocks, 1.0)
    plan = FreezePlan()
    _decide(auto, 0, plan, flat)
    assert _decide(auto, 2, plan, flat) is not None and auto.decisions[0].blocks == ["0", "1", "2"]
    assert auto.decisions[0].saves == pytest.approx(0.5)


def test_tables_that_are_added_or_looked_up_multiply_nothing() -> None:
    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pos_embedding = nn.Parameter(torch.zeros(1, 5, 8))  # added to the input, not a product
            self.layer = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.layer(x + self.pos_embedding)

    model = nn.Sequential(nn.Embedding(50, 8), Encoder())
    costs = BlockCosts(model, ["1.layer"], front=["0"])
    model(torch.zeros(2, 5, dtype=torch.long))
    assert costs.macs == {"1.layer": 2 * 5 * 64} and costs.total == 2 * 5 * 64 + 2 * 5 * 8
