"""Dark theme: the tree's check boxes, and the window's own, stand out from the dark base
(Fusion frames them with a shade of the window colour, nearly black there)."""

from __future__ import annotations

import gc
from typing import Any

from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication, QCheckBox, QStyle, QStyleOptionButton

from tests.timeouts import GUI_EVENT_S, ms
from workbench.gui import settings as app_settings
from workbench.gui.main_window import MainWindow
from workbench.gui.plan.tree_columns import column_index
from workbench.gui.theme import FramedChecks


def _contrast(window: MainWindow, path: str, key: str) -> int:
    """The largest lightness difference from the base colour inside one unchecked cell."""
    view = window.view
    index = window.proxy.mapFromSource(window.tree_model.index_of(path, column_index(key)))
    rect = view.visualRect(index)
    assert rect.isValid() and not rect.isEmpty()
    image = view.viewport().grab().toImage()
    base = view.palette().color(QPalette.ColorRole.Base).lightness()
    ratio = image.width() / view.viewport().width()  # device pixels
    return max(
        abs(QColor(image.pixel(int(x * ratio), int(y * ratio))).lightness() - base)
        for x in range(rect.left() + 1, rect.right() - 1)
        for y in range(rect.top() + 1, rect.bottom() - 1)
    )


def test_dark_theme_check_boxes_are_visible(window: MainWindow, qtbot: Any) -> None:
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    before = QPalette(app.palette())
    try:
        window.resize(1280, 720)
        window.theme_actions["dark"].trigger()
        qtbot.waitUntil(lambda: window.view.palette().color(QPalette.ColorRole.Base).lightness() < 60,
                        timeout=ms(GUI_EVENT_S))
        assert _contrast(window, "fc", "frozen") >= 90  # the empty box's frame, not a shadow of it
        assert _contrast(window, "fc", "reparam") >= 90
    finally:
        app_settings.settings().remove("view/theme")
        app.setPalette(before)


def _box_contrast(box: QCheckBox) -> int:
    """The largest lightness difference from the window colour inside a check box's indicator."""
    opt = QStyleOptionButton()
    box.initStyleOption(opt)
    rect = box.style().subElementRect(QStyle.SubElement.SE_CheckBoxIndicator, opt, box)
    image = box.grab().toImage()
    ratio = image.width() / box.width()
    base = box.palette().color(QPalette.ColorRole.Window).lightness()
    return max(
        abs(QColor(image.pixel(int(x * ratio), int(y * ratio))).lightness() - base)
        for x in range(rect.left() + 1, rect.right())
        for y in range(rect.top() + 1, rect.bottom())
    )


def test_dark_theme_window_check_boxes_are_framed(window: MainWindow, qtbot: Any) -> None:
    """The window's own boxes ("Structure only", "channels last") get the light frame too."""
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    before = QPalette(app.palette())
    try:
        window.theme_actions["dark"].trigger()
        gc.collect()  # the style belongs to the application, not to a Python name
        assert isinstance(app.style(), FramedChecks)
        for box in (window.source_bar.meta_box, window.training.panel.channels_last):
            qtbot.waitUntil(lambda box=box: box.palette().color(QPalette.ColorRole.Window).lightness() < 80,
                            timeout=ms(GUI_EVENT_S))
            box.setChecked(False)
            assert _box_contrast(box) >= 90, box.text()
    finally:
        app_settings.settings().remove("view/theme")
        app.setPalette(before)
