"""The less-used training settings: warm-up, weight decay on biases and norms, validation, TensorBoard,
the frozen-prefix cache, auto-freeze and the columns of a Hugging Face dataset.

:class:`TrainingOptions` holds them as plain data (what the training panel keeps, saves in
``QSettings`` and turns into :class:`~workbench.core.training.config.TrainConfig` fields, as
the CLI's ``--warmup-steps``, ``--no-decay``, ``--val``, ``--val-every`` and
``--val-fraction``, ``--tensorboard`` and ``--text-column``/``--label-column``/``--image-column`` do). :class:`TrainingOptionsDialog` edits a copy; the panel takes it back
when the dialog is accepted, so Cancel changes nothing.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLineEdit,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from workbench.core.training.config import ConfigError
from workbench.core.training.losses import LOSSES
from workbench.core.training.task_metrics import METRICS, metric_label
from workbench.core.training.tensorboard import INSTALL_HINT, tensorboard_available
from workbench.gui import dialogs

__all__ = ["COLUMN_ROLES", "HELD_OUT", "TENSORBOARD_IN_RUN", "TrainingOptions", "TrainingOptionsDialog", "options_tooltip"]

#: The columns of ``hf-dataset:`` data a run reads, each ``TrainConfig.<role>_column`` (``input``: a
#: column of arrays, audio or features, fed as a float tensor).
COLUMN_ROLES: tuple[str, ...] = ("text", "label", "image", "input")
#: The loss and metric combos' entry for your own code (``py:FILE.py:FUNC``, typed beside it).
PY_CHOICE = "py"

#: ``TrainingOptions.val_kind`` of a held-out split of the training data (the default source).
HELD_OUT = "heldout"

#: ``TrainConfig.tensorboard_dir`` while the run's folder is not known yet: the run controller
#: replaces it with ``<run folder>/tensorboard`` when the run starts.
TENSORBOARD_IN_RUN = "<run>/tensorboard"


@dataclass
class TrainingOptions:
    """Training settings kept behind the panel's Options… button.

    Attributes:
        warmup_steps: steps of linear warm-up (``TrainConfig.warmup_steps``).
        no_decay: no weight decay on biases, norms and other 1-D parameters
            (``TrainConfig.no_decay = "auto"``).
        validate: validation is on.
        val_kind: :data:`HELD_OUT`, or a dataset kind (``imagefolder``, ``cifar10`` ...) read
            from :attr:`val_path`.
        val_path: the validation dataset's folder (dataset kinds only).
        val_percent: share of the training data held out, in percent (held-out split).
        val_every: validate every N steps (and at the end); 0: only at the end (a dataset
            source only; a held-out split needs N >= 1).
        tensorboard: write TensorBoard event files into the run's folder
            (``<run>/tensorboard``; ``TrainConfig.tensorboard_dir``).
        cache_frozen: keep the frozen front layers' output after the first epoch where that
            is exact (``TrainConfig.cache_frozen`` ``auto``; unchecked: ``off``).
        auto_freeze: freeze the front blocks whose gradient norm flattened, while training
            (``TrainConfig.auto_freeze``).
        auto_freeze_every: decide every N steps; 0: 5 % of the run's steps, at least 10
            (``TrainConfig.auto_freeze_every`` None).
        auto_freeze_threshold: a block has flattened when its gradient norm changed by less
            than this share (``TrainConfig.auto_freeze_threshold``).
        auto_freeze_max: freeze at most this share of the blocks (``TrainConfig.auto_freeze_max``).
        columns: the ``hf-dataset:`` data's text, label, image and input columns, ``""`` for
            the default name (``TrainConfig.text_column``, ``label_column``, ``image_column``,
            ``input_column``).
        loss: ``TrainConfig.loss`` (a row of the loss table, or ``py:FILE.py:FUNC``).
        metric: ``TrainConfig.metric`` (a row of the metric table, or ``py:FILE.py:FUNC``).
        val_at_start: validate once before the first step too (``TrainConfig.val_at_start``).
        input_shape: one sample's shape, ``"1024"`` or ``"3,224,224"`` (``TrainConfig.input_shape``;
            the cost panel predicts for it); ``""``: images, or the data's own.
    """

    warmup_steps: int = 0
    no_decay: bool = False
    validate: bool = False
    val_kind: str = HELD_OUT
    val_path: str = ""
    val_percent: int = 10
    val_every: int = 50
    tensorboard: bool = False
    cache_frozen: bool = True
    auto_freeze: bool = False
    auto_freeze_every: int = 0
    auto_freeze_threshold: float = 0.1
    auto_freeze_max: float = 0.75
    columns: dict[str, str] = dataclasses.field(default_factory=dict)
    loss: str = "cross_entropy"
    metric: str = "accuracy"
    val_at_start: bool = False
    input_shape: str = ""

    def config_fields(self) -> dict[str, Any]:
        """The :class:`~workbench.core.training.config.TrainConfig` fields these options set.

        Returns:
            ``warmup_steps``, ``no_decay``, ``val``, ``val_every``, ``val_fraction`` and
            ``tensorboard_dir`` (:data:`TENSORBOARD_IN_RUN`, which the run controller turns into
            the run's own folder, or None).

        Raises:
            ConfigError: validation from a dataset without its folder.
        """
        out: dict[str, Any] = {
            "warmup_steps": int(self.warmup_steps),
            "no_decay": "auto" if self.no_decay else None,
            "val": None,
            "val_every": None,
            "val_fraction": 0.1,
            "tensorboard_dir": TENSORBOARD_IN_RUN if self.tensorboard else None,
            "cache_frozen": "auto" if self.cache_frozen else "off",
            "auto_freeze": bool(self.auto_freeze),
            "auto_freeze_every": max(0, int(self.auto_freeze_every)) or None,
            **self.auto_freeze_shares(),
            **{f"{role}_column": self.columns.get(role, "").strip() or None for role in COLUMN_ROLES},
            "loss": self.loss.strip() or "cross_entropy",
            "metric": self.metric.strip() or "accuracy",
            "val_at_start": bool(self.val_at_start and self.validate),
            "input_shape": self.input_shape.strip() or None,
        }
        if not self.validate:
            return out
        if self.val_kind == HELD_OUT:
            out["val_every"] = max(1, int(self.val_every))
            out["val_fraction"] = self.val_percent / 100.0
            return out
        path = self.val_path.strip()
        if not path:
            what = {"py": "file and function", "text": "file"}.get(self.val_kind, "folder")  # JSONL is one file
            raise ConfigError(f"choose the {what} of the validation data (Options…), or validate on a held-out split")
        out["val"] = f"{self.val_kind}:{path}"
        out["val_every"] = int(self.val_every) or None
        return out

    def auto_freeze_shares(self) -> dict[str, float]:
        """Threshold and maximum as TrainConfig takes them.

        Returns:
            ``auto_freeze_threshold`` and ``auto_freeze_max``; a value out of range (from
            damaged settings) is the default.
        """
        threshold, most = float(self.auto_freeze_threshold), float(self.auto_freeze_max)
        return {"auto_freeze_threshold": threshold if math.isfinite(threshold) and threshold > 0 else 0.1,
                "auto_freeze_max": most if math.isfinite(most) and 0 < most <= 1 else 0.75}

    def summary(self) -> str:
        """A few words for the panel: ``warm-up 20 · val every 50 (10 % held out) · no decay on biases``
        (``""`` with every option at its default)."""
        parts = []
        if self.warmup_steps:
            parts.append(f"warm-up {self.warmup_steps}")
        if self.validate:
            when = f"every {self.val_every}" if self.val_every else "at the end"
            source = f"{self.val_percent} % held out" if self.val_kind == HELD_OUT else self.val_kind
            parts.append(f"val {when} ({source})")
        if self.no_decay:
            parts.append("no decay on biases/norms")
        if self.tensorboard:
            parts.append("TensorBoard")
        if not self.cache_frozen:
            parts.append("no frozen cache")
        if self.auto_freeze:
            parts.append(f"auto-freeze every {self.auto_freeze_every}" if self.auto_freeze_every > 0 else "auto-freeze")
        if named := self.named_columns():
            parts.append("columns " + ", ".join(f"{r}={c}" for r, c in named.items()))
        if self.loss.strip() not in ("", "cross_entropy"):
            parts.append(f"loss {_short(self.loss)}")
        if self.metric.strip() not in ("", "accuracy"):
            parts.append(f"metric {_short(self.metric)}")
        if self.input_shape.strip():
            parts.append(f"input {self.input_shape.strip()}")
        return " · ".join(parts)

    def named_columns(self) -> dict[str, str]:
        """The dataset columns given other names than the defaults (role -> column)."""
        return {r: c.strip() for r in COLUMN_ROLES if (c := self.columns.get(r, "")).strip()}

    def copy(self) -> TrainingOptions:
        """An independent copy."""
        return dataclasses.replace(self, columns=dict(self.columns))


class TrainingOptionsDialog(QDialog):
    """Edits a copy of :class:`TrainingOptions`.

    Args:
        options: the values to start from (not changed).
        datasets: ``(label, kind)`` of the dataset kinds a validation folder can be (the
            training panel's list; ``synthetic`` is left out).
        parent: Qt parent.
    """

    def __init__(self, options: TrainingOptions, datasets: Sequence[tuple[str, str]], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Training Options")
        self.warmup = QSpinBox(self)
        self.warmup.setRange(0, 10_000_000)
        self.warmup.setSuffix(" steps")
        self.warmup.setSpecialValueText("none")
        self.warmup.setToolTip("Steps of linear warm-up at the start of the schedule "
                               "(one-cycle: the rising phase; none = the first 30 % of the run)")
        self.no_decay = QCheckBox("No weight decay on biases and norms", self)
        self.no_decay.setToolTip("Biases, normalization weights and the model's no_weight_decay() names get weight "
                                 "decay 0 (as timm does); the rest gets the WD of the panel")

        self.tensorboard = QCheckBox("Write TensorBoard logs", self)
        if tensorboard_available():
            self.tensorboard.setToolTip("Every metric, the lr of each param group and the plan changes go to "
                                        "<run folder>/tensorboard (open it with: tensorboard --logdir RUNS_FOLDER)")
        else:
            self.tensorboard.setEnabled(False)
            self.tensorboard.setToolTip(f"Needs the tensorboard package: {INSTALL_HINT}")

        self.cache_frozen = QCheckBox("Cache the frozen front layers after the first epoch", self)
        self.cache_frozen.setToolTip("Where it is exact (frozen, eval-mode front layers; data without random "
                                     "augmentation) later epochs run only the trainable part on kept activations; "
                                     "the run's events say where it cut, or why not")

        self.auto_freeze = QCheckBox("Auto-freeze converged front blocks", self)
        self.auto_freeze.setToolTip("Every N steps, freeze the front-most blocks whose gradient norm has flattened "
                                    "(a plan change, marked on the plots); the frozen part stays a prefix, so the cache "
                                    "can skip it")
        self.auto_every = QSpinBox(self)
        self.auto_every.setRange(0, 10_000_000)
        self.auto_every.setPrefix("every ")
        self.auto_every.setSuffix(" steps")
        self.auto_every.setSpecialValueText("every 5 % of the run")
        self.auto_every.setToolTip("How often auto-freeze compares each block's gradient norm with the window before; "
                                   "0: every 5 % of the run's steps, at least 10")
        self.auto_threshold = QSpinBox(self)
        self.auto_threshold.setRange(1, 1000)
        self.auto_threshold.setPrefix("threshold ")
        self.auto_threshold.setSuffix(" %")
        self.auto_threshold.setToolTip("A block has flattened when its mean gradient norm changed by less than this "
                                       "between two windows")
        self.auto_max = QSpinBox(self)
        self.auto_max.setRange(1, 100)
        self.auto_max.setPrefix("at most ")
        self.auto_max.setSuffix(" % of blocks")
        self.auto_max.setToolTip("Auto-freeze never freezes more than this share of the model's blocks")
        for w in (self.auto_every, self.auto_threshold, self.auto_max):
            self.auto_freeze.toggled.connect(w.setEnabled)

        self.validate = QGroupBox("Validate during training", self)
        self.validate.setCheckable(True)
        self.validate.setToolTip("Measure the loss (and the accuracy of classifiers) on data the run does not train on")
        self.source = QComboBox(self.validate)
        self.source.addItem("Held-out split of the training data", HELD_OUT)
        for label, kind in datasets:
            if kind != "synthetic":
                self.source.addItem(label, kind)
        self.source.setToolTip("Where the validation data come from: a held-out part of the training data "
                               "(never trained on), or a dataset on disk (torchvision datasets: their test split)")
        self.percent = QSpinBox(self.validate)
        self.percent.setRange(1, 50)
        self.percent.setSuffix(" %")
        self.percent.setToolTip("Share of the training data held out for validation")
        self.path = QLineEdit(self.validate)
        self.path.setPlaceholderText("folder…")
        self.path.setMinimumWidth(self.path.fontMetrics().horizontalAdvance("x" * 28))
        self.browse = QToolButton(self.validate)
        self.browse.setText("…")
        self.browse.setToolTip("Choose the validation data's folder")
        self.browse.clicked.connect(self._browse)
        self.every = QSpinBox(self.validate)
        self.every.setRange(0, 10_000_000)
        self.every.setPrefix("every ")
        self.every.setSuffix(" steps")
        self.every.setToolTip("Validate every N steps and after the last step")
        self.val_at_start = QCheckBox("Also before the first step (the pretrained score)", self.validate)
        self.val_at_start.setToolTip("One validation pass before training starts (--val-at-start)")
        path_row = QHBoxLayout()
        path_row.setContentsMargins(0, 0, 0, 0)
        path_row.addWidget(self.path, 1)
        path_row.addWidget(self.browse)
        self._form = form = QFormLayout(self.validate)
        form.addRow("Source", self.source)
        form.addRow("Held out", self.percent)
        form.addRow("Folder", path_row)
        form.addRow("When", self.every)
        form.addRow("", self.val_at_start)
        self.source.currentIndexChanged.connect(self._source_changed)

        self.data_columns = QGroupBox("Hugging Face dataset columns (hf-dataset: data)", self)
        self.data_columns.setToolTip("Which columns of a dataset saved with save_to_disk hold the text, the label "
                                     "and the image; blank: the column of that name")
        self.column_edits: dict[str, QLineEdit] = {}
        columns_form = QFormLayout(self.data_columns)
        for role in COLUMN_ROLES:
            edit = QLineEdit(self.data_columns)
            edit.setPlaceholderText(role)
            edit.setToolTip(f"The column that holds the {role} (--{role}-column); blank: '{role}'")
            self.column_edits[role] = edit
            columns_form.addRow(role.capitalize(), edit)

        self.task = QGroupBox("Loss, metric and input", self)
        self.task.setToolTip("What the run minimises, and what validation reports under its name (the validation "
                             "plot's title); py: runs your function (FUNC(output, target)) after you confirm the file")
        task_form = QFormLayout(self.task)
        self.loss_box, self.loss_code = self._task_row(task_form, "Loss", [(k.label, k.name, k.tooltip) for k in LOSSES.values()])
        self.input_shape = QLineEdit(self.task)
        self.input_shape.setPlaceholderText("images, or the data's (e.g. 1024)")
        self.input_shape.setToolTip("One sample's input shape without the batch (--input-shape): 1024 for audio frames, "
                                    "3,224,224 for images; synthetic data and the cost panel's estimate take it")
        self.metric_box, self.metric_code = self._task_row(
            task_form, "Metric", [(k.label, k.name, "higher is better" if k.higher_is_better else "lower is better")
                                  for k in METRICS.values()])
        task_form.addRow("Input shape", self.input_shape)

        top = QFormLayout()
        top.addRow("Warm-up", self.warmup)
        top.addRow("", self.no_decay)
        top.addRow("", self.tensorboard)
        top.addRow("", self.cache_frozen)
        auto_row = QHBoxLayout()
        auto_row.setContentsMargins(0, 0, 0, 0)
        auto_row.addWidget(self.auto_freeze)
        auto_row.addWidget(self.auto_every)
        auto_row.addWidget(self.auto_threshold)
        auto_row.addWidget(self.auto_max)
        auto_row.addStretch(1)
        top.addRow("", auto_row)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel, self)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.task)
        layout.addWidget(self.validate)
        layout.addWidget(self.data_columns)
        layout.addWidget(buttons)
        self.set_options(options)

    def set_options(self, o: TrainingOptions) -> None:
        """Show ``o`` in the fields.

        Args:
            o: the values.
        """
        self.warmup.setValue(int(o.warmup_steps))
        self.no_decay.setChecked(bool(o.no_decay))
        self.tensorboard.setChecked(bool(o.tensorboard) and self.tensorboard.isEnabled())
        self.cache_frozen.setChecked(bool(o.cache_frozen))
        self.auto_freeze.setChecked(bool(o.auto_freeze))
        self.auto_every.setValue(max(0, int(o.auto_freeze_every)))
        shares = o.auto_freeze_shares()
        self.auto_threshold.setValue(round(shares["auto_freeze_threshold"] * 100))
        self.auto_max.setValue(round(shares["auto_freeze_max"] * 100))
        for w in (self.auto_every, self.auto_threshold, self.auto_max):
            w.setEnabled(bool(o.auto_freeze))
        self.validate.setChecked(bool(o.validate))
        i = self.source.findData(o.val_kind)
        self.source.setCurrentIndex(max(i, 0))
        self.path.setText(o.val_path)
        self.percent.setValue(int(o.val_percent))
        self._source_changed()
        self.every.setValue(int(o.val_every))
        for role, edit in self.column_edits.items():
            edit.setText(o.columns.get(role, ""))
        self._set_task(self.loss_box, self.loss_code, o.loss or "cross_entropy")
        self._set_task(self.metric_box, self.metric_code, o.metric or "accuracy")
        self.val_at_start.setChecked(bool(o.val_at_start))
        self.input_shape.setText(o.input_shape)

    @staticmethod
    def _task_row(form: QFormLayout, label: str, rows: list[tuple[str, str, str]]) -> tuple[QComboBox, QLineEdit]:
        box = QComboBox(form.parentWidget())
        for i, (text, name, tip) in enumerate(rows):
            box.addItem(text, name)
            box.setItemData(i, tip, Qt.ItemDataRole.ToolTipRole)
        box.addItem("Python (py:)…", PY_CHOICE)
        code = QLineEdit(form.parentWidget())
        code.setPlaceholderText("py:file.py:FUNCTION")
        code.setToolTip(f"Your {label.lower()} function: py:FILE.py:FUNC or py:MODULE:FUNC, called as FUNC(output, target)")
        code.setMinimumWidth(code.fontMetrics().horizontalAdvance("x" * 28))
        box.currentIndexChanged.connect(lambda *_: code.setVisible(box.currentData() == PY_CHOICE))
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(box)
        row.addWidget(code, 1)
        form.addRow(label, row)
        return box, code

    @staticmethod
    def _set_task(box: QComboBox, code: QLineEdit, value: str) -> None:
        py = value.strip().lower().startswith("py:")
        i = box.findData(PY_CHOICE if py else value)
        box.setCurrentIndex(max(i, 0))
        code.setText(value if py else "")
        code.setVisible(py)

    @staticmethod
    def _task_value(box: QComboBox, code: QLineEdit) -> str:
        if box.currentData() != PY_CHOICE:
            return str(box.currentData())
        text = code.text().strip()
        return text if not text or text.lower().startswith("py:") else f"py:{text}"

    def options(self) -> TrainingOptions:
        """The values in the fields.

        Returns:
            New options.
        """
        return TrainingOptions(
            warmup_steps=self.warmup.value(),
            no_decay=self.no_decay.isChecked(),
            validate=self.validate.isChecked(),
            val_kind=str(self.source.currentData()),
            val_path=self.path.text().strip(),
            val_percent=self.percent.value(),
            val_every=self.every.value(),
            tensorboard=self.tensorboard.isChecked(),
            cache_frozen=self.cache_frozen.isChecked(),
            auto_freeze=self.auto_freeze.isChecked(),
            auto_freeze_every=self.auto_every.value(),
            auto_freeze_threshold=self.auto_threshold.value() / 100,
            auto_freeze_max=self.auto_max.value() / 100,
            columns={role: text for role, edit in self.column_edits.items() if (text := edit.text().strip())},
            loss=self._task_value(self.loss_box, self.loss_code) or "cross_entropy",
            metric=self._task_value(self.metric_box, self.metric_code) or "accuracy",
            val_at_start=self.val_at_start.isChecked(),
            input_shape=self.input_shape.text().strip(),
        )

    def _source_changed(self, *_: Any) -> None:
        held = self.source.currentData() == HELD_OUT
        self._form.setRowVisible(1, held)
        self._form.setRowVisible(2, not held)
        # a held-out split is validated every N steps (N >= 1); a dataset may be validated at the end only
        self.every.setMinimum(1 if held else 0)
        self.every.setSpecialValueText("" if held else "at the end only")
        self.adjustSize()

    def _browse(self) -> None:
        if self.source.currentData() == "text":  # JSON lines: one file
            path = dialogs.open_file(self, "Choose the validation text file (one JSON object per line)",
                                     self.path.text().strip(), "JSON lines (*.jsonl);;All files (*)")
        else:
            path = dialogs.open_dir(self, "Choose the validation data's folder", self.path.text().strip())
        if path:
            self.path.setText(path)


def options_tooltip(o: TrainingOptions) -> str:
    """The Options… button's tooltip: every option spelled out.

    Args:
        o: the options.

    Returns:
        The text.
    """
    lines = [
        "Warm-up, weight decay on biases and norms, validation",
        f"warm-up: {o.warmup_steps} steps" if o.warmup_steps else "warm-up: none",
        "weight decay on biases/norms: " + ("off" if o.no_decay else "as the WD field"),
    ]
    if not o.validate:
        lines.append("validation: off")
    else:
        source = f"{o.val_percent} % of the training data held out" if o.val_kind == HELD_OUT else f"{o.val_kind}:{o.val_path}"
        lines.append(f"validation: {source}, " + (f"every {o.val_every} steps" if o.val_every else "at the end"))
    lines.append("TensorBoard: " + ("<run folder>/tensorboard" if o.tensorboard else "off"))
    lines.append("frozen-prefix cache: " + ("where exact" if o.cache_frozen else "off"))
    shares = o.auto_freeze_shares()
    every = f"every {o.auto_freeze_every} steps" if o.auto_freeze_every > 0 else "every 5 % of the run's steps"
    lines.append("auto-freeze: " + (f"{every}, threshold {shares['auto_freeze_threshold'] * 100:.0f} %, "
                                    f"at most {shares['auto_freeze_max'] * 100:.0f} % of the blocks" if o.auto_freeze else "off"))
    named = o.named_columns()
    lines.append("hf-dataset columns: " + (", ".join(f"{r} = {c}" for r, c in named.items()) if named else "text, label, image"))
    lines.append(f"loss: {o.loss or 'cross_entropy'}; metric: {o.metric or 'accuracy'}"
                 + ("; validated before the first step too" if o.val_at_start and o.validate else ""))
    return "\n".join(lines)


def _short(spec: str) -> str:
    """``pitch_accuracy`` for ``py:examples/crepe_pitch.py:pitch_accuracy``; table names as they are."""
    return metric_label(spec) if spec.strip().lower().startswith("py:") else spec.strip()

