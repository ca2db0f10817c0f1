"""Real text data from a local file: ``text:PATH.jsonl``, one JSON object per line.

Each line has a ``text`` field and, for classification, a ``label`` field (an integer, or a
string: the sorted distinct strings become classes ``0..C-1``). The text is tokenized with
the tokenizer saved in the model's folder (``tokenizer.json`` / ``tokenizer_config.json`` /
``vocab.txt``), read with ``local_files_only``: nothing is downloaded. Samples are dicts
(``input_ids``, ``attention_mask``, ``labels``) like :class:`SyntheticTextDataset`'s, so
:func:`workbench.core.training.batches.forward_loss` trains on them as ``model(**batch)``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from workbench.core.training.batches import IGNORE_INDEX
from workbench.core.training.data_common import TEXT_TASKS, DataError

__all__ = ["TEXT_FILE_SEQ_LEN", "TOKENIZER_FILES", "JsonlTextDataset", "load_tokenizer", "open_text_dataset", "tokenizer_folder"]

#: Tokens per sample of ``text:`` data (fewer when the model has fewer positions).
TEXT_FILE_SEQ_LEN = 128
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


def _read_lines(path: Path, task: str) -> tuple[list[str], list[Any]]:
    if not path.is_file():
        raise DataError(f"text file {str(path)!r} does not exist; give a .jsonl file with one {{\"text\": ...}} per line")
    texts: list[str] = []
    labels: list[Any] = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{lineno}: not JSON ({exc.msg}); each line must be one JSON object") from exc
            if not isinstance(row, dict) or not isinstance(row.get("text"), str):
                raise DataError(f"{path}:{lineno}: needs a string field 'text'")
            if task == "classification" and not isinstance(row.get("label"), (int, str)):
                raise DataError(f"{path}:{lineno}: classification needs a 'label' (an integer or a string)")
            texts.append(row["text"])
            labels.append(row.get("label"))
    if not texts:
        raise DataError(f"{path} holds no samples")
    return texts, labels


class JsonlTextDataset(Dataset[dict[str, torch.Tensor]]):
    """Tokenized samples of a ``.jsonl`` file.

    Args:
        path: The ``.jsonl`` file.
        tokenizer: A ``transformers`` tokenizer (see :func:`load_tokenizer`).
        seq_len: Tokens per sample (truncated / padded).
        task: ``"classification"``, ``"causal_lm"`` or ``"masked_lm"``; for language
            modelling, ``labels`` are the token ids with padding set to -100.

    Attributes:
        classes: Class names (classification): the label strings, or ``"0".."C-1"``.

    Raises:
        DataError: Missing file, a bad line, an unknown task, or a bad ``seq_len``.
    """

    def __init__(self, path: str | Path, tokenizer: Any, seq_len: int = 128, task: str = "classification") -> None:
        if task not in TEXT_TASKS:
            raise DataError(f"unknown text task {task!r}; use one of {', '.join(TEXT_TASKS)}")
        if not isinstance(seq_len, int) or seq_len < 2:
            raise DataError(f"seq_len must be an integer >= 2, got {seq_len!r}")
        texts, raw = _read_lines(Path(path).expanduser(), task)
        if tokenizer.pad_token is None and tokenizer.eos_token is not None:
            tokenizer.pad_token = tokenizer.eos_token  # GPT-style tokenizers have no pad token
        enc = tokenizer(texts, truncation=True, max_length=seq_len, padding="max_length", return_tensors="pt")
        self.input_ids: torch.Tensor = enc["input_ids"]
        self.attention_mask: torch.Tensor = enc["attention_mask"]
        self.task = task
        if task == "classification":
            if all(isinstance(v, int) for v in raw):
                self.classes = [str(i) for i in range(max(raw) + 1)]
                ids = raw
            else:
                self.classes = sorted({str(v) for v in raw})
                index = {c: i for i, c in enumerate(self.classes)}
                ids = [index[str(v)] for v in raw]
            self.labels = torch.tensor(ids, dtype=torch.long)
        else:
            self.classes = []
            self.labels = self.input_ids.masked_fill(self.attention_mask == 0, IGNORE_INDEX)

    @property
    def num_classes(self) -> int:
        """Number of classes (0 for language modelling)."""
        return len(self.classes)

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.input_ids[index], "attention_mask": self.attention_mask[index],
                "labels": self.labels[index]}


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
