"""The training panel's fields as one table: each :class:`PanelField` row ties a
:class:`~workbench.core.training.config.TrainConfig` field (the name ``set_values`` takes) to
the panel's widget and to the ``QSettings`` key that keeps it between sessions. The panel's
restore, save, ``set_values`` and ``config`` iterate :data:`PANEL_FIELDS`; the settings behind
Options… iterate the fields of :class:`~workbench.gui.training.options_dialog.TrainingOptions`.

:class:`StepSetup` is what one training step's memory depends on (device, batch, input size,
precision, tokens): the cost panel's estimate and the Suggest… dialog read it from the panel.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from PySide6.QtWidgets import QCheckBox, QComboBox, QLineEdit, QSpinBox, QWidget

from workbench.core.training.config import MAX_SEQ_LEN, ConfigError, TrainConfig
from workbench.core.training.data_sources import DATA_SOURCES
from workbench.gui.torch_ready import known_devices
from workbench.gui.training.options_dialog import COLUMN_ROLES, HELD_OUT, TrainingOptions

__all__ = ["OPTION_LIMITS", "PANEL_FIELDS", "PanelField", "StepSetup", "default_image_size", "image_size_applies",
           "options_from_settings", "options_settings", "parse_float", "show_value", "widget_value"]


def _same(v: Any) -> Any:
    return v


def parse_float(text: str, name: str, hint: str) -> float:
    """A number typed in a field, finite and >= 0.

    Args:
        text: what was typed.
        name: the field's name (the message says it).
        hint: an example value.

    Returns:
        The number.

    Raises:
        ConfigError: not a number, or negative or not finite.
    """
    try:
        value = float(text.strip())
    except ValueError:
        raise ConfigError(f"{name} {text.strip()!r} is not a number; type one like {hint}") from None
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"{name} must be a finite number >= 0, got {text.strip()!r}")
    return value


@dataclass(frozen=True)
class PanelField:
    """One field of the training panel.

    Attributes:
        config: its ``TrainConfig`` field and ``set_values`` name; ``""`` for a part of a
            composite value the panel builds itself (the data's path, the run's length kind).
        widget: the panel's attribute holding its widget (a combo box's value is its item data).
        setting: its key under ``training/`` in ``QSettings``.
        default: the value without a setting (a function: computed when read).
        to_config: the widget's value as the config takes it (may raise ``ConfigError``).
        to_widget: a config value as the widget shows it.
        model: ``"image"`` or ``"text"``: only a model of that kind takes it (otherwise the
            config's default); ``""``: every model.
    """

    config: str
    widget: str
    setting: str
    default: Any
    to_config: Callable[[Any], Any] = _same
    to_widget: Callable[[Any], Any] = _same
    model: str = ""

    def default_value(self) -> Any:
        """The default (computed when it is a function)."""
        return self.default() if callable(self.default) else self.default


def default_image_size() -> int:
    """The default input side: 64 px without an accelerator (quick demo runs), else 0 (the model's own).

    64 as well while the devices are not known yet (start-up): the panel sets it again once they are.
    """
    known = known_devices()
    return 0 if known is not None and known.accelerator else 64


#: The panel's fields, in the order they are restored.
PANEL_FIELDS: tuple[PanelField, ...] = (
    PanelField("", "data_box", "data", "synthetic"),  # with data_path: TrainConfig.data
    PanelField("", "data_path", "data_path", ""),
    PanelField("image_size", "image_size", "image_size", default_image_size, lambda v: v or None,
               lambda v: int(v or 0), model="image"),
    PanelField("seq_len", "seq_len", "seq_len", 0, lambda v: v or None,
               lambda v: min(MAX_SEQ_LEN, max(0, int(v or 0))), model="text"),
    PanelField("batch_size", "batch_size", "batch_size", 16, to_widget=int),
    PanelField("lr", "lr", "lr", "1e-3", lambda t: parse_float(t, "learning rate", "1e-3"), lambda v: repr(float(v))),
    PanelField("weight_decay", "wd", "weight_decay", "0", lambda t: parse_float(t, "weight decay", "0.01"),
               lambda v: repr(float(v))),
    PanelField("", "length_kind", "length_kind", "steps"),  # with length: TrainConfig.steps or .epochs
    PanelField("", "length", "length", 200, to_widget=int),
    PanelField("device", "device_box", "device", "auto", to_widget=lambda v: "cuda:0" if str(v) == "cuda" else str(v)),
    PanelField("amp", "amp_box", "amp", "off", to_widget=str),
    PanelField("channels_last", "channels_last", "channels_last", False, to_widget=bool, model="image"),
    PanelField("scheduler", "schedule_box", "scheduler", "constant", to_widget=str),
)


def image_size_applies(data_kind: str, options: TrainingOptions) -> bool:
    """Whether the run resizes images to the panel's image size: the training data, or the validation
    data of Options…, is image files or generated images. Your own code's items (``py:``), a text
    file, an ``hf-dataset:`` input column of arrays and generated samples of Options…' input shape
    come as they are.

    Args:
        data_kind: the chosen data's kind (a key of the data-source table).
        options: the options (input shape, ``hf-dataset:`` columns, validation data).

    Returns:
        True when the image size says anything about the run.
    """
    def resized(kind: str) -> bool:
        source = DATA_SOURCES.get(kind)
        if source is None or source.runs_code or source.key == "text":
            return False
        if source.key == "synthetic":
            return not options.input_shape.strip()
        if source.key == "hf-dataset":
            return not options.columns.get("input", "").strip()
        return True

    validation = options.validate and options.val_kind != HELD_OUT and resized(options.val_kind)
    return resized(data_kind) or validation


#: The largest count a setting may hold (Qt's spin boxes take 32-bit ints).
_MAX_INT = 2**31 - 1
#: Bounds of the numeric options read from settings: ``{field: (least, most or None: any 32-bit int)}``.
OPTION_LIMITS: dict[str, tuple[int, int | None]] = {
    "warmup_steps": (0, None), "val_percent": (1, 50), "val_every": (0, None), "auto_freeze_every": (0, None),
}


def widget_value(w: QWidget) -> Any:
    """A field widget's value: a combo box's item data, a spin box's number, a line's text, a box's check.

    Args:
        w: the widget.

    Returns:
        The value.

    Raises:
        TypeError: a widget of another kind.
    """
    if isinstance(w, QComboBox):
        return w.currentData()
    if isinstance(w, QSpinBox):
        return w.value()
    if isinstance(w, QLineEdit):
        return w.text()
    if isinstance(w, QCheckBox):
        return w.isChecked()
    raise TypeError(f"no field value for a {type(w).__name__}")


def show_value(w: QWidget, value: Any) -> None:
    """Show a value in a field widget (a combo box keeps its item when no item has that data).

    Args:
        w: the widget.
        value: the value, as :func:`widget_value` returns it.

    Raises:
        TypeError: a widget of another kind.
    """
    if isinstance(w, QComboBox):
        i = w.findData(value)
        if i >= 0:
            w.setCurrentIndex(i)
    elif isinstance(w, QSpinBox):
        w.setValue(max(w.minimum(), min(w.maximum(), int(value))))  # a huge number overflows Qt's int
    elif isinstance(w, QLineEdit):
        w.setText(str(value))
    elif isinstance(w, QCheckBox):
        w.setChecked(bool(value))
    else:
        raise TypeError(f"cannot show a value in a {type(w).__name__}")


#: Options whose saved value the run's config checks (:meth:`TrainConfig.validate`): a value it refuses is ignored.
_CONFIG_CHECKED: tuple[str, ...] = ("auto_freeze_threshold", "auto_freeze_max")


def _config_refusal(name: str, value: Any) -> str | None:
    """Why the run's config refuses ``value`` for its field ``name`` (None: it takes it)."""
    try:
        TrainConfig(**{name: value}).validate()
    except ConfigError as e:
        return str(e).partition(": ")[2] or str(e)
    return None


def options_from_settings(get: Callable[[str, Any, type], Any], val_kinds: frozenset[str],
                          ignored: list[str] | None = None) -> TrainingOptions:
    """The options kept in settings: one key per field of :class:`TrainingOptions` (one per role of
    ``columns``), numbers kept within :data:`OPTION_LIMITS`, an auto-freeze share the run's config
    refuses and an unknown validation kind replaced by the default; every other setting is kept.

    Args:
        get: ``get(key, default, type)``: the setting, or the default when missing or unreadable.
        val_kinds: the validation kinds the panel offers.
        ignored: when given, one line is appended per saved setting not taken as it was (which, and why).

    Returns:
        The options.
    """
    d = TrainingOptions()
    notes = ignored if ignored is not None else []
    values: dict[str, Any] = {}
    for f in dataclasses.fields(TrainingOptions):
        if f.name == "columns":
            values["columns"] = {r: c for r in COLUMN_ROLES if (c := get(f"{r}_column", "", str).strip())}
            continue
        default = getattr(d, f.name)
        value = get(f.name, default, type(default))
        if f.name in OPTION_LIMITS:
            low, high = OPTION_LIMITS[f.name]
            kept = max(low, min(_MAX_INT if high is None else high, value))
            if kept != value:
                notes.append(f"saved option {f.name} = {value!r} is out of its range {low}..{high or _MAX_INT}: {kept} is used")
            value = kept
        elif f.name in _CONFIG_CHECKED and (why := _config_refusal(f.name, value)) is not None:
            notes.append(f"saved option {f.name} = {value!r} was ignored ({why}): the default {default!r} is used")
            value = default
        values[f.name] = value
    if values["val_kind"] not in val_kinds:
        notes.append(f"saved option val_kind = {values['val_kind']!r} is not a validation source here: "
                     f"the default {d.val_kind!r} is used")
        values["val_kind"] = d.val_kind
    return TrainingOptions(**values)


def options_settings(options: TrainingOptions) -> dict[str, Any]:
    """The settings that keep ``options`` (the keys :func:`options_from_settings` reads).

    Args:
        options: the options.

    Returns:
        ``{key: value}``.
    """
    out: dict[str, Any] = {}
    for f in dataclasses.fields(TrainingOptions):
        if f.name == "columns":
            out.update({f"{r}_column": options.columns.get(r, "") for r in COLUMN_ROLES})
        else:
            out[f.name] = getattr(options, f.name)
    return out


@dataclass(frozen=True)
class StepSetup:
    """What one training step's memory depends on, as the panel is set now.

    Attributes:
        device: ``auto``, ``cpu``, ``cuda:N`` or ``mps``.
        batch_size: samples per step.
        image_size: the input side (None: the model's own; None too where the run resizes no
            images: a text model, your code's items, arrays, generated samples of a set shape).
        amp: ``off``, ``bf16`` or ``fp16``.
        tokens: tokens per sample the run feeds a text model (the chosen data's length, capped at
            the model's positions); None: not a text model.
    """

    device: str
    batch_size: int
    image_size: int | None
    amp: str
    tokens: int | None

    def config_fields(self) -> Mapping[str, Any]:
        """The ``TrainConfig`` fields of this setup (``batch_size``, ``image_size``, ``seq_len``: the
        tokens, ``device``, ``amp``)."""
        return {"batch_size": self.batch_size, "image_size": self.image_size, "seq_len": self.tokens,
                "device": self.device, "amp": self.amp}
