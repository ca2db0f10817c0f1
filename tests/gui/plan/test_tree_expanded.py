"""A large tree stays responsive when expanded: what a click, the live columns and the filter
hand to the view is bounded by the rows in view, not by the rows of the tree.

These tests count what is announced and what is expanded per step (no wall-clock limits):
a root click on an expanded tree announces only the rows in view; a filter is a reset of the
proxy, not row insertions under each expanded row; matches and View ▸ Expand All are expanded
in slices from the event loop, each slice laying out at most one bounded subtree.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from PySide6.QtCore import QEvent, QObject, Qt
from torch import nn

from tests.timeouts import GUI_EVENT_S, ms
from workbench.core.training.module_stats import ModuleStats
from workbench.gui.main_window import MainWindow
from workbench.gui.model_loading import loaded_from_model
from workbench.gui.plan.tree_columns import column_index
from workbench.gui.plan.tree_expand import SLICE_MS
from workbench.gui.plan.tree_model import LIVE_COLUMNS, PATH_ROLE, SEARCH_TEXT_ABOVE, ModuleTreeModel
from workbench.gui.plan.tree_view import EXPAND_AT_ONCE_BELOW


def wide(n: int = 120, leaves: int = 3) -> nn.Module:
    """``n`` blocks of ``leaves`` Linear(2, 2): a tree with ``n + 1`` rows that have children."""
    return nn.Sequential(*[nn.Sequential(*[nn.Linear(2, 2) for _ in range(leaves)]) for _ in range(n)])


def load(window: MainWindow, model: nn.Module, name: str = "wide") -> None:
    window.controller.set_loaded(loaded_from_model(model, name))
    window.filter_edit.clear()


def expand_all(window: MainWindow, qtbot: Any) -> None:
    window.plan_actions.act_expand_all.trigger()
    qtbot.waitUntil(lambda: not window.view.expander.busy, timeout=ms(GUI_EVENT_S))


def announced_rows(window: MainWindow) -> list[tuple[str | None, int, int]]:
    model = window.tree_model
    out: list[tuple[str | None, int, int]] = []
    model.dataChanged.connect(lambda a, b, *_: out.append((model.path(a.parent()), a.row(), b.row())))
    return out


def in_view(window: MainWindow) -> set[tuple[str | None, int]]:
    """``(parent path, row)`` of the rows in view, in the tree model."""
    rows = set()
    for idx in window.view.visible_rows():
        src = window.proxy.mapToSource(idx)
        rows.add((window.tree_model.path(src.parent()), src.row() if src.parent().isValid() else 0))
    return rows


def test_a_root_click_on_an_expanded_tree_announces_the_rows_in_view_only(window: MainWindow, qtbot: Any) -> None:
    load(window, wide())
    expand_all(window, qtbot)
    assert window.view.isExpanded(window.proxy.index(0, 0, window.proxy.index(0, 0)))
    emitted = announced_rows(window)
    view_rows = in_view(window)
    assert 5 < len(view_rows) < 200
    assert window.controller.set_value([""], "frozen", True)
    covered = {(p, r) for p, a, b in emitted for r in range(a, b + 1)}
    assert covered == view_rows  # every row in view changed (all are frozen now), none else announced
    assert len(emitted) == len({p for p, _r in view_rows})  # one run of adjacent siblings per parent in view
    # rows out of view show the new state when read
    fz = column_index("frozen")
    for path in ("119", "119.2", "60.1"):
        assert window.tree_model.index_of(path, fz).data(Qt.ItemDataRole.CheckStateRole) == Qt.CheckState.Checked
    # scrolled into view: painted from the model, with the new state
    window.plan_actions.select_path("119.2")
    assert ("119", 2) in in_view(window)


def test_a_small_change_is_announced_wherever_it_is(window: MainWindow, qtbot: Any) -> None:
    load(window, wide())
    expand_all(window, qtbot)
    emitted = announced_rows(window)
    assert window.controller.set_value(["119.2"], "frozen", True)  # out of view: a few rows, all announced
    assert ("119", 2, 2) in emitted and ("", 119, 119) in emitted


def test_live_numbers_on_an_expanded_tree_announce_the_rows_in_view(window: MainWindow, qtbot: Any) -> None:
    load(window, wide())
    expand_all(window, qtbot)
    emitted: list[tuple[int, int, int, int]] = []
    window.tree_model.dataChanged.connect(lambda a, b, *_: emitted.append((a.row(), b.row(), a.column(), b.column())))
    tree = window.controller.tree
    assert tree is not None
    paths = tuple(tree.paths())
    n = len(paths)
    window.tree_model.set_module_stats(ModuleStats(1, paths, (1.0,) * n, (1e-6,) * n, (1.0,) * n))
    rows = sum(b - a + 1 for a, b, _c, _d in emitted)
    assert rows == len(in_view(window))
    assert {c for _a, _b, c, d in emitted for c in (c, d)} <= set(LIVE_COLUMNS)


def test_a_filter_resets_the_proxy_instead_of_moving_rows(window: MainWindow, qtbot: Any) -> None:
    load(window, wide())
    expand_all(window, qtbot)
    moved: list[str] = []
    for name in ("rowsInserted", "rowsRemoved", "layoutChanged"):
        getattr(window.proxy, name).connect(lambda *a, name=name: moved.append(name))
    resets: list[int] = []
    window.proxy.modelReset.connect(lambda: resets.append(1))
    window.filter_edit.setText("7.1")  # a small tree filters at each keystroke
    window.filter_edit.clear()
    assert not moved and len(resets) == 2


def test_clearing_the_filter_keeps_the_current_row_in_view(window: MainWindow, qtbot: Any) -> None:
    load(window, wide())
    window.filter_edit.setText("97.2")
    window.plan_actions.apply_filter()
    shown = window.proxy.mapFromSource(window.tree_model.index_of("97.2"))
    assert shown.isValid() and window.view.isExpanded(shown.parent())
    window.view.setCurrentIndex(shown)
    window.filter_edit.clear()
    current = window.view.currentIndex()
    assert current.data(PATH_ROLE) == "97.2"
    assert ("97", 2) in in_view(window)
    # the rest is back at the top level
    assert not window.view.isExpanded(window.proxy.mapFromSource(window.tree_model.index_of("3")))


def test_many_matches_are_expanded_in_slices(window: MainWindow, qtbot: Any) -> None:
    n = EXPAND_AT_ONCE_BELOW // 5 + 100
    load(window, wide(n, 4))  # more rows than EXPAND_BLOCK: the root is expanded first, then each block
    expander = window.view.expander
    expander.slice_ms = 0.0  # one row a slice: however fast the machine, the first slice leaves rows
    window.filter_edit.setText("0")  # every block with a 0 in its name, and each block's first leaf
    window.plan_actions.apply_filter()
    assert expander.busy  # the rest from the event loop
    expander.slice_ms = SLICE_MS  # the rest in the app's own slices: one row a slice relays the view out per row
    top = window.proxy.index(0, 0)
    assert window.view.isExpanded(top)  # the top is shown at once
    qtbot.waitUntil(lambda: not expander.busy, timeout=ms(GUI_EVENT_S))
    assert expander.slices > 1
    for path in (f"{n - 1}", "0", "250"):
        idx = window.proxy.mapFromSource(window.tree_model.index_of(path))
        assert idx.isValid() and window.view.isExpanded(idx), path
    # a new pattern cancels what is left of the old one
    window.filter_edit.setText("1")
    window.plan_actions.apply_filter()
    window.filter_edit.setText("zzz")
    window.plan_actions.apply_filter()
    assert not expander.busy and window.proxy.rowCount() == 0


def test_expand_order_lays_out_bounded_subtrees(window: MainWindow) -> None:
    load(window, nn.Sequential(*[wide(30, 3) for _ in range(4)]))  # 4 × (1 + 30 × 4) rows under the root
    model = window.tree_model
    ids = window.proxy.rows_to_expand()
    order = model.expand_order(ids, block=50).tolist()
    assert sorted(order) == sorted(ids.tolist())
    parents = model.parent_ids()
    pos = {r: k for k, r in enumerate(order)}
    expanded: set[int] = set()
    laid_out = []
    for r in order:
        visible = all(a in expanded for a in _ancestors(parents, r))
        expanded.add(r)
        if visible:  # the view lays out r's subtree of rows already expanded
            laid_out.append(_shown_under(r, parents, expanded))
    assert max(laid_out) <= 50 + 30  # a block, or the children of a row above the blocks
    assert pos[0] < pos[1]  # above the blocks: top down


def _ancestors(parents: np.ndarray, r: int) -> list[int]:
    out = []
    p = int(parents[r])
    while p >= 0:
        out.append(p)
        p = int(parents[p])
    return out


def _shown_under(r: int, parents: np.ndarray, expanded: set[int]) -> int:
    """Rows a view lays out when ``r`` is expanded: descendants reached through expanded rows."""
    children: dict[int, list[int]] = {}
    for i, p in enumerate(parents.tolist()):
        children.setdefault(p, []).append(i)
    count, stack = 0, [r]
    while stack:
        i = stack.pop()
        for ch in children.get(i, []):
            count += 1
            if ch in expanded:
                stack.append(ch)
    return count


def test_settings_in_use_are_those_of_the_modules(window: MainWindow) -> None:
    load(window, wide(10))
    c = window.controller
    assert c.set_value(["3"], "frozen", True)
    state = c.state
    assert state is not None
    in_use = state.settings_in_use()
    every = [st.settings for st in state.nodes.values()]
    assert all(e in in_use for e in every) and all(e in every for e in in_use)
    assert len(in_use) < len(every)


def test_expand_all_shows_every_row(window: MainWindow, qtbot: Any) -> None:
    load(window, wide(8))
    expand_all(window, qtbot)
    assert window.depth_box.currentData() == -1
    idx = window.proxy.mapFromSource(window.tree_model.index_of("7"))
    assert window.view.isExpanded(idx)
    assert window.view.isExpanded(window.proxy.index(0, 0))


def _count_calls(monkeypatch: Any, names: tuple[str, ...]) -> dict[str, int]:
    """Count calls of these ``ModuleTreeModel`` methods (by Qt and by Python)."""
    counts = dict.fromkeys(names, 0)
    for name in names:
        original = getattr(ModuleTreeModel, name)

        def counted(self: Any, *a: Any, _name: str = name, _f: Any = original) -> Any:
            counts[_name] += 1
            return _f(self, *a)

        monkeypatch.setattr(ModuleTreeModel, name, counted)
    return counts


def test_a_paint_asks_the_model_once_per_cell(window: MainWindow, qtbot: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    load(window, wide())
    expand_all(window, qtbot)
    view = window.view
    rows = len(view.visible_rows())
    header, width = view.header(), view.viewport().width()
    columns = sum(  # the columns in view (a narrow window scrolls the others out)
        not header.isSectionHidden(c) and header.sectionViewportPosition(c) < width
        and header.sectionViewportPosition(c) + header.sectionSize(c) > 0
        for c in range(header.count())
    )
    counts = _count_calls(monkeypatch, ("data", "multiData", "index"))
    view.viewport().repaint()
    cells = rows * columns
    assert cells <= counts["multiData"] <= cells + columns  # every role of a cell in one call (a row may be cut)
    # one call per role (seven a cell) each mapped through the proxy would be 7 data + 7 index calls a cell
    assert counts["data"] <= rows
    assert counts["index"] <= 4 * (cells + columns)


def test_a_filter_typed_on_looks_among_the_previous_matches_only(window: MainWindow) -> None:
    load(window, wide(200))
    model = window.tree_model
    n = len(model.rows())
    assert model.search_rows("19").sum() > 0 and model.searched == n  # a first pattern: every row
    ones = int(model.searched)
    model.search_rows("19")
    assert model.searched == 0  # kept
    narrower = model.search_rows("199")
    assert 0 < model.searched < n / 10  # only the rows "19" matched (typing extends the pattern)
    assert ones == n
    model.search_rows("19")
    assert model.searched == 0  # Backspace: the kept pattern
    # the same rows as a full search, ancestors included
    full = np.array([("199" in f"{r.path} {r.type_name}") for r in model.rows()])
    parents = model.parent_ids()
    for i in np.flatnonzero(full):
        j = int(parents[i])
        while j >= 0:
            full[j] = True
            j = int(parents[j])
    assert (narrower == full).all()
    window.controller.set_loaded(loaded_from_model(wide(3), "other"))  # a new model forgets them
    model.search_rows("19")
    assert model.searched == len(model.rows())


def test_the_expand_box_says_what_a_filter_shows(window: MainWindow) -> None:
    load(window, wide(8))
    box = window.depth_box
    assert box.currentData() == 0
    window.filter_edit.setText("7.1")  # a small tree filters at each keystroke
    assert box.currentData() == -1  # every row the filter shows is expanded
    assert window.view.isExpanded(window.proxy.mapFromSource(window.tree_model.index_of("7")))
    window.filter_edit.clear()
    assert box.currentData() == 0  # back at the top level


class _SlicesAtPaint(QObject):
    """Records the expander's slice count at each paint of a viewport."""

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window = window
        self.seen: list[int] = []
        window.view.viewport().installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Paint:
            self.seen.append(self.window.view.expander.slices)
        return False


