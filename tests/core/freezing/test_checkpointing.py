"""Activation checkpointing from the plan: same gradients, installed and removed, checks and lint."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from workbench.core.checks.lint import lint_plan
from workbench.core.freezing.checkpointing import is_checkpointed
from workbench.core.models.tree import ModelTree
from workbench.core.plan.rules import FreezePlan, PlanError, Rule


class Block(nn.Module):
    def __init__(self, d: int = 8) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d, 2 * d)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(2 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(self.act(self.fc1(x)))


class Stack(nn.Module):
    def __init__(self, n: int = 3, d: int = 8) -> None:
        super().__init__()
        self.stem = nn.Linear(d, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(n))
        self.head = nn.Linear(d, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


class CountingBlock(Block):
    calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        CountingBlock.calls += 1
        return super().forward(x)


def _grads(model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    model(x).square().sum().backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _plan(*rules: Rule) -> FreezePlan:
    return FreezePlan(rules=list(rules))


def test_checkpointed_blocks_give_the_same_gradients_as_plain_ones():
    torch.manual_seed(0)
    plain = Stack().double()
    ckpt = copy.deepcopy(plain)
    applied = _plan(Rule("stem", frozen=True), Rule("blocks.*", checkpoint=True)).apply(ckpt)
    _plan(Rule("stem", frozen=True)).apply(plain)
    assert all(is_checkpointed(b) for b in ckpt.blocks) and not is_checkpointed(ckpt.head)
    x = torch.randn(4, 8, dtype=torch.float64)
    g_plain, g_ckpt = _grads(plain, x), _grads(ckpt, x)
    assert g_plain.keys() == g_ckpt.keys() and "blocks.0.fc1.weight" in g_ckpt
    for name in g_plain:
        torch.testing.assert_close(g_ckpt[name], g_plain[name], msg=name)
    assert applied.verify().ok


def test_checkpoint_recomputes_forward_in_backward_and_not_under_no_grad():
    model = Stack()
    model.blocks[1] = CountingBlock()
    _plan(Rule("blocks.1", checkpoint=True)).apply(model)
    x = torch.randn(2, 8)
    CountingBlock.calls = 0
    model(x).sum().backward()
    assert CountingBlock.calls == 2  # forward, then again in backward
    CountingBlock.calls = 0
    with torch.no_grad():
        model(x)
    assert CountingBlock.calls == 1


def test_checkpoint_is_not_inherited_and_remove_or_update_unwraps():
    model = Stack()
    applied = _plan(Rule("blocks", frozen=False), Rule("blocks.0", checkpoint=True)).apply(model)
    assert applied.effective["blocks.0"].checkpoint and not applied.effective["blocks.0.fc1"].checkpoint
    assert is_checkpointed(model.blocks[0]) and not is_checkpointed(model.blocks[0].fc1)
    diff = applied.update(_plan(Rule("blocks.1", checkpoint=True)))
    assert not is_checkpointed(model.blocks[0]) and is_checkpointed(model.blocks[1])
    assert diff.reinstalled == []  # no tensor changed
    applied.remove()
    assert not any(is_checkpointed(m) for m in model.modules())
    assert "forward" not in model.blocks[1].__dict__


def test_checkpoint_round_trips_through_json():
    plan = FreezePlan.from_dict({"rules": [{"select": "blocks.*", "checkpoint": True}]})
    assert plan.rules[0].checkpoint is True
    assert FreezePlan.from_json(plan.to_json()).rules[0].to_dict() == {"select": "blocks.*", "checkpoint": True}
    with pytest.raises(PlanError, match="checkpoint.*true or false"):
        FreezePlan.from_dict({"rules": [{"select": "blocks.*", "checkpoint": "yes"}]})


@pytest.mark.parametrize(
    "select, words",
    [("blocks.0.act", "has no parameters"), ("blocks", "no forward of its own")],
)
def test_checkpoint_on_a_module_without_parameters_or_outputs_is_one_line(select, words):
    model = Stack()
    with pytest.raises(PlanError) as e:
        _plan(Rule(select, checkpoint=True)).apply(model)
    text = str(e.value)
    assert words in text and "\n" not in text.strip()
    assert not any(is_checkpointed(m) for m in model.modules())


def test_root_uses_the_models_own_switch_when_it_has_one():
    class Switchable(Stack):
        grad_checkpointing = False

        def set_grad_checkpointing(self, enable: bool = True) -> None:
            self.grad_checkpointing = enable

    model = Switchable()
    applied = _plan(Rule("*", checkpoint=True)).apply(model)
    assert model.grad_checkpointing and not is_checkpointed(model)
    assert applied.installed("checkpoint")[""].via == "timm"
    applied.remove()
    assert not model.grad_checkpointing


def test_root_without_a_switch_is_wrapped():
    model = Stack()
    applied = _plan(Rule("*", checkpoint=True)).apply(model)
    assert is_checkpointed(model) and applied.installed("checkpoint")[""].via == "wrap"
    model(torch.randn(2, 8)).sum().backward()
    assert model.stem.weight.grad is not None


def test_lint_warns_about_checkpointing_in_the_frozen_prefix():
    model = Stack()
    tree = ModelTree.from_model(model)
    plan = _plan(Rule("stem", frozen=True), Rule("blocks.0", frozen=True), Rule("blocks.*", checkpoint=True))
    found = [f for f in lint_plan(plan, tree) if f.code == "checkpoint-frozen-prefix"]
    assert [f.path for f in found] == ["blocks.0"]
    assert "frozen prefix" in found[0].one_line()
    unfrozen = _plan(Rule("blocks.*", checkpoint=True))
    assert not [f for f in lint_plan(unfrozen, tree) if f.code == "checkpoint-frozen-prefix"]


def test_checkpoint_key_is_in_the_schema_table():
    from workbench.core.plan.keys import schema_markdown

    assert "| `checkpoint` | boolean | no (matched modules only) | `false` |" in schema_markdown()
