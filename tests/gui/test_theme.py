"""View ▸ Theme: dark and light colours for the window, kept in the settings; the plots follow."""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QApplication

from tests.timeouts import GUI_EVENT_S, ms
from workbench.gui import settings as app_settings
from workbench.gui.main_window import MainWindow
from workbench.gui.theme import apply_theme, saved_theme
from workbench.gui.training.plot_style import is_dark


def test_the_theme_menu_switches_the_window_and_the_plots(window: MainWindow, qtbot: Any) -> None:
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    before = QPalette(app.palette())
    try:
        window.theme_actions["dark"].trigger()
        assert is_dark(app.palette())
        qtbot.waitUntil(lambda: window.training.plots.dark, timeout=ms(GUI_EVENT_S))
        assert saved_theme(app_settings.settings()) == "dark"
        window.theme_actions["light"].trigger()
        assert not is_dark(app.palette())
        qtbot.waitUntil(lambda: not window.training.plots.dark, timeout=ms(GUI_EVENT_S))
        assert saved_theme(app_settings.settings()) == "light"
    finally:
        app_settings.settings().remove("view/theme")
        app.setPalette(before)


def test_apply_theme_refuses_an_unknown_theme() -> None:
    with pytest.raises(ValueError, match="system, light, dark"):
        apply_theme("sepia")
