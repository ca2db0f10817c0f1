"""File ▸ Export ▸ Script… writes the run the training panel sets up: plain SGD is momentum 0."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from workbench.core.plan.rules import FreezePlan
from workbench.gui.main_window import MainWindow


def _optimizer_line(text: str) -> str:
    match = re.search(r"optimizer = (torch\.optim\.\w+\(groups, .*\))", text)
    assert match, "no optimizer constructor in the script"
    return match.group(1)


def test_export_of_an_sgd_run_writes_momentum_zero(window: MainWindow, dialogs: Any, tmp_path: Path) -> None:
    window.training.panel.set_values(optimizer="sgd", lr=0.05, weight_decay=0.001, steps=7)
    assert window.training.panel.config().optimizer == "sgd"
    dialogs.script("save_file", str(tmp_path / "sgd_run.py"))
    assert window.documents.export_script(), dialogs.kinds("error")
    text = (tmp_path / "sgd_run.py").read_text()
    line = _optimizer_line(text)
    assert line.startswith("torch.optim.SGD(") and "momentum=0.0," in line and "lr=LR" in line
    assert "weight_decay=0.001" in line and "nesterov=False" in line
    assert "LR = 0.05" in text and "STEPS = 7" in text and "SEED = 0" in text
    # SGD + momentum keeps the config's momentum (0.9): the two names are two optimizers
    window.training.panel.set_values(optimizer="sgd_momentum")
    dialogs.script("save_file", str(tmp_path / "momentum_run.py"))
    assert window.documents.export_script()
    assert "momentum=0.9," in _optimizer_line((tmp_path / "momentum_run.py").read_text())


def test_export_of_a_lora_and_partial_run_writes_plain_pytorch(window: MainWindow, dialogs: Any, tmp_path: Path) -> None:
    """Low-rank A+B and sub-tensor freezing are the script's own code, not refused; the window's model is untouched."""
    assert window.controller.set_value(["layer4.1.conv2"], "reparam", {"rank": 4, "alpha": 8, "dora": True})
    partial = FreezePlan.from_dict({"rules": [{"select": "fc", "partial": {"param": "weight", "dim": 1, "trainable": [[0, 64]]}}]})
    assert window.controller.edit("Partly freeze fc", lambda plan, tree: plan.rules.extend(partial.rules))
    before = {k: v.clone() for k, v in window.controller.model.state_dict().items()}
    dialogs.script("save_file", str(tmp_path / "lora_run.py"))
    assert window.documents.export_script(), dialogs.kinds("error")
    text = (tmp_path / "lora_run.py").read_text()
    assert "'variant': 'dora'" in text and "PARTIAL = [('fc', {'dim': 1, 'trainable': [[0, 64]]})]" in text
    assert "import peft" not in text and "no PEFT" in text
    compile(text, "lora_run.py", "exec")
    after = window.controller.model.state_dict()
    assert after.keys() == before.keys() and all((after[k] == v).all() for k, v in before.items())
