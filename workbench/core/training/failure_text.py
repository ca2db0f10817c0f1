"""How the training engine words what went wrong: one line each, saying what to do."""

from __future__ import annotations

import math

import torch

from workbench.core.errors import first_line

__all__ = ["hint", "nonfinite_stop_message", "nonfinite_word", "oom_message", "step_failed_message"]

_HINTS = (
    ("out of bounds", "does the model's head have as many outputs as the dataset has classes? (num_classes / --num-classes)"),
    ("shapes cannot be multiplied", "does the image size fit the model? (image_size / --image-size)"),
    ("size mismatch", "does the image size fit the model? (image_size / --image-size)"),
    ("but got input of size", "does the input fit the model? give one sample's shape with --input-shape (e.g. 1024 "
     "for audio frames) or train on --data"),
    ("does not require grad", "nothing that the loss depends on is trainable; unfreeze a module on the path to the loss"),
)


def hint(e: BaseException) -> str:
    """``"; <what to check>"`` for errors with a common cause, else ``""``.

    Args:
        e: the exception.

    Returns:
        The hint, to append to a message.
    """
    text = str(e)
    for needle, what in _HINTS:
        if needle in text:
            return "; " + what
    return ""


def oom_message(e: BaseException, step: int, batch_size: int, device: torch.device) -> str:
    """The message for running out of memory in a step.

    Args:
        e: the out-of-memory error.
        step: the step that failed.
        batch_size: its batch size.
        device: the device.

    Returns:
        One line with the ways out (smaller batch, bf16, more frozen).
    """
    return (
        f"out of memory at step {step} with batch size {batch_size} on {device}: "
        f"{first_line(e)}; lower the batch size (e.g. {max(1, batch_size // 2)}), use amp bf16, "
        "or freeze more of the model"
    )


def step_failed_message(e: BaseException, step: int) -> str:
    """The message for an exception raised by a step.

    Args:
        e: the exception.
        step: the step that failed.

    Returns:
        One line, with a hint for common causes.
    """
    return f"step {step} failed: {type(e).__name__}: {first_line(e)}{hint(e)}"


def nonfinite_word(loss: float, distributed: bool) -> str:
    """How a non-finite loss is named in messages and events.

    Args:
        loss: the loss value (this rank's).
        distributed: under torchrun, another rank may be the one with the bad loss.

    Returns:
        ``"nan"``, ``"inf"``, ``"-inf"`` or ``"not finite on some rank"``.
    """
    if distributed:
        return "not finite on some rank"
    return "nan" if math.isnan(loss) else ("inf" if loss > 0 else "-inf")


def nonfinite_stop_message(word: str, step: int) -> str:
    """The message for a run stopped by a non-finite loss (``on_nonfinite="stop"``).

    Args:
        word: :func:`nonfinite_word`.
        step: the step.

    Returns:
        One line with the ways out.
    """
    return (
        f"loss is {word} at step {step}; the optimizer step was not taken. Lower the learning "
        "rate, use amp bf16 instead of fp16, or set on_nonfinite='skip' (--on-nonfinite skip)"
    )
