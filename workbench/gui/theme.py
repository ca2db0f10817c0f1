"""Light and dark colours for the window: follow the platform's colour scheme, or a choice
the user made in View ▸ Theme (kept in the settings). The plots follow the palette.

The style is Fusion (:class:`FramedChecks`), with a light frame around check boxes on a dark
base: Fusion frames them with a shade of the window colour, nearly black on a dark palette,
so an empty box ("Structure only", "channels last", the tree's columns) is nearly invisible.

Widgets that colour text themselves take the colours from the palette they are drawn with
(:func:`tone`, :func:`muted_color`) and colour again when it changes (``changeEvent``), so a
switch of theme leaves no light box in a dark window.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QSettings, Qt, Slot
from PySide6.QtGui import QActionGroup, QColor, QGuiApplication, QPainter, QPalette
from PySide6.QtWidgets import QApplication, QMenu, QProxyStyle, QStyle, QStyleFactory, QStyleOption, QWidget

__all__ = [
    "THEMES", "TONES", "FramedChecks", "add_theme_menu", "apply_theme", "dark_palette", "is_dark", "muted_color",
    "outline_dark_box", "palette_changed", "saved_theme", "tone",
]

#: The choices: ``(key, menu text)``.
THEMES: tuple[tuple[str, str], ...] = (("system", "Follow System"), ("light", "Light"), ("dark", "Dark"))
_KEY = "view/theme"


#: A message's colours, ``{kind: ((background, text) on a light palette, (background, text) on a dark one)}``.
TONES: dict[str, tuple[tuple[str, str], tuple[str, str]]] = {
    "ok": (("#e6f4ea", "#1a5e2a"), ("#1d3526", "#a8dcb5")),
    "warn": (("#fff4e5", "#7a4a00"), ("#3a2c12", "#f2c57c")),
    "error": (("#fdecea", "#8a1c1c"), ("#43201f", "#f4a7a3")),
}


def is_dark(palette: QPalette | None = None) -> bool:
    """Whether a palette (default: the application's) is dark: its window colour is dark.

    Args:
        palette: the palette.

    Returns:
        True for a dark palette.
    """
    pal = palette if palette is not None else QApplication.palette()
    return pal.color(QPalette.ColorRole.Window).lightness() < 128


def palette_changed(event: QEvent) -> bool:
    """Whether an event a widget's ``changeEvent`` gets is a change of its palette (its own or the
    application's: a theme switched), after which it colours what it coloured itself again."""
    return event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange)


def tone(kind: str, palette: QPalette | None = None) -> tuple[str, str]:
    """The background and text colours of a message of one kind, for a palette.

    Args:
        kind: ``"ok"``, ``"warn"`` or ``"error"`` (:data:`TONES`).
        palette: the palette the message is drawn with (default: the application's).

    Returns:
        ``(background, text)``, colour names.
    """
    return TONES[kind][1 if is_dark(palette) else 0]


def muted_color(palette: QPalette | None = None) -> str:
    """The colour of secondary text in rich text (a hint, where a finding came from): the
    palette's placeholder text, readable on its base in both themes.

    Args:
        palette: the palette (default: the application's).

    Returns:
        A colour name.
    """
    pal = palette if palette is not None else QApplication.palette()
    return pal.color(QPalette.ColorRole.PlaceholderText).name()


def dark_palette() -> QPalette:
    """A dark palette for the Fusion style (window, text, links, selection, disabled text).

    Returns:
        The palette.
    """
    p = QPalette()
    base, window, text = QColor(30, 31, 34), QColor(43, 45, 48), QColor(223, 225, 229)
    for role, color in (
        (QPalette.ColorRole.Window, window), (QPalette.ColorRole.WindowText, text),
        (QPalette.ColorRole.Base, base), (QPalette.ColorRole.AlternateBase, QColor(38, 40, 43)),
        (QPalette.ColorRole.ToolTipBase, window), (QPalette.ColorRole.ToolTipText, text),
        (QPalette.ColorRole.Text, text), (QPalette.ColorRole.Button, window),
        (QPalette.ColorRole.ButtonText, text), (QPalette.ColorRole.BrightText, QColor(255, 90, 90)),
        (QPalette.ColorRole.Link, QColor(100, 160, 240)), (QPalette.ColorRole.Highlight, QColor(53, 116, 240)),
        (QPalette.ColorRole.HighlightedText, QColor(255, 255, 255)), (QPalette.ColorRole.Mid, QColor(90, 92, 96)),
        (QPalette.ColorRole.PlaceholderText, QColor(140, 142, 146)),
    ):
        p.setColor(role, color)
    for role in (QPalette.ColorRole.Text, QPalette.ColorRole.ButtonText, QPalette.ColorRole.WindowText):
        p.setColor(QPalette.ColorGroup.Disabled, role, QColor(120, 122, 126))
    return p


