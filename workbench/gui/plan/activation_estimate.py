"""The next run's step memory, activations included, kept current off the GUI thread.

:class:`ActivationEstimator` profiles the loaded model once per batch size and image size (a
text model: sequence length, the panel's Tokens as the run will use it, capped at the model's
positions)
(:func:`~workbench.core.advisor.activations.profile_activations`: one forward pass on the
``meta`` device, on a :class:`~workbench.gui.background.BackgroundTask`), caches the profile,
and predicts the step's peak for the current plan, optimizer and precision in milliseconds
from it. The cost panel shows the prediction and the Start path asks :meth:`preflight` whether
the batch fits the device.

A sample's shape is the data's: images of the panel's size (*model*: the side the run takes,
:func:`~workbench.core.training.setup.run_image_size` of the loaded model and its spec), tokens of the Tokens control's
length (the chosen data's default when it is left at *default*, before a file is chosen too),
generated samples of Options… ▸ Input shape, and for your own data (``py:``) or an
``hf-dataset:`` column of arrays one item read from the data on the worker thread (a dict input's
keys, shapes and dtypes included); ``py:`` data only once Start has shown its code and the user
chose *Run*, the estimate saying so until then.

On a large model the profile is seconds of Python work; on a worker thread that would hold
the interpreter lock against every Python call the GUI thread makes (a click on a 50,000-module
tree waited for it, 1–2 s). The profile therefore runs paced
(:class:`~workbench.core.advisor.activations.Pacer`): a slice of a few milliseconds, then a
pause until the GUI thread's event loop has handled what was waiting and resumes it, so user
input never queues behind the profile; it only makes the estimate arrive later.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Qt, QTimer, Signal

from workbench.core.collector import collector_paused
from workbench.core.errors import WorkbenchError
from workbench.core.formatting import fmt_bytes
from workbench.core.training.config import TrainConfig
from workbench.core.training.py_code import is_py_spec
from workbench.gui.background import BackgroundTask
from workbench.gui.controller import Controller
from workbench.gui.training.code_confirm import is_confirmed
from workbench.gui.training.session import run_spec

if TYPE_CHECKING:  # pragma: no cover - typing only
    from workbench.core.advisor.activations import ActivationProfile, DeviceMemory, Pacer, StepPrediction
    from workbench.core.advisor.profile import DictBatch

__all__ = ["ActivationEstimator", "Estimate"]

_CACHE = 6
#: Seconds the profile runs on its worker thread before it waits for the GUI's event loop.
PACE_SLICE_S = 0.005
#: Seconds it waits at most: a GUI thread blocked for longer (e.g. on a lock the profile holds) only slows it.
PACE_MAX_PAUSE_S = 0.1

Key = tuple[Any, ...]


#: Marks a profile key whose batch comes from one sample of the run's data.
_DATA = "data"


def _shaped_by_data(cfg: TrainConfig) -> bool:
    """Whether only the data says what a sample is: your own code (``py:``) or an ``hf-dataset:`` column of arrays."""
    from workbench.core.training.data_sources import data_source_of

    source = data_source_of(cfg.data)
    return source is not None and (source.runs_code or source.key == "hf-dataset" and bool(cfg.input_column))


def _data_sample(key: tuple[Any, ...]) -> tuple[int, ...] | DictBatch:
    """One sample's input shape (or a dict input's keys, shapes and dtypes), read from the first item of the data.

    Raises:
        WorkbenchError: the data cannot be opened, or its first item is not ``(tensor or dict of tensors, target)``.
    """
    from workbench.core.advisor.profile import DictBatch, batch_template
    from workbench.core.training.data_sources import make_dataset

    _, spec, columns, origin, may_run, side = key
    if not may_run:
        raise WorkbenchError("the input shape is read from one sample of your data once Start has shown its code "
                             "and you chose Run (Options… ▸ Input shape gives it before)")
    ds = make_dataset(spec, image_size=side, num_classes=10, columns=dict(columns), origin=origin)
    template = batch_template(ds[0], 1)
    return template if isinstance(template, DictBatch) else template[1:]


class Estimate:
    """The prediction shown for the next run.

    Attributes:
        prediction: the step's predicted memory, or None (see ``note``).
        memory: the device's memory, or None.
        verdict: ``fits``, ``tight``, ``does not fit``, ``impossible`` or ``""``.
        note: why there is no prediction (``"estimating…"``, an error), or ``""``.
    """

    def __init__(
        self, prediction: StepPrediction | None = None, memory: DeviceMemory | None = None, note: str = ""
    ) -> None:
        self.prediction = prediction
        self.memory = memory
        self.note = note
        self.verdict = ""
        if prediction is not None and memory is not None:
            from workbench.core.advisor.activations import fit_verdict

            self.verdict = fit_verdict(prediction, memory)

    def warning(self) -> str:
        """One paragraph for the Start confirmation ("" when the step fits)."""
        from workbench.core.advisor.activations import largest_batch

        p, m = self.prediction, self.memory
        if p is None or m is None or self.verdict in ("fits", "tight", ""):
            return ""
        if self.verdict == "impossible":
            return (
                f"Weights, gradients and optimizer state alone need {fmt_bytes(p.without_activations)}, more than "
                f"the {fmt_bytes(m.total)} {m.device} has in all. Freeze more of the model, use a lighter "
                "optimizer, or train on a device with more memory."
            )
        n = largest_batch(p, m)
        lower = (
            f" A batch of about {n} should fit." if n >= 1
            else " Even a batch of 1 is predicted not to fit: freeze more of the model or use a lighter optimizer."
        )
        return (
            f"A training step at batch {p.batch_size} and {p.input_text} is predicted to need "
            f"{fmt_bytes(p.peak)} (activations kept for backward {fmt_bytes(p.activations)}), more than the "
            f"{fmt_bytes(m.available)} of {m.what} on {m.device}.{lower}"
        )


class ActivationEstimator(QObject):
    """Profiles the loaded model for the next run's batch and predicts its step memory.

    Signals:
        changed(): a new estimate is ready (or the one shown no longer holds).

    Args:
        controller: the loaded model and the plan.
        parent: Qt parent.
    """

    changed = Signal()
    _paused = Signal(object)  # from the worker thread: its Pacer waits to be resumed

    def __init__(self, controller: Controller, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._c = controller
        self._settings: Callable[[], TrainConfig | None] = lambda: None
        self._cache: OrderedDict[Key, ActivationProfile | str] = OrderedDict()
        self._task: BackgroundTask | None = None
        self._task_key: Key | None = None
        self._pacer: Pacer | None = None
        #: Pauses the profile made for the GUI thread (tests read it).
        self.pauses = 0
        self._paused.connect(self._resume, Qt.ConnectionType.QueuedConnection)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(250)
        self._timer.timeout.connect(self._refresh)
        self._closed = False
        controller.planChanged.connect(self.request)
        controller.modelChanged.connect(self._model_changed)

    def set_settings_source(self, settings: Callable[[], TrainConfig | None]) -> None:
        """Say where the next run's settings come from (None when they do not parse)."""
        self._settings = settings
        self.request()

    def request(self, *_: Any) -> None:
        """Recompute soon (settings or plan changed; several requests make one update)."""
        if not self._closed:
            self._timer.start()

    def shutdown(self) -> None:
        """Stop updating, stop a profile being computed and wait for its thread (the window is closing)."""
        self._closed = True
        self._timer.stop()
        if self._pacer is not None:
            self._pacer.cancel()
        self.wait()

    def _model_changed(self, *_: Any) -> None:
        self._cache.clear()
        if self._pacer is not None:  # profiling a model that is gone
            self._pacer.cancel()
        self.request()

    def _resume(self, pacer: Pacer) -> None:
        """The event loop reached the profile's request: it may run its next slice."""
        self.pauses += 1
        pacer.resume()

    # ------------------------------------------------------------ keys and profiles
    def _key(self, cfg: TrainConfig) -> Key | None:
        c = self._c
        if c.model is None or c.tree is None or c.state is None:
            return None
        from workbench.core.training.data import run_seq_len
        from workbench.core.training.setup import run_image_size

        st = c.state
        bn_eval = st.bn_modules > 0 and st.bn_eval_modules == st.bn_modules
        tokens = run_seq_len(c.model, cfg.seq_len, cfg.data)  # a text model: a token batch of that length
        size = tokens if tokens is not None else run_image_size(cfg.image_size, run_spec(c.spec), c.model)  # the run's
        # the data's own samples: read one (on the worker); your code only once Start has shown it
        may_run = not is_py_spec(cfg.data) or is_confirmed(cfg.data)
        if tokens is None and _shaped_by_data(cfg) and (may_run or cfg.input_shape is None):
            columns = {"text_column": cfg.text_column, "label_column": cfg.label_column,
                       "image_column": cfg.image_column, "input_column": cfg.input_column}
            data = (_DATA, cfg.data, tuple(columns.items()), cfg.origin_of("data"), may_run, size)
            return (id(c.model), c.tree.fingerprint, cfg.batch_size, data, bn_eval, False)
        if tokens is None and cfg.input_shape is not None:  # generated samples of Options…' shape (audio, features)
            return (id(c.model), c.tree.fingerprint, cfg.batch_size, cfg.input_shape, bn_eval, False)
        return (id(c.model), c.tree.fingerprint, cfg.batch_size, size, bn_eval, tokens is not None)

    def _compute(self, key: Key, pacer: Pacer | None = None) -> Callable[[], ActivationProfile]:
        model = self._c.model
        assert model is not None
        lock = self._c.model_lock
        _, _, batch, size, bn_eval, text = key

        @collector_paused()  # the copy's objects are freed before the collector sees them (see collector.py)
        def run() -> ActivationProfile:
            from workbench.core.advisor.activations import profile_activations
            from workbench.core.advisor.profile import meta_copy

            sample = _data_sample(size) if isinstance(size, tuple) and size[:1] == (_DATA,) else None
            with lock:  # the meta copy reads the module tree
                meta = meta_copy(model, pacer)
            if sample is not None:
                return profile_activations(meta, batch, 0, bn_eval=bn_eval, checkpoint=pacer, in_place=True,
                                           input_shape=sample)
            if text:
                return profile_activations(meta, batch, 0, bn_eval=bn_eval, seq_len=size, checkpoint=pacer,
                                           in_place=True)
            if isinstance(size, tuple):
                return profile_activations(meta, batch, 0, bn_eval=bn_eval, checkpoint=pacer, in_place=True,
                                           input_shape=size)
            return profile_activations(meta, batch, size, bn_eval=bn_eval, checkpoint=pacer, in_place=True)

        return run

    def _store(self, key: Key, value: ActivationProfile | str) -> None:
        self._cache[key] = value
        self._cache.move_to_end(key)
        while len(self._cache) > _CACHE:
            self._cache.popitem(last=False)

    def _refresh(self) -> None:
        cfg = self._settings()
        key = self._key(cfg) if cfg is not None else None
        if key is not None and key not in self._cache and self._task is None and not self._closed:
            from workbench.core.advisor.activations import Pacer

            self._task_key = key
            pacer = Pacer(PACE_SLICE_S, on_pause=lambda: self._paused.emit(pacer), max_pause_s=PACE_MAX_PAUSE_S)
            self._pacer = pacer
            self._task = BackgroundTask(self._compute(key, pacer), self)
            self._task.done.connect(self._done)
            self._task.start()
        self.changed.emit()

    def _done(self, result: Any, error: str, details: str) -> None:
        key, self._task_key, task, self._task = self._task_key, None, self._task, None
        pacer, self._pacer = self._pacer, None
        if task is not None:
            task.deleteLater()
        if key is not None and not (pacer is not None and pacer.cancelled):
            self._store(key, result if result is not None else (error or "the model could not be profiled"))
        self._refresh()  # the settings may have moved on meanwhile

    @property
    def busy(self) -> bool:
        """A profile is being computed."""
        return self._task is not None

    def wait(self) -> None:
        """Block until the profile being computed is ready (tests, shutdown); it runs unpaced meanwhile."""
        if self._pacer is not None:
            self._pacer.release()  # it must not wait for this thread's event loop
        if self._task is not None:
            self._task.wait()

    # ------------------------------------------------------------ answers
    def profile(self, cfg: TrainConfig | None = None, *, compute: bool = False) -> ActivationProfile | str | None:
        """The cached profile for a run's settings (an error text, or None when not known yet).

        Args:
            cfg: the settings (default: the current ones).
            compute: profile now, on this thread, when it is not cached.

        Returns:
            The profile, the reason there is none, or None.
        """
        cfg = cfg if cfg is not None else self._settings()
        key = self._key(cfg) if cfg is not None else None
        if key is None:
            return None
        hit = self._cache.get(key)
        if hit is None and compute:
            if self._pacer is not None:  # it may hold the model's lock, which this thread takes next
                self._pacer.release()
            try:
                hit = self._compute(key)()
            except Exception as e:
                hit = str(e).splitlines()[0] if str(e) else type(e).__name__
            self._store(key, hit)
        return hit

    def _trainable(self) -> set[str]:
        from workbench.core.advisor.activations import unfrozen_param_names

        c = self._c
        assert c.loaded is not None and c.state is not None
        frozen = {p: e.frozen for p, e in c.state.effective.items()}
        return unfrozen_param_names(c.loaded.param_shapes, frozen)

    def estimate(self, cfg: TrainConfig | None = None, *, compute: bool = False) -> Estimate:
        """The next run's predicted step memory against its device.

        Args:
            cfg: the run's settings (default: the current ones).
            compute: profile now when the profile is not cached (the Start path).

        Returns:
            The estimate (with a ``note`` instead of a prediction when there is none).
        """
        cfg = cfg if cfg is not None else self._settings()
        if cfg is None:
            return Estimate(note="")
        if self._c.loaded is None or self._c.state is None:
            return Estimate(note="")
        from workbench.core.advisor.activations import device_memory, predict_step

        act = self.profile(cfg, compute=compute)
        if act is None:
            return Estimate(note="estimating activations…")
        if isinstance(act, str):
            return Estimate(note=f"activations not estimated: {act}")
        try:
            device = device_memory(cfg.device)
        except Exception:
            device = None
        device_type = device.device.split(":")[0] if device is not None else "cpu"
        pred = predict_step(act, self._trainable(), optimizer=self._c.optimizer, amp=cfg.amp, device_type=device_type)
        return Estimate(pred, device)

    def row_notes(self) -> Mapping[str, str]:
        """Per module: its output shape and what it keeps for backward under the plan (tooltips).

        Each text is made when it is read (a tooltip shows): on a 50,000-module model a plan
        change makes none.
        """
        cfg = self._settings()
        act = self.profile(cfg) if cfg is not None else None
        if act is None or isinstance(act, str) or self._c.state is None or self._c.loaded is None:
            return {}  # no profile (yet), or the reason there is none
        return _RowNotes(act, self._trainable())


class _RowNotes(Mapping[str, str]):
    """``{module path: tooltip line}`` for a profile and a plan's trainable parameters, made on demand."""

    def __init__(self, act: ActivationProfile, trainable: set[str]) -> None:
        self._act = act
        self._trainable = trainable
        self._kept: dict[str, int] | None = None

    def __getitem__(self, path: str) -> str:
        from workbench.core.advisor.activations import module_activation_bytes, shape_text

        act = self._act
        shapes = act.shapes[path]
        if self._kept is None:
            self._kept = module_activation_bytes(act, self._trainable)
        shown = ", ".join(shape_text(s) for s in shapes[:3]) + (" …" if len(shapes) > 3 else "")
        text = f"Output {shown} ({fmt_bytes(act.out_bytes.get(path, 0))}) at batch {act.batch_size}, {act.input_text}"
        k = self._kept.get(path, 0)
        return text + (f"; keeps {fmt_bytes(k)} for backward" if k else "; keeps nothing for backward under this plan")

    def __iter__(self) -> Iterator[str]:
        return iter(self._act.shapes)

    def __len__(self) -> int:
        return len(self._act.shapes)
