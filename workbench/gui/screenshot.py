"""Render the window offscreen to PNG files for the documentation, with real training runs.

Usage::

    QT_QPA_PLATFORM=offscreen python -m workbench.gui.screenshot docs/screenshots --size 1920x1080
    QT_QPA_PLATFORM=offscreen python -m workbench.gui.screenshot docs/screenshots/1280x720 --size 1280x720

It trains resnet18 (random weights, a 10-class head, synthetic 64 px images, batch 16, CPU:
the loss falls within the run) twice through the
window's own training thread, with a cosine schedule after 4 warm-up steps and validation on a
held-out split every 12 steps: run #1 fine-tunes everything; run #2 starts the same way and,
part-way through, the stem and ``layer1``–``layer3`` are frozen in the tree while it trains.
Then it writes:

- ``training.png``: the window during run #2, just after the live freeze (marker on every plot);
- ``main_window.png``: after run #2, run #1 overlaid (dashed) for comparison;
- ``module_stats.png``: the tree's gradient norm and update/weight ratio columns after run #2
  (the frozen backbone blank);
- ``memory_check.png``: the cost panel's step memory at batch 1024 and 224 px (activations
  included, against the device's memory);
- ``runs.png``: the Runs tab comparing both runs;
- ``verify.png``: the Verify tab of run #2;
- ``diagnostics.png``: the Diagnostics tab after a model check of a plan with pitfalls;
- ``filter.png``: the tree filtered by a search;
- ``suggest.png``: the Suggest… dialog for resnet18 at batch 16 and 64 px (the plans that fit
  the device's memory).

Settings and runs go to a temporary folder, so the user's files are neither used nor changed.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["main", "render"]


def _wait(app: Any, done: Callable[[], bool], timeout: float = 1800.0) -> None:
    """Run the event loop until ``done()`` (or ``timeout`` seconds: then raise)."""
    end = time.monotonic() + timeout
    while not done():
        if time.monotonic() > end:
            raise TimeoutError("the window did not get there in time")
        app.processEvents()
        time.sleep(0.01)


def render(
    out_dir: str | Path,
    size: tuple[int, int] = (1400, 850),
    steps: tuple[int, int] = (36, 60),
    freeze_at: int = 24,
) -> list[Path]:
    """Train twice in the window and render the screenshots.

    Args:
        out_dir: destination folder (created if needed).
        size: window size in pixels.
        steps: steps of run #1 and run #2.
        freeze_at: step of run #2 after which the backbone is frozen.

    Returns:
        The written files.
    """
    import torch
    from PySide6.QtCore import QCoreApplication, QEvent, QSettings
    from PySide6.QtWidgets import QApplication

    from workbench.core.atomic import atomic_path
    from workbench.gui.app import create_application
    from workbench.gui.main_window import MainWindow
    from workbench.gui.model_loading import LoadRequest, default_request
    from workbench.gui.plan.tree_model import Column
    from workbench.gui.training.runs_tab import RUNS_DIR_ENV

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    with tempfile.TemporaryDirectory() as tmp:
        QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, tmp)
        old_runs = os.environ.get(RUNS_DIR_ENV)
        os.environ[RUNS_DIR_ENV] = str(Path(tmp) / "runs")
        window = None
        try:
            app = create_application()
            app.setStyle("Fusion")
            window = MainWindow()
            window.resize(*size)
            window.show()
            c = window.controller
            t = window.training
            # the synthetic data is learnable by a 10-class head (a 1000-class one sits at ln 1000)
            demo = default_request()
            window.source_bar.classes.setValue(10)
            assert c.load(LoadRequest(demo.name, demo.weights, 10, note=demo.note))
            _wait(app, lambda: not c.busy)
            tabs = window.right_panel

            def grab(name: str, widget: Any = None) -> None:
                for _ in range(3):
                    app.processEvents()
                t.plots.redraw()
                app.processEvents()
                path = out / name
                with atomic_path(path) as tmp_png:
                    (widget or window).grab().save(str(tmp_png), "PNG")
                path.chmod(0o644)
                written.append(path)

            t.panel.set_values(batch_size=16, image_size=64, device="cpu", data="synthetic", lr=1e-3,
                               scheduler="cosine", warmup_steps=4, val_every=12)
            # run 1: everything trains
            t.panel.set_values(steps=steps[0])
            assert t.panel.start()
            _wait(app, lambda: t.runs.state == "idle")
            first = t.runs.records[-1]
            # run 2: freeze the backbone while it trains
            t.panel.set_values(steps=steps[1])
            assert t.panel.start()
            _wait(app, lambda: t.runs.current is not None and len(t.runs.current.metrics) >= freeze_at)
            c.set_value(["conv1", "bn1", "layer1", "layer2", "layer3"], "frozen", True, "Freeze the backbone up to layer3")
            for path in ("layer3", "layer4"):
                window.view.expand(window.proxy.mapFromSource(window.tree_model.index_of(path)))
            window.plan_actions.select_path("layer4")
            _wait(app, lambda: t.runs.current is not None and any(m.kind == "change" for m in t.plots.markers)
                  and len(t.runs.current.metrics) >= freeze_at + 12)
            tabs.setCurrentWidget(t.plots)
            grab("training.png")
            _wait(app, lambda: t.runs.state == "idle")
            second = t.runs.records[-1]
            t.runs_panel.select([first, second])
            tabs.setCurrentWidget(t.plots)
            grab("main_window.png")
            # the tree's live columns after run #2: which modules learn (frozen rows blank)
            _wait(app, lambda: window.tree_model.module_stats is not None
                  and not window.tree_model._live_timer.isActive())
            sizes = window.splitter.sizes()
            window.splitter.setSizes([900, sum(sizes) - 900])
            window.view.expand(window.proxy.mapFromSource(window.tree_model.index_of("layer4.0")))
            window.plan_actions.select_path("layer4.0.conv1")
            app.processEvents()  # the live columns sit next to the module names while a run's numbers show
            window.view.update_heat()
            grab("module_stats.png")
            window.splitter.setSizes(sizes)
            tabs.setCurrentWidget(t.runs_panel)
            grab("runs.png")
            t.runs_panel.select([second])
            tabs.setCurrentWidget(t.verify)
            grab("verify.png")
            c.set_value(["layer4"], "lr_scale", 0.1)
            c.set_value(["bn1"], "bn_eval", False)  # frozen BatchNorm in train mode: a pitfall
            c.set_value(["layer1"], "lr_scale", 0.5)  # no effect on frozen modules: another
            done: list[bool] = []
            c.checkFinished.connect(lambda *_: done.append(True))
            if window.diagnostics.run():
                _wait(app, lambda: bool(done))
            tabs.setCurrentWidget(window.diagnostics)
            if window.diagnostics.rows:
                window.diagnostics.table.selectRow(0)
            grab("diagnostics.png")
            tabs.setCurrentIndex(0)
            window.filter_edit.setText("bn")
            window.view.scrollTo(window.proxy.index(0, Column.MODULE))
            grab("filter.png")
            window.filter_edit.clear()
            # the next run's step memory with activations: batch 1024 at 224 px (issue: 187 MB shown, 8.4 GB used)
            tabs.setCurrentWidget(t.plots)
            c.set_value(["conv1", "bn1", "layer1", "layer2", "layer3"], "frozen", False, "Unfreeze the backbone")
            t.panel.set_values(batch_size=1024, image_size=224)
            est = window.activations
            est.request()
            _wait(app, lambda: not est.busy and not est._timer.isActive()
                  and "224 px" in window.cost_panel.activation_label.text())
            grab("memory_check.png")
            t.panel.set_values(batch_size=16, image_size=64)
            # Suggest…: the plans that fit the device's memory, on the Pareto chart
            suggest = window.suggest_dialog()
            suggest.resize(min(size[0], 1100), min(size[1], 700))
            suggest.show()
            _wait(app, lambda: not suggest.busy and suggest.advice is not None)
            grab("suggest.png", suggest)
            suggest.reject()
            suggest.deleteLater()
            c.undo_stack.setClean()
            window.close()
            window.deleteLater()
            QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
            QApplication.processEvents()
        except BaseException:
            if window is not None:  # a wait timed out or a step failed: no thread may outlive the window
                _stop_threads(window)
                window.hide()
                window.deleteLater()
                QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
            raise
        finally:
            if old_runs is None:
                os.environ.pop(RUNS_DIR_ENV, None)
            else:
                os.environ[RUNS_DIR_ENV] = old_runs
    return written


def _stop_threads(window: Any) -> None:
    """Stop the window's training run and background work, and join their threads."""
    window.activations.shutdown()  # first: it lets go of the model lock a starting run may wait for
    window.training.shutdown()
    window.source_bar.wait()
    window.controller.wait()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m workbench.gui.screenshot [OUT_DIR]``.

    Args:
        argv: arguments (default: ``sys.argv[1:]``).

    Returns:
        0, or 1 when the window did not reach a state in time (one line on stderr).
    """
    import argparse

    p = argparse.ArgumentParser(prog="python -m workbench.gui.screenshot", description=__doc__.splitlines()[0])
    p.add_argument("out_dir", nargs="?", default="docs/screenshots")
    p.add_argument("--size", default="1400x850", help="window size WIDTHxHEIGHT (default 1400x850)")
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        width, height = (int(v) for v in args.size.lower().split("x"))
    except ValueError:
        p.error(f"--size must be WIDTHxHEIGHT, like 1280x720, got {args.size!r}")
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    try:
        written = render(args.out_dir, size=(width, height))
    except TimeoutError as e:
        print(f"workbench.gui.screenshot: error: {e}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
