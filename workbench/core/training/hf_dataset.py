"""A Hugging Face ``datasets`` folder on disk: ``hf-dataset:PATH``.

PATH is a folder written by ``Dataset.save_to_disk`` or ``DatasetDict.save_to_disk`` (Arrow
files, ``state.json``, ``dataset_info.json``; a ``DatasetDict`` adds ``dataset_dict.json`` and
one folder per split). It is opened with ``datasets.load_from_disk``, which memory-maps the
Arrow files: samples are read (and tokenized, or decoded and transformed) one at a time in
``__getitem__``, so memory stays bounded whatever the dataset's size.

- Text models (a Hugging Face model with a task head, opened from its folder): the
  ``text`` column (``text_column``) is tokenized with the tokenizer saved in the model's
  folder; classification takes its class from the ``label`` column (``label_column``: a
  ``ClassLabel``, integers, or strings: the sorted distinct strings become classes).
  Language models train on the tokens.
- Image models: the ``image`` column (``image_column``, a ``datasets.Image`` feature) is
  decoded to RGB and transformed; the class is the ``label`` column's.
- Splits: ``train`` (else the first split) for training; ``validation`` / ``valid`` /
  ``val`` / ``test`` for validation. A dataset without one of those is split: a seeded
  random 10% (at least one sample) is held out for validation and never trained on.

Nothing is downloaded and no code from the folder runs: ``load_dataset`` (which runs loading
scripts) is never called. The folder's JSON files are read within the size and nesting limits
of :mod:`workbench.core.safe_json` first; the Arrow files they name must be regular files
inside the folder (no links, pipes or paths that leave it). Every problem is a
:class:`DataError` of one line.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from workbench.core.safe_json import JsonInputError
from workbench.core.safe_json import load as load_json
from workbench.core.training.batches import IGNORE_INDEX
from workbench.core.training.data_common import TEXT_TASKS, DataError
from workbench.core.training.row_limits import MAX_TEXT_CLASSES, check_class_count, check_label, tokenize_text
from workbench.core.training.text_jsonl import TEXT_FILE_SEQ_LEN, load_tokenizer, tokenizer_folder

__all__ = [
    "DEFAULT_COLUMNS",
    "HOLDOUT_FRACTION",
    "VALIDATION_SPLITS",
    "HfDiskDataset",
    "open_hf_dataset",
]

#: Column names used when none are given.
DEFAULT_COLUMNS: dict[str, str] = {"text": "text", "label": "label", "image": "image"}
#: Share held out for validation when the dataset has no validation split.
HOLDOUT_FRACTION = 0.1
#: Split names taken as the validation split, in this order.
VALIDATION_SPLITS: tuple[str, ...] = ("validation", "valid", "val", "test")

_SPLIT_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
_SAVE_HINT = "save it with Dataset.save_to_disk(PATH) or DatasetDict.save_to_disk(PATH)"


# ------------------------------------------------------------------ checking the folder
def _json(path: Path, what: str) -> Any:
    try:
        return load_json(path, what=what)
    except FileNotFoundError:
        raise DataError(f"{path} is missing; {_SAVE_HINT}") from None
    except (JsonInputError, json.JSONDecodeError, OSError) as e:
        raise DataError(f"{what} {path} is unreadable ({str(e).splitlines()[0]}); {_SAVE_HINT}") from None


def _regular_inside(folder: Path, name: Any, what: str) -> Path:
    """``folder/name`` when it is a plain file name of a regular file (no link, no pipe)."""
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name in (".", ".."):
        raise DataError(f"{what} in {folder} names {name!r}, not a file of that folder; {_SAVE_HINT}")
    path = folder / name
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise DataError(f"{path} is missing (named by {what}); the dataset folder is incomplete: {_SAVE_HINT}") from None
    if stat.S_ISLNK(st.st_mode):
        raise DataError(f"{path} is a symbolic link; the Arrow files of a dataset folder must be regular files in it")
    if not stat.S_ISREG(st.st_mode):
        raise DataError(f"{path} is not a regular file (a pipe, device or folder); {_SAVE_HINT}")
    return path


def _check_split_folder(folder: Path) -> None:
    """A ``Dataset.save_to_disk`` folder: ``state.json`` naming regular Arrow files in it."""
    state = _json(folder / "state.json", "dataset state")
    _json(folder / "dataset_info.json", "dataset info")
    files = state.get("_data_files") if isinstance(state, dict) else None
    if not isinstance(files, list) or not files:
        raise DataError(f"{folder / 'state.json'} lists no data files; {_SAVE_HINT}")
    for entry in files:
        _regular_inside(folder, entry.get("filename") if isinstance(entry, dict) else None, "state.json")


def _layout(folder: Path) -> list[str] | None:
    """The split names of a ``DatasetDict`` folder, None for a single ``Dataset`` folder.

    Raises:
        DataError: the folder is not a dataset saved to disk.
    """
    if (folder / "dataset_dict.json").exists():
        info = _json(folder / "dataset_dict.json", "dataset dict")
        splits = info.get("splits") if isinstance(info, dict) else None
        if not isinstance(splits, list) or not splits or not all(isinstance(s, str) for s in splits):
            raise DataError(f"{folder / 'dataset_dict.json'} lists no splits; {_SAVE_HINT}")
        for s in splits:
            if not _SPLIT_NAME.match(s) or s.startswith(".."):
                raise DataError(f"{folder / 'dataset_dict.json'} names the split {s!r}, not a folder name")
            sub = folder / s
            if sub.is_symlink() or not sub.is_dir():
                raise DataError(f"split folder {sub} is missing or not a plain folder; {_SAVE_HINT}")
            _check_split_folder(sub)
        return list(splits)
    if (folder / "state.json").exists():
        _check_split_folder(folder)
        return None
    scripts = sorted(p.name for p in folder.glob("*.py"))
    if scripts:
        raise DataError(
            f"{folder} holds a loading script ({', '.join(scripts[:3])}) and no saved dataset; the workbench never "
            f"runs dataset code: run it yourself, then {_SAVE_HINT}"
        )
    raise DataError(f"{folder} is not a dataset saved to disk (no state.json or dataset_dict.json); {_SAVE_HINT}")


def _open_folder(path: str | os.PathLike[str]) -> tuple[Any, list[str] | None]:
    folder = Path(path).expanduser()
    if not str(path).strip():
        raise DataError(f"hf-dataset needs a folder: use hf-dataset:PATH ({_SAVE_HINT})")
    try:
        st = os.stat(folder)
    except FileNotFoundError:
        raise DataError(f"dataset folder {str(folder)!r} does not exist; {_SAVE_HINT}") from None
    except OSError as e:
        raise DataError(f"dataset folder {str(folder)!r} cannot be read ({e.strerror})") from None
    if not stat.S_ISDIR(st.st_mode):
        raise DataError(f"{str(folder)!r} is not a folder; hf-dataset:PATH names the folder that save_to_disk wrote")
    splits = _layout(folder)
    try:
        str(folder).encode("utf-8")
    except UnicodeEncodeError:
        raise DataError(
            f"the path of the dataset folder {os.fsencode(folder)!r} is not UTF-8, which datasets cannot open; "
            "rename the folder (or link it from a UTF-8 path)"
        ) from None
    try:
        import datasets
    except ImportError:
        raise DataError("hf-dataset data needs the datasets package: pip install 'freeze-workbench[hf]'") from None
    try:
        loaded = datasets.load_from_disk(str(folder), keep_in_memory=False)
    except Exception as e:  # pyarrow and datasets raise many types for a damaged folder
        first = (str(e).splitlines() or [""])[0][:200]
        raise DataError(f"could not read the dataset in {str(folder)!r} ({type(e).__name__}: {first}); {_SAVE_HINT}") from None
    return loaded, splits


# ------------------------------------------------------------------ splits and columns
def _split_of(loaded: Any, splits: list[str] | None, *, train: bool, seed: int) -> tuple[Any, Sequence[int] | None]:
    """The split for training or validation, and the indices of it to use (None: all)."""
    if splits is not None:
        val_name = next((s for s in VALIDATION_SPLITS if s in splits), None)
        rest = [s for s in splits if s != val_name]
        train_name = "train" if "train" in splits else (rest[0] if rest else None)
        if val_name is not None and train_name is not None:
            return loaded[train_name if train else val_name], None
        base = loaded[train_name or val_name]
    else:
        base = loaded
    n = len(base)
    if n < 2:
        raise DataError(f"the dataset has {n} sample(s) and no validation split; it needs at least 2 to hold one out")
    held = max(1, round(n * HOLDOUT_FRACTION))
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    return base, sorted(order[:held] if not train else order[held:])


def _column(ds: Any, name: str, role: str, flag: str) -> Any:
    features = ds.features
    if name not in features:
        cols = ", ".join(sorted(features)) or "none"
        raise DataError(f"the dataset has no {role} column {name!r} (its columns: {cols}); name it with {flag}")
    return features[name]


def _classes(splits: list[Any], name: str) -> tuple[list[str], Callable[[Any], int]]:
    """Class names of a label column over all splits, and the mapping of a value to its index."""
    feature = splits[0].features[name]
    names = getattr(feature, "names", None)
    if names:
        check_class_count(len(names), f"label column {name!r} (a ClassLabel)")
        return [str(n) for n in names], int
    dtype = str(getattr(feature, "dtype", ""))
    values: set[Any] = set()
    for ds in splits:
        values.update(ds.unique(name))
    if dtype.startswith(("int", "uint")):
        if any(v is None or v < 0 for v in values):
            raise DataError(f"label column {name!r} holds negative or missing labels; labels are 0..C-1")
        top = max(values)
        if top >= MAX_TEXT_CLASSES:  # never a class list built up to it
            check_label(top, _row_of(splits, name, top))
        return [str(i) for i in range(top + 1)], int
    if dtype in ("string", "large_string"):
        if None in values:
            raise DataError(f"label column {name!r} has missing labels")
        check_class_count(len(values), f"label column {name!r}")
        classes = sorted(values)
        index = {c: i for i, c in enumerate(classes)}
        return classes, index.__getitem__
    raise DataError(f"label column {name!r} is {dtype or type(feature).__name__}; labels must be integers, strings or a ClassLabel")


def _row_of(splits: list[Any], name: str, value: Any) -> str:
    """Where ``value`` first stands in column ``name``: ``"row R of split 'S'"`` (for messages)."""
    import pyarrow.compute as pc

    for ds in splits:
        try:
            row = pc.index(ds.data.column(name), value).as_py()
        except Exception:  # an index only names the row: the message stands without it
            row = -1
        if row is not None and row >= 0:
            split = getattr(ds, "split", None)
            return f"hf-dataset row {row}" + (f" of split '{split}'" if split else "") + f", column {name!r}"
    return f"hf-dataset column {name!r}"


class HfDiskDataset(Dataset[Any]):
    """Samples of one split of a dataset saved to disk, read one at a time.

    Args:
        ds: a ``datasets.Dataset`` (memory-mapped).
        indices: the rows to use (None: all).
        encode: makes a sample from a row (a dict of the columns).

    Attributes:
        classes: class names (empty for language modelling).
    """

    def __init__(self, ds: Any, indices: Sequence[int] | None, encode: Callable[[dict[str, Any]], Any], classes: list[str]) -> None:
        self._ds = ds
        self._indices = indices
        self._encode = encode
        self.classes = classes

    @property
    def num_classes(self) -> int:
        """Number of classes (0 for language modelling)."""
        return len(self.classes)

    def __len__(self) -> int:
        return len(self._indices) if self._indices is not None else len(self._ds)

    def __getitem__(self, index: int) -> Any:
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        i = int(self._indices[index] if self._indices is not None else index)
        try:
            row = self._ds[i]
        except Exception as e:  # a damaged Arrow record or an image that does not decode
            raise DataError(f"sample {i} of the dataset could not be read ({type(e).__name__}: {str(e)[:120]})") from None
        if isinstance(self._encode, _TextEncoder):
            return self._encode(row, i)  # the row's index names it if its text is cut
        return self._encode(row)

    def __repr__(self) -> str:
        return f"HfDiskDataset({len(self)} samples, {len(self.classes)} classes)"


@dataclass
class _TextEncoder:
    """A row to ``input_ids``, ``attention_mask`` and ``labels`` (picklable for loader workers)."""

    tokenizer: Any
    column: str
    label_column: str
    seq_len: int
    classification: bool
    to_index: Callable[[Any], int]
    cut_said: list[bool] = field(default_factory=lambda: [False])  # the first row cut is said once

    def __call__(self, row: dict[str, Any], index: int | None = None) -> dict[str, torch.Tensor]:
        text = row[self.column]
        where = f"hf-dataset row {index}, column {self.column!r}" if index is not None else f"hf-dataset column {self.column!r}"
        enc = tokenize_text(self.tokenizer, text if isinstance(text, str) else "", self.seq_len, where, self.cut_said)
        ids, mask = enc["input_ids"][0], enc["attention_mask"][0]
        if self.classification:
            labels = torch.tensor(self.to_index(row[self.label_column]))
        else:
            labels = ids.masked_fill(mask == 0, IGNORE_INDEX)
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}


@dataclass
class _ImageEncoder:
    """A row to ``(transformed RGB image, class index)`` (picklable for loader workers)."""

    column: str
    label_column: str
    transform: Callable[[Any], Any] | None
    to_index: Callable[[Any], int]

    def __call__(self, row: dict[str, Any]) -> tuple[Any, int]:
        try:
            img = row[self.column].convert("RGB")
        except Exception as e:
            raise DataError(f"an image of the dataset could not be decoded ({type(e).__name__})") from None
        return (self.transform(img) if self.transform is not None else img), self.to_index(row[self.label_column])


@dataclass
class _ArrayEncoder:
    """A row to ``(float tensor of the input column, target)`` (picklable for loader workers).

    The target is the class index (``to_index``), or a float tensor of the label column
    (regression, multi-label) when ``to_index`` is None.
    """

    column: str
    label_column: str
    to_index: Callable[[Any], int] | None

    def __call__(self, row: dict[str, Any]) -> tuple[torch.Tensor, Any]:
        try:
            x = torch.as_tensor(row[self.column], dtype=torch.float32)
        except (TypeError, ValueError, RuntimeError) as e:
            raise DataError(f"column {self.column!r} holds {type(row[self.column]).__name__}, not an array of numbers "
                            f"({str(e)[:80]}); name a column of arrays with --input-column") from None
        y = row[self.label_column]
        return x, (self.to_index(y) if self.to_index is not None else torch.as_tensor(y, dtype=torch.float32))


def _seq_len(model: Any, want: int | None = None) -> int:
    want = want if want is not None else TEXT_FILE_SEQ_LEN
    config = getattr(model, "config", None)
    max_len = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    return min(want, max_len) if isinstance(max_len, int) and max_len > 1 else want


def open_hf_dataset(
    path: str | os.PathLike[str],
    *,
    task: str | None = None,
    model: Any = None,
    train: bool = True,
    transform: Callable[[Any], Any] | None = None,
    seed: int = 0,
    text_column: str | None = None,
    label_column: str | None = None,
    image_column: str | None = None,
    seq_len: int | None = None,
    input_column: str | None = None,
) -> HfDiskDataset:
    """Open a dataset folder written by ``save_to_disk`` for a model.

    Args:
        path: the folder.
        task: the text task of the model (``"classification"``, ``"causal_lm"``,
            ``"masked_lm"``), or None for an image model.
        model: the text model (its folder's tokenizer and its positions); unused for images.
        train: the training split (False: the validation split or the held-out samples).
        transform: for images: PIL image (RGB) to tensor.
        seed: seed of the held-out split.
        text_column / label_column / image_column: column names (default ``text``,
            ``label``, ``image``).
        seq_len: tokens per sample of text (None: 128), capped at the model's positions.
        input_column: a column of arrays (audio, features) given to the model as a float
            tensor, instead of an image column (None: images).

    Returns:
        Dicts of ``input_ids``, ``attention_mask`` and ``labels`` (text), or
        ``(image tensor, label)`` pairs.

    Raises:
        DataError: the folder, its files, its columns or the model do not fit (one line).
    """
    text_column = text_column or DEFAULT_COLUMNS["text"]
    label_column = label_column or DEFAULT_COLUMNS["label"]
    image_column = image_column or DEFAULT_COLUMNS["image"]
    if task is not None and task not in TEXT_TASKS:
        raise DataError(f"unknown text task {task!r}; use one of {', '.join(TEXT_TASKS)}")
    loaded, splits = _open_folder(path)
    ds, indices = _split_of(loaded, splits, train=train, seed=seed)
    every = [loaded[s] for s in splits] if splits is not None else [loaded]

    if task is not None:
        feature = _column(ds, text_column, "text", "--text-column")
        if str(getattr(feature, "dtype", "")) not in ("string", "large_string"):
            raise DataError(f"column {text_column!r} is {getattr(feature, 'dtype', type(feature).__name__)}, not text; name the text column with --text-column")
        tokenizer = load_tokenizer(tokenizer_folder(model))
        if tokenizer.pad_token is None and tokenizer.eos_token is not None:
            tokenizer.pad_token = tokenizer.eos_token
        seq_len = _seq_len(model, seq_len)
        classes: list[str] = []
        to_index: Callable[[Any], int] = int
        if task == "classification":
            _column(ds, label_column, "label", "--label-column")
            classes, to_index = _classes(every, label_column)

        encode_text = _TextEncoder(tokenizer, text_column, label_column, seq_len, task == "classification", to_index)
        return HfDiskDataset(ds, indices, encode_text, classes)

    if input_column is not None:
        _column(ds, input_column, "input", "--input-column")
        _column(ds, label_column, "label", "--label-column")
        label = ds.features[label_column]
        if type(label).__name__ in ("Sequence", "List", "Array2D") or str(getattr(label, "dtype", "")).startswith("float"):
            return HfDiskDataset(ds, indices, _ArrayEncoder(input_column, label_column, None), [])
        classes, to_index = _classes(every, label_column)
        return HfDiskDataset(ds, indices, _ArrayEncoder(input_column, label_column, to_index), classes)
    feature = _column(ds, image_column, "image", "--image-column")
    if type(feature).__name__ != "Image":
        hint = " (a text column: train a Hugging Face text model on it, --model hf:FOLDER)" if text_column in ds.features else ""
        fix = "name the image column with --image-column"
        if type(feature).__name__ in ("Sequence", "List", "Array2D", "Array3D"):
            hint, fix = " but a column of arrays", f"give it to the model with --input-column {image_column}"
        raise DataError(f"column {image_column!r} is not an image column{hint}; {fix}")
    _column(ds, label_column, "label", "--label-column")
    classes, to_index = _classes(every, label_column)
    return HfDiskDataset(ds, indices, _ImageEncoder(image_column, label_column, transform, to_index), classes)
