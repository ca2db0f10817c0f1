"""Module tree at scale: populate the window and freeze the root, for small to 5,000+-module models.

Models (all side by side in one process, offscreen):

- ``resnet18`` (68 modules), the baseline;
- ``vit_l_16`` and ``convnext_large`` with ``weights=None``, built on the ``meta`` device
  (the tree and counts need shapes only, so no 1 GB of random weights is allocated);
- ``nested_5k``: nested ``nn.Sequential`` (10 × 10 × 50 ``Linear``), 5,111 modules;
- ``nested_10k``: 10 × 20 × 50, 10,211 modules;
- ``nested_50k``: 10 × 100 × 50, 51,011 modules (``--models nested_50k``; not in the default set);
- ``moe_61x256``: a DeepSeek-V3-shaped mixture of experts (61 layers × 256 experts, 60,486
  modules, 667 B parameters) built on ``meta`` from ``py:tests/benchmarks/moe_model.py:build``
  as the app's "Structure only" does (``--models moe_61x256``; not in the default set).

Measured (median of ``--repeat`` runs), as the user experiences them:

- ``load``: building the ``ModelTree``, byte and shape tables (the worker thread's part);
- ``populate``: ``Controller.set_loaded`` → model reset, tree expanded to the top level, the
  cost panel refreshed, and the view painted (GUI thread; the issue's target is < 1 s);
- ``freeze root`` / ``unfreeze root``: one click's plan edit, ``PlanState`` (resolve + lint),
  ``dataChanged`` ranges and a repaint of the view (target < 100 ms);
- ``freeze leaf``: the same for one module deep in the tree (it resolves and recounts that
  module only; the subtree sums are one cumulative sum over the flat pre-order arrays);
- ``findings``: the plan's lint and readiness for the cost panel, which a large tree runs a
  moment after the click (coalesced), not in it;
- ``filter key``: one keystroke in the filter box (a large tree filters once typing pauses);
  ``filter``: the filter pass itself, with the matches expanded and painted;
- ``expand all``: View ▸ Expand All until the view is painted (a large tree shows its first
  slice; the rest expands from the event loop) and ``expand all done``: until every row is
  expanded;
- ``freeze root exp`` / ``unfreeze root exp``: the root's Frozen box clicked with the whole
  tree expanded (only the rows in view are announced);
- ``filter type`` / ``filter backspace`` / ``filter clear``: with the tree expanded, a filter
  word (``experts.9`` on the MoE: the deepest module's last numbered collection and first digit) applied
  as the filter box applies it once typing pauses, then one Backspace (a broader filter), then
  the clear button; each until the view is painted (the first slice of matches);
- ``longest slice``: the longest pass of the event loop while expansions run in slices (what a
  click waits for at most);
- ``live stats``: one update of the live columns (gradient norm, update/weight ratio) with a
  value for every module: its ``dataChanged`` per parent, the heat range over the rows in view
  and a repaint, with the tree expanded to the top level (target < 100 ms; it happens at most
  once a second while training);
- ``estimate``: from the load until the cost panel shows the next run's step memory (or why
  there is none). The activation profile behind it starts right after the load and runs while
  every step above is clicked, as a user would click; it runs in slices that wait for the GUI's
  event loop, so the clicks do not wait for it. The ``nested`` models are fed 4 px images (a
  ``Linear(4, 4)`` takes them), so their profile runs the whole forward pass; the MoE's routing
  reads token values, which a shape-only pass does not have, so its panel says why there is no
  estimate.

It prints the median and best time, the median CPU time of the GUI thread in the step (the
steadier figure on a machine shared with other work; — for derived measures), the median's
ratio to the target and to resnet18; it asserts nothing.

Run::

    QT_QPA_PLATFORM=offscreen python tests/benchmarks/bench_gui_tree.py
    QT_QPA_PLATFORM=offscreen python tests/benchmarks/bench_gui_tree.py --repeat 5 --json gui_tree.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import torch
from torch import nn

if TYPE_CHECKING:
    from workbench.core.plan.tree import ModelTree
    from workbench.core.training.module_stats import ModuleStats

TARGETS = {"populate": 0.3, "freeze root": 0.1, "unfreeze root": 0.1, "freeze leaf": 0.1, "live stats": 0.1,
           "filter key": 0.05}
MEASURES = ("load", "populate", "freeze root", "unfreeze root", "freeze leaf", "findings", "expand all",
            "expand all done", "freeze root exp", "unfreeze root exp", "filter type", "filter backspace",
            "filter clear", "longest slice", "filter key", "filter", "live stats", "estimate")
TARGETS.update({"freeze root exp": 0.1, "unfreeze root exp": 0.1, "filter type": 0.1, "filter backspace": 0.1,
                "filter clear": 0.1, "longest slice": 0.1})
MOE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "moe_model.py")


def nested(width: int, mid: int, leaf: int) -> nn.Module:
    """``width`` Sequentials of ``mid`` Sequentials of ``leaf`` Linear(4, 4)."""
    return nn.Sequential(
        *[nn.Sequential(*[nn.Sequential(*[nn.Linear(4, 4) for _ in range(leaf)]) for _ in range(mid)])
          for _ in range(width)]
    )


def torchvision_on_meta(name: str) -> nn.Module:
    from workbench.core.models.zoo import build_model

    with torch.device("meta"):
        return build_model(name, weights=None)


def moe_from_py() -> nn.Module:
    """The MoE of ``moe_model.py`` built as the app builds a ``py:`` model with "Structure only"."""
    from workbench.gui.model_loading import LoadRequest, load_model

    return load_model(LoadRequest(name=f"{MOE_FILE}:build", source="py", meta=True)).model


MODELS: dict[str, Callable[[], nn.Module]] = {
    "resnet18": lambda: torchvision_on_meta("resnet18"),
    "vit_l_16": lambda: torchvision_on_meta("vit_l_16"),
    "convnext_large": lambda: torchvision_on_meta("convnext_large"),
    "nested_5k": lambda: nested(10, 10, 50),
    "nested_10k": lambda: nested(10, 20, 50),
    "nested_50k": lambda: nested(10, 100, 50),
    "moe_61x256": moe_from_py,
}
DEFAULT_MODELS = [m for m in MODELS if m not in ("nested_50k", "moe_61x256")]


class Seconds(float):
    """Wall-clock seconds, with the GUI thread's CPU seconds in ``cpu`` (steadier on a loaded machine)."""

    cpu: float = float("nan")


