"""The tree filter matches on the tree's names, lays out the rows it shows once, and answers a
view from that layout: the calls a view makes to lay out a filtered tree are counted per row
it shows, not per row of the tree (nor per sibling of a row shown)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from PySide6.QtCore import QModelIndex, Qt
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import QTreeView
from torch import nn

from tests.gui.plan.test_tree_model import make
from workbench.gui.plan.tree_model import PATH_ROLE, Column, ModuleFilterProxy, ModuleTreeModel


def _nested() -> nn.Module:
    """10 × 10 × 10 ``Linear`` in nested ``Sequential``s (1,111 modules), a ``ReLU`` per block."""
    return nn.Sequential(*[
        nn.Sequential(*[nn.Sequential(*[nn.Linear(2, 2) for _ in range(10)], nn.ReLU()) for _ in range(10)])
        for _ in range(10)
    ])


def _shown(proxy: ModuleFilterProxy) -> set[str]:
    """The paths of every row the proxy shows (walking it as an expanded view does)."""
    out: set[str] = set()
    stack = [QModelIndex()]
    while stack:
        parent = stack.pop()
        for r in range(proxy.rowCount(parent)):
            idx = proxy.index(r, 0, parent)
            out.add(idx.data(PATH_ROLE))
            stack.append(idx)
    return out


def _expected(m: ModuleTreeModel, text: str) -> set[str]:
    """Brute force: rows whose path or class name contains ``text`` (any case), with their ancestors."""
    rows = m.rows()
    hits = {n.path for n in rows if text.casefold() in f"{n.path} {n.type_name}".casefold()}
    out = set(hits)
    for n in rows:
        if n.path in hits:
            p = n.parent
            while p is not None:
                out.add(p.path)
                p = p.parent
    return out


def _count_calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the calls into the tree model's and the proxy's Python methods that answer a view's
    questions about rows (by Qt and by Python)."""
    counts: dict[str, int] = {}
    names = ("index", "parent", "rowCount", "hasChildren", "sibling", "row_id", "filterAcceptsRow", "mapToSource",
             "mapFromSource")
    for cls in (ModuleTreeModel, ModuleFilterProxy):
        for name in names:
            if name not in cls.__dict__:  # Qt's own (C++) method: no call into Python
                continue
            original = cls.__dict__[name]
            key = f"{cls.__name__}.{name}"
            counts[key] = 0

            def counted(self: Any, *a: Any, _key: str = key, _f: Any = original) -> Any:
                counts[_key] += 1
                return _f(self, *a)

            monkeypatch.setattr(cls, name, counted)
    return counts


def _wide(blocks: int, leaves: int) -> nn.Module:
    return nn.Sequential(*[nn.Sequential(*[nn.Linear(2, 2) for _ in range(leaves)]) for _ in range(blocks)])


def test_a_view_lays_out_a_filter_with_calls_per_row_shown(qtbot: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _, m = make(_wide(10, 200), "wide")  # 2,011 rows; the filter shows one leaf of each block
    proxy = ModuleFilterProxy()
    proxy.setSourceModel(m)
    view = QTreeView()
    qtbot.addWidget(view)
    view.resize(400, 2000)  # every row shown is in view
    view.setModel(proxy)
    view.show()
    shown = {"", *(str(b) for b in range(10)), *(f"{b}.199" for b in range(10))}
    counts = _count_calls(monkeypatch)
    proxy.set_pattern(".199")
    view.expandAll()
    view.viewport().repaint()
    calls = sum(counts.values())
    assert _shown(proxy) == shown
    # each of the 21 rows shown is asked about a few times; a filter proxy that asked about every
    # child of each row it mapped asked about the 199 siblings of each leaf shown: 2,000 calls
    assert 0 < calls <= 4 * len(shown), counts


def test_the_filter_passes_on_changes_of_the_rows_it_shows(qtbot: Any) -> None:
    c, m = make(_nested(), "nested")
    proxy = ModuleFilterProxy()
    proxy.setSourceModel(m)
    proxy.set_pattern("3.7.")
    changed: list[tuple[str, str, int, int]] = []
    proxy.dataChanged.connect(
        lambda a, b, *_: changed.append((a.data(PATH_ROLE), b.data(PATH_ROLE), a.row(), b.row()))
    )
    assert c.set_value(["3"], "frozen", True)
    covered = {path for first, last, _a, _b in changed for path in (first, last)}
    assert covered and covered <= _shown(proxy)  # only rows the filter shows, at their rows in the proxy
    for first, _last, row, _b in changed:
        idx = proxy.mapFromSource(m.index_of(first))
        assert idx.row() == row
    fz = proxy.mapFromSource(m.index_of("3.7.5", Column.FROZEN))
    assert fz.data(Qt.ItemDataRole.CheckStateRole) == Qt.CheckState.Checked


def test_qtmodeltester_under_filters(qtmodeltester: Any) -> None:
    c, m = make(_nested(), "nested")
    proxy = ModuleFilterProxy()
    proxy.setSourceModel(m)
    for text in ("relu", "3.7", "", "nothing such"):
        proxy.set_pattern(text)
        qtmodeltester.check(proxy)
    proxy.set_pattern("9.9")
    c.set_value(["9"], "frozen", True)
    qtmodeltester.check(proxy)


def test_the_filter_refuses_another_model_in_one_line() -> None:
    with pytest.raises(TypeError, match="module tree model, not a QStandardItemModel"):
        ModuleFilterProxy().setSourceModel(QStandardItemModel())


def test_filter_shows_exactly_the_matches_and_their_ancestors() -> None:
    _, m = make(_nested(), "nested")
    proxy = ModuleFilterProxy()
    proxy.setSourceModel(m)
    rnd = random.Random(7)
    patterns = ["relu", "LINEAR", "sequential", "1.1", "9.9.10", ".0", "nothing such", " 2.3 "]
    patterns += [rnd.choice(m.rows()).path[-rnd.randint(1, 4):] for _ in range(20)]
    for text in patterns:
        proxy.set_pattern(text)
        expected = _expected(m, text.strip()) if text.strip() else {n.path for n in m.rows()}
        assert _shown(proxy) == expected, text


def test_a_new_model_under_a_pattern_is_filtered_by_its_own_names() -> None:
    c, m = make(_nested(), "nested")
    proxy = ModuleFilterProxy()
    proxy.setSourceModel(m)
    proxy.set_pattern("relu")
    assert "0.0.10" in _shown(proxy)
    from workbench.gui.model_loading import loaded_from_model

    c.set_loaded(loaded_from_model(nn.Sequential(nn.Linear(2, 2), nn.ReLU()), "small"))
    assert _shown(proxy) == {"", "1"}
