"""Regressions of the desktop app: window width, refused starts, duplicate findings,
unreadable runs, wording, and ``workbench FILE`` without the word ``gui``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.timeouts import GUI_EVENT_S, GUI_WORKER_S, ms
from workbench.core.checks.lint import lint_plan
from workbench.core.plan.rules import FreezePlan
from workbench.gui.main_window import MainWindow
from workbench.gui.wording import sentence


def test_window_fits_a_1280x720_screen(window: MainWindow, qtbot: Any) -> None:
    window.show()
    qtbot.waitExposed(window, timeout=ms(GUI_EVENT_S))
    assert window.minimumSizeHint().width() <= 1280
    assert window.minimumSizeHint().height() <= 720


def test_refused_start_keeps_no_run(window: MainWindow, qtbot: Any) -> None:
    t = window.training
    before = list(t.runs.records)
    t.panel.set_values(batch_size=4096, steps=2, image_size=32)  # larger than the synthetic data
    with qtbot.waitSignal(t.runs.runEnded, timeout=ms(GUI_WORKER_S)) as blocker:
        assert t.panel.start()
    record = blocker.args[0]
    assert record.status == "refused" and t.runs.records == before
    assert record.folder is None or not record.folder.exists()
    assert t.panel.progress.format() == "not started"


def test_watch_findings_already_shown_are_not_listed_twice(window: MainWindow) -> None:
    c = window.controller
    c.set_value(["layer1"], "frozen", True)
    c.set_value(["layer1.0.bn1"], "bn_eval", False)
    panel = window.diagnostics
    n = len(panel.rows)
    assert n
    panel.show_watch([f.to_dict() for _s, f in panel.rows], {"steps": 4})
    assert len(panel.rows) == n


def test_unreadable_metrics_give_the_controllers_message(window: MainWindow, qtbot: Any, tmp_path: Path) -> None:
    from workbench.core.training.metrics import MetricsError, load_metrics

    bad = tmp_path / "metrics.csv"
    bad.write_bytes(b"\xff\xfe\x00 not utf-8")
    with pytest.raises(MetricsError, match="not UTF-8"):
        load_metrics(bad)
    runs = window.training.runs
    record = runs.store.new_record("#9 broken", config={}, plan={}, model={})
    runs.store.save(record, metrics=False)
    (record.folder or runs.store.folder / record.id).joinpath("metrics.csv").write_bytes(b"\xff\xfe\x00")
    record.metrics, record.metrics_loaded = [], False
    with qtbot.waitSignal(runs.statusMessage, timeout=ms(GUI_EVENT_S)) as blocker:
        assert runs.load_metrics(record) == []
    assert "Cannot read the metrics of #9 broken" in blocker.args[0]


def test_wording() -> None:
    assert sentence("did you mean 'layer2'?") == "did you mean 'layer2'?"
    assert sentence("no module 'x'") == "no module 'x'."


def test_ab_on_a_frozen_subtree_is_one_finding(window: MainWindow) -> None:
    tree = window.controller.tree
    plan = FreezePlan.from_dict({"format": "freeze-plan", "version": 1, "rules": [
        {"select": "layer1", "frozen": True, "reparam": {"kind": "a_plus_b"}}]})
    found = [f for f in lint_plan(plan, tree) if f.code == "reparam-frozen"]
    assert [f.path for f in found] == ["layer1"] and "modules in this subtree" in found[0].message


def test_info_only_findings_have_no_warning_sign(window: MainWindow) -> None:
    window.controller.set_value(["layer1"], "frozen", True)
    window.controller.set_value(["layer1"], "reparam", {"kind": "a_plus_b"})
    title = window.cost_panel.findings_title.text()
    assert "finding" in title and "⚠" not in title


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["plan.json"], ("plan.json", None, None)),
        (["model.safetensors"], ("model.safetensors", None, None)),
        (["--model", "vit_b_16"], (None, "vit_b_16", None)),
        (["plan.json", "--screenshot", "out.png"], ("plan.json", None, "out.png")),
    ],
)
def test_app_arguments_work_without_the_word_gui(argv: list[str], expected: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    from workbench import cli
    from workbench.commands import gui

    seen: list[tuple] = []
    monkeypatch.setattr(gui, "run", lambda a: seen.append((a.file, a.model, a.screenshot)) or 0)
    assert cli.main(argv) == 0 and seen == [expected]


def test_a_mistyped_command_is_still_an_error(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    from workbench import cli

    with pytest.raises(SystemExit) as e:
        cli.main(["trian"])
    assert e.value.code == 2 and "invalid choice: 'trian'" in capsys.readouterr().err
