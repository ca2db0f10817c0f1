import json
import warnings

import pytest
import torchvision

from workbench.core.models.tree import ModelTree
from workbench.core.plan.rules import FreezePlan, PlanError, PlanWarning, Rule, Stage, select_paths


@pytest.fixture(scope="module")
def tree():
    return ModelTree.from_model(torchvision.models.resnet18(weights=None))


DESIGN_EXAMPLE = {
    "format": "freeze-plan",
    "version": 1,
    "model": {"source": "torchvision", "name": "resnet18", "weights": "IMAGENET1K_V1"},
    "rules": [
        {"select": "*", "frozen": True},
        {"select": "layer4", "frozen": False, "lr_scale": 0.1},
        {"select": "fc", "frozen": False},
        {"select": "type:BatchNorm2d", "bn_eval": True},
    ],
    "stages": [{"at_step": 500, "rules": [{"select": "layer3", "frozen": False}]}],
}


def test_effective_later_rule_wins_and_bn_follows_frozen(tree):
    plan = FreezePlan.from_dict(DESIGN_EXAMPLE)
    eff = plan.resolve(tree)
    assert eff["conv1"].frozen and eff["layer1.0.conv1"].frozen
    assert not eff["layer4.0.conv1"].frozen and eff["layer4.0.conv1"].lr_scale == 0.1
    assert not eff["fc"].frozen and eff["fc"].lr_scale == 1.0
    # explicit bn_eval wins over "follows frozen": layer4 BN trains but stays in eval
    assert eff["layer4.0.bn1"].bn_eval and eff["layer4.0.bn1"].bn_eval_explicit
    plan2 = FreezePlan([Rule("*", frozen=True), Rule("layer4", frozen=False)])
    eff2 = plan2.resolve(tree)
    assert eff2["bn1"].bn_eval and not eff2["bn1"].bn_eval_explicit
    assert not eff2["layer4.0.bn1"].bn_eval
    assert plan2.effective("layer4.1.bn2", tree).bn_eval is False


def test_selectors(tree):
    assert select_paths("*", tree) == tree.paths()
    assert select_paths("", tree, subtree=False) == [""]
    assert select_paths("layer1", tree, subtree=False) == ["layer1"]
    assert "layer1.0.bn1" in select_paths("layer1", tree)
    assert select_paths("layer*.0.conv1", tree, subtree=False) == [f"layer{i}.0.conv1" for i in range(1, 5)]
    bns = select_paths("type:BatchNorm2d", tree, subtree=False)
    assert len(bns) == 20 and all(tree[p].is_bn for p in bns)
    # base class names match too
    assert select_paths("type:_BatchNorm", tree, subtree=False) == bns
    assert select_paths("nothing", tree) == []


def test_roundtrip_save_load(tmp_path, tree):
    plan = FreezePlan.from_dict(DESIGN_EXAMPLE)
    path = tmp_path / "p.json"
    plan.save(path)
    again = FreezePlan.load(path)
    assert again == plan
    assert again.to_dict() == plan.to_dict()
    assert json.loads(path.read_text())["rules"][1] == {"select": "layer4", "frozen": False, "lr_scale": 0.1}


def test_atomic_save_keeps_existing_file_when_serialization_fails(tmp_path):
    path = tmp_path / "p.json"
    FreezePlan([Rule("*", frozen=True)]).save(path)
    before = path.read_bytes()
    bad = FreezePlan([Rule("*", frozen=True)])
    bad.model["name"] = object()  # not JSON-serializable
    with pytest.raises(TypeError):
        bad.save(path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]  # no temp file left


def _err(data) -> PlanError:
    with pytest.raises(PlanError) as ei:
        FreezePlan.from_dict(data)
    return ei.value


def test_invalid_json_reports_line_and_column(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"rules": [\n  {"select": "fc",}\n]}')
    with pytest.raises(PlanError) as ei:
        FreezePlan.load(path)
    assert "line 2" in str(ei.value) and "column" in str(ei.value) and "bad.json" in str(ei.value)


def test_missing_file():
    with pytest.raises(PlanError, match="no such plan file"):
        FreezePlan.load("/nonexistent/plan.json")


@pytest.mark.parametrize(
    "rule, field, words",
    [
        ({"select": "fc", "frozen": "yes"}, "frozen", "true or false"),
        ({"select": "fc", "bn_eval": 1}, "bn_eval", "true or false"),
        ({"select": "fc", "lr_scale": -1}, "lr_scale", ">= 0"),
        ({"select": "fc", "lr_scale": "0.1"}, "lr_scale", "number"),
        ({"select": "fc", "frozn": True}, "frozn", "did you mean 'frozen'"),
        ({"frozen": True}, "select", "missing"),
        ({"select": 3}, "select", "string"),
        ({"select": "type:"}, "select", "class name"),
    ],
)
def test_rule_errors_name_index_and_field(rule, field, words):
    e = _err({"rules": [{"select": "*", "frozen": True}, rule]})
    assert e.rule_index == 1 and e.field == field
    assert "rule 1" in str(e) and field in str(e) and words in str(e)


