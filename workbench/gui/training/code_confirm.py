"""Ask before a run runs your code: ``py:`` data, loss or metric (the file and the function's first lines).

A ``py:`` spec in the training panel or its options may come from the settings of an earlier session
(a file): it runs only after this dialog showed the file and the user chose *Run*, as ``py:`` models
do (:func:`~workbench.gui.model_source.confirm_code`). A spec confirmed once is not asked again in
the session while its file is unchanged.
"""

from __future__ import annotations

import os
from html import escape

from PySide6.QtWidgets import QWidget

from workbench.core.models.py_models import code_preview
from workbench.core.training.config import TrainConfig
from workbench.core.training.py_code import is_py_spec, py_target_file
from workbench.gui import dialogs

__all__ = ["RUN_TASK_CODE_TITLE", "code_specs", "confirm_task_code", "forget_confirmations", "is_confirmed"]

#: The dialog's title.
RUN_TASK_CODE_TITLE = "Run your code?"

_WHAT = {"data": "data", "val": "validation data", "loss": "loss", "metric": "metric"}
_confirmed: set[tuple[str, int, int]] = set()


def code_specs(config: TrainConfig) -> list[tuple[str, str]]:
    """The ``py:`` specs a config runs: ``(field, spec)`` for data, val, loss and metric.

    Args:
        config: the run's settings.

    Returns:
        The pairs, in that order.
    """
    return [(f, v) for f in _WHAT if is_py_spec(v := getattr(config, f))]


def _key(spec: str) -> tuple[str, int, int]:
    path = py_target_file(spec)
    try:
        st = os.stat(path) if path is not None else None
    except OSError:
        st = None
    return spec.strip(), st.st_mtime_ns if st else 0, st.st_size if st else -1


def is_confirmed(spec: str) -> bool:
    """Whether a ``py:`` spec was confirmed in this session and its file is unchanged since (it may run)."""
    return _key(spec) in _confirmed


def forget_confirmations() -> None:
    """Forget every confirmation of this session: each spec is shown again before it runs."""
    _confirmed.clear()


def confirm_task_code(parent: QWidget | None, config: TrainConfig) -> bool:
    """Show each ``py:`` spec of a run not confirmed yet; True when the user chose *Run* for all.

    Args:
        parent: the panel.
        config: the run's settings.

    Returns:
        True when the run may start (no code, or every spec confirmed).
    """
    for field, spec in code_specs(config):
        key = _key(spec)
        if key in _confirmed:
            continue
        name = spec.strip()[3:].strip()
        try:
            path, lines = code_preview(name)
        except Exception as e:  # a spec without :FUNC: the run refuses it in one line
            path, lines = name, f"({e})"
        func = name.rpartition(":")[2]
        question = (f"<p>This run's {_WHAT[field]} runs <b>{escape(func)}()</b> from<br><tt>{escape(path, quote=False)}"
                    f"</tt><br>with your rights. Only run code you trust.</p><pre>{escape(lines, quote=False)}</pre>")
        if dialogs.ask(parent, RUN_TASK_CODE_TITLE, question, ("Run", "Cancel"), "Cancel") != "Run":
            return False
        _confirmed.add(key)
    return True
