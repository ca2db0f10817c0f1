"""Every modal dialog the window opens goes through these functions.

Keeping them in one module gives tests one place to intercept them (``monkeypatch`` the
functions here), so no real dialog ever blocks a test.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtWidgets import QDialog, QFileDialog, QInputDialog, QMessageBox, QWidget

__all__ = ["ask", "choose", "error", "info", "open_dir", "open_file", "run_dialog", "save_file"]


#: The file dialogs' filter for freeze plans.
PLAN_FILTER = "Freeze plans (*.json);;All files (*)"


def error(parent: QWidget | None, title: str, message: str, details: str = "") -> None:
    """Show an error: what went wrong and what to do.

    Args:
        parent: the window.
        title: dialog title (``"Cannot open plan"``).
        message: the error text (several lines allowed).
        details: a traceback or long listing behind "Show Details…".
    """
    box = QMessageBox(QMessageBox.Icon.Critical, title, message, QMessageBox.StandardButton.Ok, parent)
    if details:
        box.setDetailedText(details)
    box.exec()


def info(parent: QWidget | None, title: str, message: str) -> None:
    """Show an information message.

    Args:
        parent: the window.
        title: dialog title.
        message: the text.
    """
    QMessageBox.information(parent, title, message)


def ask(parent: QWidget | None, title: str, question: str, choices: Sequence[str], default: str) -> str:
    """Ask a question with named answers.

    Args:
        parent: the window.
        title: dialog title.
        question: the question.
        choices: button labels, e.g. ``("Save", "Discard", "Cancel")``; a label
            ``"Cancel"`` is also what closing the dialog answers.
        default: the label of the default button.

    Returns:
        The chosen label.
    """
    box = QMessageBox(QMessageBox.Icon.Question, title, question, QMessageBox.StandardButton.NoButton, parent)
    buttons = {}
    for label in choices:
        role = QMessageBox.ButtonRole.RejectRole if label == "Cancel" else QMessageBox.ButtonRole.AcceptRole
        if label in ("Discard", "Don't Save"):
            role = QMessageBox.ButtonRole.DestructiveRole
        buttons[box.addButton(label, role)] = label
        if label == default:
            box.setDefaultButton(list(buttons)[-1])
    box.exec()
    clicked = box.clickedButton()
    fallback = "Cancel" if "Cancel" in choices else default
    return next((label for button, label in buttons.items() if button is clicked), fallback)


def open_file(parent: QWidget | None, caption: str, directory: str, filters: str) -> str:
    """Ask for an existing file.

    Args:
        parent: the window.
        caption: dialog title.
        directory: starting folder.
        filters: ``"Freeze plans (*.json);;All files (*)"``.

    Returns:
        The chosen path, or ``""`` when cancelled.
    """
    path, _ = QFileDialog.getOpenFileName(parent, caption, directory, filters)
    return path


def open_dir(parent: QWidget | None, caption: str, directory: str) -> str:
    """Ask for an existing folder.

    Args:
        parent: the window.
        caption: dialog title.
        directory: starting folder.

    Returns:
        The chosen folder, or ``""`` when cancelled.
    """
    return QFileDialog.getExistingDirectory(parent, caption, directory)


def save_file(parent: QWidget | None, caption: str, directory: str, filters: str) -> str:
    """Ask for a file name to write.

    Args:
        parent: the window.
        caption: dialog title.
        directory: starting folder or suggested file path.
        filters: file type filters.

    Returns:
        The chosen path, or ``""`` when cancelled.
    """
    path, _ = QFileDialog.getSaveFileName(parent, caption, directory, filters)
    return path


def choose(parent: QWidget | None, title: str, label: str, items: Sequence[str], current: str = "") -> str | None:
    """Pick one of ``items``.

    Args:
        parent: the window.
        title: dialog title.
        label: the prompt.
        items: the choices.
        current: the preselected item.

    Returns:
        The chosen item, or None when cancelled.
    """
    index = list(items).index(current) if current in items else 0
    item, ok = QInputDialog.getItem(parent, title, label, list(items), index, False)
    return item if ok else None


def run_dialog(dialog: QDialog) -> bool:
    """Run one of the app's own dialogs modally.

    Args:
        dialog: the dialog, filled in by the caller.

    Returns:
        True when it was accepted.
    """
    return dialog.exec() == QDialog.DialogCode.Accepted
