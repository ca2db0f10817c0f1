"""The About dialog: versions of the app and its stack, and the device training would use.

:func:`environment_rows` gathers the facts as plain ``(label, value)`` pairs (also what the
**Copy to Clipboard** button copies, for bug reports); :class:`AboutDialog` shows them;
:func:`show_about` runs the dialog through :mod:`workbench.gui.dialogs` (the seam tests
intercept).
"""

from __future__ import annotations

import importlib
import platform
import sys
from importlib import metadata

from PySide6 import __version__ as pyside_version
from PySide6.QtCore import Qt, qVersion
from PySide6.QtWidgets import (
    QApplication,
    QDialog,
    QDialogButtonBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from workbench import __version__
from workbench.gui import dialogs

__all__ = ["AboutDialog", "about_text", "device_description", "environment_rows", "show_about", "torch_build"]

TAGLINE = "Decide which parts of a pretrained PyTorch model train, and see what each choice costs."


def _version(module: str, dist: str) -> str:
    """A package's version: the module's ``__version__``, else its installed metadata.

    Args:
        module: import name (``"pyqtgraph"``).
        dist: distribution name (``"pyqtgraph"``).

    Returns:
        The version, or ``"not installed"``.
    """
    try:
        mod = sys.modules.get(module) or importlib.import_module(module)
        version = getattr(mod, "__version__", None)
        if version:
            return str(version)
    except ImportError:
        return "not installed"
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "unknown"


def torch_build() -> str:
    """What the installed PyTorch was built for.

    Returns:
        ``"CUDA 12.4"`` (with ``" · cuDNN 90100"`` when a GPU is present), ``"ROCm 6.1"`` or
        ``"CPU build"``.
    """
    import torch

    cuda = getattr(torch.version, "cuda", None)
    hip = getattr(torch.version, "hip", None)
    if cuda:
        text = f"CUDA {cuda}"
        if torch.cuda.is_available() and torch.backends.cudnn.is_available():
            text += f" · cuDNN {torch.backends.cudnn.version()}"
        return text
    if hip:
        return f"ROCm {hip}"
    return "CPU build"


def device_description() -> str:
    """The device training uses by default, as found now.

    Returns:
        ``"cuda:0 · NVIDIA H200 · 139.8 GiB · compute 9.0"`` (``" (+1 more GPU)"`` when there
        are several), ``"mps · Apple GPU"``, or ``"cpu"`` with the reason there is no GPU
        (``"cpu (CPU build of PyTorch)"``, ``"cpu (CUDA 12.4 build, no CUDA device visible)"``).
    """
    import torch

    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        text = (
            f"cuda:0 · {props.name} · {props.total_memory / 2**30:.1f} GiB · compute {props.major}.{props.minor}"
        )
        more = torch.cuda.device_count() - 1
        if more > 0:
            text += f" (+{more} more GPU{'s' if more > 1 else ''})"
        return text
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps · Apple GPU"
    cuda = getattr(torch.version, "cuda", None)
    if cuda:
        return f"cpu (CUDA {cuda} build, no CUDA device visible)"
    if getattr(torch.version, "hip", None):
        return "cpu (ROCm build, no GPU visible)"
    return "cpu (CPU build of PyTorch)"


def environment_rows() -> list[tuple[str, str]]:
    """Everything the About dialog lists.

    Returns:
        ``(label, value)`` pairs: Freeze Workbench, Python, platform, PyTorch (and its
        CUDA/ROCm/CPU build), torchvision, Qt, PySide6, pyqtgraph, device.
    """
    import torch

    frozen = " · bundled" if getattr(sys, "frozen", False) else ""
    return [
        ("Freeze Workbench", __version__ + frozen),
        ("Python", f"{platform.python_version()} ({platform.python_implementation()})"),
        ("Platform", platform.platform(terse=True)),
        ("PyTorch", f"{torch.__version__} ({torch_build()})"),
        ("torchvision", _version("torchvision", "torchvision")),
        ("Qt", qVersion()),
        ("PySide6", pyside_version),
        ("pyqtgraph", _version("pyqtgraph", "pyqtgraph")),
        ("Device", device_description()),
    ]


def about_text(rows: list[tuple[str, str]] | None = None) -> str:
    """The rows as plain text, one ``label: value`` per line (what **Copy** puts on the clipboard).

    Args:
        rows: the rows (default: :func:`environment_rows`).

    Returns:
        The text, ending with a newline.
    """
    rows = environment_rows() if rows is None else rows
    return "".join(f"{label}: {value}\n" for label, value in rows)


class AboutDialog(QDialog):
    """The About box: icon, name, tagline, the environment table and a copy button.

    Args:
        parent: the window.

    Attributes:
        rows: the ``(label, value)`` pairs shown.
        value_labels: the value label of each row, by row label.
        copy_button: copies :func:`about_text` to the clipboard.
        copied_label: says so after a copy.
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("AboutDialog")
        self.setWindowTitle("About Freeze Workbench")
        self.rows = environment_rows()

        icon = QLabel(self)
        app = QApplication.instance()
        window_icon = app.windowIcon() if isinstance(app, QApplication) else None
        if window_icon is not None and not window_icon.isNull():
            icon.setPixmap(window_icon.pixmap(64, 64))
        title = QLabel(f"<b style='font-size:15pt'>Freeze Workbench</b><br>version {__version__}", self)
        title.setTextFormat(Qt.TextFormat.RichText)
        tagline = QLabel(TAGLINE, self)
        tagline.setWordWrap(True)
        header = QHBoxLayout()
        header.addWidget(icon, 0, Qt.AlignmentFlag.AlignTop)
        text = QVBoxLayout()
        text.addWidget(title)
        text.addWidget(tagline)
        header.addLayout(text, 1)

        grid = QGridLayout()
        grid.setHorizontalSpacing(16)
        self.value_labels: dict[str, QLabel] = {}
        for row, (label, value) in enumerate(self.rows):
            key = QLabel(label, self)
            key.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignTop)
            val = QLabel(value, self)
            val.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            val.setWordWrap(True)
            grid.addWidget(key, row, 0)
            grid.addWidget(val, row, 1)
            self.value_labels[label] = val
        grid.setColumnStretch(1, 1)

        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        self.copy_button = QPushButton("&Copy to Clipboard", self)
        self.copy_button.setToolTip("Copy these versions as text, e.g. for a bug report")
        buttons.addButton(self.copy_button, QDialogButtonBox.ButtonRole.ActionRole)
        self.copy_button.clicked.connect(self.copy_to_clipboard)
        buttons.rejected.connect(self.reject)
        self.copied_label = QLabel("", self)

        layout = QVBoxLayout(self)
        layout.addLayout(header)
        layout.addSpacing(8)
        layout.addLayout(grid)
        layout.addWidget(self.copied_label)
        layout.addWidget(buttons)
        self.setMinimumWidth(480)

    def text(self) -> str:
        """The shown rows as plain text (see :func:`about_text`)."""
        return about_text(self.rows)

    def copy_to_clipboard(self) -> None:
        """Put :meth:`text` on the clipboard and say so."""
        QApplication.clipboard().setText(self.text())
        self.copied_label.setText("Copied to the clipboard.")


def show_about(parent: QWidget | None = None) -> None:
    """Show the About dialog modally.

    Args:
        parent: the window.
    """
    dialog = AboutDialog(parent)
    try:
        dialogs.run_dialog(dialog)
    finally:
        dialog.deleteLater()
