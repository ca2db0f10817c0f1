"""View ▸ Theme: dark and light colours for the window, kept in the settings; the plots follow."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtGui import QColor, QImage, QPalette
from PySide6.QtWidgets import QApplication

from tests.timeouts import GUI_EVENT_S, ms
from workbench.core.advisor.sweep_report import SweepReport, SweepRow
from workbench.core.training.module_stats import ModuleStats
from workbench.gui import settings as app_settings
from workbench.gui.advisor.sweep_chart import SweepChart, write_chart
from workbench.gui.main_window import MainWindow
from workbench.gui.theme import TONES, apply_theme, dark_palette, saved_theme, tone
from workbench.gui.training.plot_style import is_dark, plot_theme


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


def _layers_colours(window: MainWindow) -> tuple[str, str]:
    """The Layers plot's background and its legend's first name, as colour names."""
    plot = window.layers_plot
    background = plot.plot.backgroundBrush().color().name()
    _sample, label = plot.legend.items[0]
    match = re.search(r"color: *(#[0-9a-fA-F]{6})", label.item.toHtml())
    assert match is not None
    return background, match.group(1).lower()


def test_the_layers_plot_follows_the_theme_with_its_legend(window: MainWindow, qtbot: Any) -> None:
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    before = QPalette(app.palette())
    history = window.training.runs.module_history
    history.add(ModuleStats(step=1, paths=("", "fc", "layer4"), grad_sq=(2.0, 1.0, 1.0), update_sq=(1e-6,) * 3,
                            weight_sq=(1.0,) * 3))
    plot = window.layers_plot
    plot.redraw()  # a legend drawn before the switch: its names change colour too
    assert set(plot.curves) == {"fc", "layer4"}
    light = _layers_colours(window)
    try:
        window.theme_actions["dark"].trigger()
        qtbot.waitUntil(lambda: plot.dark, timeout=ms(GUI_EVENT_S))
        dark = _layers_colours(window)
        assert dark == (QColor(plot_theme(True)["background"]).name(), QColor(plot_theme(True)["text"]).name())
        assert dark[0] != light[0] and dark[1] != light[1]
        window.theme_actions["light"].trigger()
        qtbot.waitUntil(lambda: not plot.dark, timeout=ms(GUI_EVENT_S))
        assert _layers_colours(window) == light
    finally:
        app_settings.settings().remove("view/theme")
        app.setPalette(before)
        history.clear()
        plot.redraw()


def test_messages_boxes_and_hints_take_the_new_themes_colours(window: MainWindow, qtbot: Any) -> None:
    """The verify banner, the diagnostics' details box and its hint, the runs' note: coloured from
    the palette, so a theme switched with them shown leaves no light box in a dark window."""
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    before = QPalette(app.palette())
    verify, details = window.training.verify, window.diagnostics.details
    verify.show_report({"ok": True, "checked": {"frozen": 1}, "violations": [], "module_status": {"": "ok"}}, "#1")
    note = window.training.runs_panel.note

    def colours() -> tuple[str, str, str, str]:
        hint = re.search(r"color: *(#[0-9a-fA-F]{6})", details.text())
        assert hint is not None
        return (verify.banner.styleSheet(), details.palette().color(details.backgroundRole()).name(),
                hint.group(1).lower(), note.palette().color(note.foregroundRole()).name())

    try:
        window.theme_actions["light"].trigger()
        qtbot.waitUntil(lambda: not window.training.plots.dark, timeout=ms(GUI_EVENT_S))
        light = colours()
        window.theme_actions["dark"].trigger()
        qtbot.waitUntil(lambda: window.training.plots.dark, timeout=ms(GUI_EVENT_S))
        dark = colours()
        background, text = tone("ok", app.palette())
        assert background in dark[0] and text in dark[0] and (background, text) == TONES["ok"][1]
        base, muted = app.palette().color(QPalette.ColorRole.Base), app.palette().color(QPalette.ColorRole.PlaceholderText)
        assert dark[1:] == (base.name(), muted.name(), muted.name())
        assert all(d != li for d, li in zip(dark, light, strict=True))  # every one changed with the theme
        assert details.autoFillBackground() and details.styleSheet() == ""  # no colour fixed in a style sheet
    finally:
        app_settings.settings().remove("view/theme")
        app.setPalette(before)
        verify.clear()


def test_the_sweep_chart_is_dark_in_a_dark_palette_and_its_png_light(qtbot: Any, tmp_path: Path) -> None:
    rows = [SweepRow(id=f"c{i}", name=f"plan {i}", lr=1e-3, status="completed", metric=0.5 + i / 10, time_s=1.0 + i,
                     peak_bytes=(10 + i) * 10**6, on_time_front=True, on_memory_front=True) for i in range(3)]
    report = SweepReport(rows=rows, recommended=1)
    chart = SweepChart()
    qtbot.addWidget(chart)
    chart.resize(600, 300)
    chart.set_report(report)

    def corner(image: QImage) -> QColor:
        return image.pixelColor(2, 2)

    chart.setPalette(dark_palette())
    assert corner(chart.grab().toImage()).lightness() < 64
    chart.setPalette(QApplication.style().standardPalette())
    assert corner(chart.grab().toImage()).lightness() > 240
    chart.setPalette(dark_palette())  # the file is a document: light whatever the window's theme
    png = write_chart(report, tmp_path / "chart.png", size=(600, 300))
    assert corner(QImage(str(png))).lightness() > 240


def test_apply_theme_refuses_an_unknown_theme() -> None:
    with pytest.raises(ValueError, match="system, light, dark"):
        apply_theme("sepia")