def test_the_first_slice_is_painted_before_the_next_runs(window: MainWindow, qtbot: Any) -> None:
    n = EXPAND_AT_ONCE_BELOW // 5 + 100
    load(window, wide(n, 4))
    window.view.expander.slice_ms = 0.0  # one row a slice: many slices whatever the machine's speed
    seen = _SlicesAtPaint(window)
    window.filter_edit.setText("10")  # blocks 10, 100-109, 110, 210, …: some 70 rows to expand
    window.plan_actions.apply_filter()
    expander = window.view.expander
    assert expander.busy and expander.slices == 1
    qtbot.waitUntil(lambda: not expander.busy, timeout=ms(GUI_EVENT_S))
    assert expander.slices > 2
    assert seen.seen and seen.seen[0] == 1  # the top of the matches on screen before any other slice


def test_a_large_tree_makes_its_filter_text_once_idle(window: MainWindow, qtbot: Any) -> None:
    load(window, wide(SEARCH_TEXT_ABOVE // 4 + 1))  # more rows than SEARCH_TEXT_ABOVE
    model = window.tree_model
    qtbot.waitUntil(lambda: model._search is not None, timeout=ms(GUI_EVENT_S))  # made without a filter
    text = model.search_text()
    window.filter_edit.setText("7.1")
    window.plan_actions.apply_filter()
    assert model.search_text() is text and model.searched == len(model.rows())  # looked in, not made again
    load(window, wide(3))
    assert not model._search_timer.isActive()  # a small tree makes it when a filter asks
