"""Where a model comes from, as data: :class:`ModelSpec` (source, name, weights, checkpoint, head).

What the engine, the window and the command line pass around; :meth:`ModelSpec.build` builds
it through :mod:`workbench.core.models.zoo` (torchvision, checkpoints) or the source table in
:mod:`workbench.core.models.sources` (timm, Hugging Face, your own code).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from workbench.core.models.checkpoints import load_checkpoint, load_weights_into
from workbench.core.models.heads import current_num_classes, replace_head
from workbench.core.models.source_errors import ModelSourceError
from workbench.core.models.sources import (
    CHECKPOINT_SOURCE,
    DEFAULT_SOURCE,
    SOURCES,
    architecture_source,
    build_from_source,
    check_code_origin,
    parse_model_spec,
)
from workbench.core.models.torchvision_models import build_model

if TYPE_CHECKING:  # pragma: no cover - typing only
    from torch import nn

__all__ = ["FROM_A_FILE", "ModelSpec"]

#: The default ``origin`` of :meth:`ModelSpec.from_dict`: a spec read from data was named by a file.
FROM_A_FILE = "a model block read from a file"


def _table_sources() -> tuple[str, ...]:
    """Sources built by the source table's ``build`` (the rows other than torchvision)."""
    return tuple(key for key in SOURCES if key != DEFAULT_SOURCE)


def _spec_sources() -> tuple[str, ...]:
    return (DEFAULT_SOURCE, CHECKPOINT_SOURCE, *_table_sources())


