"""Nothing stale: loading another model clears what belonged to the old one (the cost panel's
last-run line, the progress bar), while the old run stays in the Runs tab."""

from __future__ import annotations

from typing import Any

from tests.timeouts import GUI_EVENT_S, GUI_RUN_S, GUI_WORKER_S, ms
from workbench.gui.main_window import MainWindow


def test_a_new_model_clears_the_old_models_last_run_and_progress(qtbot: Any, window: MainWindow) -> None:
    t = window.training
    t.panel.set_values(steps=2)
    with qtbot.waitSignal(t.runs.runEnded, timeout=ms(GUI_RUN_S)):
        assert t.panel.start()
    qtbot.waitUntil(lambda: "Last run" in window.cost_panel.activation_label.text(), timeout=ms(GUI_WORKER_S))
    assert "step 2 / 2" in t.panel.progress.text()
    window.source_bar.set_current({"name": "resnet18"})
    with qtbot.waitSignal(window.controller.loadFinished, timeout=ms(GUI_WORKER_S)):
        window.source_bar.load_button.click()
    qtbot.waitUntil(lambda: "Last run" not in window.cost_panel.activation_label.text(), timeout=ms(GUI_WORKER_S))
    assert t.panel.progress.text() == "no run yet" and t.panel.rate_label.text() == ""
    assert len(t.runs.records) == 1  # the old run stays in the Runs tab


def test_a_new_model_clears_the_verify_tab(qtbot: Any, window: MainWindow) -> None:
    from workbench.gui.training.verify_panel import EMPTY_TEXT

    t = window.training
    t.panel.set_values(steps=2)
    with qtbot.waitSignal(t.runs.runEnded, timeout=ms(GUI_RUN_S)):
        assert t.panel.start()
    qtbot.waitUntil(lambda: t.verify.tree.topLevelItemCount() > 0, timeout=ms(GUI_WORKER_S))
    index = window.right_panel.indexOf(t.verify)
    assert not window.right_panel.tabIcon(index).isNull()  # the old run's dot
    window.source_bar.set_current({"name": "resnet18"})
    with qtbot.waitSignal(window.controller.loadFinished, timeout=ms(GUI_WORKER_S)):
        window.source_bar.load_button.click()
    qtbot.waitUntil(lambda: t.verify.tree.topLevelItemCount() == 0, timeout=ms(GUI_WORKER_S))
    assert t.verify.banner.text() == EMPTY_TEXT and t.verify.ok is None and t.verify.status == {}
    assert window.right_panel.tabIcon(index).isNull()
    assert len(t.runs.records) == 1  # the old run stays in the Runs tab, its report with it


def test_view_expand_all_says_so_in_the_expand_box(window: MainWindow) -> None:
    assert window.depth_box.currentData() == 0
    window.plan_actions.act_expand_all.trigger()
    assert window.depth_box.currentText() == "All"
    window.plan_actions.act_expand_default.trigger()
    assert window.depth_box.currentText() == "Top level"


def test_the_options_summary_is_cut_by_whole_items(qtbot: Any) -> None:
    from workbench.gui.elided_label import ElidedLabel

    label = ElidedLabel(separator=" · ")
    qtbot.addWidget(label)
    label.show()
    qtbot.waitExposed(label, timeout=ms(GUI_EVENT_S))
    full = "warm-up 4 · val every 10 (10 % held out) · auto-freeze every 20 steps"
    label.resize(label.fontMetrics().horizontalAdvance("warm-up 4 · val every 10 (10 % held out) · auto"), 20)
    label.set_full_text(full)
    assert label.text() == "warm-up 4 · val every 10 (10 % held out) · …"
    label.resize(label.fontMetrics().horizontalAdvance("warm-up 4 · val"), 20)
    assert label.text() == "warm-up 4 · …"
    label.resize(label.fontMetrics().horizontalAdvance(full) + 4, 20)
    assert label.text() == full and label.full_text() == full
