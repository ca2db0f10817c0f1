"""What a model source reports when a model, its weights or a checkpoint cannot be provided."""

from __future__ import annotations

from workbench.core.errors import WorkbenchError

__all__ = ["CheckpointKeyMismatch", "ModelSourceError"]


class ModelSourceError(WorkbenchError):
    """A model, its weights or a checkpoint could not be provided.

    The message is meant for the user as-is (CLI output, GUI dialog): it says what went
    wrong and what to do about it.
    """


class CheckpointKeyMismatch(ModelSourceError, UserWarning):  # noqa: N818 - a warning, named for what it reports
    """A checkpoint loaded with missing or unexpected keys (a warning; an error when strict).

    Issued with :func:`warnings.warn` by a non-strict load; the CLI prints it as one line,
    and ``--strict`` turns it into an error (``warnings.simplefilter("error", ...)``).
    """
