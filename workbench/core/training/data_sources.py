"""The data-source table: one row per place a run's data can come from.

=================  ======================================  ==========================
source             spec                                    items
=================  ======================================  ==========================
synthetic          ``synthetic``, ``synthetic:N``          generated images (or tokens,
                                                           or ``input_shape`` tensors)
imagefolder        ``imagefolder:PATH``                    ``(image, class)``
cifar10 ... stl10  ``cifar10:PATH``                        ``(image, class)``
text               ``text:PATH.jsonl``                     token dicts (text models)
hf-dataset         ``hf-dataset:PATH``                     images, tokens or arrays
py                 ``py:FILE.py:FUNC``, ``py:MODULE:FUNC``  your ``(input, target)`` items
=================  ======================================  ==========================

Each :class:`DataSource` row says how to open the data (``builder``), how the app offers it
(``label``, ``placeholder``, ``browse``, ``in_combo``, ``text``), which ``hf-dataset:`` columns
it reads (``columns``) and how an exported script opens it (``script``). The training setup,
the app's Data combo and the exporter iterate the table: a new source is one row and its
builder. A source that ``runs_code`` (``py``) runs only when the caller named it
(:mod:`workbench.core.training.py_code`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from workbench.core.training.data_common import DataError

if TYPE_CHECKING:  # pragma: no cover - typing only
    from torch.utils.data import Dataset

__all__ = ["DATA_SOURCES", "DataRequest", "DataSource", "data_source_of", "make_dataset", "open_data"]


@dataclass
class DataRequest:
    """What a builder needs to open a spec for a run.

    Attributes:
        spec: the whole spec (``"imagefolder:/data/pets"``).
        arg: the part after ``KIND:`` (``"/data/pets"``), stripped.
        image_size / num_classes / channels: the images the model takes; synthetic classes.
        train: the training split (False: validation/test).
        transform: a transform for image files (None: the default one).
        seed / length: seed of generated data and of a subset; samples (None: all).
        model: the model the data feeds (text models get tokens).
        columns: ``hf-dataset:`` columns (``text_column``, ``label_column``, ``image_column``,
            ``input_column``).
        seq_len: tokens per sample for a text model.
        input_shape: one sample's shape for synthetic data (None: images or tokens).
        origin: what file named the spec (code is then refused); None: the caller.
    """

    spec: str
    arg: str
    image_size: int
    num_classes: int
    train: bool = True
    transform: Callable[[Any], Any] | None = None
    seed: int = 0
    length: int | None = None
    channels: int = 3
    model: Any = None
    columns: dict[str, str | None] = field(default_factory=dict)
    seq_len: int | None = None
    input_shape: tuple[int, ...] | None = None
    origin: str | None = None


@dataclass(frozen=True)
class DataSource:
    """One row of :data:`DATA_SOURCES`.

    Attributes:
        key: the spec's ``KIND`` (``"imagefolder"``).
        label: what the app's Data combo shows.
        placeholder: the app's path field hint.
        browse: how the app picks its argument: ``"none"`` (no argument), ``"folder"``,
            ``"file"`` or ``"code"`` (a ``.py`` file shown and confirmed before it runs).
        builder: opens the data for a :class:`DataRequest`.
        script: the exported script's code that opens the data (a ``dataset = ...`` line
            from the spec's argument), or None when the script trains on random data.
        needs_arg: the spec needs ``KIND:ARG``.
        in_combo: the app offers it for image (and other non-text) models.
        text: the app offers it for text models.
        columns: the ``TrainConfig`` fields of the ``hf-dataset:`` columns it reads.
        runs_code: opening it runs the user's code.
        file_filter: the app's file dialog filter (``browse="file"``/``"code"``).
    """

    key: str
    label: str
    placeholder: str
    browse: Literal["none", "folder", "file", "code"]
    builder: Callable[[DataRequest], Dataset[Any]]
    script: Callable[[str], str] | None = None
    needs_arg: bool = True
    in_combo: bool = True
    text: bool = False
    columns: tuple[str, ...] = ()
    runs_code: bool = False
    file_filter: str = ""


# ------------------------------------------------------------------ builders (data.py's helpers: the
# exported script inlines their source, so they keep their names there)
def _synthetic(req: DataRequest) -> Dataset[Any]:
    from workbench.core.training import data as wdata

    n = req.length if req.length is not None else wdata.SYNTHETIC_DEFAULT_LENGTH
    if req.arg:
        try:
            n = int(req.arg)
        except ValueError:
            n = -1
        if n < 1:
            raise DataError(f"bad synthetic size in {req.spec!r}; use synthetic:N with N a positive integer")
        if req.length is not None:
            n = min(n, req.length)
    offset = 0 if req.train else wdata._VAL_INDEX_OFFSET
    if req.model is not None and wdata.text_task_of(req.model) is not None:
        return wdata.synthetic_for_model(req.model, n, seed=req.seed, index_offset=offset,
                                         seq_len=req.seq_len if req.seq_len is not None else wdata.SYNTHETIC_SEQ_LEN)
    shape = req.input_shape
    if shape is not None and len(shape) != 3:  # audio frames, features: tensors of that shape
        return wdata.SyntheticTensorDataset(n, shape, req.num_classes, seed=req.seed, index_offset=offset)
    channels, size = (shape[0], (shape[1], shape[2])) if shape is not None else (req.channels, req.image_size)
    return wdata.SyntheticImageDataset(n, size, req.num_classes, channels=channels, seed=req.seed, index_offset=offset,
                                       transform=req.transform)


def _image_transform(req: DataRequest, source_channels: int) -> Callable[[Any], Any]:
    from workbench.core.training import data as wdata

    base = req.transform if req.transform is not None else wdata.default_transform(req.image_size, channels=req.channels)
    return wdata._with_channels(base, source_channels=source_channels, channels=req.channels)


def _imagefolder(req: DataRequest) -> Dataset[Any]:
    from workbench.core.training import data as wdata

    ds = wdata._imagefolder(Path(req.arg).expanduser(), train=req.train, transform=_image_transform(req, 3))
    return wdata._limit(ds, req.length, req.seed)


def _torchvision(kind: str) -> Callable[[DataRequest], Dataset[Any]]:
    def build(req: DataRequest) -> Dataset[Any]:
        from workbench.core.training import data as wdata

        grayscale = wdata._TV_DATASETS[kind][2]
        ds = wdata._torchvision_dataset(kind, Path(req.arg).expanduser(), train=req.train,
                                            transform=_image_transform(req, 1 if grayscale else 3))
        return wdata._limit(ds, req.length, req.seed)

    return build


def _text(req: DataRequest) -> Dataset[Any]:
    from workbench.core.training import data as wdata

    return wdata._limit(wdata._text_file(req.spec, req.model, req.seq_len), req.length, req.seed)


def _hf_dataset(req: DataRequest) -> Dataset[Any]:
    from workbench.core.training import data as wdata
    from workbench.core.training.hf_dataset import open_hf_dataset

    unknown = sorted(set(req.columns) - set(_HF_COLUMNS))
    if unknown:
        raise DataError(f"unknown column option(s) {', '.join(unknown)}; use {', '.join(_HF_COLUMNS)}")
    task = wdata.text_task_of(req.model) if req.model is not None else None
    cols = {k: v for k, v in req.columns.items() if k != "input_column"}
    extra = {"input_column": req.columns["input_column"]} if req.columns.get("input_column") else {}
    hf = open_hf_dataset(req.arg, task=task, model=req.model, train=req.train, transform=_image_transform(req, 3),
                         seed=req.seed, seq_len=req.seq_len, **cols, **extra)
    return wdata._limit(hf, req.length, req.seed)


def _py(req: DataRequest) -> Dataset[Any]:
    from workbench.core.training.user_data import load_user_data

    data = load_user_data(req.spec, origin=req.origin)
    if not req.train and data.val is not None:
        return data.val
    return data


# ------------------------------------------------------------------ exported-script hooks
def _py_script(arg: str) -> str:
    target, _, func = arg.rpartition(":")
    if target.endswith(".py"):
        return ("import importlib.util\n"
                f"_spec = importlib.util.spec_from_file_location('user_data', {target!r})\n"
                "_module = importlib.util.module_from_spec(_spec)\n_spec.loader.exec_module(_module)\n"
                f"dataset = getattr(_module, {func!r})()  # a dataset, or (train, val)\n")
    return f"import importlib\ndataset = getattr(importlib.import_module({target!r}), {func!r})()  # a dataset, or (train, val)\n"


def _imagefolder_script(arg: str) -> str:
    return ("from torchvision import datasets, transforms\n"
            f"dataset = datasets.ImageFolder({arg!r}, transform=transforms.Compose([transforms.Resize(256), "
            "transforms.CenterCrop(224), transforms.ToTensor()]))\n")


_HF_COLUMNS = ("text_column", "label_column", "image_column", "input_column")

DATA_SOURCES: dict[str, DataSource] = {s.key: s for s in (
    DataSource("synthetic", "Synthetic", "", "none", _synthetic, needs_arg=False, text=True),
    DataSource("imagefolder", "Image folder", "folder…", "folder", _imagefolder, script=_imagefolder_script),
    *(DataSource(kind, label, "folder…", "folder", _torchvision(kind)) for kind, label in (
        ("cifar10", "CIFAR-10"), ("cifar100", "CIFAR-100"), ("mnist", "MNIST"), ("fashionmnist", "Fashion-MNIST"),
        ("svhn", "SVHN"), ("stl10", "STL-10"))),
    DataSource("text", "Text (JSONL)", "file.jsonl…", "file", _text, in_combo=False, text=True,
               file_filter="JSON lines (*.jsonl *.json);;All files (*)"),
    DataSource("hf-dataset", "HF dataset (save_to_disk)", "folder…", "folder", _hf_dataset, columns=_HF_COLUMNS),
    DataSource("py", "Python (py:)…", "file.py:FUNCTION", "code", _py, script=_py_script, runs_code=True,
               file_filter="Python files (*.py);;All files (*)"),
)}

_FORMS = ("synthetic, synthetic:N, imagefolder:PATH, cifar10:PATH, cifar100:PATH, mnist:PATH, fashionmnist:PATH, "
          "svhn:PATH, stl10:PATH, text:PATH.jsonl, hf-dataset:PATH, py:FILE.py:FUNC")


def data_source_of(spec: str) -> DataSource | None:
    """The row a spec opens with, None for an unknown kind.

    Args:
        spec: a data spec.

    Returns:
        The row.
    """
    kind = spec.strip().partition(":")[0].strip().lower() if isinstance(spec, str) else ""
    return DATA_SOURCES.get(kind)


def open_data(req: DataRequest) -> Dataset[Any]:
    """Open the data a request's spec names, through its row.

    Args:
        req: the request (``spec`` and ``arg`` set).

    Returns:
        The dataset.

    Raises:
        DataError: an unknown kind, a missing argument, or what the builder raises.
    """
    source = data_source_of(req.spec)
    if source is None:
        raise DataError(f"unknown dataset spec {req.spec!r}; valid forms: {_FORMS}")
    if source.needs_arg and not req.arg:
        what = {"folder": "a folder", "file": "a file", "code": "a function"}.get(source.browse, "an argument")
        example = "py:FILE.py:FUNC" if source.runs_code else f"{source.key}:PATH"
        raise DataError(f"dataset spec {req.spec!r} needs {what}: use {example}")
    return source.builder(req)


def make_dataset(
    spec: str,
    *,
    image_size: int,
    num_classes: int,
    train: bool = True,
    transform: Callable[[Any], Any] | None = None,
    seed: int = 0,
    length: int | None = None,
    channels: int = 3,
    model: Any = None,
    columns: dict[str, str | None] | None = None,
    seq_len: int | None = None,
    input_shape: tuple[int, ...] | None = None,
    origin: str | None = None,
) -> Dataset[Any]:
    """Open a dataset from a spec string (see the module docstring for the forms).

    Each form is a row of :data:`DATA_SOURCES`.

    Args:
        spec: ``"synthetic"``, ``"synthetic:N"``, ``"imagefolder:PATH"``,
            ``"<cifar10|cifar100|mnist|fashionmnist|svhn|stl10>:PATH"`` or ``"text:PATH.jsonl"``.
        image_size: Square side of the images fed to the model.
        num_classes: Classes of the synthetic data (file datasets have their own).
        train: Training split (``False``: validation/test split).
        transform: Transform for file datasets; defaults to :func:`default_transform`.
            For synthetic data it is applied to the generated tensor when given.
        seed: Seed of the synthetic data and of the subset chosen by ``length``.
        length: Number of samples (synthetic), or a deterministic random subset of a file
            dataset; ``None`` for all.
        channels: Channels the model expects; grayscale datasets are converted to it.
        model: The model to be fed: synthetic data for a text model is token ids within its
            vocabulary (:func:`synthetic_for_model`) instead of images; ``text:`` data is
            tokenized with the tokenizer of its folder.
        columns: for ``hf-dataset:`` data, ``text_column`` / ``label_column`` /
            ``image_column`` (None or absent: ``text``, ``label``, ``image``).
        seq_len: tokens per sample for a text model (capped at its position embeddings);
            None: :data:`SYNTHETIC_SEQ_LEN` for synthetic tokens, ``TEXT_FILE_SEQ_LEN`` for
            ``text:`` and ``hf-dataset:`` data.
        input_shape: one sample's shape of synthetic data (``(1024,)`` audio frames,
            ``(3, 64, 64)`` images); None: images of ``image_size``.
        origin: what file named the spec: a ``py:`` spec is then refused (nothing runs).
        A map-style dataset yielding ``(image_tensor, label)``, or dicts of token tensors
        (synthetic data for a text model, ``text:`` data).

    Raises:
        DataError: Unknown spec, bad N, missing folder or dataset files; ``text:`` data
            for a model that is not a Hugging Face text model or has no tokenizer.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise DataError(f"empty dataset spec; use one of: {_FORMS}")
    if length is not None and (not isinstance(length, int) or length < 1):
        raise DataError(f"length must be a positive integer or None, got {length!r}")
    arg = spec.strip().partition(":")[2].strip()
    return open_data(DataRequest(
        spec=spec.strip(), arg=arg, image_size=image_size, num_classes=num_classes, train=train, transform=transform,
        seed=seed, length=length, channels=channels, model=model, columns=dict(columns or {}), seq_len=seq_len,
        input_shape=input_shape, origin=origin,
    ))
