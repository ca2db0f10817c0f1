"""The window's state: the loaded model, its tree, the freeze plan, the file, undo history.

The :class:`Controller` is the one owner of the plan. Widgets read ``controller.plan`` and
``controller.state`` and change the plan only through :meth:`Controller.edit` (one
:class:`PlanEditCommand` on the ``QUndoStack`` per user action); they keep no copy of it.
Other panels (training, plots) connect to :attr:`Controller.planChanged` and
:attr:`Controller.modelChanged`.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QTimer, Signal, Slot
from PySide6.QtGui import QUndoCommand, QUndoStack

from workbench.core.freezing.counts import Counts
from workbench.core.optimizers import CHOICES, OPTIMIZER_TABLE
from workbench.core.plan.keys import rule_key
from workbench.core.plan.rules import FreezePlan, PlanError
from workbench.core.plan.tree import ModelTree
from workbench.gui.background import BackgroundTask
from workbench.gui.plan import edits as plan_edits
from workbench.gui.plan.state import PlanState

if TYPE_CHECKING:  # pragma: no cover - typing only
    from torch import nn

    from workbench.gui.model_loading import LoadedModel, LoadRequest

__all__ = ["Controller", "OPTIMIZER_LABELS", "PlanEditCommand"]

#: How long after a model loads its objects leave the garbage collector's sight (see
#: ``Controller._freeze_objects``).
FREEZE_OBJECTS_AFTER_MS = 300
#: Optimizers the cost panel can count state for: ``{name: label}``.
OPTIMIZER_LABELS: dict[str, str] = {name: OPTIMIZER_TABLE[name].label for name in CHOICES}


class PlanEditCommand(QUndoCommand):
    """One user edit of the plan: the plan before and after.

    Plans are never changed in place, so both are kept by reference. The ``model`` block is
    not part of the history (undo keeps the current one).
    """

    def __init__(self, controller: Controller, text: str, before: FreezePlan, after: FreezePlan) -> None:
        super().__init__(text)
        self._controller = controller
        self._before = before
        self._after = after
        self._done_once = False

    @property
    def after(self) -> FreezePlan:
        """The plan the edit put in force."""
        return self._after

    def redo(self) -> None:
        """Put the edited plan in force."""
        self._controller._set_plan(self._after, "redo" if self._done_once else "edit")
        self._done_once = True

    def undo(self) -> None:
        """Put the plan before the edit back."""
        self._controller._set_plan(self._before, "undo")


class Controller(QObject):
    """Owner of the model, tree, plan, derived state, file path and undo history.

    Signals:
        planChanged(kind): the plan (or what is derived from it) changed; ``kind`` is
            ``"edit"``, ``"undo"``, ``"redo"``, ``"open"``, ``"new"``, ``"model"``,
            ``"saved"`` or ``"optimizer"``.
        modelChanged(): a new model (and tree) is loaded.
        dirtyChanged(dirty): the plan has (or no longer has) unsaved changes.
        pathChanged(path): the plan file changed (``""`` for an unsaved plan).
        busyChanged(busy, what): a model load started or ended.
        loadFinished(ok): a background load ended (after its thread has ended).
        errorOccurred(title, message, details): something failed; the window shows it.
        checkFinished(findings, error): a doctor check (:meth:`start_check`) ended;
            ``findings`` is a list of :class:`~workbench.core.checks.findings.Finding` or None.

    Attributes:
        model: the loaded ``nn.Module`` (None before the first load). Only the controller
            and the training panel use it; widgets read the tree and the plan.
        tree: its :class:`ModelTree`.
        plan: the plan in force (replace it only through :meth:`edit`).
        state: what the window shows for the plan (:class:`PlanState`).
        loaded: details of the loaded model (spec, label, note).
        path: the plan file, or None.
        undo_stack: the edit history.
        optimizer: optimizer name the cost panel counts state for (and training uses).
        model_lock: held by worker threads while they read or modify :attr:`model` in place
            (the doctor check applies the plan to it; a training run copies it).
    """

    planChanged = Signal(str)
    modelChanged = Signal()
    dirtyChanged = Signal(bool)
    pathChanged = Signal(str)
    busyChanged = Signal(bool, str)
    loadFinished = Signal(bool)
    errorOccurred = Signal(str, str, str)
    checkFinished = Signal(object, str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.model: nn.Module | None = None
        self.tree: ModelTree | None = None
        self.plan = FreezePlan()
        self.state: PlanState | None = None
        self.loaded: LoadedModel | None = None
        self.path: Path | None = None
        self.optimizer = "adamw"
        self.model_lock = threading.Lock()
        self.undo_stack = QUndoStack(self)
        self._meta_dirty = False
        self._was_dirty = False
        self._task: BackgroundTask | None = None
        self._check_task: BackgroundTask | None = None
        self._busy_text = ""
        self._waiting = False
        self.undo_stack.cleanChanged.connect(self._emit_dirty)
        self._freeze_soon = QTimer(self)
        self._freeze_soon.setSingleShot(True)
        self._freeze_soon.setInterval(FREEZE_OBJECTS_AFTER_MS)
        self._freeze_soon.timeout.connect(self._freeze_objects)

    def _freeze_objects(self) -> None:
        """Move the objects alive now (the model's tree, its plan state) out of the garbage
        collector's sight: with a 50,000-module tree, each full collection would walk them
        again in the middle of a click. Run once the window is idle after a model loads; the
        previous model's objects are handed back to the collector first."""
        gc.unfreeze()
        gc.collect()
        gc.freeze()

    # ------------------------------------------------------------------ properties
    @property
    def dirty(self) -> bool:
        """Whether the plan has unsaved changes."""
        return self._meta_dirty or not self.undo_stack.isClean()

    @property
    def busy(self) -> bool:
        """Whether a model is being loaded."""
        return self._task is not None

    @property
    def counts(self) -> Counts | None:
        """Parameter counts and training memory of the plan (from the plan, not the model)."""
        return self.state.counts if self.state is not None else None

    @property
    def spec(self) -> dict[str, Any]:
        """The loaded model's spec (the plan's ``model`` block for it)."""
        return dict(self.loaded.spec) if self.loaded is not None else {}

    # ------------------------------------------------------------------ loading
    def load(self, request: LoadRequest, plan: FreezePlan | None = None, path: str | Path | None = None) -> bool:
        """Load a model on a worker thread; the current model stays until it succeeds.

        Args:
            request: what to load (never downloads unless it says so).
            plan: a plan to put in force with the new model (an opened plan file).
            path: the plan's file.

        Returns:
            False when a load is already running (nothing started).
        """
        if self._task is not None or self._check_task is not None:
            return False
        from workbench.gui.model_loading import load_model  # imports no torch (the load does, on its thread)

        self._busy_text = f"Loading {request.describe()}…"
        self._waiting = False
        task = BackgroundTask(lambda: load_model(request), self)
        task.done.connect(lambda result, error, details: self._load_done(result, error, details, plan, path))
        self._task = task
        self.busyChanged.emit(True, self._busy_text)
        task.start()
        return True

    def show_waiting(self, text: str) -> None:
        """Say that a model will load before :meth:`load` can start (start-up: torch is importing).

        The window shows ``text`` as it shows a load (:attr:`busyChanged`) until :meth:`load`
        starts; :attr:`busy` stays False (nothing runs yet).

        Args:
            text: ``"Loading PyTorch and resnet18…"``; ``""`` ends the wait (as :meth:`load` does).
        """
        self._busy_text = text
        self._waiting = bool(text)
        self.busyChanged.emit(bool(text), text)

    @property
    def waiting(self) -> bool:
        """Whether the window says a model will load (:meth:`show_waiting`) and no load has started."""
        return self._waiting

    def _load_done(
        self, result: LoadedModel | None, error: str, details: str, plan: FreezePlan | None, path: str | Path | None
    ) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.deleteLater()
        self.busyChanged.emit(False, "")
        if result is None:
            self.errorOccurred.emit("Cannot load model", error or "the model could not be loaded", details)
            self.loadFinished.emit(False)
            return
        self.set_loaded(result, plan, path)
        self.loadFinished.emit(True)

    def set_loaded(self, loaded: LoadedModel, plan: FreezePlan | None = None, path: str | Path | None = None) -> None:
        """Put a loaded model in place (on the GUI thread).

        Without ``plan``, the current plan is kept when it fits the new model (same
        parameter names and shapes, or every rule still matches a module; its ``model``
        block is updated); otherwise a new empty plan starts for the new model. The undo
        steps start anew, except over a described tree (:meth:`show_described`) whose model this
        is, as described: the edits made on it stay undo steps.

        Args:
            loaded: the result of :func:`load_model`.
            plan: a plan to put in force with it.
            path: the plan's file.
        """
        same = self.tree is not None and (
            self.tree.fingerprint == loaded.tree.fingerprint
            or (bool(self.plan.rules) and not self.plan.unmatched(loaded.tree))
        )
        # the model of a described tree (show_described), as described: its edits stay undo steps
        described = self.loaded is None and self.tree is not None and self.tree.fingerprint == loaded.tree.fingerprint
        self.model, self.tree, self.loaded = loaded.model, loaded.tree, loaded
        if plan is not None or not described:
            self.undo_stack.clear()
        if plan is not None:
            self.plan = plan
            self.path = Path(path) if path else None
            self._meta_dirty = False
            kind = "open"
        elif same:
            new = self.plan.copy()
            new.model = dict(loaded.spec)
            # the described model's block as loaded (its fingerprint, its weights) is no edit of the user's
            self._meta_dirty = self._meta_dirty or (not described and new.model != self.plan.model)
            self.plan = new
            kind = "model"
        else:
            self.plan = FreezePlan(model=dict(loaded.spec))
            self.path = None
            self._meta_dirty = False
            kind = "model"
        self._recompute()
        self.modelChanged.emit()
        self._freeze_soon.start()
        self.pathChanged.emit(str(self.path or ""))
        self.planChanged.emit(kind)
        self._emit_dirty()
        if kind == "open":
            self._report_problems()

    def show_described(self, tree: ModelTree, spec: Mapping[str, Any]) -> None:
        """Put a model's described tree in place before any model loads (the start-up window).

        The plan is edited on it as on a loaded model's tree (same edits, same undo steps);
        there is no model, so nothing is measured, checked or trained. The window that loads
        the model takes the edits over (:meth:`done_edits`, :meth:`take_edits`).

        Args:
            tree: the tree as described the last time the model loaded.
            spec: the model's spec (the plan's ``model`` block).
        """
        self.model, self.loaded, self.tree = None, None, tree
        self.undo_stack.clear()
        self.plan = FreezePlan(model=dict(spec))
        self.path = None
        self._meta_dirty = False
        self._recompute()
        self.modelChanged.emit()
        self.planChanged.emit("model")

    def done_edits(self) -> list[tuple[str, FreezePlan]]:
        """The plan edits in force, oldest first (those undone are left out).

        Returns:
            ``(undo text, plan after the edit)`` per edit.
        """
        done = (self.undo_stack.command(i) for i in range(self.undo_stack.index()))
        return [(c.text(), c.after) for c in done if isinstance(c, PlanEditCommand)]

    def take_edits(self, edits: Sequence[tuple[str, FreezePlan]], described: ModelTree | None) -> str:
        """Replay plan edits made on a described tree (the start-up window's, :meth:`done_edits`),
        one undo step each, on this controller's loaded model.

        Args:
            edits: ``(undo text, plan after the edit)`` per edit, oldest first.
            described: the tree they were made on.

        Returns:
            ``""`` when the edits were taken (or there were none); otherwise one line saying why
            they were not (the loaded model's tree is not the one described).
        """
        if not edits or self.tree is None:
            return ""
        if described is None or (described.fingerprint != self.tree.fingerprint and edits[-1][1].unmatched(self.tree)):
            return (f"the {len(edits)} plan edit(s) made before the model loaded were not kept: the loaded model's "
                    "tree is not the one shown at start-up")
        for text, after in edits:
            self.undo_stack.push(PlanEditCommand(self, text, self.plan, after))
        return ""

    def open_plan(self, plan: FreezePlan, path: str | Path) -> bool:
        """Put an opened plan in force, loading the model it names if that is not loaded.

        Args:
            plan: the plan (already parsed: :meth:`FreezePlan.load`).
            path: its file.

        Returns:
            True when a model load was started for it (the plan follows when it ends).
        """
        from workbench.gui.model_loading import request_for_plan

        request = request_for_plan(plan, self.spec, Path(path).parent)
        if request is not None:
            return self.load(request, plan, path)
        self.undo_stack.clear()
        self.plan = plan
        self.path = Path(path)
        self._meta_dirty = False
        self._recompute()
        self.pathChanged.emit(str(self.path))
        self.planChanged.emit("open")
        self._emit_dirty()
        self._report_problems()
        return False

    def _report_problems(self) -> None:
        assert self.state is not None
        problems = self.state.problems
        if not problems:
            return
        err = PlanError(problems, str(self.path) if self.path else None)
        n = len(self.plan.rules)
        bad = sorted({p.rule_index for p in problems if p.rule_index is not None and p.stage_index is None})
        which = f"Rules that failed: {', '.join(map(str, bad))}. " if bad else ""
        self.errorOccurred.emit(
            "Plan does not fit the model",
            f"{err}\n\n{which}All {n} rules were kept: a rule that matches nothing has no effect "
            "until you fix its selector or remove it (Edit ▸ Remove Rules That Match Nothing).",
            "",
        )

    def wait(self) -> None:
        """Block until a running load or check has ended (used when the window closes)."""
        for task in (self._task, self._check_task):
            if task is not None:
                task.wait()

    # ------------------------------------------------------------------ diagnosis
    @property
    def checking(self) -> bool:
        """Whether a doctor check is running."""
        return self._check_task is not None

    def start_check(self) -> bool:
        """Run the freeze doctor on the model with the plan applied, on a worker thread.

        The plan is applied to the model, the model put in train mode, checked with
        :func:`workbench.core.checks.doctor.check`, and the plan removed again. ``checkFinished``
        reports the findings (needs ``workbench.core.checks.doctor``).

        Returns:
            False when no model is loaded, or a load or a check is running.
        """
        model, plan = self.model, self.plan
        if model is None or self._check_task is not None or self._task is not None:
            return False
        from workbench.gui.model_loading import diagnose

        lock = self.model_lock

        def run() -> list[Any]:
            with lock:  # a training run may be copying the model
                return diagnose(model, plan)

        task = BackgroundTask(run, self)
        task.done.connect(self._check_done)
        self._check_task = task
        task.start()
        return True

    def _check_done(self, findings: list[Any] | None, error: str, details: str) -> None:
        task, self._check_task = self._check_task, None
        if task is not None:
            task.deleteLater()
        self.checkFinished.emit(findings, error)

    # ------------------------------------------------------------------ editing
    def edit(self, text: str, fn: Callable[[FreezePlan, ModelTree], Any]) -> bool:
        """Apply one user action to the plan as an undoable edit.

        Args:
            text: what the action did, for the Edit menu (``"Freeze layer1"``).
            fn: edits the plan copy it is given (see :mod:`workbench.gui.plan.edits`).

        Returns:
            True when the plan changed (an undo step was pushed).
        """
        if self.tree is None:
            return False
        after = self.plan.copy()
        try:
            fn(after, self.tree)
        except (ValueError, KeyError) as e:
            msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
            self.errorOccurred.emit("Cannot change the plan", str(msg), "")
            return False
        if after.to_dict() == self.plan.to_dict():
            return False
        self.undo_stack.push(PlanEditCommand(self, text, self.plan, after))
        return True

    def set_value(self, paths: Iterable[str], key: str, value: Any, text: str | None = None) -> bool:
        """Set ``key`` on the subtrees at ``paths`` (one undo step).

        Args:
            paths: module paths.
            key: an inherited plan key (``"frozen"``, ``"bn_eval"``, ``"lr_scale"``, ``"reparam"``, ...).
            value: the value (None: inherit; see :func:`plan_edits.set_minimal`).
            text: undo text (default: generated).

        Returns:
            True when the plan changed.
        """
        paths = list(paths)
        if text is None:
            text = _describe(paths, key, value)
        return self.edit(text, lambda plan, tree: plan_edits.set_on_paths(plan, tree, paths, key, value))

    def toggle_frozen(self, paths: Sequence[str]) -> bool:
        """Freeze the given modules, or unfreeze them when all are frozen (Space in the tree).

        Args:
            paths: module paths.

        Returns:
            True when the plan changed.
        """
        state = self.state
        if not paths or state is None:
            return False
        all_frozen = all(state.nodes[p].frozen == "on" for p in paths if p in state.nodes)
        return self.set_value(paths, "frozen", not all_frozen)

    def _set_plan(self, plan: FreezePlan, kind: str) -> None:
        """Put ``plan`` in force (undo/redo); the current ``model`` block is kept."""
        if plan.model != self.plan.model:
            plan = plan.copy()
            plan.model = dict(self.plan.model)
        self.plan = plan
        self._recompute()
        self.planChanged.emit(kind)

    def new_plan(self) -> None:
        """Start an empty plan for the loaded model (every module trains)."""
        self.undo_stack.clear()
        self.plan = FreezePlan(model=self.spec)
        self.path = None
        self._meta_dirty = False
        self._recompute()
        self.pathChanged.emit("")
        self.planChanged.emit("new")
        self._emit_dirty()

    def save(self, path: str | Path) -> bool:
        """Write the plan to ``path`` atomically.

        The ``model`` block records the loaded model's fingerprint (and its source when the
        plan does not name one).

        Args:
            path: destination ``.json`` file.

        Returns:
            True on success; on failure ``errorOccurred`` is emitted.
        """
        plan = self.plan.copy()
        model = dict(self.spec)
        model.update({k: v for k, v in plan.model.items() if k != "fingerprint"})
        if self.tree is not None:
            model["fingerprint"] = self.tree.fingerprint
        plan.model = model
        try:
            plan.save(path)
        except OSError as e:
            self.errorOccurred.emit(
                "Cannot save plan", f"{path}: {e.strerror or e}; choose another folder or file name", ""
            )
            return False
        self.plan = plan
        self.path = Path(path)
        self._meta_dirty = False
        self.undo_stack.setClean()
        self.pathChanged.emit(str(self.path))
        self.planChanged.emit("saved")
        self._emit_dirty()
        return True

    def set_optimizer(self, name: str) -> None:
        """Count optimizer state for ``name`` (a key of :data:`OPTIMIZER_LABELS`).

        Args:
            name: optimizer name.

        Raises:
            ValueError: unknown name.
        """
        if name not in OPTIMIZER_LABELS:
            raise ValueError(f"unknown optimizer {name!r}; use one of {', '.join(OPTIMIZER_LABELS)}")
        if name == self.optimizer:
            return
        self.optimizer = name
        self._recompute()
        self.planChanged.emit("optimizer")

    # ------------------------------------------------------------------ internals
    def _recompute(self) -> None:
        if self.tree is None:
            self.state = None
            return
        loaded = self.loaded
        previous = self.state if self.state is not None and self.state.tree is self.tree else None
        self.state = PlanState.compute(
            self.tree,
            self.plan,
            loaded.own_bytes if loaded is not None else None,
            self.optimizer,
            loaded.param_shapes if loaded is not None else None,
            previous=previous,  # an edit recounts only the rows it can reach
        )

    @Slot()
    def _emit_dirty(self, *_: Any) -> None:
        dirty = self.dirty
        if dirty != self._was_dirty:
            self._was_dirty = dirty
            self.dirtyChanged.emit(dirty)


def _describe(paths: list[str], key: str, value: Any) -> str:
    """The undo text of setting ``key`` on ``paths`` (the key's row words it)."""
    what = (paths[0] or "(root)") if len(paths) == 1 else f"{len(paths)} modules"
    try:
        row = rule_key(key)
    except KeyError:
        return f"Set {key} on {what}"
    return row.edit_text(value, what)
