"""View ▸ Theme's "Follow System": the platform's colour scheme is applied while it is the saved choice, and the
connection to the application's style hints ends with its window (a closed window leaves none behind)."""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtCore import QCoreApplication, QEvent, Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QMenu, QWidget

from workbench.gui import settings as app_settings
from workbench.gui import theme

_SIGNAL = "2colorSchemeChanged(Qt::ColorScheme)"  # SIGNAL() of the C++ signature


def _follow_connections() -> int:
    hints = QGuiApplication.styleHints()
    assert hints is not None
    return hints.receivers(_SIGNAL)


def _window_with_theme_menu(qtbot: Any) -> QWidget:
    host = QWidget()
    qtbot.addWidget(host)
    menu = QMenu(host)
    theme.add_theme_menu(menu, app_settings.settings(), host)
    return host


def test_follow_system_applies_the_scheme_while_it_is_chosen(qtbot: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    applied: list[str] = []
    host = _window_with_theme_menu(qtbot)
    monkeypatch.setattr(theme, "apply_theme", applied.append)
    hints = QGuiApplication.styleHints()
    hints.colorSchemeChanged.emit(Qt.ColorScheme.Dark)
    assert applied == ["system"]
    store = app_settings.settings()
    store.setValue("view/theme", "light")
    store.sync()
    hints.colorSchemeChanged.emit(Qt.ColorScheme.Dark)
    assert applied == ["system"]  # a chosen theme stays
    host.close()


def test_a_closed_window_leaves_no_connection_to_the_style_hints(qtbot: Any) -> None:
    before = _follow_connections()
    host = _window_with_theme_menu(qtbot)
    assert _follow_connections() == before + 1
    host.close()
    host.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    assert _follow_connections() == before
