"""Low-rank A+B and sub-tensor freezing the run itself would refuse are refused at export, in one
line naming the module and the setting; nothing is written and the model is left as it was."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from workbench.core.export import ExportError, export_script
from workbench.core.models.spec import ModelSpec
from workbench.core.plan.problems import PlanError
from workbench.core.plan.rules import FreezePlan

SPEC = ModelSpec(source="py", name="hostile:make")


class Odd(nn.Module):
    """A grouped convolution, an embedding, a weight tied to a head, a Linear subclass, and a head of
    the synthetic data's 10 classes (the run keeps it: a head the run replaced would be a plain Linear)."""

    def __init__(self) -> None:
        super().__init__()
        self.grouped = nn.Conv2d(4, 4, 3, groups=2)
        self.emb = nn.Embedding(10, 4)
        self.lin = nn.Linear(4, 4)
        self.tied = nn.Linear(4, 10)
        self.tied.weight = self.emb.weight
        self.sub = type("MyLinear", (nn.Linear,), {})(4, 3)
        self.out = nn.Linear(3, 10)


def _refused(tmp_path: Path, rules: list[dict[str, Any]], *, stages: list[dict[str, Any]] | None = None) -> str:
    model = Odd()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    plan = FreezePlan.from_dict({"rules": rules, "stages": stages or []})
    dest = tmp_path / "out.py"
    with pytest.raises((ExportError, PlanError)) as info:  # the plan's own checks, or the export's
        export_script(plan, SPEC, dest, model=model)
    message = str(info.value)
    assert "\n" not in message and not dest.exists()
    after = dict(model.named_parameters())
    assert list(after) == list(before) and all(torch.equal(after[n], t) for n, t in before.items())
    return message


@pytest.mark.parametrize(("rule", "words"), [
    ({"select": "lin", "reparam": {"rank": 5}}, ["lin.weight", "reparam.rank 5", "min(out, in) = 4"]),
    ({"select": "grouped", "reparam": {"rank": 1}}, ["grouped.weight", "groups=1"]),
    ({"select": "emb", "reparam": {"rank": 2, "dora": True}}, ["emb.weight", "dora does not support a Embedding"]),
    ({"select": "tied", "reparam": {"rank": 2}}, ["tied.weight", "tied"]),
    ({"select": "sub", "partial": {"param": "weight", "dim": 1, "trainable": [[0, 2]]}}, ["'sub'", "MyLinear", "partial"]),
    ({"select": "grouped", "partial": {"param": "weight", "dim": 1, "trainable": [[0, 1]]}}, ["'grouped'", "groups=2"]),
])
def test_what_the_run_refuses_is_refused_naming_the_module(rule: dict[str, Any], words: list[str], tmp_path: Path):
    message = _refused(tmp_path, [rule])
    for word in words:
        assert word in message, (word, message)


def test_a_stage_that_adds_partial_freezing_is_refused(tmp_path: Path):
    stage = {"at_step": 3, "rules": [{"select": "lin", "partial": {"param": "weight", "dim": 0, "trainable": [[0, 2]]}}]}
    assert "'partial'" in _refused(tmp_path, [{"select": "*", "frozen": False}], stages=[stage])


def test_a_variant_the_script_does_not_compute_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """A new LoRA-family variant (class and row, as docs/architecture.md adds one) is never exported as LoRA."""
    from tests.fixtures.scaled_variant import ROW
    from workbench.core.plan import lora_variants

    monkeypatch.setitem(lora_variants.VARIANTS, "scaled", ROW)
    message = _refused(tmp_path, [{"select": "lin", "reparam": {"rank": 2, "scaled": True}}])
    assert "lin.weight" in message and "not scaled" in message


def test_a_model_with_the_plan_applied_is_refused(tmp_path: Path):
    """The script is written from the plain model: one with LoRA or partial freezing installed is refused."""
    for rule in ({"select": "lin", "reparam": {"rank": 2}},
                 {"select": "lin", "partial": {"param": "weight", "dim": 1, "trainable": [[0, 2]]}}):
        model = Odd()
        plan = FreezePlan.from_dict({"rules": [rule]})
        applied = plan.apply(model)
        with pytest.raises(ExportError, match="'lin' has low-rank A\\+B or sub-tensor freezing applied") as info:
            export_script(plan, SPEC, tmp_path / "out.py", model=model)
        assert "\n" not in str(info.value) and not (tmp_path / "out.py").exists()
        applied.remove(merge=False)
