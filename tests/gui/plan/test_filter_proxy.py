"""The tree filter matches on the tree's names and asks the proxy only about rows near what it shows."""

from __future__ import annotations

import random
from typing import Any

from PySide6.QtCore import QModelIndex
from torch import nn

from tests.gui.plan.test_tree_model import make
from workbench.gui.plan.tree_model import PATH_ROLE, ModuleFilterProxy, ModuleTreeModel


class _Counting(ModuleFilterProxy):
    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def filterAcceptsRow(self, source_row: int, source_parent: Any) -> bool:
        self.asked += 1
        return super().filterAcceptsRow(source_row, source_parent)


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


def test_filter_asks_only_about_the_children_of_shown_rows() -> None:
    _, m = make(_nested(), "nested")
    proxy = _Counting()
    proxy.setSourceModel(m)
    proxy.set_pattern("3.7.5")
    proxy.asked = 0
    assert _shown(proxy) == {"", "3", "3.7", "3.7.5"}
    # the root, its 10 children, the 10 of "3", the 11 of "3.7", none of the leaf: not the 1,111 rows
    assert proxy.asked <= 1 + 10 + 10 + 11
    proxy.set_pattern("")
    assert len(_shown(proxy)) == len(m.rows())


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
