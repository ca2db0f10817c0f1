"""The example plans shipped in resources/plans validate against their models."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
import torchvision

from workbench.core.plan.rules import FreezePlan
from workbench.resources import example_plans

#: name -> (trainable parameters at step 0, at step 10_000, lr scales of the param groups at 10_000)
EXPECTED = {
    "resnet18-fc-only": (513_000, 513_000, {1.0}),
    "resnet18-layer4-fc": (8_906_728, 8_906_728, {0.1, 1.0}),
    "resnet18-progressive": (513_000, 11_006_440, {0.01, 0.1, 1.0}),
    "resnet18-layer4-a-plus-b": (8_770_536, 8_770_536, {1.0}),
    "mobilenet_v3_small-classifier": (1_672_296, 1_672_296, {0.1, 1.0}),
}


@pytest.fixture(scope="module")
def models() -> dict[str, torch.nn.Module]:
    """One randomly initialised model per architecture the examples name (no download)."""
    torch.manual_seed(0)
    names = {FreezePlan.load(p).model["name"] for p in example_plans().values()}
    return {n: torchvision.models.get_model(n, weights=None) for n in sorted(names)}


def test_the_examples_the_issue_asks_for_exist():
    plans = {name: FreezePlan.load(p) for name, p in example_plans().items()}
    assert set(plans) == set(EXPECTED)
    assert plans["resnet18-progressive"].stages, "progressive unfreezing needs stages"
    assert any(r.lr_scale for r in plans["resnet18-layer4-fc"].rules)
    for name, plan in plans.items():
        assert plan.description, f"{name}: say what the example does"
        assert plan.model.get("source") == "torchvision"
        # templates for any head size: a fingerprint would warn on every `train` with --num-classes
        assert "fingerprint" not in plan.model, f"{name}: an example plan carries no fingerprint"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_validates_strictly_and_trains_what_it_says(name, models):
    path = example_plans()[name]
    plan = FreezePlan.load(path)
    model = models[plan.model["name"]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a PlanWarning (e.g. fingerprint) fails the test
        plan.validate(model, strict=True)
        for step, want in ((0, EXPECTED[name][0]), (10_000, EXPECTED[name][1])):
            applied = plan.at(step).apply(model, strict=True, base_dir=path.parent)
            try:
                assert applied.counts().trainable == want, f"{name} at step {step}"
                if step:
                    groups = applied.param_groups(lr=1e-3)
                    assert {g["lr_scale"] for g in groups} == EXPECTED[name][2]
                model.train()
                bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
                assert bns and all(not m.training for m in bns), "every example keeps BatchNorm in eval"
            finally:
                applied.remove()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_file_is_in_canonical_form(name):
    """Opening and saving an example in the app rewrites nothing."""
    path = example_plans()[name]
    text = path.read_text(encoding="utf-8")
    assert FreezePlan.load(path).to_json() == text
    assert json.loads(text)["format"] == "freeze-plan"


def test_the_commands_the_docs_give_do_not_warn_with_an_example(tmp_path):
    """`workbench train --plan EXAMPLE` builds a 10-class head: the example still fits, silently."""
    import subprocess

    from tests.preload import python_argv
    from tests.timeouts import SUBPROCESS_S

    path = example_plans()["resnet18-layer4-fc"]
    cmd = python_argv("-m", "workbench", "train", "--model", "resnet18", "--plan", str(path),
           "--steps", "1", "--image-size", "32", "--batch-size", "2")
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=SUBPROCESS_S)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "warning" not in proc.stderr.lower(), proc.stderr[-2000:]
