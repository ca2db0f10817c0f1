"""The Verify tab shows what did not train, by name, and never says OK for a run that trained nothing."""

from __future__ import annotations

from typing import Any


def _panel(qtbot: Any) -> Any:
    from workbench.gui.training.verify_panel import VerifyPanel

    panel = VerifyPanel()
    qtbot.addWidget(panel)
    return panel


def _find(item: Any, name: str) -> Any:
    for i in range(item.childCount()):
        if item.child(i).text(0) == name:
            return item.child(i)
    raise AssertionError(f"no row {name}")


def test_a_run_that_trained_nothing_is_not_ok(qtbot: Any) -> None:
    panel = _panel(qtbot)
    report = {"ok": True, "steps": 0, "trained": False, "checked": {"frozen": 4, "trainable": 2}, "violations": [],
              "module_status": {"conv": "ok", "fc": "ok"}}
    panel.show_report(report, "#3 failed at step 0")
    text = panel.banner.text()
    assert panel.ok is None and "Nothing trained" in text and "OK" not in text


def test_adapters_that_stopped_training_are_named_in_red(qtbot: Any) -> None:
    panel = _panel(qtbot)
    message = "trainable tensor received gradients up to step 3, then none in the last 196 steps"
    report = {
        "ok": False, "steps": 200, "trained": True, "checked": {"frozen": 4, "trainable": 4},
        "violations": [
            {"name": "layer4.0.conv1.wb_lowrank.weight.U", "module": "layer4.0.conv1", "kind": "trainable_grad_stopped",
             "severity": "error", "message": message},
            {"name": "layer4.0.conv1.wb_lowrank.weight.V", "module": "layer4.0.conv1", "kind": "trainable_grad_stopped",
             "severity": "error", "message": message},
        ],
        "module_status": {"layer4.0.conv1": "error", "fc": "ok"},
    }
    panel.show_report(report, "#4")
    assert panel.ok is False
    assert "FAILED" in panel.banner.text() and "2 trainable tensors did not train" in panel.banner.text()
    assert "changed that the plan keeps fixed" not in panel.banner.text()
    root = panel.tree.topLevelItem(0)
    conv = _find(_find(_find(root, "layer4"), "0"), "conv1")
    assert conv.text(1) == "stopped training" and panel.status["layer4"] == "error"
    assert "layer4.0.conv1.wb_lowrank.weight.U" in conv.text(2) and "(+1 more)" in conv.text(2)
    assert "weight.V" in conv.toolTip(2)


def test_a_short_run_warns_by_name_and_stays_ok(qtbot: Any) -> None:
    panel = _panel(qtbot)
    report = {
        "ok": True, "steps": 5, "trained": True, "checked": {"trainable": 2},
        "violations": [{"name": "head.weight", "module": "head", "kind": "trainable_no_grad", "severity": "warning",
                        "message": "trainable tensor received no gradient in any of the run's 5 optimizer steps"}],
        "module_status": {"head": "warning"},
    }
    panel.show_report(report)
    assert panel.ok is True and "did not train as expected" in panel.banner.text()
    assert _find(panel.tree.topLevelItem(0), "head").text(1) == "no gradient"
