"""``workbench export --to plan.json`` describes the model it was exported from, weights included."""

from __future__ import annotations

import json

from workbench.cli import main
from workbench.resources import example_plan


def _model_block(path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))["model"]


def test_a_random_init_model_does_not_inherit_the_input_plans_weights(tmp_path):
    out = tmp_path / "plan.json"
    assert main(["export", "--plan", str(example_plan("resnet18-layer4-fc")), "--model", "resnet18", "--to", str(out)]) == 0
    block = _model_block(out)
    assert block["name"] == "resnet18" and "weights" not in block and block["fingerprint"]


def test_weights_named_on_the_command_line_or_by_the_plan_stay(tmp_path):
    plan = example_plan("resnet18-layer4-fc")
    named = tmp_path / "named.json"
    assert main(["export", "--plan", str(plan), "--model", "resnet18", "--weights", "IMAGENET1K_V1",
                 "--to", str(named)]) == 0
    assert _model_block(named)["weights"] == "IMAGENET1K_V1"
    kept = tmp_path / "kept.json"
    assert main(["export", "--plan", str(plan), "--to", str(kept)]) == 0  # the plan's own model block
    assert _model_block(kept)["weights"] == "IMAGENET1K_V1"