def test_all_problems_listed():
    e = _err({"rules": [{"select": "fc", "frozen": 1}, {"select": "x", "lr_scale": -2}]})
    assert e.rule_indices == [0, 1] and "2 problems" in str(e)


def test_top_level_errors():
    assert "newer" in str(_err({"version": 2, "rules": []})) and "upgrade" in str(_err({"version": 2}))
    assert _err({"rules": [], "extra": 1}).field == "extra"
    assert "not a freeze plan" in str(_err({"format": "other"}))
    assert "rules" in str(_err({"rules": {"select": "*"}}))
    assert "JSON object" in str(_err([1, 2]))
    assert _err({"model": {"nme": "x"}}).field == "model.nme"


def test_stage_errors():
    e = _err({"stages": [{"rules": [{"select": "fc", "frozen": False}]}]})
    assert e.problems[0].stage_index == 0 and "at_step" in str(e)
    e = _err({"stages": [{"at_step": 5, "rules": [{"select": "fc", "frozen": 2}]}]})
    assert "stage 0, rule 0, field 'frozen'" in str(e)


def test_stages_listed_out_of_order_are_refused_by_stage():
    fc, l4 = [{"select": "fc", "frozen": False}], [{"select": "layer4", "frozen": False}]
    e = _err({"stages": [{"at_step": 10, "rules": fc}, {"at_step": 5, "rules": l4}]})
    assert e.problems[0].stage_index == 1
    assert "(at_step 5) is listed after stage 0 (at_step 10)" in str(e) and "order they are reached" in str(e)
    e = _err({"stages": [{"at_epoch": 2, "rules": fc}, {"at_step": 1, "rules": l4}, {"at_epoch": 1, "rules": l4}]})
    assert [p.stage_index for p in e.problems] == [2]  # steps and epochs are ordered each on their own
    ok = FreezePlan.from_dict({"stages": [{"at_step": 5, "rules": fc}, {"at_step": 5, "rules": l4}]})
    assert len(ok.stages) == 2  # equal steps: list order decides, as documented


def test_add_stage_keeps_the_stages_in_time_order():
    plan = FreezePlan.from_dict({"stages": [
        {"at_step": 5, "rules": [{"select": "fc", "frozen": False}]},
        {"at_epoch": 1, "rules": [{"select": "fc", "frozen": True}]},
        {"at_step": 20, "rules": [{"select": "layer4", "frozen": False}]},
    ]})
    plan.add_stage(Stage(rules=[Rule("layer1", frozen=True)], at_step=10, label="new"))
    plan.add_stage(Stage(rules=[Rule("layer2", frozen=True)], at_step=20, label="same step"))
    plan.add_stage(Stage(rules=[Rule("layer3", frozen=True)], at_epoch=0, label="epoch 0"))
    assert [(s.at_step, s.at_epoch, s.label) for s in plan.stages] == [
        (5, None, None), (None, 0, "epoch 0"), (None, 1, None), (10, None, "new"), (20, None, None), (20, None, "same step"),
    ]  # before the first later stage of its own kind (steps and epochs are not compared)
    assert FreezePlan.from_dict(plan.to_dict()).to_dict() == plan.to_dict()  # still a valid file


def test_unknown_selector_suggests_close_names(tree):
    plan = FreezePlan([Rule("*", frozen=True), Rule("layer5", frozen=False), Rule("type:BatchNorm", bn_eval=True)])
    with pytest.raises(PlanError) as ei:
        plan.validate(tree)
    msg = str(ei.value)
    assert ei.value.rule_indices == [1, 2]
    assert "'layer5' matches no module" in msg and "layer4" in msg
    assert "type:BatchNorm2d" in msg


def test_fingerprint_mismatch_warns_or_fails(tree):
    plan = FreezePlan([Rule("fc", frozen=True)], model={"fingerprint": "0" * 64})
    with pytest.warns(PlanWarning, match="fingerprint"):
        plan.validate(tree)
    with pytest.raises(PlanError, match="fingerprint"):
        plan.validate(tree, strict=True)
    ok = FreezePlan([Rule("fc", frozen=True)], model={"fingerprint": tree.fingerprint})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ok.validate(tree, strict=True)


def test_stages_at(tree):
    plan = FreezePlan.from_dict(DESIGN_EXAMPLE)
    assert plan.at(499).resolve(tree)["layer3.0.conv1"].frozen
    assert not plan.at(500).resolve(tree)["layer3.0.conv1"].frozen
    assert plan.stage_index(499) == 0 and plan.stage_index(500) == 1
    st = Stage(rules=[Rule("layer3", frozen=False)], at_epoch=2)
    assert not st.reached(10_000, 1) and st.reached(0, 2)


