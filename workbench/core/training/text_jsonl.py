"""Real text data from a local file: ``text:PATH.jsonl``, one JSON object per line.

Each line has a ``text`` field and, for classification, a ``label`` field (an integer, or a
string: the sorted distinct strings become classes ``0..C-1``). The text is tokenized with
the tokenizer saved in the model's folder (``tokenizer.json`` / ``tokenizer_config.json`` /
``vocab.txt``), read with ``local_files_only``: nothing is downloaded. Samples are dicts
(``input_ids``, ``attention_mask``, ``labels``) like :class:`SyntheticTextDataset`'s, so
:func:`workbench.core.training.batches.forward_loss` trains on them as ``model(**batch)``.

The file is streamed: one pass checks every line (UTF-8, JSON, labels in range, at most
:data:`MAX_LINE_BYTES` per line) and keeps 16 bytes per line; samples are tokenized when a
batch asks for them (``tests/benchmarks/bench_text_jsonl_memory.py`` measures the memory),
each text cut first to ``seq_len`` x 64 characters. Labels and texts meet the limits of
:mod:`workbench.core.training.row_limits`, shared with ``hf-dataset:``.
"""

from __future__ import annotations

import json
import os
import stat
from array import array
from pathlib import Path
from typing import Any, BinaryIO

import torch
from torch.utils.data import Dataset

from workbench.core import safe_json
from workbench.core.training.batches import IGNORE_INDEX
from workbench.core.training.data_common import TEXT_TASKS, DataError
from workbench.core.training.row_limits import MAX_TEXT_CLASSES, check_class_count, check_label, tokenize_text

__all__ = ["MAX_LINE_BYTES", "MAX_TEXT_CLASSES", "TEXT_FILE_SEQ_LEN", "TOKENIZER_FILES", "JsonlTextDataset", "load_tokenizer", "open_text_dataset", "tokenizer_folder"]

#: Tokens per sample of ``text:`` data (fewer when the model has fewer positions).
TEXT_FILE_SEQ_LEN = 128
#: Longest line of a ``text:`` file, in bytes (a longer one is refused, naming the line).
MAX_LINE_BYTES = 1 << 20
#: Files that show a folder holds a tokenizer.
TOKENIZER_FILES: tuple[str, ...] = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json")


def tokenizer_folder(model: Any) -> Path:
    """The folder a ``transformers`` model was opened from (its config's ``name_or_path``).

    Args:
        model: The model (``hf:FOLDER`` models, or any model loaded with ``from_pretrained(FOLDER)``).

    Returns:
        The folder.

    Raises:
        DataError: The model was not opened from a local folder.
    """
    config = getattr(model, "config", None)
    name = str(getattr(config, "name_or_path", "") or "")
    if not name or not Path(name).expanduser().is_dir():
        raise DataError(
            "text:PATH.jsonl is tokenized with the tokenizer saved in the model's folder, and this model was not "
            "opened from a folder; open it as hf:FOLDER (config.json and the tokenizer files)"
        )
    return Path(name).expanduser()


def load_tokenizer(folder: str | Path) -> Any:
    """The tokenizer saved in a model folder, read offline.

    Args:
        folder: The Hugging Face model folder.

    Returns:
        A ``transformers`` tokenizer.

    Raises:
        DataError: No tokenizer files in the folder, transformers missing, or unreadable files.
    """
    path = Path(folder).expanduser()
    if not any((path / f).is_file() for f in TOKENIZER_FILES):
        raise DataError(
            f"no tokenizer in {str(path)!r} (none of {', '.join(TOKENIZER_FILES)}); "
            "save it there with tokenizer.save_pretrained(FOLDER)"
        )
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise DataError("text data needs transformers: pip install 'freeze-workbench[hf]'") from exc
    try:
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True, trust_remote_code=False)
    except Exception as exc:
        raise DataError(f"could not read the tokenizer in {str(path)!r}: {type(exc).__name__}: {exc}") from exc


