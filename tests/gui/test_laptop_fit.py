"""The window fits a laptop: the first size fits the screen's available geometry, a saved
geometry is restored only when it fits, and Start is on screen at 1280 × 800."""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtCore import QPoint, QRect

from tests.timeouts import GUI_EVENT_S, ms
from workbench.gui import settings as app_settings
from workbench.gui import window_geometry
from workbench.gui.main_window import MainWindow

LAPTOP = QRect(0, 0, 1280, 800 - 32)  # a 1280 × 800 screen less its task bar


@pytest.fixture
def laptop(monkeypatch: pytest.MonkeyPatch) -> QRect:
    monkeypatch.setattr(window_geometry, "available_geometry", lambda _w: QRect(LAPTOP))
    s = app_settings.settings()
    s.remove("window/geometry")
    s.sync()
    return LAPTOP


def _open(qtbot: Any) -> MainWindow:
    w = MainWindow()
    qtbot.addWidget(w)
    w.show()
    qtbot.waitExposed(w, timeout=ms(GUI_EVENT_S))
    return w


def test_the_first_window_fits_a_1280x800_screen_with_start_in_view(laptop: QRect, qtbot: Any) -> None:
    w = _open(qtbot)
    assert laptop.contains(w.frameGeometry()), (w.frameGeometry(), laptop)
    assert w.minimumSizeHint().width() <= laptop.width() and w.minimumSizeHint().height() <= laptop.height()
    start = w.training.panel.start_button
    top_left = start.mapTo(w, QPoint(0, 0))
    assert w.rect().contains(QRect(top_left, start.size())), (top_left, start.size(), w.size())


def test_a_saved_geometry_is_restored_only_when_it_fits(laptop: QRect, qtbot: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from workbench.gui import main_window

    restored: list[bool] = []

    def spy(window: Any, saved: object) -> bool:
        restored.append(window_geometry.restore_geometry(window, saved))
        return restored[-1]

    monkeypatch.setattr(main_window, "restore_geometry", spy)
    big = _open(qtbot)
    big.setGeometry(0, 0, 1880, 1040)  # saved on a large monitor
    big.save_settings()
    big.close()
    w = _open(qtbot)
    assert restored[-1] is False
    assert laptop.contains(w.frameGeometry()) and w.width() < 1880
    w.setGeometry(40, 40, 1200, 650)
    w.save_settings()
    w.close()
    _open(qtbot)
    assert restored == [False, False, True]  # nothing saved; too large; fits: kept


def test_first_geometry_is_centred_and_never_larger_than_the_screen() -> None:
    rect = window_geometry.first_geometry(QRect(0, 0, 1280, 720))
    assert QRect(0, 0, 1280, 720).contains(rect) and rect.width() <= 1280 - 16
    wide = window_geometry.first_geometry(QRect(100, 0, 2560, 1440))
    assert wide.size() == window_geometry.PREFERRED_SIZE and wide.center().x() == 100 + 1280 - 1