def test_set_click_semantics(tree):
    plan = FreezePlan([Rule("*", frozen=True), Rule("layer1.0", frozen=False), Rule("fc", frozen=False)])
    plan.set("layer1", "frozen", False, tree)
    eff = plan.resolve(tree)
    assert all(not eff[p].frozen for p in tree.subtree("layer1"))
    plan.set("layer1", "frozen", True, tree)
    eff = plan.resolve(tree)
    assert all(eff[p].frozen for p in tree.subtree("layer1"))  # the layer1.0 rule lost its key
    assert [r.select for r in plan.rules] == ["*", "layer1", "fc"]
    # a later type rule would override: the click must still win
    plan.rules.append(Rule("type:BatchNorm2d", frozen=False))
    plan.set("layer2", "frozen", True, tree)
    assert plan.resolve(tree)["layer2.0.bn1"].frozen
    assert not plan.resolve(tree)["layer3.0.bn1"].frozen
    plan.set("layer2", "frozen", None, tree)
    assert not plan.resolve(tree)["layer2.0.bn1"].frozen
    with pytest.raises(ValueError):
        plan.set("fc", "lr_scale", -1, tree)
    with pytest.raises(KeyError):
        plan.set("nope", "frozen", True, tree)


def test_set_keeps_tree_order(tree):
    plan = FreezePlan()
    plan.set("fc", "frozen", False, tree)
    plan.set("", "frozen", True, tree)
    plan.set("fc", "frozen", False, tree)
    plan.set("layer4", "lr_scale", 0.1, tree)
    assert [r.select for r in plan.rules] == ["*", "layer4", "fc"]
    assert not plan.resolve(tree)["fc"].frozen


def test_summary(tree):
    s = FreezePlan([Rule("*", frozen=True), Rule("fc", frozen=False)]).summary(tree)
    assert "513,000" in s and "11,689,512" in s and "4.4%" in s and "20/20" in s


def test_reparam_false_roundtrip():
    plan = FreezePlan.from_dict({"rules": [{"select": "fc", "reparam": False}]})
    assert plan.rules[0].reparam_off and plan.to_dict()["rules"][0] == {"select": "fc", "reparam": False}


def test_saved_file_mode_follows_umask_and_existing_file(tmp_path):
    import os
    import stat

    old = os.umask(0o022)
    try:
        path = tmp_path / "p.json"
        FreezePlan([Rule("*", frozen=True)]).save(path)
        assert stat.S_IMODE(path.stat().st_mode) == 0o644  # not mkstemp's 0600
        os.chmod(path, 0o640)
        FreezePlan([Rule("*", frozen=False)]).save(path)
        assert stat.S_IMODE(path.stat().st_mode) == 0o640
    finally:
        os.umask(old)


def test_lint_and_summary_say_when_a_plus_b_changes_the_function(tree):
    from workbench.core.checks.lint import lint_plan

    same = FreezePlan.from_dict({"rules": [{"select": "layer4", "reparam": {"kind": "a_plus_b"}}]})
    changed = FreezePlan.from_dict(
        {"rules": [{"select": "layer4", "reparam": {"kind": "a_plus_b", "a": {"random": {"seed": 1}}}}]}
    )
    from_file = FreezePlan.from_dict({"rules": [{"select": "layer4", "reparam": {"kind": "a_plus_b", "a": {"file": "a.safetensors"}}}]})
    assert "function changes" not in same.summary(tree)
    assert not [f for f in lint_plan(same, tree) if f.code == "reparam-changes-function"]
    assert "function changes" in changed.summary(tree)
    (f,) = [f for f in lint_plan(changed, tree) if f.code == "reparam-changes-function"]
    assert "does not equal" in f.message and f.path == "layer4"
    (g,) = [f for f in lint_plan(from_file, tree) if f.code == "reparam-changes-function"]
    assert "may not equal" in g.message and "from a file" in from_file.summary(tree)


def test_rules_built_in_code_are_normalized_like_parsed_ones() -> None:
    parsed = FreezePlan.from_dict({"rules": [{"select": "fc", "reparam": True}, {"select": "fc", "reparam": False}]})
    built = FreezePlan([Rule("fc", reparam=True), Rule("fc", reparam=False)])
    assert built.to_dict() == parsed.to_dict()
    assert built.rules[0].reparam == parsed.rules[0].reparam and built.rules[0].reparam["kind"] == "a_plus_b"
    assert built.rules[1].reparam_off and built.rules[1].reparam is None
    with pytest.raises(ValueError, match="mode"):
        Rule("fc", reparam={"mode": "sideways"})
