"""The bar above the plots: the shown run's title, the x axis, smoothing, the View menu
(which plots show, legends, outliers, log scales) and the Save PNG / Export CSV buttons.

The bar only holds the controls; :class:`~workbench.gui.training.plots.PlotsPanel` connects
them and keeps them in step with its state.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QComboBox, QDoubleSpinBox, QHBoxLayout, QLabel, QMenu, QPushButton, QToolButton, QWidget

from workbench.gui.elided_label import ElidedLabel
from workbench.gui.training.plot_specs import PlotSpec

__all__ = ["PlotsToolbar"]


class PlotsToolbar(QWidget):
    """The plots' controls.

    Args:
        specs: every plot, in menu order.
        ema: the smoothing factor shown at first.
        parent: Qt parent.

    Attributes:
        title / title_val: the shown run's name and state, and its validation numbers.
        x_box: ``Step`` or ``Wall time (s)``.
        ema_box: the smoothing factor.
        view_button: opens the View menu.
        act_outliers: "Ignore Outliers".
        act_legends: "Legends" (shown or hidden).
        show_actions: ``{key: QAction}``, one checkable "show this plot" per plot.
        act_auto_plots: "Fit the Width" (the default set for the panel's width: all plots when
            wide, the compact rows when narrow).
        log_actions: ``{key: QAction}``, one checkable "log scale" per plot.
        save_button / csv_button: Save PNG… and Export CSV….
    """

    def __init__(self, specs: Sequence[PlotSpec], ema: float, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.x_box = QComboBox(self)
        self.x_box.addItem("Step", "step")
        self.x_box.addItem("Wall time (s)", "wall")
        self.x_box.setToolTip("X axis of every plot (wall time shades the intervals the run paused or validated)")
        self.ema_box = QDoubleSpinBox(self)
        self.ema_box.setRange(0.0, 0.99)
        self.ema_box.setSingleStep(0.05)
        self.ema_box.setDecimals(2)
        self.ema_box.setValue(ema)
        self.ema_box.setToolTip("Smoothing of step time and loss (exponential moving average; 0 = off)")
        self.save_button = QPushButton("Save PNG…", self)
        self.save_button.setToolTip("Save the plots as a PNG image")
        self.csv_button = QPushButton("Export CSV…", self)
        self.csv_button.setToolTip("Export the metrics of the shown run (every step) as CSV")
        self.view_button = QToolButton(self)
        self.view_button.setText("View")
        self.view_button.setToolTip("Which plots show, legends, y axes: ignore outliers, log scale per plot")
        self.view_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(self.view_button)
        plots_menu = menu.addMenu("Plots")
        self.act_auto_plots = QAction("Fit the Width (Default)", plots_menu)
        self.act_auto_plots.setCheckable(True)
        self.act_auto_plots.setChecked(True)
        self.act_auto_plots.setToolTip("Show the plots that fit the panel's width: all of them when wide; "
                                       f"{_names(s for s in specs if s.compact)} when narrow")
        plots_menu.addAction(self.act_auto_plots)
        plots_menu.addSeparator()
        self.show_actions: dict[str, QAction] = {}
        for spec in specs:
            key, title = spec.key, spec.menu
            act = QAction(title, plots_menu)
            act.setCheckable(True)
            act.setChecked(True)
            plots_menu.addAction(act)
            self.show_actions[key] = act
        self.act_legends = QAction("Legends", menu)
        self.act_legends.setCheckable(True)
        self.act_legends.setChecked(True)
        self.act_legends.setToolTip("Show the legends of the plots (they sit in a corner of the plot)")
        menu.addAction(self.act_legends)
        self.act_outliers = QAction("Ignore Outliers", menu)
        self.act_outliers.setCheckable(True)
        self.act_outliers.setToolTip(f"Fit the y axes of {_names(s for s in specs if s.robust)} to the data "
                                     "without their outliers (a single slow step no longer flattens the curve)")
        menu.addAction(self.act_outliers)
        menu.addSeparator()
        self.log_actions: dict[str, QAction] = {}
        for spec in specs:
            key, title = spec.key, spec.menu
            act = QAction(f"Log Scale: {title}", menu)
            act.setCheckable(True)
            menu.addAction(act)
            self.log_actions[key] = act
        self.view_button.setMenu(menu)
        self.title = QLabel("No run yet: press Start.", self)
        self.title.setTextFormat(Qt.TextFormat.RichText)
        self.title_val = ElidedLabel(self)
        bar = QHBoxLayout(self)
        bar.setContentsMargins(0, 0, 0, 0)
        bar.setSpacing(6)
        bar.addWidget(self.title)
        bar.addWidget(self.title_val, 1)
        bar.addWidget(QLabel("X", self))
        bar.addWidget(self.x_box)
        bar.addWidget(QLabel("EMA", self))
        bar.addWidget(self.ema_box)
        bar.addWidget(self.view_button)
        bar.addWidget(self.save_button)
        bar.addWidget(self.csv_button)


def _names(specs: Iterable[PlotSpec]) -> str:
    """``step time, memory and loss``: the plots' menu names without their units."""
    names = [s.menu.split(" (")[0].lower() for s in specs]
    return ", ".join(names[:-1]) + (" and " if len(names) > 1 else "") + names[-1] if names else "no plot"
