"""The dot icon painter shared by the model bar, the Verify tab and its tab icon."""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtGui import QColor

from workbench.gui.icons import dot_icon
from workbench.gui.model_source import cached_icon
from workbench.gui.training.verify_panel import STATUS_COLORS, status_icon

GREEN = QColor(46, 160, 67)


def pixels(icon: Any, size: int) -> Any:
    image = icon.pixmap(size, size).toImage()
    assert (image.width(), image.height()) == (size, size)
    return image


def test_filled_dot_is_the_colour_in_the_middle_and_transparent_in_the_corners(qapp: Any) -> None:
    image = pixels(dot_icon(GREEN, size=10), 10)
    assert image.pixelColor(5, 5) == GREEN
    assert image.pixelColor(0, 0).alpha() == 0 and image.pixelColor(9, 9).alpha() == 0


def test_hollow_dot_and_outline_colour(qapp: Any) -> None:
    hollow = pixels(dot_icon(GREEN, margin=2, filled=False), 12)
    assert hollow.pixelColor(6, 6).alpha() == 0  # nothing inside
    assert hollow.pixelColor(6, 2).alpha() > 0  # the ring
    red = QColor(210, 40, 40)
    ringed = pixels(dot_icon(red, outline=QColor(0, 0, 255)), 12)
    assert ringed.pixelColor(6, 6) == red
    top = ringed.pixelColor(6, 1)
    assert top.blue() > top.red()


def test_callers_use_it(qapp: Any) -> None:
    assert pixels(cached_icon(True), 12).pixelColor(6, 6) == GREEN
    assert pixels(cached_icon(False), 12).pixelColor(6, 6).alpha() == 0
    assert pixels(status_icon("error"), 12).pixelColor(6, 6) == STATUS_COLORS["error"]


def test_no_room_for_the_dot_is_an_error() -> None:
    with pytest.raises(ValueError, match="smaller margin"):
        dot_icon(GREEN, size=4, margin=2)