@dataclass
class ModelSpec:
    """A serialisable description of where a model comes from.

    Attributes:
        source: ``"torchvision"`` (registry ``name`` + ``weights``, optionally a checkpoint
            loaded on top), ``"checkpoint"`` (architecture ``name`` or the checkpoint's own
            ``arch`` entry, weights from ``checkpoint``), or ``"timm"``, ``"hf"``, ``"py"``
            (see :mod:`workbench.core.models.sources`). A torchvision ``name`` written as a
            prefixed spec (``"timm:vit_tiny_patch16_224"``) moves to its source.
        name: Architecture name within the source.
        weights: torchvision weights name, or ``None``.
        checkpoint: Path of a checkpoint file, or ``None``.
        num_classes: Final number of classes (head replaced if different), or ``None``.
        origin: ``None`` when the user named the spec (a command-line argument, a Python
            call, a confirmed dialog); otherwise what named it (``"plan file x.json"``). A
            spec that runs code (``py``) is built only without an origin (see
            :func:`~workbench.core.models.sources.check_code_origin`). Not part of
            :meth:`to_dict`, so no file can clear it.
    """

    source: str = DEFAULT_SOURCE
    name: str | None = None
    weights: str | None = None
    checkpoint: str | None = None
    num_classes: int | None = None
    origin: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.source == DEFAULT_SOURCE and isinstance(self.name, str) and ":" in self.name:
            self.source, self.name = parse_model_spec(self.name)
        self.validate()

    def validate(self) -> None:
        """Check the fields are consistent.

        Raises:
            ModelSourceError: Unknown source, or a missing name/checkpoint.
        """
        if self.source not in _spec_sources():
            raise ModelSourceError(
                f"model source {self.source!r} is unknown; use one of {', '.join(_spec_sources())}"
            )
        if self.source == DEFAULT_SOURCE and not self.name:
            raise ModelSourceError(f"a {DEFAULT_SOURCE} model spec needs a name, e.g. '{SOURCES[DEFAULT_SOURCE].placeholder}'")
        if self.source in _table_sources() and not self.name:
            raise ModelSourceError(f"a {self.source} model spec needs a name, e.g. {self.source}:NAME")
        if self.source == CHECKPOINT_SOURCE and not self.checkpoint:
            raise ModelSourceError("a checkpoint model spec needs the checkpoint file path")
        if self.num_classes is not None and (
            isinstance(self.num_classes, bool)
            or not isinstance(self.num_classes, int)
            or self.num_classes < 1
        ):
            raise ModelSourceError(
                f"num_classes must be a positive integer or null, got {self.num_classes!r}"
            )

    @property
    def architecture_source(self) -> str:
        """The key of the source-table row that builds the spec's architecture: its own source,
        or the default source (torchvision) for a checkpoint spec, whose architecture is a
        torchvision name (the spec's or the checkpoint's ``arch``)."""
        return architecture_source(self.source)

    @property
    def from_checkpoint_file(self) -> bool:
        """Whether this is a checkpoint spec: the file holds the weights and, when the spec
        has no name, the architecture (its ``arch`` entry); the spec's ``weights`` are not read."""
        return self.source == CHECKPOINT_SOURCE

    def weights_preset(self) -> Any | None:
        """The registry entry the spec's weights name (torchvision's weights enum member, see
        the source row's ``weights_preset``), or None.

        Returns:
            The entry, or None when the architecture's row has no registry weights or the
            spec names none of its entries.
        """
        row = SOURCES[self.architecture_source]
        return row.weights_preset(self.name, self.weights) if row.weights_preset is not None else None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (all fields, ``None`` included).

        Returns:
            ``{"source", "name", "weights", "checkpoint", "num_classes"}``.
        """
        return {"source": self.source, "name": self.name, "weights": self.weights,
                "checkpoint": self.checkpoint, "num_classes": self.num_classes}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, origin: str | None = FROM_A_FILE) -> ModelSpec:
        """Build a spec from :meth:`to_dict` output (or a plan file's ``model`` block).

        Keys other than the fields (e.g. a plan's ``fingerprint``) are ignored.

        Args:
            data: The mapping.
            origin: What named it (see the ``origin`` attribute). The default says "a
                file", so a spec read from data never runs code; pass ``None`` only for a
                mapping the user wrote (a Python call, a command-line argument).

        Returns:
            The spec.

        Raises:
            ModelSourceError: Not a mapping, a field of the wrong type, or inconsistent fields.
        """
        if not isinstance(data, Mapping):
            raise ModelSourceError(f"a model spec must be a mapping, got {type(data).__name__}")
        kwargs: dict[str, Any] = {}
        for key in ("source", "name", "weights", "checkpoint"):
            value = data.get(key)
            if value is not None and not isinstance(value, str):
                raise ModelSourceError(
                    f"model spec field {key!r} must be a string or null, got {value!r}"
                )
            if value is not None:
                kwargs[key] = value
        if "num_classes" in data:
            kwargs["num_classes"] = data["num_classes"]
        return cls(**kwargs, origin=origin)

    def head_classes(self) -> int | None:
        """Outputs of the classification head the spec builds, read from its structure alone.

        Returns:
            The class count (``num_classes`` when the spec sets it), or None without a
            recognisable head.

        Raises:
            ModelSourceError: the spec cannot be built.
        """
        if self.num_classes is not None:
            return self.num_classes
        model = self.build(allow_download=False, meta=self.checkpoint is None)
        return current_num_classes(model)

    def build(
        self, allow_download: bool = True, *, trust_pickle: bool = False, meta: bool = False
    ) -> nn.Module:
        """Build the model: registry model, checkpoint weights, then the final head.

        Args:
            allow_download: Passed to :func:`build_model`.
            trust_pickle: Passed to :func:`load_checkpoint`.
            meta: Build on the ``meta`` device; ignored when a checkpoint is given.

        Returns:
            The model (see :meth:`build_named`).

        Raises:
            CodeFromFileError: A spec that runs code (``py``) with an ``origin``: a file named it.
            ModelSourceError: Any failure of :func:`build_model`, :func:`load_checkpoint`
                or of the model source.
        """
        return self.build_named(allow_download, trust_pickle=trust_pickle, meta=meta)[0]

    def build_named(
        self, allow_download: bool = True, *, trust_pickle: bool = False, meta: bool = False
    ) -> tuple[nn.Module, str | None]:
        """:meth:`build`, with the name of the model's architecture: the spec's, or, for a
        checkpoint spec without one, the architecture the file names (what decides the run's
        image size and what the exported script builds).

        Args:
            allow_download: Passed to :func:`build_model`.
            trust_pickle: Passed to :func:`load_checkpoint` (never stored in the spec, so a
                shared spec/plan file cannot switch it on).
            meta: Build on the ``meta`` device (shapes only, nothing allocated or read);
                ignored when a checkpoint is given.

        Returns:
            ``(model, name)``: the model, on CPU (or on the meta device), and its architecture's
            name (None when neither the spec nor the file names one).

        Raises:
            CodeFromFileError: A spec that runs code (``py``) with an ``origin``: a file named it.
            ModelSourceError: Any failure of :func:`build_model`, :func:`load_checkpoint`
                or of the model source.
        """
        self.validate()
        if not self.from_checkpoint_file:
            check_code_origin(self.source, self.name, self.origin)
        name = self.name
        if self.from_checkpoint_file:
            assert self.checkpoint is not None
            loaded = load_checkpoint(self.checkpoint, arch=self.name, trust_pickle=trust_pickle)
            model, name = loaded.model, self.name or loaded.arch
        else:
            assert self.name is not None
            if self.checkpoint is None and (meta or self.source in _table_sources()):
                return build_from_source(
                    self.source, self.name, self.weights, self.num_classes,
                    meta=meta, allow_download=allow_download, trust_pickle=trust_pickle,
                ), name
            if self.checkpoint is None:
                return build_model(
                    self.name, self.weights, self.num_classes, allow_download=allow_download
                ), name
            if self.source in _table_sources():
                model = build_from_source(
                    self.source, self.name, self.weights,
                    allow_download=allow_download, trust_pickle=trust_pickle,
                )
            else:
                model = build_model(self.name, self.weights, allow_download=allow_download)
            load_weights_into(model, self.checkpoint, trust_pickle=trust_pickle)
        if self.num_classes is not None:
            replace_head(model, self.num_classes)
        return model, name