def outline_dark_box(painter: QPainter, box: QStyleOption) -> None:
    """Outline a check box drawn on a dark base (nothing on a light one, where the style's own
    frame shows).

    Args:
        painter: the painter the box was drawn with.
        box: the box's option (its rect, palette and enabled state).
    """
    if box.palette.color(QPalette.ColorRole.Base).lightness() >= 128:
        return
    enabled = bool(box.state & QStyle.StateFlag.State_Enabled)
    color = box.palette.color(QPalette.ColorRole.Text if enabled else QPalette.ColorRole.Mid)
    color.setAlpha(170 if enabled else 255)
    painter.save()
    painter.setRenderHint(QPainter.RenderHint.Antialiasing, False)
    painter.setPen(color)
    painter.setBrush(Qt.BrushStyle.NoBrush)
    painter.drawRect(box.rect.adjusted(1, 1, -2, -2))
    painter.restore()


class FramedChecks(QProxyStyle):
    """Fusion, with :func:`outline_dark_box` around every check box it draws."""

    def __init__(self) -> None:
        super().__init__(QStyleFactory.create("Fusion"))

    def drawPrimitive(
        self, element: QStyle.PrimitiveElement, option: QStyleOption, painter: QPainter, widget: QWidget | None = None
    ) -> None:
        """Draw as Fusion does, then frame a check box on a dark base."""
        super().drawPrimitive(element, option, painter, widget)
        if element == QStyle.PrimitiveElement.PE_IndicatorCheckBox:
            outline_dark_box(painter, option)


def _system_dark() -> bool:
    hints = QGuiApplication.styleHints()
    return hints is not None and hints.colorScheme() == Qt.ColorScheme.Dark


def apply_theme(theme: str, app: QApplication | None = None) -> bool:
    """Colour the application light or dark.

    Args:
        theme: ``"system"`` (the platform's colour scheme), ``"light"`` or ``"dark"``.
        app: the application (default: the running one).

    Returns:
        True when the colours are dark.

    Raises:
        ValueError: another theme.
    """
    if theme not in dict(THEMES):
        raise ValueError(f"theme must be one of {', '.join(k for k, _t in THEMES)}, got {theme!r}")
    app = app or QApplication.instance()  # type: ignore[assignment]
    assert isinstance(app, QApplication)
    dark = _system_dark() if theme == "system" else theme == "dark"
    if not isinstance(app.style(), FramedChecks):
        app.setStyle(FramedChecks())  # Fusion: the one style that draws any palette the same on every platform
    app.setPalette(dark_palette() if dark else app.style().standardPalette())
    return dark


def saved_theme(settings: QSettings | None) -> str:
    """The theme kept in the settings (``"system"`` when none or unknown)."""
    value = settings.value(_KEY) if settings is not None else None
    return value if isinstance(value, str) and value in dict(THEMES) else "system"


class _FollowSystem(QObject):
    """Applies the platform's colour scheme while "Follow System" is the saved choice. A child of
    the window: its connection to the application's style hints ends with the window (a lambda's
    would outlive every window, holding its settings)."""

    def __init__(self, settings: QSettings | None, parent: QObject) -> None:
        super().__init__(parent)
        self._settings = settings

    @Slot()
    def follow(self) -> None:
        if saved_theme(self._settings) == "system":
            apply_theme("system")


def add_theme_menu(menu: QMenu, settings: QSettings | None, parent: QWidget) -> dict[str, object]:
    """Add View ▸ Theme (Follow System, Light, Dark), apply the saved choice, and follow the
    platform's scheme while "Follow System" is chosen.

    Args:
        menu: the View menu.
        settings: where the choice is kept.
        parent: owner of the actions.

    Returns:
        ``{key: QAction}``.
    """
    sub = menu.addMenu("&Theme")
    group = QActionGroup(parent)
    group.setExclusive(True)
    actions: dict[str, object] = {}
    current = saved_theme(settings)

    def choose(key: str) -> None:
        if settings is not None:
            settings.setValue(_KEY, key)
        apply_theme(key)

    for key, text in THEMES:
        act = sub.addAction(text)
        act.setCheckable(True)
        act.setChecked(key == current)
        group.addAction(act)
        act.triggered.connect(lambda _c=False, key=key: choose(key))
        actions[key] = act
    hints = QGuiApplication.styleHints()
    if hints is not None:
        hints.colorSchemeChanged.connect(_FollowSystem(settings, parent).follow)
    if current != "system" or _system_dark():
        apply_theme(current)
    return actions
