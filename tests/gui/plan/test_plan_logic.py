"""The Qt-free parts of the GUI: formats, plan edits, per-row state and counts, plan → model."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torchvision.models import resnet18

from workbench.core.formatting import fmt_bytes, fmt_count, fmt_lr, fmt_percent
from workbench.core.freezing.apply import apply_plan
from workbench.core.models.tree import ModelTree
from workbench.core.plan.rules import FreezePlan, Rule
from workbench.gui.model_loading import LoadRequest, loaded_from_model, request_for_plan
from workbench.gui.plan import edits as plan_edits
from workbench.gui.plan.state import PlanState, deciding_rule, explicit_paths


@pytest.fixture(scope="module")
def model() -> nn.Module:
    torch.manual_seed(0)
    return resnet18(num_classes=10)


@pytest.fixture(scope="module")
def tree(model: nn.Module) -> ModelTree:
    return ModelTree.from_model(model)


def frozen_paths(plan: FreezePlan, tree: ModelTree) -> set[str]:
    eff = plan.resolve(tree)
    return {p for p, n in tree.nodes.items() if n.own_params and eff[p].frozen}


def test_formats() -> None:
    assert [fmt_count(n) for n in (0, 512, 9408, 51_300, 513_000, 11_689_512, 1_200_000_000)] == [
        "0", "512", "9.4k", "51.3k", "513k", "11.7M", "1.2B",
    ]
    assert fmt_count(999_999) == "1M"
    assert [fmt_bytes(n) for n in (512, 9_400, 5_200_000, 52_000_000, 1_200_000_000)] == [
        "512 B", "9.4 kB", "5.2 MB", "52 MB", "1.2 GB",
    ]
    assert fmt_percent(513_000, 11_689_512) == "4.4%"
    assert fmt_percent(1, 10**7) == "<0.1%"
    assert fmt_percent(0, 10) == "0%"
    assert [fmt_lr(x) for x in (1.0, 0.1, 1e-5)] == ["1", "0.1", "1e-05"]


def test_set_minimal_adds_only_what_changes_something(tree: ModelTree) -> None:
    plan = FreezePlan()
    plan_edits.set_minimal(plan, tree, "layer1", "frozen", True)
    assert [r.to_dict() for r in plan.rules] == [{"select": "layer1", "frozen": True}]
    plan_edits.set_minimal(plan, tree, "layer1", "frozen", False)  # nothing above freezes it: rule removed
    assert plan.rules == []
    plan_edits.set_minimal(plan, tree, "", "frozen", True)
    plan_edits.set_minimal(plan, tree, "fc", "frozen", False)  # under a frozen root: explicit rule
    assert [r.to_dict() for r in plan.rules] == [{"select": "*", "frozen": True}, {"select": "fc", "frozen": False}]
    plan_edits.set_minimal(plan, tree, "fc", "frozen", True)
    assert [r.to_dict() for r in plan.rules] == [{"select": "*", "frozen": True}]


def test_freeze_before_top_level_and_nested(tree: ModelTree) -> None:
    plan = FreezePlan()
    plan_edits.freeze_before(plan, tree, "layer3")
    assert frozen_paths(plan, tree) == {p for p in tree.nodes if tree.nodes[p].own_params} - {
        p for p in tree.nodes if p.startswith(("layer3", "layer4", "fc"))
    }
    plan = FreezePlan()
    plan_edits.freeze_before(plan, tree, "layer3.1")
    frozen = frozen_paths(plan, tree)
    assert "layer3.0.conv1" in frozen and "layer2.1.conv2" in frozen and "conv1" in frozen
    assert not any(p.startswith(("layer3.1", "layer4", "fc")) for p in frozen)
    with pytest.raises(ValueError, match="below the root"):
        plan_edits.freeze_before(FreezePlan(), tree, "")


def test_train_only_and_bn_everywhere(tree: ModelTree) -> None:
    plan = FreezePlan()
    plan_edits.train_only(plan, tree, ["fc", "layer4.1"])
    eff = plan.resolve(tree)
    trainable = {p for p, n in tree.nodes.items() if n.own_params and not eff[p].frozen}
    assert trainable == {p for p in tree.nodes if p.startswith(("fc", "layer4.1")) and tree.nodes[p].own_params}
    plan_edits.set_bn_eval_everywhere(plan, tree, False)
    eff = plan.resolve(tree)
    assert not any(eff[p].bn_eval for p, n in tree.nodes.items() if n.is_bn)
    plan_edits.set_bn_eval_everywhere(plan, tree, None)
    eff = plan.resolve(tree)
    assert all(eff[p].bn_eval == eff[p].frozen for p, n in tree.nodes.items() if n.is_bn)


def test_remove_unmatched_rules_keeps_the_rest(tree: ModelTree) -> None:
    plan = FreezePlan.from_dict(
        {
            "rules": [{"select": "layer9", "frozen": True}, {"select": "layer1", "frozen": True}],
            "stages": [{"at_step": 5, "rules": [{"select": "nope", "frozen": False}]}],
        }
    )
    assert plan_edits.remove_unmatched_rules(plan, tree) == 2
    assert [r.select for r in plan.rules] == ["layer1"]
    assert plan.stages == []


def test_plan_state_counts_match_applied_plan(model: nn.Module, tree: ModelTree) -> None:
    plan = FreezePlan([Rule("layer1", frozen=True), Rule("layer2", frozen=True), Rule("layer3", frozen=True)])
    loaded = loaded_from_model(model)
    for opt in ("adamw", "sgd", "sgd_momentum"):
        state = PlanState.compute(loaded.tree, plan, loaded.own_bytes, opt, loaded.param_shapes)
        applied = apply_plan(model, plan)
        try:
            real = applied.counts(opt)
        finally:
            applied.remove()
        assert state.counts == real
    st = state.nodes
    assert st["layer1"].frozen == "on" and st[""].frozen == "mixed" and st["fc"].frozen == "off"
    assert st["layer1"].trainable == 0 and st["fc"].trainable == 512 * 10 + 10
    assert st["layer1.0.bn1"].bn == "on" and st["layer1.0.bn1"].bn_auto
    assert st[""].bn == "mixed" and st["fc"].bn is None
    assert st["relu"].frozen == "off"  # no parameters: its own flag


def test_plan_state_findings_and_explicit(tree: ModelTree) -> None:
    plan = FreezePlan([Rule("*", frozen=True), Rule("bn1", bn_eval=False), Rule("layer2", lr_scale=0.1)])
    state = PlanState.compute(tree, plan)
    codes = {f.code for f in state.findings}
    assert "bn-frozen-train-mode" in codes
    assert "lr-scale-on-frozen" in codes
    assert "nothing-trainable" in codes
    assert state.findings[0].severity == "error"
    assert any("bn1" in text for _, text, path in state.messages() if path == "bn1")
    assert state.nodes["layer2.0"].lr_ignored
    assert explicit_paths(plan, "lr_scale") == {"layer2"}
    assert explicit_paths(plan, "frozen") == {""}
    assert deciding_rule(plan, tree, "layer2.0.conv1", "lr_scale") == 2
    assert deciding_rule(plan, tree, "fc", "bn_eval") is None


def test_partial_counts_frozen_slice(model: nn.Module) -> None:
    loaded = loaded_from_model(model)
    plan = FreezePlan()
    plan_edits.set_partial(plan, loaded.tree, "fc", {"param": "weight", "dim": 1, "trainable": [[0, 8]]})
    state = PlanState.compute(loaded.tree, plan, loaded.own_bytes, "adamw", loaded.param_shapes)
    assert state.nodes["fc"].frozen == "mixed"
    assert state.nodes["fc"].trainable == 8 * 10 + 10
    applied = apply_plan(model, plan)
    try:
        assert applied.counts("adamw").trainable == state.counts.trainable
    finally:
        applied.remove()
    with pytest.raises(ValueError, match="dim"):
        plan_edits.set_partial(plan, loaded.tree, "fc", {"param": "weight", "dim": 5, "trainable": [[0, 8]]})
    plan_edits.set_partial(plan, loaded.tree, "fc", None)
    assert all(r.partial is None for r in plan.rules)


def test_request_for_plan() -> None:
    current = {"source": "torchvision", "name": "resnet18", "fingerprint": "abc"}
    assert request_for_plan(FreezePlan(), current) is None  # names no model
    assert request_for_plan(FreezePlan(model={"name": "resnet18", "fingerprint": "abc"}), current) is None
    req = request_for_plan(FreezePlan(model={"name": "resnet50", "num_classes": 7}), current)
    assert req == LoadRequest("resnet50", None, 7, None, origin="the plan's model block")  # never runs code unasked
    req = request_for_plan(FreezePlan(model={"source": "checkpoint", "checkpoint": "w.pt", "name": "resnet18"}),
                           current, "/data")
    assert req is not None and req.checkpoint == "/data/w.pt"
    assert request_for_plan(FreezePlan(model={"name": "resnet18"}), {"name": "resnet18"}) is None


def test_set_minimal_on_the_root(tree: ModelTree) -> None:
    plan = FreezePlan()
    plan_edits.set_minimal(plan, tree, "", "frozen", True)
    assert [r.to_dict() for r in plan.rules] == [{"select": "*", "frozen": True}]
    plan_edits.set_minimal(plan, tree, "", "frozen", False)  # the root's own rule is not inherited
    assert plan.rules == []
    plan = FreezePlan([Rule("type:Conv2d", lr_scale=0.5)])
    plan_edits.set_minimal(plan, tree, "layer1", "lr_scale", 1.0)  # a type rule reaches inside: explicit
    assert plan.resolve(tree)["layer1.0.conv1"].lr_scale == 1.0
    assert plan.resolve(tree)["layer2.0.conv1"].lr_scale == 0.5


def test_a_plus_b_on_named_parameters_counts_only_their_fixed_copy(model: nn.Module) -> None:
    # The cost panel's estimate (no model needed) matches what applying the plan really adds.
    loaded = loaded_from_model(model)
    plan = FreezePlan.from_dict(
        {"rules": [{"select": "layer4", "reparam": {"params": ["weight"]}}, {"select": "fc", "reparam": True}]}
    )
    state = PlanState.compute(loaded.tree, plan, loaded.own_bytes, "adamw", loaded.param_shapes)
    applied = apply_plan(model, plan)
    try:
        real = applied.counts("adamw")
    finally:
        applied.remove()
    assert state.counts == real
    layer4_weights = sum(p.numel() * 4 for n, p in model.layer4.named_parameters() if n.endswith("weight"))
    fc_all = sum(p.numel() * 4 for p in model.fc.parameters())
    assert real.fixed_bytes == layer4_weights + fc_all
