"""File ▸ Export ▸ PEFT Adapter…: beside Plan (JSON)… and Script…, for plans with low-rank A+B;
off with the reason in its tooltip otherwise, and the CLI's refusals in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from workbench.core.plan.rules import FreezePlan
from workbench.gui.main_window import MainWindow


def _export_menu(window: MainWindow) -> list[str]:
    file_menu = window.menuBar().actions()[0].menu()
    export = next(a.menu() for a in file_menu.actions() if a.menu() is not None and "Export" in a.text())
    return [a.text().replace("&", "") for a in export.actions()]


def test_peft_adapter_is_off_with_the_reason_until_the_plan_has_low_rank_a_plus_b(
    window: MainWindow, dialogs: Any, tmp_path: Path
) -> None:
    assert _export_menu(window) == ["Plan (JSON)…", "Plain PyTorch Script…", "PEFT Adapter…"]
    act = window.act_export_peft
    assert not act.isEnabled() and "no low-rank A+B" in act.toolTip()
    assert window.controller.set_value(["fc"], "reparam", {"rank": 4, "alpha": 8})
    assert act.isEnabled() and "PEFT" in act.toolTip()
    before = {k: v.clone() for k, v in window.controller.model.state_dict().items()}
    dialogs.script("save_file", str(tmp_path / "adapter"))
    assert window.documents.export_peft(), dialogs.kinds("error")
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["r"] == 4 and config["lora_alpha"] == 8 and config["target_modules"] == ["fc"]
    assert (tmp_path / "adapter" / "adapter_model.safetensors").stat().st_size > 0
    assert "Exported PEFT adapter" in window.statusBar().currentMessage()
    after = window.controller.model.state_dict()  # the loaded model is left as it was
    assert after.keys() == before.keys() and all((after[k] == v).all() for k, v in before.items())
    window.controller.set_value(["fc"], "reparam", False)
    assert not act.isEnabled()


def test_peft_adapter_refuses_full_rank_a_plus_b_in_one_line(window: MainWindow, dialogs: Any, tmp_path: Path) -> None:
    window.controller.set_value(["fc"], "reparam", {"rank": 4})
    window.controller.set_value(["layer4.1.conv2"], "reparam", {"kind": "a_plus_b"})  # full rank: no PEFT form
    assert window.act_export_peft.isEnabled()
    dialogs.script("save_file", str(tmp_path / "adapter"))
    assert not window.documents.export_peft()
    (_, title, message), = dialogs.kinds("error")
    assert title == "Cannot export PEFT adapter" and "\n" not in message
    assert message.startswith("cannot write a PEFT adapter: full-rank A+B on layer4.1.conv2 has no PEFT form")
    assert not (tmp_path / "adapter").exists()


def test_plan_json_export_names_the_model_and_keeps_the_document(window: MainWindow, dialogs: Any, tmp_path: Path) -> None:
    window.controller.set_value(["layer1"], "frozen", True)
    dialogs.script("save_file", str(tmp_path / "exported"))
    assert window.documents.export_plan()
    plan = FreezePlan.load(tmp_path / "exported.json")
    assert plan.model["name"] == "resnet18" and plan.model["fingerprint"] == window.controller.tree.fingerprint
    assert plan.rules == window.controller.plan.rules and window.controller.path is None


def test_peft_adapter_refuses_a_destination_that_cannot_be_a_folder(window: MainWindow, dialogs: Any, tmp_path: Path) -> None:
    """Hostile destinations: an existing file, a path below a file, a folder whose config name is a folder."""
    window.controller.set_value(["fc"], "reparam", {"rank": 4})
    a_file = tmp_path / "taken"
    a_file.write_text("keep me")
    blocked = tmp_path / "blocked"
    (blocked / "adapter_config.json").mkdir(parents=True)
    for dest in (a_file, a_file / "adapter", blocked):
        dialogs.calls.clear()
        dialogs.script("save_file", str(dest))
        assert not window.documents.export_peft()
        (_, title, message), = dialogs.kinds("error")
        assert title == "Cannot export PEFT adapter" and "\n" not in message and "choose a writable folder" in message
    assert a_file.read_text() == "keep me"
    assert window.controller.model is not None and not hasattr(window.controller.model.fc, "parametrizations")
