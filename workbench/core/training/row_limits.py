"""The limits of text rows, in one place: ``text:PATH.jsonl`` files and ``hf-dataset:`` folders.

Both readers take a row's label and text through these functions, so a hostile row meets the
same rule whichever format holds it:

* an integer label is a class id ``0..MAX_TEXT_CLASSES-1`` (:func:`check_label`): a label of
  300,000,000 is one line naming the row, never a class list built up to it;
* at most :data:`MAX_TEXT_CLASSES` classes (:func:`check_class_count`);
* a text is cut to :func:`text_char_limit` characters before it is tokenized
  (:func:`tokenize_text`): a sample keeps ``seq_len`` tokens, and no tokenizer's token covers
  more than :data:`MAX_CHARS_PER_TOKEN` characters on average, so the cut never changes a
  sample while a 55 MB string is never handed to the tokenizer whole. The first cut row of a
  dataset is said in one line (a :class:`TextCutWarning`).
"""

from __future__ import annotations

import warnings
from typing import Any

from workbench.core.training.data_common import DataError

__all__ = ["MAX_CHARS_PER_TOKEN", "MAX_TEXT_CLASSES", "TextCutWarning", "check_class_count", "check_label",
           "text_char_limit", "tokenize_text"]

#: Most classes of text data (integer labels are ids below it).
MAX_TEXT_CLASSES = 100_000
#: Characters kept per token of ``seq_len`` before tokenizing.
MAX_CHARS_PER_TOKEN = 64


class TextCutWarning(UserWarning):
    """A row's text was cut before tokenizing (said once per dataset)."""


def check_label(label: int, where: str) -> None:
    """Refuse an integer label outside ``0..MAX_TEXT_CLASSES-1``.

    Args:
        label: the label.
        where: the row, for the message (``"data.jsonl:7"``, ``"row 5 of split 'train'"``).

    Raises:
        DataError: the label is out of range (one line naming the row).
    """
    if not 0 <= label < MAX_TEXT_CLASSES:
        shown = f"{label:,}" if abs(label) < 10**30 else f"{str(label)[:12]}… ({len(str(label))} digits)"
        raise DataError(f"{where}: label {shown} is out of range; integer labels are class ids 0..{MAX_TEXT_CLASSES - 1:,}")


def check_class_count(count: int, where: str) -> None:
    """Refuse more than :data:`MAX_TEXT_CLASSES` distinct labels.

    Args:
        count: how many distinct labels.
        where: the data, for the message.

    Raises:
        DataError: too many (one line).
    """
    if count > MAX_TEXT_CLASSES:
        raise DataError(f"{where}: more than {MAX_TEXT_CLASSES:,} distinct labels; is 'label' a class?")


def text_char_limit(seq_len: int) -> int:
    """Characters of a text kept before tokenizing, for samples of ``seq_len`` tokens.

    Args:
        seq_len: tokens per sample.

    Returns:
        ``seq_len * MAX_CHARS_PER_TOKEN``.
    """
    return seq_len * MAX_CHARS_PER_TOKEN


def tokenize_text(tokenizer: Any, text: str, seq_len: int, where: str, said: list[bool]) -> Any:
    """Tokenize one row's text, cut to :func:`text_char_limit` characters first.

    Args:
        tokenizer: a ``transformers`` tokenizer.
        text: the row's text.
        seq_len: tokens per sample (truncated and padded to it).
        where: the row, for the message.
        said: ``[False]`` per dataset: set once the first cut row has been said.

    Returns:
        The tokenizer's output (``return_tensors="pt"``).
    """
    limit = text_char_limit(seq_len)
    if len(text) > limit:
        if not said[0]:
            said[0] = True
            warnings.warn(TextCutWarning(
                f"{where}: text of {len(text):,} characters cut to its first {limit:,} before tokenizing (a sample "
                f"keeps {seq_len} tokens); later rows are cut the same way without a word"), stacklevel=2)
        text = text[:limit]
    return tokenizer(text, truncation=True, max_length=seq_len, padding="max_length", return_tensors="pt")
