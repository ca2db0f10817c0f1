"""The training controls under the cost panel: data, batch, optimizer, schedule, device; Start / Pause / Stop.

Row 1 holds the settings of the next run (a :class:`~workbench.core.training.config.TrainConfig`),
row 2 the run controls, a progress bar with the rate and the time left, and the state.
The less-used settings (warm-up, no weight decay on biases and norms, validation) are behind
the Options… button (:class:`~workbench.gui.training.options_dialog.TrainingOptionsDialog`);
a muted line next to it says which are on.
The optimizer is the cost panel's (``Controller.optimizer``): one setting, two views.
Each field is a row of :data:`~workbench.gui.training.panel_fields.PANEL_FIELDS` (config name,
widget, settings key): restoring, saving, ``set_values`` and ``config`` iterate it, and
:meth:`TrainingPanel.step_setup` is what the cost panel's estimate and Suggest… read.
Settings are kept in ``QSettings`` between sessions. The panel builds the config and asks
the :class:`~workbench.gui.training.run_controller.RunController` to run it; it never touches the
training thread.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any

from PySide6.QtCore import QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence, QPalette
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QSizePolicy,
    QSpinBox,
    QStyle,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from workbench.core.training.config import MAX_SEQ_LEN, ConfigError, TrainConfig
from workbench.core.training.data_sources import DATA_SOURCES
from workbench.gui import dialogs, torch_ready
from workbench.gui.controller import OPTIMIZER_LABELS, Controller
from workbench.gui.elided_label import ElidedLabel
from workbench.gui.training.code_confirm import confirm_task_code
from workbench.gui.training.options_dialog import (
    COLUMN_ROLES,
    HELD_OUT,
    TrainingOptions,
    TrainingOptionsDialog,
    options_tooltip,
)
from workbench.gui.training.panel_fields import (
    PANEL_FIELDS,
    PanelField,
    StepSetup,
    default_image_size,
    image_size_applies,
    options_from_settings,
    options_settings,
    show_value,
    widget_value,
)
from workbench.gui.training.run_controller import RunController

__all__ = [
    "DATASETS",
    "PROGRESS_INTERVAL_MS",
    "SCHEDULES",
    "TrainingPanel",
    "default_image_size",
    "fmt_eta",
]

#: Shortest time between two updates of the progress bar and the rate label during a run (ms).
PROGRESS_INTERVAL_MS = 500

#: Dataset choices: ``(label, spec kind)``, the rows of the data-source table the app offers; all but
#: synthetic need a folder, a file or (``py:``) a function of a file.
DATASETS: tuple[tuple[str, str], ...] = tuple((s.label, s.key) for s in DATA_SOURCES.values() if s.in_combo)

#: The Data list for a text model (a Hugging Face model with a task head): token ids.
TEXT_DATASETS: tuple[tuple[str, str], ...] = (
    ("Synthetic tokens", "synthetic"),
    ("Text (JSONL)", "text"),
)

#: Where validation data can come from: a held-out split, or a dataset kind with a folder.
_VAL_KINDS = frozenset({HELD_OUT} | {kind for _label, kind in DATASETS if kind != "synthetic"})

#: The fields ``set_values`` sets through the field table, by config name.
_BY_CONFIG = {f.config: f for f in PANEL_FIELDS if f.config}
#: The options ``set_values`` sets as they are (same name in the config), with their types.
_OPTION_TYPES: dict[str, type] = {
    name: type(getattr(TrainingOptions(), name)) for name in ("warmup_steps", "loss", "metric", "val_at_start")
}

#: Learning-rate schedules: ``(label, TrainConfig.scheduler)``.
SCHEDULES: tuple[tuple[str, str], ...] = (
    ("constant", "constant"),
    ("cosine", "cosine"),
    ("linear", "linear"),
    ("one-cycle", "onecycle"),
)


def fmt_eta(seconds: float) -> str:
    """``01:11`` or ``1:02:03`` (``--:--`` when unknown).

    Args:
        seconds: time left.

    Returns:
        The text.
    """
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "--:--"
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class TrainingPanel(QWidget):
    """Settings of the next run and the controls of the current one.

    Args:
        controller: the window's controller (optimizer setting, model).
        runs: starts and controls runs.
        settings: where the settings are kept between sessions (None: not kept).
        parent: Qt parent.

    Signals:
        stepSetupChanged(): a field of :meth:`step_setup` (or the data) changed.

    Attributes:
        act_start / act_pause / act_stop: the Run menu's actions (F5, F6, Shift+F5).
    """

    stepSetupChanged = Signal()

    def __init__(
        self, controller: Controller, runs: RunController, settings: QSettings | None = None, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self._c = controller
        self._text = False
        self.runs = runs
        self._settings = settings
        self._total = 0
        self._rate_points: list[tuple[float, float]] = []
        # The progress bar and the rate label change at most PROGRESS_INTERVAL_MS apart: each
        # change repaints the panel, and the window's CPU time is taken from the training step.
        self._progress_pending: tuple[int, str] | None = None
        self._progress_timer = QTimer(self)
        self._progress_timer.setSingleShot(True)
        self._progress_timer.setInterval(PROGRESS_INTERVAL_MS)
        self._progress_timer.timeout.connect(self._show_progress)

        # ---- row 1: settings
        self.data_box = QComboBox(self)
        for label, kind in DATASETS:
            self.data_box.addItem(label, kind)
        self.data_box.setToolTip("Training data: synthetic images (no files), an image folder (one sub-folder per "
                                 "class), a torchvision dataset already on disk, or a Hugging Face dataset folder "
                                 "written by save_to_disk (text/label or image/label columns); nothing is downloaded")
        self.data_path = QLineEdit(self)
        self.data_path.setPlaceholderText("folder…")
        # narrow at least: a long path scrolls in the field (a wider minimum pushed a text model's row,
        # Tokens and all, past a 1280-px screen)
        self.data_path.setMinimumWidth(self.data_path.fontMetrics().horizontalAdvance("x" * 9))
        self.browse = QToolButton(self)
        self.browse.setText("…")
        self.browse.setToolTip("Choose the dataset folder")
        self.browse.clicked.connect(self._browse)
        self.data_box.currentIndexChanged.connect(self._data_changed)
        self.image_size = QSpinBox(self)
        self.image_size.setRange(0, 1024)
        self.image_size.setSingleStep(16)
        self.image_size.setSpecialValueText("model")
        self.image_size.setSuffix(" px")
        self.image_size.setToolTip("Input side in pixels (model: the model's own, the weights' crop size or its "
                                   "configured size, usually 224). Small images make quick CPU runs")

        self.seq_len = QSpinBox(self)  # text models, in place of the image size
        self.seq_len.setRange(0, MAX_SEQ_LEN)
        self.seq_len.setSingleStep(32)
        self.seq_len.setSpecialValueText("default")
        self.seq_len.valueChanged.connect(lambda _v: self._show_sequence(self._c.model) if self._text else None)
        self.batch_size = QSpinBox(self)
        self.batch_size.setRange(1, 65536)
        self.batch_size.setToolTip("Samples per step")
        self.optimizer_box = QComboBox(self)
        for key, label in OPTIMIZER_LABELS.items():
            self.optimizer_box.addItem(label, key)
        self.optimizer_box.setToolTip("Optimizer (the cost panel counts its state)")
        self.optimizer_box.currentIndexChanged.connect(self._optimizer_chosen)
        controller.planChanged.connect(self._sync_optimizer)
        controller.modelChanged.connect(self._model_changed)
        self.lr = QLineEdit(self)
        self.lr.setToolTip("Base learning rate; each module's LR × multiplies it")
        self.lr.setMaximumWidth(self.lr.fontMetrics().horizontalAdvance("0.00001") + 16)
        self.lr.setMinimumWidth(self.lr.fontMetrics().horizontalAdvance("0.001") + 16)  # "1e-3" stays whole
        self.wd = QLineEdit(self)
        self.wd.setToolTip("Weight decay of every parameter group")
        self.wd.setMaximumWidth(self.wd.fontMetrics().horizontalAdvance("0.00001") + 16)
        self.wd.setMinimumWidth(self.wd.fontMetrics().horizontalAdvance("0.01") + 16)
        self.schedule_box = QComboBox(self)
        for label, value in SCHEDULES:
            self.schedule_box.addItem(label, value)
        self.schedule_box.setToolTip("Learning-rate schedule over the run (warm-up in Options…); it carries on "
                                     "for the parameter groups stages and live edits add")
        self.options = TrainingOptions()
        self.options_button = QToolButton(self)
        self.options_button.setText("Options…")
        self.options_button.clicked.connect(lambda _c=False: self.edit_options())
        self.options_label = ElidedLabel(self, separator=" · ")  # cut by whole items; all of them in its tooltip
        muted = self.options_label.palette()
        muted.setColor(QPalette.ColorRole.WindowText, muted.color(QPalette.ColorRole.PlaceholderText))
        self.options_label.setPalette(muted)
        self.length_kind = QComboBox(self)
        self.length_kind.addItem("steps", "steps")
        self.length_kind.addItem("epochs", "epochs")
        self.length_kind.setToolTip("Run for a number of optimizer steps or of passes over the data")
        self.length = QSpinBox(self)
        self.length.setRange(1, 10_000_000)
        self.device_box = QComboBox(self)
        self.device_box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)  # "auto (cuda:0)" once probed
        self._fill_devices()
        torch_ready.notifier().ready.connect(self._devices_probed)
        self.device_box.setToolTip("Where to train (only devices present on this machine are listed)")
        self.amp_box = QComboBox(self)
        for label, value in (("off", "off"), ("bf16", "bf16"), ("fp16", "fp16")):
            self.amp_box.addItem(label, value)
        self.amp_box.setToolTip("Mixed precision: bf16 autocast (CPU too), fp16 autocast with a gradient scaler")
        self.channels_last = QCheckBox("channels last", self)
        self.channels_last.setToolTip("Model and inputs in channels-last memory format (faster convolutions on most GPUs)")

        # two rows of settings (what to train on, then how long and where) so the window
        # fits a 1280 px wide screen; the run controls share the second row
        row1 = QHBoxLayout()
        row1.setSpacing(5)
        row2 = QHBoxLayout()
        row2.setSpacing(5)
        self.seq_label = QLabel(self)
        self.seq_label.hide()
        self._labels: dict[str, QLabel] = {}
        for row, label, widgets in (
            (row1, "Data", [self.data_box, self.data_path, self.browse]),
            (row1, "Image", [self.image_size]),
            (row1, "Tokens", [self.seq_len, self.seq_label]),
            (row1, "Batch", [self.batch_size]),
            (row1, "Optimizer", [self.optimizer_box]),
            (row1, "LR", [self.lr]),
            (row1, "WD", [self.wd]),
            (row1, "Schedule", [self.schedule_box]),
            (row2, "Run", [self.length, self.length_kind]),
            (row2, "Device", [self.device_box]),
            (row2, "AMP", [self.amp_box]),
        ):
            lab = self._labels[label] = QLabel(label, self)
            row.addWidget(lab)
            for w in widgets:
                row.addWidget(w)
            row.addSpacing(6)
        for w in (self.seq_len, self._labels["Tokens"]):  # shown for text models (set_text_model)
            w.hide()
        row1.addWidget(self.options_button)
        row1.addWidget(self.options_label, 1)
        row2.addWidget(self.channels_last)
        row2.addSpacing(12)
        self._settings_widgets = [
            self.data_box, self.data_path, self.browse, self.image_size, self.seq_len, self.batch_size, self.optimizer_box,
            self.lr, self.wd, self.schedule_box, self.options_button, self.length_kind, self.length, self.device_box, self.amp_box, self.channels_last,
        ]

        # ---- row 2: controls and progress
        style = self.style()
        self.act_start = QAction(style.standardIcon(QStyle.StandardPixmap.SP_MediaPlay), "&Start Training", self)
        self.act_start.setShortcut(QKeySequence("F5"))
        self.act_start.setIconText("Start")
        self.act_start.setStatusTip("Train a copy of the loaded model with the plan (the loaded weights stay as they are)")
        self.act_start.triggered.connect(lambda _c=False: self.start())
        self.act_pause = QAction(style.standardIcon(QStyle.StandardPixmap.SP_MediaPause), "&Pause", self)
        self.act_pause.setShortcut(QKeySequence("F6"))
        self.act_pause.setIconText("Pause")
        self.act_pause.triggered.connect(lambda _c=False: self.toggle_pause())
        self.act_stop = QAction(style.standardIcon(QStyle.StandardPixmap.SP_MediaStop), "S&top", self)
        self.act_stop.setShortcut(QKeySequence("Shift+F5"))
        self.act_stop.setIconText("Stop")
        self.act_stop.setStatusTip("End the run after the current step; the run is kept")
        self.act_stop.triggered.connect(lambda _c=False: self.runs.stop())
        self.start_button = self._tool_button(self.act_start)
        self.pause_button = self._tool_button(self.act_pause)
        self.stop_button = self._tool_button(self.act_stop)
        self.progress = QProgressBar(self)
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.progress.setFormat("no run yet")  # "step %v / %m" once a run reports its length
        self.progress.setTextVisible(True)
        self.progress.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.rate_label = QLabel("", self)
        self.rate_label.setMinimumWidth(self.rate_label.fontMetrics().horizontalAdvance("000.0 it/s · ETA 00:00:00"))
        self.state_label = QLabel("Ready", self)
        self.state_label.setMinimumWidth(self.state_label.fontMetrics().horizontalAdvance("Stopping…  "))
        row2.addWidget(self.start_button)
        row2.addWidget(self.pause_button)
        row2.addWidget(self.stop_button)
        row2.addWidget(self.state_label)
        row2.addWidget(self.progress, 1)
        row2.addWidget(self.rate_label)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 0, 2, 0)
        layout.setSpacing(4)
        layout.addLayout(row1)
        layout.addLayout(row2)

        for signal in (self.batch_size.valueChanged, self.image_size.valueChanged, self.seq_len.valueChanged,
                       self.data_box.currentIndexChanged, self.device_box.currentIndexChanged,
                       self.amp_box.currentIndexChanged):
            signal.connect(lambda *_a: self.stepSetupChanged.emit())
        self._restore()
        self._sync_optimizer()
        self._data_changed()
        runs.stateChanged.connect(self._state_changed)
        runs.prepared.connect(self._prepared)
        runs.metricsReceived.connect(self._metrics)
        runs.runStarted.connect(self._started)
        runs.runEnded.connect(self._ended)
        self._state_changed(runs.state)

    def _tool_button(self, action: QAction) -> QToolButton:
        b = QToolButton(self)
        b.setDefaultAction(action)
        b.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        return b

    # ------------------------------------------------------------ settings
    def _restore(self) -> None:
        s = self._settings
        self._ignored_settings: list[str] = []

        def get(key: str, default: Any, kind: type) -> Any:
            if s is None:
                return default
            v = s.value(f"training/{key}", default)
            try:
                return kind(v) if kind is not bool else (v in (True, "true", "1", 1))
            except (TypeError, ValueError):
                self._ignored_settings.append(f"saved setting {key} = {str(v)[:40]!r} is not a {kind.__name__}: "
                                              f"the default {default!r} is used")
                return default

        for f in PANEL_FIELDS:
            default = f.default_value()
            show_value(getattr(self, f.widget), get(f.setting, default, type(default)))  # a spin box clamps
        # what the devices' probe may change once torch is imported: a saved GPU, the default input side
        self._wanted_device = str(get("device", "auto", str))
        saved = s is not None and s.contains("training/image_size")
        self._default_image_size: int | None = None if saved else self.image_size.value()
        self.set_options(options_from_settings(get, _VAL_KINDS, self._ignored_settings))

    def _fill_devices(self) -> None:
        """List the devices (``auto`` and ``cpu`` until they are probed), keeping the one shown."""
        current = self.device_box.currentData()
        self.device_box.blockSignals(True)
        self.device_box.clear()
        for label, value in torch_ready.device_choices():
            self.device_box.addItem(label, value)
        self.device_box.blockSignals(False)
        if current is not None:
            self._select(self.device_box, str(current))

    def _devices_probed(self) -> None:
        """The devices are known: list them, show the saved device if it is one of them, and the
        default input side of this machine when none was saved or chosen."""
        shown = self.device_box.currentData()
        self._fill_devices()
        if shown == "auto" and self._wanted_device != "auto":
            self._select(self.device_box, self._wanted_device)
        if self._default_image_size is not None and self.image_size.value() == self._default_image_size:
            self.image_size.setValue(default_image_size())  # not saved, not changed since: this machine's default
        self._default_image_size = None
        self.stepSetupChanged.emit()

    def settings_problem(self) -> str | None:
        """The saved training settings that were not restored as they were, and why (said once at start-up).

        Returns:
            One line, or None when every saved setting was taken.
        """
        if not self._ignored_settings:
            return None
        return "training settings: " + "; ".join(self._ignored_settings)

    def save_settings(self) -> None:
        """Keep the settings for the next session."""
        s = self._settings
        if s is None:
            return
        values = {f.setting: widget_value(getattr(self, f.widget)) for f in PANEL_FIELDS}
        for key, value in (values | options_settings(self.options)).items():
            s.setValue(f"training/{key}", value)
        s.sync()

    @staticmethod
    def _select(box: QComboBox, value: str) -> None:
        i = box.findData(value)
        if i >= 0:
            box.setCurrentIndex(i)

    def set_values(self, **values: Any) -> None:
        """Set fields by config name (``batch_size=4``, ``image_size=32``, ``steps=20``,
        ``device="cpu"``, ``data="synthetic"``, ``lr=1e-3``, ``scheduler="cosine"``,
        ``warmup_steps=5``, ``no_decay="auto"``, ``val=None`` (a held-out split) or
        ``val="imagefolder:PATH"``, ``val_every=10``, ``val_fraction=0.2`` ...), for scripts and tests.

        Args:
            **values: config field values.

        Raises:
            KeyError: a name the panel has no field for.
        """
        for key, v in sorted(values.items(), key=lambda kv: kv[0] == "val_every"):  # after ``val``
            if key == "data":
                kind, _, path = str(v).partition(":")
                self._select(self.data_box, kind)
                self.data_path.setText(path)
            elif key in _BY_CONFIG:
                f = _BY_CONFIG[key]
                show_value(getattr(self, f.widget), f.to_widget(v))
            elif key in ("steps", "epochs"):
                self._select(self.length_kind, key)
                self.length.setValue(int(v))
            elif key == "optimizer":
                self._c.set_optimizer(str(v))
            elif key == "no_decay":
                self.set_options(dataclasses.replace(self.options, no_decay=v in (True, "auto")))
            elif key in ("val", "val_every", "val_fraction"):
                self.set_options(self._with_validation(key, v))
            elif key == "input_shape":
                shape = ",".join(str(d) for d in v) if isinstance(v, (list, tuple)) else str(v or "")
                self.set_options(dataclasses.replace(self.options, input_shape=shape))
            elif key.endswith("_column") and (role := key.removesuffix("_column")) in COLUMN_ROLES:
                columns = {r: c for r, c in self.options.columns.items() if r != role} | ({role: str(v)} if v else {})
                self.set_options(dataclasses.replace(self.options, columns=columns))
            elif key in _OPTION_TYPES:  # warmup_steps, loss, metric, val_at_start ...
                self.set_options(dataclasses.replace(self.options, **{key: _OPTION_TYPES[key](v)}))
            else:
                raise KeyError(f"the training panel has no field {key!r}")

    def config(self) -> TrainConfig:
        """The next run's settings.

        Returns:
            A validated config (``model`` and ``plan`` left empty: the window's are used).

        Raises:
            ConfigError: a field is invalid (the message names it and the fix).
        """
        kind = self.data_box.currentData()
        if kind == "synthetic":
            data = "synthetic"
        else:
            path = self.data_path.text().strip()
            if not path:
                what = {"py": "file and function", "text": "file"}.get(kind, "folder")  # JSONL is one file
                raise ConfigError(f"choose the {what} of the {self.data_box.currentText()} data (the … button), or use Synthetic")
            data = f"{kind}:{path}"
        length = "epochs" if self.length_kind.currentData() == "epochs" else "steps"
        fields: dict[str, Any] = {f.config: f.to_config(widget_value(getattr(self, f.widget))) for f in PANEL_FIELDS
                                  if f.config and self._applies(f)}
        return TrainConfig(
            data=data,
            optimizer=self._c.optimizer,
            **(fields | {length: self.length.value()}),
            **self.options.config_fields(),
        ).validate()

    @property
    def model_kind(self) -> str:
        """``"text"`` for a model that takes token ids, else ``"image"`` (which fields apply)."""
        return "text" if self._text else "image"

    def image_size_applies(self) -> bool:
        """The next run resizes images to the Image size (an image model, and data of image files or
        generated images; see :func:`~workbench.gui.training.panel_fields.image_size_applies`)."""
        return not self._text and image_size_applies(str(self.data_box.currentData()), self.options)

    def _applies(self, f: PanelField) -> bool:
        """A field says something about the next run: one of the model's kind, the image size only for data it resizes."""
        return f.model in ("", self.model_kind) and (f.config != "image_size" or self.image_size_applies())

    def _show_inputs(self) -> None:
        """Show the input controls that apply to the chosen model and data (Image size, Tokens). The ones
        going away are hidden first: a row holding both for a moment would widen the window for good."""
        shown = {"Image": self.image_size_applies(), "Tokens": self._text}
        if not self._text:
            self.seq_label.hide()  # the length the tokens come to (shown by _show_sequence)
        for visible in (False, True):
            for label, w in (("Image", self.image_size), ("Tokens", self.seq_len)):
                if shown[label] == visible:
                    w.setVisible(visible)
                    self._labels[label].setVisible(visible)

    def step_setup(self) -> StepSetup:
        """What the next run's step memory depends on: device, batch, input size, precision, tokens.

        Returns:
            The setup as the panel is set now (valid even while other fields are not); its image
            size is None where the run resizes no images (a text model, your code's items, arrays),
            as in :meth:`config`.
        """
        size = (self.image_size.value() or None) if self.image_size_applies() else None
        return StepSetup(
            device=str(self.device_box.currentData()), batch_size=self.batch_size.value(), image_size=size,
            amp=str(self.amp_box.currentData()), tokens=self.tokens(),
        )

    # ------------------------------------------------------------ options
    def set_options(self, options: TrainingOptions) -> None:
        """Take new options (warm-up, no decay, validation) and show which are on.

        Args:
            options: the values (kept as given).
        """
        self.options = options
        self._show_inputs()  # an input shape, columns or validation data decide whether images are resized
        self.options_label.set_full_text(options.summary())
        self.options_button.setToolTip(options_tooltip(options))
        self.options_label.setToolTip(options_tooltip(options))

    def edit_options(self) -> bool:
        """Open the options dialog on a copy of the options; take it when accepted.

        Returns:
            True when the dialog was accepted.
        """
        dialog = TrainingOptionsDialog(self.options.copy(), DATASETS, self)
        try:
            if not dialogs.run_dialog(dialog):
                return False
            self.set_options(dialog.options())
        finally:
            dialog.deleteLater()
        return True

    def _with_validation(self, key: str, v: Any) -> TrainingOptions:
        """The options with one validation field set by its config name (see :meth:`set_values`)."""
        o = self.options.copy()
        if key == "val":
            o.validate = v is not None or o.validate
            if v is None:
                o.val_kind, o.val_path = HELD_OUT, ""
            else:
                kind, _, path = str(v).partition(":")
                o.val_kind, o.val_path, o.val_every = kind, path, 0  # at the end, unless val_every says
        elif key == "val_every":
            o.validate = v is not None or (o.validate and o.val_kind != HELD_OUT)
            o.val_every = int(v or 0)
        else:
            o.val_percent = max(1, min(50, round(float(v) * 100)))
        return o

    # ------------------------------------------------------------ actions
    def start(self, watch_steps: int | None = None) -> bool:
        """Start a run with the panel's settings (an error dialog when they are invalid).

        Args:
            watch_steps: also run the freeze doctor's watch over this many steps (the run is
                that long).

        Returns:
            True when the run started.
        """
        try:
            cfg = self.config()
            if watch_steps:
                cfg = cfg.replace(steps=watch_steps + 1, epochs=None)
        except ConfigError as e:
            dialogs.error(self, "Cannot start training", str(e))
            return False
        if not confirm_task_code(self, cfg):  # py: data, loss or metric run only after the file was shown
            return False
        self.save_settings()
        return self.runs.start(cfg, watch_steps=watch_steps)

    def toggle_pause(self) -> None:
        """Pause a running run, or resume a paused one."""
        if self.runs.state == "paused":
            self.runs.resume()
        else:
            self.runs.pause()

    def _browse(self) -> None:
        start = self.data_path.text().strip()
        if self.data_box.currentData() == "text":
            path = dialogs.open_file(self, "Choose the text file (one JSON object per line)", start,
                                     "JSON lines (*.jsonl);;All files (*)")
        elif self.data_box.currentData() == "py":  # the function is typed after FILE.py: (it runs only after Train)
            path = dialogs.open_file(self, "Choose the Python file whose function returns the data",
                                     start.rpartition(":")[0] or start, DATA_SOURCES["py"].file_filter)
            path = f"{path}:{_first_function(path)}" if path else path
        else:
            path = dialogs.open_dir(self, f"Choose the {self.data_box.currentText()} folder", start)
        if path:
            self.data_path.setText(path)

    # ------------------------------------------------------------ text models
    @property
    def text_model(self) -> bool:
        """The loaded model takes token ids (the Data list offers text, tokens replace pixels)."""
        return self._text

    def _model_changed(self) -> None:
        model = self._c.model  # None for a described tree (start-up): no model to ask yet
        if model is not None:
            from workbench.core.training.data import text_task_of

            self.set_text_model(text_task_of(model) is not None, model)
        else:
            self.set_text_model(False)
        if self.runs.state == "idle":  # the last run was the old model's (the Runs tab keeps it)
            self._progress_timer.stop()
            self._progress_pending = None
            self.progress.setRange(0, 1)
            self.progress.setValue(0)
            self.progress.setFormat("no run yet")
            self.rate_label.setText("")

    def set_text_model(self, text: bool, model: Any = None) -> None:
        """Show the controls of a text model (synthetic tokens, a JSONL file, the sequence
        length and the tokenizer it uses) or of an image model (image datasets and size).

        Args:
            text: the model takes token ids.
            model: the model (its positions cut the sequence; its folder holds the tokenizer).
        """
        self._text = bool(text)
        wanted = TEXT_DATASETS if text else DATASETS
        current = self.data_box.currentData()
        if [self.data_box.itemData(i) for i in range(self.data_box.count())] != [k for _l, k in wanted]:
            self.data_box.blockSignals(True)
            self.data_box.clear()
            for label, kind in wanted:
                self.data_box.addItem(label, kind)
            i = self.data_box.findData(current)
            self.data_box.setCurrentIndex(max(i, 0))
            self.data_box.blockSignals(False)
        self.channels_last.setVisible(not text)
        self._show_inputs()
        self.data_box.setToolTip(
            "Training data: synthetic token ids (no files) or a JSON-lines file of {\"text\": ..., \"label\": ...} "
            "tokenized with the model folder's tokenizer" if text else
            "Training data: synthetic images (no files), an image folder (one sub-folder per class) or a "
            "torchvision dataset already on disk (nothing is downloaded)")
        self.data_path.setPlaceholderText("file.jsonl…" if text else "folder…")
        self.browse.setToolTip("Choose the JSON-lines file" if text else "Choose the dataset folder")
        if text:
            self._show_sequence(model)
        self._data_changed()

    def tokens(self) -> int | None:
        """Tokens per sample the next run feeds the loaded text model (the Tokens control, or the chosen data's
        default, capped at the model's positions), whether or not the data's file is chosen yet; None for other models."""
        from workbench.core.training.data import run_seq_len

        data = "synthetic" if self.data_box.currentData() == "synthetic" else "text:"
        return run_seq_len(self._c.model, self.seq_len.value() or None, data) if self._text else None

    def _show_sequence(self, model: Any) -> None:
        from workbench.core.training.data import SYNTHETIC_SEQ_LEN, model_positions, run_seq_len
        from workbench.core.training.text_jsonl import TEXT_FILE_SEQ_LEN, tokenizer_folder

        limit = model_positions(model)
        asked = self.seq_len.value() or None
        data = "synthetic" if self.data_box.currentData() == "synthetic" else "text:"
        tokens = run_seq_len(model, asked, data)
        try:
            tokenizer = f"tokenizer of {tokenizer_folder(model)}"
        except Exception:
            tokenizer = "no tokenizer folder (Text (JSONL) needs the model opened from its folder)"
        # one line when the model cuts the length asked for; the default's length otherwise
        capped = asked is not None and tokens is not None and tokens < asked
        self.seq_label.setText(f"→ {tokens} (model's max)" if capped else
                               f"= {tokens}" if asked is None and tokens is not None else "")
        self.seq_label.setVisible(bool(self.seq_label.text()))
        tip = (f"Tokens per sample (default: {SYNTHETIC_SEQ_LEN} for synthetic tokens, {TEXT_FILE_SEQ_LEN} for a "
               "text file)" + (f", at most the model's {limit} positions" if limit is not None else "")
               + f"; {tokenizer}. The cost panel's activation estimate is for this length")
        self.seq_len.setToolTip(tip)
        self.seq_label.setToolTip(tip)

    def _data_changed(self, *_: Any) -> None:
        source = DATA_SOURCES.get(str(self.data_box.currentData()))
        files = self.data_box.currentData() != "synthetic"
        self.data_path.setVisible(files)
        self.browse.setVisible(files)
        self._show_inputs()
        if source is not None and not self._text:
            self.data_path.setPlaceholderText(source.placeholder or "folder…")
        if self._text:
            self._show_sequence(self._c.model)

    def _optimizer_chosen(self, index: int) -> None:
        key = self.optimizer_box.itemData(index)
        if key and key != self._c.optimizer:
            self._c.set_optimizer(key)

    def _sync_optimizer(self, *_: Any) -> None:
        i = self.optimizer_box.findData(self._c.optimizer)
        if i >= 0 and i != self.optimizer_box.currentIndex():
            self.optimizer_box.blockSignals(True)
            self.optimizer_box.setCurrentIndex(i)
            self.optimizer_box.blockSignals(False)

    # ------------------------------------------------------------ run feedback
    def _state_changed(self, state: str) -> None:
        idle = state == "idle"
        self.act_start.setEnabled(idle)
        self.act_pause.setEnabled(state in ("running", "paused"))
        self.act_stop.setEnabled(state in ("starting", "running", "paused"))
        style = self.style()
        if state == "paused":
            self.act_pause.setText("&Resume")
            self.act_pause.setIconText("Resume")
            self.act_pause.setIcon(style.standardIcon(QStyle.StandardPixmap.SP_MediaPlay))
        else:
            self.act_pause.setText("&Pause")
            self.act_pause.setIconText("Pause")
            self.act_pause.setIcon(style.standardIcon(QStyle.StandardPixmap.SP_MediaPause))
        for w in self._settings_widgets:
            w.setEnabled(idle)
        if state == "paused":  # no time left to estimate while nothing runs
            self._progress_pending = None
            self.rate_label.setText("paused")
        elif state == "running" and self._rate_points:
            self._rate_points = []  # the rate after a pause counts from the resume
            self.rate_label.setText("resuming…")
        self.state_label.setText(
            {"idle": "Ready", "starting": "Starting…", "running": "Training", "paused": "Paused", "stopping": "Stopping…"}.get(state, state)
        )

    def _started(self, _record: Any) -> None:
        self.progress.setFormat("step %v / %m")
        self._progress_timer.stop()
        self._progress_pending = None
        self._total = 0
        self._rate_points = []
        self.progress.setRange(0, 0)  # busy until the setup reports the length
        self.rate_label.setText("setting up…")

    def _prepared(self, info: dict) -> None:
        self._total = int(info.get("total_steps") or 0)
        self.progress.setFormat("step %v / %m")
        self.progress.setRange(0, max(1, self._total))
        self.progress.setValue(0)
        self.rate_label.setText("")

    def _metrics(self, batch: list) -> None:
        if not batch:
            return
        last = batch[-1]
        done = int(last.get("step", 0)) + 1
        wall = float(last.get("wall_time") or 0.0)
        pts = self._rate_points
        pts.append((wall, float(done)))
        while len(pts) > 2 and wall - pts[0][0] > 5.0:  # rate over the last ~5 s
            pts.pop(0)
        if len(pts) >= 2 and pts[-1][0] > pts[0][0]:
            rate = (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])
        else:
            rate = done / wall if wall > 0 else 0.0
        eta = (self._total - done) / rate if rate > 0 and self._total else math.nan
        paused = self.runs.state == "paused"  # the last steps before the pause: no ETA
        self._progress_pending = (done, "paused" if paused else f"{rate:.1f} it/s · ETA {fmt_eta(eta)}")
        if not self._progress_timer.isActive():  # shown now, then at most once per interval
            self._show_progress()

    def _show_progress(self) -> None:
        """Show the newest step count and rate (held back by the progress timer)."""
        if self._progress_pending is None:
            return
        if not self._progress_timer.isActive():
            self._progress_timer.start()  # the next update waits its turn, however soon it comes
        (done, text), self._progress_pending = self._progress_pending, None
        if self._total:
            self.progress.setValue(min(done, self._total))
        self.rate_label.setText(text)

    def _ended(self, record: Any) -> None:
        self._progress_timer.stop()
        self._progress_pending = None
        if record.status == "refused":  # nothing ran: no step count to show
            self.progress.setRange(0, 1)
            self.progress.setValue(0)
            self.progress.setFormat("not started")
            self.rate_label.setText("refused")
            return
        if self._total:
            self.progress.setRange(0, max(1, self._total))
            self.progress.setValue(min(record.steps(), self._total))
        else:
            self.progress.setRange(0, 1)
            self.progress.setValue(0)
        self.rate_label.setText(record.status)


def _first_function(path: str) -> str:
    """The first top-level function of a Python file, read without running it ("" when none)."""
    import ast

    try:
        if os.path.getsize(path) > 2_000_000:
            return ""
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return ""
    return next((n.name for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")), "")
