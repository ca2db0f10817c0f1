"""A one-line label that shortens its text with … to the room it gets."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget

__all__ = ["ElidedLabel"]


class ElidedLabel(QLabel):
    """A plain-text label that ends with … where it is cut, and asks for no width of its own
    (it takes what its layout leaves, so a long text never widens a window).

    Args:
        parent: Qt parent.
        separator: the text is a list of items joined by this (e.g. ``" · "``): it is cut by
            whole items, ``…`` standing for those left out (one item too long is cut within);
            None: cut anywhere.
    """

    def __init__(self, parent: QWidget | None = None, separator: str | None = None) -> None:
        super().__init__(parent)
        self._full = ""
        self._separator = separator
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)

    def set_full_text(self, text: str) -> None:
        """Show ``text``, shortened to the label's width.

        Args:
            text: the whole text.
        """
        self._full = text
        self._elide()

    def full_text(self) -> str:
        """The whole text (what :meth:`set_full_text` got)."""
        return self._full

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        width, metrics = max(0, self.width()), self.fontMetrics()
        sep = self._separator
        if sep and metrics.horizontalAdvance(self._full) > width:
            items = self._full.split(sep)
            for keep in range(len(items) - 1, 0, -1):
                text = sep.join(items[:keep]) + sep + "…"
                if metrics.horizontalAdvance(text) <= width:
                    self.setText(text)
                    return
        self.setText(metrics.elidedText(self._full, Qt.TextElideMode.ElideRight, width))