def timed(fn: Callable[[], object]) -> Seconds:
    t0, c0 = time.perf_counter(), time.thread_time()
    fn()
    out = Seconds(time.perf_counter() - t0)
    out.cpu = time.thread_time() - c0
    return out


def all_module_stats(tree: ModelTree | None) -> ModuleStats:
    """Module statistics with a value for every module of the tree (the one loaded)."""
    from workbench.core.training.module_stats import ModuleStats

    assert tree is not None
    paths = tuple(tree.paths())
    n = len(paths)
    return ModuleStats(1, paths, tuple(float(i % 97 + 1) for i in range(n)), (1e-6,) * n, (1.0,) * n)


def deepest_leaf(tree: ModelTree | None) -> str:
    """The path of the tree's deepest module (the one loaded)."""
    assert tree is not None
    paths = tree.paths()
    return max(paths, key=lambda p: (p.count("."), p))


def filter_word(path: str) -> str:
    """A filter word for a module path: its last numbered module's collection and the number's
    first digit (``layers.60.mlp.experts.255.up_proj`` → ``experts.2``)."""
    parts = path.split(".")
    for k in range(len(parts) - 1, 0, -1):
        if parts[k].isdigit():
            return f"{parts[k - 1]}.{parts[k][0]}"
    return parts[-1][:3]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeat", type=int, default=5, help="runs per measurement (median and best reported)")
    p.add_argument("--models", nargs="*", default=DEFAULT_MODELS, choices=list(MODELS))
    p.add_argument("--json", help="also write the results to this JSON file")
    args = p.parse_args(argv)
    torch.set_num_threads(1)

    from PySide6.QtCore import QEvent, QEventLoop, QObject, QSettings, QTimer
    from PySide6.QtWidgets import QApplication

    from workbench.gui.app import create_application
    from workbench.gui.main_window import MainWindow
    from workbench.gui.model_loading import loaded_from_model

    class PaintCounter(QObject):
        """Counts the paint events of a widget."""

        def __init__(self, widget: QObject) -> None:
            super().__init__(widget)
            self.count = 0
            widget.installEventFilter(self)

        def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
            if event.type() == QEvent.Type.Paint:
                self.count += 1
            return False

    settings_dir = tempfile.mkdtemp(prefix="bench-gui-settings-")
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, settings_dir)
    app = create_application()
    window = MainWindow(load_default=False)
    window.resize(1400, 850)
    window.show()
    app.processEvents()
    c = window.controller
    view = window.view

    painted = PaintCounter(view.viewport())

    def settle() -> None:
        """Until the view is painted once: the events the step posted (a view paints its pending
        updates among them), or a paint of the view when they did not paint it."""
        before = painted.count
        app.processEvents()
        if painted.count == before:
            view.viewport().repaint()

    def drain(seconds: float = 0.5) -> None:
        """Let the work a step leaves for later (the plan's lint, the idle-time garbage
        collector freeze after a load) run before the next step is timed: the app's own event
        loop, idle as between a user's clicks (the activation profile runs its slices then)."""
        loop = QEventLoop()
        QTimer.singleShot(int(seconds * 1000), loop.quit)
        loop.exec()

    def painted_after(*calls: Callable[[], object]) -> Callable[[], None]:
        """One step as the user sees it: the calls in order, then :func:`settle` (until the view is painted)."""
        def step() -> None:
            for call in calls:
                call()
            settle()
        return step

    def timed_step(fn: Callable[[], object]) -> float:
        drain()
        return timed(fn)

    def slices_done() -> tuple[float, float]:
        """Run the event loop until the view's expansions in slices are done: (seconds, longest pass)."""
        expander = view.expander
        t0, longest = time.perf_counter(), 0.0
        while expander.busy:
            longest = max(longest, timed(app.processEvents))
        return time.perf_counter() - t0, longest

    results: dict[str, dict[str, float | int]] = {}
    notes: dict[str, str] = {}
    for name in args.models:
        window.training.panel.set_values(image_size=4 if name.startswith("nested") else None)
        model = MODELS[name]()
        runs: dict[str, list[float]] = {k: [] for k in MEASURES}
        ranges = 0
        for _ in range(args.repeat):
            loaded = None

            def load() -> None:
                nonlocal loaded
                loaded = loaded_from_model(model, name)  # noqa: F821 - timed at once; `del model` ends the loop body

            runs["load"].append(timed(load))
            assert loaded is not None
            c.tree = None  # a different model each time: a full reset and a new plan
            est, label = window.activations, window.cost_panel.activation_label
            loaded_at, arrived = time.perf_counter(), [0.0]

            def estimated() -> None:
                if not arrived[0] and not est.busy and "estimating" not in label.text():
                    arrived[0] = time.perf_counter()

            est.changed.connect(estimated)
            runs["populate"].append(timed(painted_after(lambda: c.set_loaded(loaded))))
            emitted = [0]
            conn = window.tree_model.dataChanged.connect(lambda *a: emitted.__setitem__(0, emitted[0] + 1))
            runs["freeze root"].append(timed_step(painted_after(lambda: c.set_value([""], "frozen", True))))
            ranges = emitted[0]
            window.tree_model.dataChanged.disconnect(conn)
            runs["unfreeze root"].append(timed_step(painted_after(lambda: c.set_value([""], "frozen", False))))
            leaf = deepest_leaf(c.tree)
            runs["freeze leaf"].append(timed_step(painted_after(lambda: c.set_value([leaf], "frozen", True))))
            runs["findings"].append(timed(painted_after(window.cost_panel.refresh_findings)))
            runs["expand all"].append(timed_step(painted_after(lambda: window.plan_actions.expand_to_depth(-1))))
            done, longest = slices_done()
            runs["expand all done"].append(runs["expand all"][-1] + done)
            runs["freeze root exp"].append(timed_step(painted_after(lambda: c.set_value([""], "frozen", True))))
            runs["unfreeze root exp"].append(timed_step(painted_after(lambda: c.set_value([""], "frozen", False))))
            word = filter_word(leaf)
            for key, text in (("filter type", word), ("filter backspace", word[:-1])):
                window.filter_edit.blockSignals(True)  # as the box applies it once typing pauses
                window.filter_edit.setText(text)
                window.filter_edit.blockSignals(False)
                runs[key].append(timed_step(painted_after(window.plan_actions.apply_filter)))
                longest = max(longest, slices_done()[1])
            runs["filter clear"].append(timed_step(painted_after(window.filter_edit.clear)))
            runs["longest slice"].append(longest)
            window.plan_actions.expand_to_depth(0)
            runs["filter key"].append(timed_step(painted_after(lambda: window.filter_edit.setText(leaf.rsplit(".", 1)[-1] + "x"))))
            window.filter_edit.setText(leaf)
            runs["filter"].append(timed_step(painted_after(window.plan_actions.apply_filter)))
            window.filter_edit.clear()
            settle()
            c.set_value([leaf], "frozen", False)
            stats = all_module_stats(c.tree)
            window.tree_model.set_module_stats(None)
            window.tree_model._live_timer.stop()
            runs["live stats"].append(timed_step(painted_after(lambda: window.tree_model.set_module_stats(stats), view.update_heat)))
            window.tree_model._live_timer.stop()
            while not arrived[0]:
                drain(0.05)
            est.changed.disconnect(estimated)
            runs["estimate"].append(arrived[0] - loaded_at)
            notes[name] = label.text()
            c.undo_stack.setClean()
        res: dict[str, float | int] = {k: statistics.median(v) for k, v in runs.items()}
        res.update({f"{k} (best)": min(v) for k, v in runs.items()})
        res.update({f"{k} (cpu)": statistics.median(getattr(x, "cpu", float("nan")) for x in v) for k, v in runs.items()})
        res["modules"] = len(c.tree) if c.tree is not None else 0
        res["ranges (freeze root)"] = ranges
        results[name] = res
        del model

    window.close()
    window.deleteLater()
    app.processEvents()

    base = results.get("resnet18")
    print(f"# GUI tree benchmark — {platform.processor() or platform.machine()}, Python {platform.python_version()}, "
          f"torch {torch.__version__}, Qt offscreen, median of {args.repeat}")
    print(f"{'model':<16}{'modules':>8}  {'measure':<18}{'median':>10}{'best':>10}{'GUI CPU':>10}  {'vs target':>10}  {'vs resnet18':>11}")
    for name, res in results.items():
        for key in MEASURES:
            t = float(res[key])
            best = float(res[f"{key} (best)"])
            cpu = float(res[f"{key} (cpu)"])
            cpu_text = f"{cpu * 1000:>8.1f}ms" if cpu == cpu else f"{'—':>10}"
            target = TARGETS.get(key)
            vs_t = f"{t / target:.2f}×" if target else "—"
            vs_b = f"{t / float(base[key]):.1f}×" if base and float(base[key]) > 0 else "—"
            print(f"{name:<16}{int(res['modules']):>8}  {key:<18}{t * 1000:>8.1f}ms{best * 1000:>8.1f}ms{cpu_text}  {vs_t:>10}  {vs_b:>11}")
        print(f"{'':<24}  dataChanged ranges for freeze root: {res['ranges (freeze root)']}")
        print(f"{'':<24}  cost panel: {re.sub(r'<[^>]+>', '', notes.get(name, ''))[:150]}")
    if args.json:
        from workbench.core.atomic import atomic_write

        atomic_write(args.json, json.dumps({"repeat": args.repeat, "results": results}, indent=2))
    QApplication.processEvents()
    return 0


if __name__ == "__main__":
    sys.exit(main())
