"""Source text of the exported script's real text data: ``text:PATH.jsonl`` and ``hf-dataset:PATH``
(its text column) for a Hugging Face text model, opened, split and tokenized as the workbench does.

It mirrors :mod:`workbench.core.training.text_jsonl` and :mod:`workbench.core.training.hf_dataset`:
the tokenizer saved in the model's folder (read offline; GPT-style tokenizers pad with their end
token), each text cut to ``seq_len`` x :data:`~workbench.core.training.row_limits.MAX_CHARS_PER_TOKEN`
characters and tokenized to ``seq_len`` tokens (truncated, padded), labels as the workbench numbers
them (sorted distinct strings, integers, or a ``ClassLabel``'s names), language-model labels the
tokens with padding set to -100; a dataset folder's ``train`` and validation splits, or its seeded
10% held out (the workbench's own code, copied at export). The workbench's checks of hostile files
(sizes, nesting, links) are not in the script: it opens the files the run opened.
"""

from __future__ import annotations

import inspect

from workbench.core.training import hf_dataset as whf
from workbench.core.training import row_limits as wrows
from workbench.core.training import text_jsonl as wtext
from workbench.core.training.batches import IGNORE_INDEX

__all__ = ["HF_IMAGE_CODE", "TEXT_DATA_CODE"]

_SPLIT_OF = inspect.getsource(whf._split_of).rstrip("\n")

#: A dataset folder's splits and label classes, as the workbench takes them.
_HF_SPLITS_CODE = f'''

HOLDOUT_FRACTION = {whf.HOLDOUT_FRACTION!r}  # of a dataset folder without a validation split
VALIDATION_SPLITS = {whf.VALIDATION_SPLITS!r}


def label_classes(every: list, name: str):
    """The classes of a label column over every split, and a value's class id."""
    feature = every[0].features[name]
    names = getattr(feature, "names", None)
    if names:
        return [str(n) for n in names], int
    values = set()
    for ds in every:
        values.update(ds.unique(name))
    if str(getattr(feature, "dtype", "")).startswith(("int", "uint")):
        return [str(i) for i in range(max(values) + 1)], int
    classes = sorted(values)
    index = {{c: i for i, c in enumerate(classes)}}
    return classes, index.__getitem__


{_SPLIT_OF}


def open_hf_split(path: Path, train: bool):
    """A save_to_disk folder (memory-mapped): the split to use, the rows of it, and every split."""
    import datasets

    loaded = datasets.load_from_disk(str(path), keep_in_memory=False)
    splits = list(loaded) if isinstance(loaded, datasets.DatasetDict) else None
    ds, indices = _split_of(loaded, splits, train=train, seed=SEED)
    every = [loaded[s] for s in splits] if splits is not None else [loaded]
    return ds, (indices if indices is not None else range(len(ds))), every
'''

