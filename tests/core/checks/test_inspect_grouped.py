"""``workbench inspect`` groups findings of one kind into one line, as ``doctor`` does (docs/doctor.md)."""

from __future__ import annotations

import json

from workbench.cli import main


def test_checkpointing_in_the_frozen_prefix_is_one_line_naming_the_others(tmp_path, capsys):
    plan = tmp_path / "p.json"
    plan.write_text(json.dumps({"rules": [
        {"select": "*", "frozen": True}, {"select": "layer4", "frozen": False},
        {"select": "layer1.*", "checkpoint": True}, {"select": "layer2.*", "checkpoint": True},
    ]}))
    assert main(["inspect", "resnet18", "--plan", str(plan)]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "checkpointing in the frozen prefix" in ln]
    assert len(lines) == 1, lines
    assert "(and 3 more like it: layer1.1, layer2.0, layer2.1)" in lines[0]
