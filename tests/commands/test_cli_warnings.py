"""A warning on the command line is one line on stderr, printed by rank 0 only."""

from __future__ import annotations

import json

import pytest

from workbench.cli import main


@pytest.fixture
def mismatched_plan(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"model": {"fingerprint": "0" * 64}, "rules": [{"select": "fc", "frozen": False}]}))
    return str(path)


def test_a_warning_is_one_line_naming_the_command(mismatched_plan, capsys, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    assert main(["inspect", "resnet18", "--plan", mismatched_plan]) == 0
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if "fingerprint" in ln]
    assert len(lines) == 1 and lines[0].startswith("workbench inspect: warning: plan was made for a model"), err
    assert "PlanWarning" not in err and ".py:" not in err, err


def test_other_ranks_do_not_repeat_it(mismatched_plan, capsys, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    assert main(["inspect", "resnet18", "--plan", mismatched_plan]) == 0
    assert "warning" not in capsys.readouterr().err