def _open_regular(path: Path) -> BinaryIO:
    """Open a regular file for reading without blocking (a FIFO or a device is refused)."""
    if not path.exists():
        raise DataError(f"text file {str(path)!r} does not exist; give a .jsonl file with one {{\"text\": ...}} per line")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise DataError(f"cannot read text file {str(path)!r} ({e.strerror or e}); check the path") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise DataError(f"text file {str(path)!r} is not a regular file (a folder, device, pipe or socket); give a .jsonl file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _parse_line(raw: bytes, where: str, task: str) -> tuple[str, Any]:
    """One line as ``(text, label)``; every problem is a :class:`DataError` naming ``where``."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{where}: not UTF-8 text (byte {e.start} of the line); is this a binary file?") from None
    try:
        row = safe_json.loads(line, what=where)
    except json.JSONDecodeError as exc:
        raise DataError(f"{where}: not JSON ({exc.msg}); each line must be one JSON object") from None
    except safe_json.JsonInputError as exc:
        raise DataError(str(exc)) from None
    if not isinstance(row, dict) or not isinstance(row.get("text"), str):
        raise DataError(f"{where}: needs a string field 'text'")
    label = row.get("label")
    if task != "classification":
        return row["text"], None
    if isinstance(label, bool) or not isinstance(label, (int, str)):
        raise DataError(f"{where}: classification needs a 'label' (an integer or a string), got {json.dumps(label)[:40]}")
    if isinstance(label, int):
        check_label(label, where)
    return row["text"], label


class JsonlTextDataset(Dataset[dict[str, torch.Tensor]]):
    """Samples of a ``.jsonl`` file, streamed: one pass checks every line and keeps only where
    each line starts and its label (16 bytes per line); a sample is read and tokenized when
    it is asked for.

    Limits (each broken one is a one-line :class:`DataError` naming the line): a regular
    file (no FIFO, device or folder), lines of at most :data:`MAX_LINE_BYTES` bytes, UTF-8,
    JSON nested at most 64 deep, integer labels ``0..MAX_TEXT_CLASSES-1`` and at most
    :data:`MAX_TEXT_CLASSES` distinct string labels.

    Args:
        path: The ``.jsonl`` file.
        tokenizer: A ``transformers`` tokenizer (see :func:`load_tokenizer`).
        seq_len: Tokens per sample (truncated / padded).
        task: ``"classification"``, ``"causal_lm"`` or ``"masked_lm"``; for language
            modelling, ``labels`` are the token ids with padding set to -100.

    Attributes:
        classes: Class names (classification): the label strings, or ``"0".."C-1"``.
        labels: Class id of each sample (classification; empty for language modelling).

    Raises:
        DataError: Missing file, not a regular file, a bad line, an unknown task, or a bad
            ``seq_len``.
    """

    def __init__(self, path: str | Path, tokenizer: Any, seq_len: int = 128, task: str = "classification") -> None:
        if task not in TEXT_TASKS:
            raise DataError(f"unknown text task {task!r}; use one of {', '.join(TEXT_TASKS)}")
        if not isinstance(seq_len, int) or seq_len < 2:
            raise DataError(f"seq_len must be an integer >= 2, got {seq_len!r}")
        self.path = Path(path).expanduser()
        self.task = task
        self.seq_len = seq_len
        self._offsets = array("q")
        self._lines = array("q")
        self.classes: list[str] = []
        self.labels = self._scan()
        if tokenizer.pad_token is None and tokenizer.eos_token is not None:
            tokenizer.pad_token = tokenizer.eos_token  # GPT-style tokenizers have no pad token
        self.tokenizer = tokenizer
        self._file: BinaryIO | None = None
        self._file_pid: int | None = None
        self._cut_said = [False]  # the first row cut before tokenizing is said once

    def _scan(self) -> torch.Tensor:
        """One bounded pass: offsets, line numbers and label ids; the classes."""
        raw_ids = array("q")  # an int label, or -(1 + index) of a string label
        strings: dict[str, int] = {}
        with _open_regular(self.path) as f:
            lineno, offset = 0, 0
            while True:
                raw = f.readline(MAX_LINE_BYTES + 1)
                if not raw:
                    break
                lineno += 1
                where = f"{self.path}:{lineno}"
                if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                    raise DataError(
                        f"{where}: line longer than {MAX_LINE_BYTES:,} bytes; split it or shorten the text "
                        "(a sample keeps at most seq_len tokens anyway)"
                    )
                start, offset = offset, offset + len(raw)
                if not raw.strip():
                    continue
                _text, label = _parse_line(raw, where, self.task)
                self._offsets.append(start)
                self._lines.append(lineno)
                if isinstance(label, str):
                    if label not in strings:
                        check_class_count(len(strings) + 1, where)
                        strings[label] = len(strings)
                    raw_ids.append(-1 - strings[label])
                elif label is not None:
                    raw_ids.append(label)
        if not self._offsets:
            raise DataError(f"{self.path} holds no samples")
        if self.task != "classification":
            return torch.empty(0, dtype=torch.long)
        ids = torch.frombuffer(raw_ids, dtype=torch.int64).clone() if raw_ids else torch.empty(0, dtype=torch.long)
        if not strings:
            self.classes = [str(i) for i in range(int(ids.max()) + 1)]
            return ids
        ints = sorted(int(v) for v in ids[ids >= 0].unique().tolist())
        self.classes = sorted({str(v) for v in ints} | set(strings))
        check_class_count(len(self.classes), str(self.path))
        index = {c: i for i, c in enumerate(self.classes)}
        by_string = torch.tensor([index[s] for s in strings], dtype=torch.long)
        by_int = torch.zeros((ints[-1] + 1) if ints else 1, dtype=torch.long)  # ints < MAX_TEXT_CLASSES
        for v in ints:
            by_int[v] = index[str(v)]
        neg = ids < 0
        return torch.where(neg, by_string[(-1 - ids).clamp(min=0) * neg], by_int[ids.clamp(min=0)])

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_file"] = state["_file_pid"] = None  # each DataLoader worker opens its own handle
        return state

    def _read(self, index: int) -> str:
        if self._file is None or self._file_pid != os.getpid():
            self._file, self._file_pid = _open_regular(self.path), os.getpid()
        self._file.seek(self._offsets[index])
        raw = self._file.readline(MAX_LINE_BYTES + 1)
        text, _ = _parse_line(raw, f"{self.path}:{self._lines[index]} (changed since it was opened?)", "causal_lm")
        return text

    @property
    def num_classes(self) -> int:
        """Number of classes (0 for language modelling)."""
        return len(self.classes)

    def __len__(self) -> int:
        return len(self._offsets)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if not -len(self) <= index < len(self):
            raise IndexError(f"sample {index} of {len(self)}")
        index %= len(self)
        enc = tokenize_text(self.tokenizer, self._read(index), self.seq_len, f"{self.path}:{self._lines[index]}",
                            self._cut_said)
        input_ids, mask = enc["input_ids"][0], enc["attention_mask"][0]
        labels = self.labels[index] if self.task == "classification" else input_ids.masked_fill(mask == 0, IGNORE_INDEX)
        return {"input_ids": input_ids, "attention_mask": mask, "labels": labels}


def open_text_dataset(spec: str, model_folder: str | Path, *, seq_len: int = 128, task: str = "classification") -> JsonlTextDataset:
    """Open ``text:PATH.jsonl`` with the tokenizer of a model folder.

    Args:
        spec: ``"text:PATH.jsonl"``.
        model_folder: The Hugging Face model folder whose tokenizer is used.
        seq_len: Tokens per sample.
        task: The model's task (see :func:`workbench.core.training.data.text_task_of`).

    Returns:
        The dataset.

    Raises:
        DataError: Not a ``text:`` spec, or any error of :func:`load_tokenizer` and
            :class:`JsonlTextDataset`.
    """
    kind, _, arg = spec.strip().partition(":")
    if kind.lower() != "text" or not arg.strip():
        raise DataError(f"text dataset spec {spec!r} must be text:PATH.jsonl")
    return JsonlTextDataset(arg.strip(), load_tokenizer(model_folder), seq_len, task)
