"""Markers on the plots: one vertical line per plan change, stage or alert on every plot, and
the layout of their labels.

Markers closer than :data:`MERGE_FRACTION` of the x range share one label (``"3 changes"``).
Auto-freeze evaluations are faint ticks without a label; a run that decides often (every step of a
long run) draws at most :data:`MAX_TICK_LINES` of them: neighbours merge into one line whose
tooltip counts them (the run's events and the status line still say each).
Labels are laid out so that none overlaps another: each label goes right of its line when it
fits before the next marker line, else left of it, else to the edge of the plot; a label that
would overlap one already placed takes the next free height (:data:`LABEL_SLOTS`); a label
with room nowhere is shortened (``…``). The full texts of a group are in the tooltip of each
of its lines, whatever the label shows.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF

from workbench.gui.training.plot_style import pen

__all__ = ["EVALUATION_HEAD", "LABEL_SLOTS", "MAX_TICK_LINES", "MERGE_FRACTION", "Marker", "MarkerLayer", "STAGE_RE",
           "marker_text"]

_MARKER_STYLE = {
    "change": ((230, 120, 0), Qt.PenStyle.SolidLine),
    "stage": ((128, 60, 170), Qt.PenStyle.SolidLine),
    "planned": ((128, 60, 170), Qt.PenStyle.DashLine),
    "refused": ((200, 30, 30), Qt.PenStyle.DotLine),
    "alert": ((200, 30, 30), Qt.PenStyle.DotLine),
    "tick": ((150, 150, 150), Qt.PenStyle.DotLine),  # an auto-freeze evaluation: faint, no label
}
#: The head of an auto-freeze evaluation event (``"auto-freeze, step 50: no block flattened ..."``).
EVALUATION_HEAD = "auto-freeze, step "
#: Markers closer than this share of the x range share one label ("3 changes").
MERGE_FRACTION = 0.06
#: Most auto-freeze tick lines on a plot: past it, each two neighbouring lines become one (a line
#: then stands for 2, 4, 8 ... evaluations in a row, and says how many in its tooltip).
MAX_TICK_LINES = 48
#: Rows of marker labels, tried in turn: from the top (after freezing, step time, memory and
#: trainable parameters drop, so the space above the newer data is free), one label height
#: apart; on the trainable count (a step function at the top and bottom of its plot) from
#: the middle outwards. A plot has as many rows as label heights fit, at most this many.
LABEL_SLOTS = 4
#: A stage number in an event's head (``"stage 1 'unfreeze'"``).
STAGE_RE = re.compile(r"stage (\d+)")
#: The label's own margins and a gap to the frame or the next line, in pixels.
_PAD = 16.0
#: Labels narrower than this many pixels are not shown (their tooltip still is).
_MIN_LABEL_PX = 18.0


def marker_text(event: str, limit: int = 30) -> tuple[str, str]:
    """The short plot label of an engine event, and its kind.

    Args:
        event: ``StepMetrics.events`` text (``"plan change: froze layer3"``,
            ``"stage 1 'unfreeze': unfroze layer3"``, ``"plan change refused: ..."``).
        limit: longest label; longer ones end with ``…``.

    Returns:
        ``(label, kind)`` with kind ``"change"``, ``"stage"``, ``"refused"``, ``"alert"``
        (a non-finite loss), ``"tick"`` (an auto-freeze evaluation: a faint line without a
        label) or ``""`` (events that change nothing, which get no marker).
    """
    if event.startswith(EVALUATION_HEAD):
        return "", "tick"
    head, _, tail = event.partition(": ")
    if "refused" in head:
        kind, prefix = "refused", "refused: "
    elif tail == "no change":
        return "", ""
    elif head.startswith("stage"):
        kind, prefix = "stage", f"stage {', '.join(STAGE_RE.findall(head))}: "
    elif head.startswith("plan change"):
        kind, prefix = "change", ""
    elif head.startswith("loss"):
        kind, prefix, tail = "alert", "", event
    else:
        kind, prefix, tail = "change", "", event
    parts = [p for p in (tail or head).split("; ") if p]
    text = prefix + "; ".join(parts)
    if len(text) > limit and len(parts) > 1:  # keep whole parts: "froze layer1; …"
        kept = parts[:1]
        for p in parts[1:]:
            if len(prefix + "; ".join([*kept, p])) + 3 > limit:
                break
            kept.append(p)
        text = prefix + "; ".join(kept) + (" …" if len(kept) < len(parts) else "")
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return text, kind


@dataclass
class Marker:
    """One marker: where it is (in steps and seconds), its texts and its lines (one per plot)."""

    step: float
    wall: float | None
    label: str
    full: str
    kind: str
    stage: int | None = None
    lines: list[pg.InfiniteLine] = field(default_factory=list)


def _slots(height: float, row_px: float, middle: bool = False) -> list[float]:
    """Label heights (0 bottom, 1 top of the plot) one label apart, as many as fit (at least one)."""
    rows = max(1, min(LABEL_SLOTS, int(height // row_px)))
    if height <= 0:
        return [0.9]
    half = row_px / 2 / height
    if middle and rows >= 3:  # room above and below the middle row
        steps = [0, -1, 1, -2, 2][:rows]
        return [min(1 - half, max(half, 0.5 + k * row_px / height)) for k in steps]
    return [max(half, 1 - (r * row_px + row_px / 2 + 2) / height) for r in range(rows)]


def _overlaps(extent: tuple[float, float], taken: list[tuple[float, float]]) -> bool:
    return any(extent[0] < b and a < extent[1] for a, b in taken)


class MarkerLayer:
    """The markers of every plot of a panel, and their label layout.

    Args:
        plots: ``{key: PlotItem}``, x-linked (the first one's x range is every plot's).
        font: the labels' font.

    Attributes:
        markers: the markers, in the order added.
        x_mode: ``"step"`` or ``"wall"`` (markers without a wall time hide in wall mode).
    """

    def __init__(self, plots: dict[str, pg.PlotItem], font: QFont) -> None:
        self.plots = plots
        self.font = font
        self.markers: list[Marker] = []
        self.x_mode = "step"
        #: The auto-freeze evaluations, in the order added; the first of each run of
        #: :attr:`_per_tick_line` of them holds the lines that stand for the run.
        self._ticks: list[Marker] = []
        self._per_tick_line = 1

    def _x(self, m: Marker) -> float | None:
        return m.step if self.x_mode == "step" else m.wall

    def add(self, step: float, wall: float | None, label: str, kind: str = "change", *,
            full: str = "", stage: int | None = None) -> Marker:
        """Add a vertical marker on every plot and lay the labels out again.

        Args:
            step: x position in steps.
            wall: x position in seconds (None: hidden in wall-time mode).
            label: short text shown at the line.
            kind: ``change``, ``stage``, ``planned``, ``refused`` or ``alert`` (its colour and style).
            full: the full text (tooltip); default ``label``.
            stage: the plan stage a ``planned`` marker stands for.

        Returns:
            The marker.
        """
        marker = Marker(step, wall, label, full or label, kind, stage)
        self.markers.append(marker)
        if kind == "tick":  # no label: nothing to lay out
            self._add_tick(marker)
            return marker
        self._draw(marker)
        self.layout()
        return marker

    def _draw(self, marker: Marker) -> None:
        """Give a marker its line on every plot, at its x."""
        color, style = _MARKER_STYLE.get(marker.kind, _MARKER_STYLE["change"])
        faint = marker.kind == "tick"
        for key in self.plots:
            if faint:  # a tick takes no label: none is made (most of a line's cost, on every plot)
                line = pg.InfiniteLine(angle=90, movable=False, pen=pen(color, 1.0, style, alpha=110))
            else:
                line = pg.InfiniteLine(
                    angle=90, movable=False, pen=pen(color, 1.5, style),
                    label=marker.label, labelOpts={"position": 0.9, "color": QColor(*color), "movable": False},
                )
                line.label.setFont(self.font)
            line.setToolTip(marker.full)
            line.setZValue(-21 if faint else -20)  # under every curve: a label never hides data
            self.plots[key].addItem(line, ignoreBounds=True)
            marker.lines.append(line)
        self.place(marker)

    def _undraw(self, marker: Marker) -> None:
        for key, line in self._lines(marker):
            self.plots[key].removeItem(line)
        marker.lines.clear()

    # ------------------------------------------------------------ auto-freeze ticks
    def tick_lines(self) -> int:
        """How many tick lines each plot draws (at most :data:`MAX_TICK_LINES`)."""
        return sum(1 for m in self._ticks if m.lines)

    def _add_tick(self, marker: Marker) -> None:
        self._ticks.append(marker)
        n = len(self._ticks) - 1
        if n % self._per_tick_line == 0:  # it starts a line of its own
            self._draw(marker)
            if self.tick_lines() > MAX_TICK_LINES:
                self._per_tick_line *= 2
                for i, m in enumerate(self._ticks):
                    if m.lines and i % self._per_tick_line:  # the second of two neighbours: merged into the first
                        self._undraw(m)
                for i in range(0, len(self._ticks), self._per_tick_line):
                    self._tick_tooltip(i)
                return
        self._tick_tooltip(n - n % self._per_tick_line)

    def _tick_tooltip(self, first: int) -> None:
        """The tooltip of the tick line the evaluations from index ``first`` share."""
        group = self._ticks[first:first + self._per_tick_line]
        head = group[0]
        if len(group) == 1:
            tip = head.full
        else:
            tip = (f"{len(group)} auto-freeze evaluations, steps {group[0].step:g}–{group[-1].step:g} (the run's "
                   f"events list each); the last:\n{group[-1].full}")
        for line in head.lines:
            line.setToolTip(tip)

    def _redraw_ticks(self) -> None:
        """Draw the ticks again from the first (after one was taken off)."""
        ticks, self._ticks, self._per_tick_line = self._ticks, [], 1
        for m in ticks:
            self._undraw(m)
        for m in ticks:
            self._add_tick(m)

    def groups(self) -> list[list[Marker]]:
        """The shown markers grouped as their labels are: markers closer than
        :data:`MERGE_FRACTION` of the x range share one label.

        Returns:
            Groups in x order (each in x order).
        """
        xs = [(x, m) for m in self.markers if m.kind != "tick" and (x := self._x(m)) is not None]
        xs.sort(key=lambda xm: xm[0])
        lo, hi = next(iter(self.plots.values())).vb.viewRange()[0]
        gap = MERGE_FRACTION * max(hi - lo, 1e-9)
        groups: list[list[Marker]] = []
        last = -math.inf
        for x, m in xs:
            if groups and x - last <= gap:
                groups[-1].append(m)
            else:
                groups.append([m])
            last = x
        return groups

    def label_texts(self) -> list[str]:
        """The marker labels as shown (one per group of close markers), in x order."""
        return [g[0].lines[0].label.format for g in self.groups() if g[0].lines]

    def _lines(self, m: Marker) -> Iterator[tuple[str, pg.InfiniteLine]]:
        return zip(self.plots, m.lines)

    def layout(self) -> None:
        """Place every label: one per group, none overlapping another (see the module doc)."""
        if not self.markers:
            return
        metrics = QFontMetricsF(self.font)
        groups = self.groups()
        texts = []
        for group in groups:
            head = group[0]
            kinds = "changes" if all(m.kind != "planned" for m in group) else "markers"
            texts.append(head.label if len(group) == 1 else f"{len(group)} {kinds}")
            tip = "\n".join(m.full for m in group)
            for m in group:
                for _key, line in self._lines(m):
                    line.setToolTip(tip)
                    line.label.setVisible(False)
        # a label's height with its margins, and a gap
        first = next((m for m in self.markers if m.kind != "tick"), None)  # one with a label (a tick has none)
        row_px = max(metrics.height() + 6, first.lines[0].label.boundingRect().height() if first and first.lines else 0) + 2
        for key, plot in self.plots.items():
            vb = plot.vb
            view = vb.sceneBoundingRect()
            slots = _slots(view.height(), row_px, middle=key == "trainable")
            at = [vb.mapViewToScene(QPointF(self._x(g[0]) or 0.0, 0.0)).x() for g in groups]
            taken: list[list[tuple[float, float]]] = [[] for _ in slots]
            index = list(self.plots).index(key)
            for i, group in enumerate(groups):
                line = group[0].lines[index]
                text = texts[i]
                width = metrics.horizontalAdvance(text) + _PAD
                nxt = at[i + 1] if i + 1 < len(groups) else view.right()
                prv = at[i - 1] if i else view.left()
                x = at[i]
                # right of the line before the next one, left of it after the previous one,
                # then to the plot's edges
                tries = [(x, min(nxt, view.right())), (max(prv, view.left()), x), (x, view.right()), (view.left(), x)]
                placed = None
                for side, (lo, hi) in enumerate(tries):
                    right = side % 2 == 0
                    if hi - lo < width and view.width() > 0:
                        continue
                    extent = (x, x + width) if right else (x - width, x)
                    slot = next((s for s in range(len(slots)) if not _overlaps(extent, taken[s])), None)
                    if slot is not None:
                        placed = (text, right, slot, extent)
                        break
                if placed is None:  # no room anywhere: shorten it to the larger free gap
                    right_room, left_room = min(nxt, view.right()) - x, x - max(prv, view.left())
                    right = right_room >= left_room
                    room = max(right_room, left_room) - _PAD
                    extent = (x, x + room + _PAD) if right else (x - room - _PAD, x)
                    slot = next((s for s in range(len(slots)) if not _overlaps(extent, taken[s])), None)
                    if slot is None or room < _MIN_LABEL_PX:
                        continue  # the tooltip has it
                    short = metrics.elidedText(text, Qt.TextElideMode.ElideRight, room)
                    placed = (short, right, slot, extent)
                shown, right, slot, extent = placed
                taken[slot].append(extent)
                anchor = (0.0, 0.5) if right else (1.0, 0.5)
                if tuple(line.label.anchors[0]) != anchor:
                    line.label.anchors = [anchor, anchor]
                if line.label.format != shown:
                    line.label.setFormat(shown)
                line.label.setPosition(slots[slot])
                line.label.setVisible(True)

    def place(self, m: Marker) -> None:
        """Move a marker's lines to its x in the current mode (hide them without one)."""
        x = self._x(m)
        for line in m.lines:
            if x is None:
                line.setVisible(False)
            else:
                line.setVisible(True)
                line.setValue(x)

    def remove(self, m: Marker) -> None:
        """Take a marker off every plot."""
        self._undraw(m)
        if m in self.markers:
            self.markers.remove(m)
        if m in self._ticks:
            self._ticks.remove(m)
            self._redraw_ticks()
            return
        self.layout()

    def remove_planned(self, stage: int) -> None:
        """Remove the dashed marker of a plan stage (the stage was reached)."""
        for m in [m for m in self.markers if m.kind == "planned" and m.stage == stage]:
            self.remove(m)

    def clear(self) -> None:
        """Remove every marker."""
        for m in self._ticks:
            self._undraw(m)
        self._ticks, self._per_tick_line = [], 1
        self.markers[:] = [m for m in self.markers if m.kind != "tick"]
        for m in list(self.markers):
            self.remove(m)

    def near(self, x: float | None, span: float) -> Marker | None:
        """The marker closest to ``x`` within ``span`` (x units), or None."""
        if x is None or math.isnan(x) or not self.markers:
            return None
        best, dist = None, math.inf
        for m in self.markers:
            mx = self._x(m)
            if mx is not None and abs(mx - x) < dist:
                best, dist = m, abs(mx - x)
        return best if dist <= span else None