TEXT_DATA_CODE = f'''

class DataError(ValueError):
    """The data cannot be opened."""


TEXT_TASKS = ("classification", "causal_lm", "masked_lm")
MAX_CHARS_PER_TOKEN = {wrows.MAX_CHARS_PER_TOKEN!r}  # a text is cut to seq_len x this many characters before tokenizing
IGNORE_INDEX = {IGNORE_INDEX!r}
TEXT_FILE_SEQ_LEN = {wtext.TEXT_FILE_SEQ_LEN!r}


def load_tokenizer(model: nn.Module):
    """The tokenizer saved in the model's folder, read offline; GPT-style tokenizers pad with their end token."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(Path(model.config.name_or_path).expanduser()), local_files_only=True,
                                              trust_remote_code=False)
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


class TextSamples(Dataset):
    """Rows tokenized when a batch asks for them: input_ids, attention_mask and labels (the class id, or the
    tokens with padding set to IGNORE_INDEX for language modelling). rows[i] is a text, or (rows, index) reads it."""

    def __init__(self, rows, labels: list[int] | None, classes: list[str], tokenizer, seq_len: int, read=None) -> None:
        self.rows, self.labels, self.classes = rows, labels, classes
        self.tokenizer, self.seq_len, self.read = tokenizer, seq_len, read

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict:
        text = self.rows[index] if self.read is None else self.read(index)
        text = text if isinstance(text, str) else ""
        enc = self.tokenizer(text[:self.seq_len * MAX_CHARS_PER_TOKEN], truncation=True, max_length=self.seq_len,
                             padding="max_length", return_tensors="pt")
        ids, mask = enc["input_ids"][0], enc["attention_mask"][0]
        labels = torch.tensor(self.labels[index]) if self.labels is not None else ids.masked_fill(mask == 0, IGNORE_INDEX)
        return {{"input_ids": ids, "attention_mask": mask, "labels": labels}}


def open_jsonl(path: Path, model: nn.Module, seq_len: int) -> TextSamples:
    """text:PATH.jsonl: one JSON object per line, its "text" (and "label" for classification); blank lines skipped.
    String labels: the sorted distinct labels are the classes; integers only: classes 0..max."""
    texts, raw = [], []
    with open(path, "rb") as f:
        for line in f:
            if not line.strip():
                continue
            row = json.loads(line.decode("utf-8"))
            texts.append(row["text"])
            if TASK == "classification":
                raw.append(row["label"])
    labels, classes = None, []
    if TASK == "classification":
        if all(isinstance(v, int) for v in raw):
            labels, classes = raw, [str(i) for i in range(max(raw) + 1)]
        else:
            classes = sorted({{str(v) for v in raw}})
            index = {{c: i for i, c in enumerate(classes)}}
            labels = [index[str(v)] for v in raw]
    return TextSamples(texts, labels, classes, load_tokenizer(model), seq_len)


def open_hf_dataset(path: Path, train: bool, model: nn.Module, seq_len: int) -> TextSamples:
    """hf-dataset:PATH (a save_to_disk folder, memory-mapped): TEXT_COLUMN tokenized, LABEL_COLUMN's class."""
    ds, rows, every = open_hf_split(path, train)
    labels, classes = None, []
    if TASK == "classification":
        classes, to_index = label_classes(every, LABEL_COLUMN)
        column = ds[LABEL_COLUMN]
        labels = [to_index(column[int(i)]) for i in rows]
    return TextSamples(rows, labels, classes, load_tokenizer(model), seq_len,
                       read=lambda index: ds[int(rows[index])][TEXT_COLUMN])


def make_dataset(model: nn.Module, train: bool, image_size: int, seq_len: int | None) -> Dataset:
    """The run's training data, or its validation data (VAL: a text file, or a dataset folder's validation split)."""
    kind, _, arg = (DATA if train else VAL).partition(":")
    path = Path(arg.strip()).expanduser()
    if kind.strip().lower() == "text":
        return open_jsonl(path, model, seq_len)
    return open_hf_dataset(path, train, model, seq_len)
''' + _HF_SPLITS_CODE

#: ``hf-dataset:PATH`` of an image model: IMAGE_COLUMN decoded to RGB with the run's transforms, or
#: INPUT_COLUMN's arrays as float tensors (after the image-file code, whose ``open_data`` and
#: transforms it uses).
HF_IMAGE_CODE = _HF_SPLITS_CODE + '''

class HfRows(Dataset):
    """Rows of a dataset folder: (IMAGE_COLUMN as RGB, transformed, or INPUT_COLUMN as a float tensor;
    LABEL_COLUMN's class id, or its values as a float tensor when it holds numbers or sequences)."""

    def __init__(self, ds, rows, classes: list[str], to_index, transform) -> None:
        self.ds, self.rows, self.classes, self.to_index, self.transform = ds, rows, classes, to_index, transform

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int):
        row = self.ds[int(self.rows[index])]
        if INPUT_COLUMN is not None:
            x = torch.as_tensor(row[INPUT_COLUMN], dtype=torch.float32)
        else:
            x = self.transform(row[IMAGE_COLUMN].convert("RGB"))
        y = row[LABEL_COLUMN]
        return x, (self.to_index(y) if self.to_index is not None else torch.as_tensor(y, dtype=torch.float32))


def make_dataset(model: nn.Module, train: bool, image_size: int, seq_len: int | None) -> Dataset:
    """The run's training data, or its validation data (a dataset folder's validation split or held-out share)."""
    spec = DATA if train else VAL
    kind, _, arg = spec.partition(":")
    if kind.strip().lower() != "hf-dataset":
        return open_data(spec, train, image_size)
    ds, rows, every = open_hf_split(Path(arg.strip()).expanduser(), train)
    label = ds.features[LABEL_COLUMN]
    if INPUT_COLUMN is not None and (type(label).__name__ in ("Sequence", "List", "Array2D")
                                     or str(getattr(label, "dtype", "")).startswith("float")):
        return HfRows(ds, rows, [], None, None)  # targets as they are (regression, multi-label)
    classes, to_index = label_classes(every, LABEL_COLUMN)
    transform = _with_channels(weights_transforms(image_size) or default_transform(image_size), source_channels=3, channels=3)
    return HfRows(ds, rows, classes, to_index, transform)
'''
