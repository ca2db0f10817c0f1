"""The window's document actions: new, open (plan, checkpoint, model folder, model code,
recent files, drag and drop), save, save as and export; each asks before unsaved edits are
lost and refuses a bad file with one message.

:class:`DocumentActions` is owned by :class:`~workbench.gui.main_window.MainWindow`: it is
given the controller, the model bar, the training panel, the settings and the status bar it
works with, and the window's menus, drops and model bar call it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QSettings, QTimer
from PySide6.QtGui import QDragEnterEvent, QDragMoveEvent, QDropEvent
from PySide6.QtWidgets import QMenu, QStatusBar, QWidget

from workbench.core.errors import WorkbenchError
from workbench.core.models.sources import source_of
from workbench.core.models.spec import ModelSpec
from workbench.core.models.zoo import CHECKPOINT_SUFFIXES, ModelSourceError
from workbench.core.plan.rules import FreezePlan, PlanError
from workbench.gui import dialogs
from workbench.gui import settings as app_settings
from workbench.gui.controller import Controller
from workbench.gui.model_loading import (
    LoadRequest,
    factory_candidates,
    path_kind,
    request_for_plan,
    source_for_path,
)
from workbench.gui.model_source import ModelSourceBar, confirm_code

if TYPE_CHECKING:
    from workbench.gui.training.panel import TrainingPanel

__all__ = ["CHECKPOINT_FILTER", "CODE_FILTER", "DocumentActions", "LOAD_MODEL_NOTE", "PLAN_FILTER", "RUNS_CODE_NOTE"]

PLAN_FILTER = dialogs.PLAN_FILTER
CHECKPOINT_FILTER = (
    "Checkpoints (" + " ".join(f"*{s}" for s in CHECKPOINT_SUFFIXES) + ");;All files (*)"
)
CODE_FILTER = "Python files (*.py);;All files (*)"
#: What the factory question says about running a ``.py`` file.
RUNS_CODE_NOTE = "Opening it runs this file's code with your rights: only open files you trust."
#: Why the window asks to save unsaved plan edits before another model loads.
LOAD_MODEL_NOTE = "The plan is kept if it fits the other model; otherwise a new plan starts."


class DocumentActions:
    """Files in and out of the window.

    Args:
        parent: the window (parent of the dialogs).
        controller: the document: model, plan, file.
        source_bar: the model bar (its Load and ``…`` requests come here; its model, classes
            and "Structure only" box fill in what a file leaves open).
        panel: the training panel (the run an exported script sets up).
        settings: where the recent files are kept.
        status_bar: where what was saved, exported or refused is said.

    Attributes:
        ask_to_save: ask before unsaved edits are lost (off: they are let go, as when a
            script's window hands its plan back on closing).
    """

    def __init__(
        self,
        parent: QWidget,
        controller: Controller,
        source_bar: ModelSourceBar,
        panel: TrainingPanel,
        settings: QSettings,
        status_bar: QStatusBar,
    ) -> None:
        self._parent = parent
        self.controller = controller
        self.source_bar = source_bar
        self.panel = panel
        self._settings = settings
        self._status = status_bar
        self.ask_to_save = True
        source_bar.loadRequested.connect(self.load_model_request)
        source_bar.browseRequested.connect(self._browse_source)

    # ------------------------------------------------------------------ files
    def maybe_save(self, why: str = "") -> bool:
        """Ask to save unsaved edits before they are lost.

        Args:
            why: what happens to the plan next (said in the question).

        Returns:
            True when the caller may go on (saved, discarded, nothing unsaved).
        """
        if not self.controller.dirty or not self.ask_to_save:
            return True
        answer = dialogs.ask(
            self._parent, "Unsaved changes", f"The plan has unsaved changes.{(' ' + why) if why else ''} Save them first?",
            ("Save", "Discard", "Cancel"), "Save",
        )
        if answer == "Save":
            return self.save()
        return answer == "Discard"

    def _can_start(self) -> bool:
        """Whether a model load may start now (none running, no doctor check running)."""
        c = self.controller
        if c.busy or c.checking:
            what = "a model is loading" if c.busy else "the diagnostics check is running"
            self._status.showMessage(f"Please wait: {what}.", 5000)
            return False
        return True

    def _start_dir(self) -> str:
        recent = app_settings.recent_files(self._settings)
        if self.controller.path is not None:
            return str(self.controller.path.parent)
        return str(Path(recent[0]).parent) if recent else str(Path.home())

    def new_plan(self) -> None:
        """Start an empty plan for the loaded model (asks to save unsaved changes)."""
        if self.maybe_save():
            self.controller.new_plan()

    def open_plan(self, path: str | None = None) -> bool:
        """Open a plan file; load the model it names when that is not the loaded one.

        A plan that does not parse is refused with its PlanError; a plan whose rules name
        modules the model lacks is opened with every rule kept, and the problems shown.

        Args:
            path: the file (default: ask).

        Returns:
            True when the plan was opened (or its model load started).
        """
        if not self._can_start() or not self.maybe_save():
            return False
        if path is None:
            path = dialogs.open_file(self._parent, "Open plan", self._start_dir(), PLAN_FILTER)
            if not path:
                return False
        try:
            plan = FreezePlan.load(path)
        except PlanError as e:
            dialogs.error(self._parent, "Cannot open plan", str(e))
            return False
        request = request_for_plan(plan, self.controller.spec, Path(path).parent)
        if request is not None:
            request = self._confirm_download(request, f"Plan {Path(path).name}")
            if request is None:
                return False
            self.controller.load(request, plan, path)
        else:
            self.controller.open_plan(plan, path)
        app_settings.add_recent(path, self._settings)
        return True

    def open_checkpoint(self, path: str | None = None) -> bool:
        """Load weights from a checkpoint file off the GUI thread.

        The architecture is the one the file names; when it names none, the model selected
        in the model bar is used.

        Args:
            path: the file (default: ask).

        Returns:
            True when the load started.
        """
        if not self._can_start() or not self.maybe_save(LOAD_MODEL_NOTE):
            return False
        if path is None:
            path = dialogs.open_file(self._parent, "Open checkpoint", self._start_dir(), CHECKPOINT_FILTER)
            if not path:
                return False
        request = LoadRequest(name=self.source_bar.current_name(), checkpoint=str(path))
        started = self.controller.load(request)
        if started:
            app_settings.add_recent(path, self._settings)
        return started

    def open_model_folder(self, path: str | None = None) -> bool:
        """Open a Hugging Face model folder (``config.json``, weights optional) off the GUI thread.

        A folder without weights opens structure-only; so does any folder while the model
        bar's "Structure only" box is checked. A folder without ``config.json`` is refused
        with one message and the current model stays.

        Args:
            path: the folder (default: ask).

        Returns:
            True when the load started.
        """
        return self.open_model_path("hf", path)

    def open_model_path(self, source: str, path: str | None = None) -> bool:
        """Open the model of a source whose name is a path on disk, as its ``browse`` row says.

        A ``"folder"`` or ``"file"`` source loads the chosen path off the GUI thread; a
        ``"code"`` source goes through :meth:`open_model_code` (a function of the file is
        chosen and the code confirmed before it runs).

        Args:
            source: a key of the source table with a ``browse`` row.
            path: the folder or file (default: ask with the row's dialog).

        Returns:
            True when the load started.

        Raises:
            ModelSourceError: the source is unknown or picks nothing from disk.
        """
        row = source_of(source)
        browse = row.browse
        if browse is None:
            raise ModelSourceError(f"model source {source!r} names no folder or file; type its model name instead")
        if browse.kind == "code":
            return self.open_model_code(path, source=source)
        if not self._can_start() or not self.maybe_save(LOAD_MODEL_NOTE):
            return False
        if path is None:
            start = self._start_dir()
            path = (dialogs.open_dir(self._parent, browse.title, start) if browse.kind == "folder"
                    else dialogs.open_file(self._parent, browse.title, start, browse.file_filter))
            if not path:
                return False
        return self.controller.load(LoadRequest(name=str(path), source=source, meta=self.source_bar.meta_box.isChecked()))

    def open_model_code(self, path: str | None = None, factory: str | None = None, *, source: str = "py") -> bool:
        """Build the model with a function of a ``.py`` file (``py:FILE.py:FACTORY``); runs that file.

        The file is parsed (not run) to offer its top-level functions and classes; the
        question says that opening runs the file's code.

        Args:
            path: the ``.py`` file (default: ask).
            factory: the function that returns the model (default: ask).
            source: the source table's row of the code (its ``browse`` names the dialog).

        Returns:
            True when the load started.
        """
        if not self._can_start() or not self.maybe_save(LOAD_MODEL_NOTE):
            return False
        if path is None:
            browse = source_of(source).browse
            title, name_filter = (browse.title, browse.file_filter) if browse is not None else ("Open model code", CODE_FILTER)
            path = dialogs.open_file(self._parent, title, self._start_dir(), name_filter)
            if not path:
                return False
        if factory is None:
            try:
                names = factory_candidates(path)
            except ModelSourceError as e:
                dialogs.error(self._parent, "Cannot open model code", str(e))
                return False
            if not names:
                dialogs.error(
                    self._parent, "Cannot open model code",
                    f"{Path(path).name} defines no top-level function or class; "
                    "add a function that returns the nn.Module",
                )
                return False
            guess = next((n for n in names if any(w in n.lower() for w in ("model", "build", "make", "create"))), names[0])
            factory = dialogs.choose(
                self._parent, "Open model code",
                f"{Path(path).name}: which function returns the model?\n{RUNS_CODE_NOTE}", names, guess,
            )
            if not factory:
                return False
        request = confirm_code(self._parent, LoadRequest(
            name=f"{path}:{factory}", source=source, num_classes=self.source_bar.classes.value() or None,
            meta=self.source_bar.meta_box.isChecked(), origin="Open Model Code",
        ))
        if request is None:
            return False
        started = self.controller.load(request)
        if started:
            app_settings.add_recent(path, self._settings)
        return started

    def _browse_source(self, source: str) -> None:
        if source_of(source).browse is not None:  # the model bar's … button: the row's dialog
            self.open_model_path(source)

    def load_model_request(self, request: LoadRequest) -> bool:
        """Load a model described by the model bar (asks before downloading).

        Args:
            request: what to load.

        Returns:
            True when the load started.
        """
        if not self._can_start() or not self.maybe_save(LOAD_MODEL_NOTE):
            return False
        confirmed = self._confirm_download(request)
        if confirmed is None:
            return False
        return self.controller.load(confirmed)

    def _confirm_download(self, request: LoadRequest, what: str = "") -> LoadRequest | None:
        """The request the user confirmed (code run, weights downloaded or not), or None.

        Args:
            request: what to load.
            what: what is not opened when the user cancels the code dialog (the status bar says so).
        """
        try:
            confirmed = confirm_code(self._parent, request)  # model code runs only after "Run"
            if confirmed is None:
                not_opened = f"{what} not opened: its model" if what else "Not loaded: model"
                self._status.showMessage(f"{not_opened} code {request.name} was not run (cancelled)", 15000)
                return None
            request = confirmed
            needs = request.needs_download()
        except ModelSourceError as e:
            dialogs.error(self._parent, "Cannot load model", str(e))
            return None
        if not needs:
            return request
        answer = dialogs.ask(
            self._parent,
            "Weights not cached",
            f"The {request.weights} weights of {request.name} are not in the local cache.\n\n"
            "Download them now, or start from random initialisation?",
            ("Download", "Random Init", "Cancel"),
            "Random Init",
        )
        if answer == "Download":
            return dataclasses.replace(request, allow_download=True)
        if answer == "Random Init":
            return dataclasses.replace(request, weights=None, note="random init (weights not cached)")
        return None

    def save(self) -> bool:
        """Save the plan to its file (asks for a name when it has none)."""
        if self.controller.path is None:
            return self.save_as()
        ok = self.controller.save(self.controller.path)
        if ok:
            app_settings.add_recent(self.controller.path, self._settings)
            self._status.showMessage(f"Saved {self.controller.path}", 5000)
        return ok

    def save_as(self) -> bool:
        """Save the plan under a new name."""
        c = self.controller
        suggested = str(c.path) if c.path else str(Path(self._start_dir()) / f"{c.loaded.label if c.loaded else 'model'}.plan.json")
        path = dialogs.save_file(self._parent, "Save plan as", suggested, PLAN_FILTER)
        if not path:
            return False
        if not path.lower().endswith(".json"):
            path += ".json"
        ok = c.save(path)
        if ok:
            app_settings.add_recent(path, self._settings)
            self._status.showMessage(f"Saved {path}", 5000)
        return ok

    def export_script(self) -> bool:
        """Export the run the training panel sets up (its plan, data, optimizer, schedule ...) as a
        standalone plain-PyTorch script (``workbench.core.export``)."""
        from workbench.core import export

        c = self.controller
        stem = c.path.stem if c.path else (c.loaded.label if c.loaded else "plan")
        path = dialogs.save_file(self._parent, "Export plan as script", str(Path(self._start_dir()) / f"{stem}.py"),
                                 "Python scripts (*.py)")
        if not path:
            return False
        if not path.lower().endswith(".py"):
            path += ".py"
        try:
            spec = ModelSpec.from_dict({**c.spec, **c.plan.model})
            config = self.panel.config()  # the run the Train button would start
            export.export_script(c.plan, spec, path, model=c.model, config=config, provided=True,
                                 base_dir=c.path.parent if c.path else None)
        except (WorkbenchError, OSError) as e:
            dialogs.error(self._parent, "Cannot export script", str(e))
            return False
        self._status.showMessage(f"Exported {path}", 5000)
        return True

    def export_plan(self) -> bool:
        """Export the plan as plan JSON with the model it was made for (its spec and tree
        fingerprint, as ``workbench export --to plan.json``); the document keeps its own file.

        Returns:
            True when the file was written.
        """
        c = self.controller
        if c.tree is None:
            return False
        stem = c.path.name.removesuffix(".json").removesuffix(".plan") if c.path else (c.loaded.label if c.loaded else "plan")
        path = dialogs.save_file(self._parent, "Export plan as JSON", str(Path(self._start_dir()) / f"{stem}.plan.json"), PLAN_FILTER)
        if not path:
            return False
        if not path.lower().endswith(".json"):
            path += ".json"
        out = c.plan.copy()
        out.model = {**out.model, **{k: v for k, v in c.spec.items() if v is not None}, "fingerprint": c.tree.fingerprint}
        try:
            out.save(path)
        except (WorkbenchError, OSError) as e:
            dialogs.error(self._parent, "Cannot export plan", f"cannot write {path} ({getattr(e, 'strerror', None) or e}); choose a writable folder")
            return False
        self._status.showMessage(f"Exported plan {path}", 5000)
        return True

    def peft_refusal(self) -> str:
        """Why File ▸ Export ▸ PEFT Adapter… is off.

        Returns:
            One line (no model, no low-rank A+B, a structure-only model), or "" when it can export.
        """
        c = self.controller
        state = c.state
        if c.model is None or state is None:
            return "Load a model first"
        if not any(e.reparam is not None and e.reparam.low_rank is not None for e in state.settings_in_use()):
            return 'The plan has no low-rank A+B: give a rule a rank (A+B Settings…, or {"reparam": {"rank": 8}})'
        if c.loaded is not None and c.loaded.meta:
            return "The model is structure only (no weights): load it with its weights to export an adapter"
        return ""

    def export_peft(self) -> bool:
        """Write the plan's low-rank A+B as a PEFT LoRA adapter folder (``adapter_config.json`` +
        ``adapter_model.safetensors``), as ``workbench export --peft DIR``: the same refusals, in
        one line (full-rank A+B, mixed variants or dropouts, an A that is not the loaded weights).

        Returns:
            True when the adapter was written.
        """
        c = self.controller
        reason = self.peft_refusal()
        if reason:
            dialogs.error(self._parent, "Cannot export PEFT adapter", reason)
            return False
        stem = c.path.name.removesuffix(".json").removesuffix(".plan") if c.path else (c.loaded.label if c.loaded else "plan")
        folder = dialogs.save_file(self._parent, "Export PEFT adapter (a folder)", str(Path(self._start_dir()) / f"{stem}-adapter"),
                                   "PEFT adapter folder (*)")
        if not folder:
            return False
        model = c.model
        assert model is not None  # peft_refusal checked
        try:
            with c.model_lock:  # a check may be applying the plan on a worker thread
                applied = c.plan.apply(model, base_dir=c.path.parent if c.path else None)
                try:
                    out = applied.to_peft(folder)
                finally:
                    applied.remove(merge=False)
        except (WorkbenchError, ValueError) as e:
            dialogs.error(self._parent, "Cannot export PEFT adapter", f"cannot write a PEFT adapter: {e}")
            return False
        except OSError as e:
            dialogs.error(self._parent, "Cannot export PEFT adapter", f"cannot write {folder} ({e.strerror or e}); choose a writable folder")
            return False
        self._status.showMessage(f"Exported PEFT adapter {out}: load it with peft.PeftModel.from_pretrained(base_model, {str(out)!r})", 8000)
        return True

    def fill_recent(self, menu: QMenu) -> None:
        """Fill File ▸ Open Recent (as it is about to show) with the recent files.

        Args:
            menu: the menu, emptied first.
        """
        menu.clear()
        files = app_settings.recent_files(self._settings)
        if not files:
            act = menu.addAction("No recent files")
            act.setEnabled(False)
            return
        for f in files:
            act = menu.addAction(Path(f).name)
            act.setToolTip(f)
            act.setStatusTip(f)
            act.triggered.connect(lambda _c=False, f=f: self.open_path(f))

    def open_path(self, path: str) -> bool:
        """Open a plan (``.json``), a Hugging Face folder, model code (``.py``) or a
        checkpoint, by what the path is (recent files, drag and drop).

        Args:
            path: the file or folder.

        Returns:
            True when it was opened or its load started.
        """
        kind = path_kind(path)
        if kind == "plan":
            return self.open_plan(path)
        source = source_for_path(path) if kind in ("folder", "code", "model") else None
        if source is not None:
            return self.open_model_path(source, path)
        return self.open_checkpoint(path)

    # ------------------------------------------------------------------ drag and drop
    @staticmethod
    def _dropped_file(event: QDragEnterEvent | QDropEvent) -> str | None:
        md = event.mimeData()
        if not md.hasUrls():
            return None
        for url in md.urls():
            if url.isLocalFile():
                p = url.toLocalFile()
                if path_kind(p) is not None:
                    return p
        return None

    def drag_enter(self, event: QDragEnterEvent) -> None:
        """Accept a drag that carries a file the window opens (the window's ``dragEnterEvent``)."""
        if self._dropped_file(event):
            event.acceptProposedAction()
        else:
            event.ignore()

    def drag_move(self, event: QDragMoveEvent) -> None:
        """Keep accepting such a drag as it moves (the window's ``dragMoveEvent``)."""
        if self._dropped_file(event):
            event.acceptProposedAction()

    def drop(self, event: QDropEvent) -> None:
        """Open the dropped file once the drop handler returns (the window's ``dropEvent``)."""
        path = self._dropped_file(event)
        if not path:
            event.ignore()
            return
        event.acceptProposedAction()
        QTimer.singleShot(0, lambda: self.open_path(path))  # leave the drop handler first

