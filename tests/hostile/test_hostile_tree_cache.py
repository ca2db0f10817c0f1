"""Hostile start-up tree descriptions: each is ignored, in one line, and the app starts as without one."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.hostile.makers import nested_json
from workbench.core.models import tree_cache as tc
from workbench.core.plan.tree import ModelTree

_SOURCE, _NAME = "torchvision", "resnet18"


def _m(path: str, cls: str, parent: int, own: Any = 0, *, trainable: Any = None, flags: Any = 4) -> list[Any]:
    """One module row of a description (``ModelTree.to_dict``)."""
    return [path, cls, [cls], parent, 0, own, own if trainable is None else trainable, [], flags]


def _valid(rows: Any = None, **changes: Any) -> str:
    versions = tc.library_versions()
    modules = rows if rows is not None else [_m("", "ResNet", -1), _m("fc", "Linear", 0, 10)]
    tree = {"modules": modules, "parameters": [["fc.weight", [10], None]], "fingerprint": "f"}
    data: dict[str, Any] = {
        "format": tc.TREE_CACHE_FORMAT, "version": 2, "model": {"source": _SOURCE, "name": _NAME, "weights": None},
        "versions": versions, "tree": tree,
    }
    data.update(changes)
    return json.dumps(data)


def _rows(*rows: list[Any]) -> str:
    return _valid([list(r) for r in rows])


def _tree(**changes: Any) -> str:
    tree: dict[str, Any] = {"modules": [_m("", "ResNet", -1)], "parameters": [], "fingerprint": "f"}
    tree.update(changes)
    return _valid(tree=tree)


_BAD_TEXT: dict[str, str | bytes] = {
    "truncated": _valid()[:-20],
    "non-UTF-8": b'{"format": "workbench-tree-cache", "\xff\xfe": 1}',
    "empty": "",
    "nested deep": nested_json(5000),
    "not an object": "[1, 2, 3]",
    "other format": _valid(format="freeze-plan"),
    "other format version": _valid(version=1),
    "other model": _valid(model={"source": _SOURCE, "name": "resnet50", "weights": None}),
    "weights not text": _valid(model={"source": _SOURCE, "name": _NAME, "weights": 7}),
    "other versions": _valid(versions={"app": "0.0", "torch": "1.0", "torchvision": "0.1", "timm": "0.1"}),
    "no versions": _valid(versions=None),
    "no tree": _valid(tree=None),
    "tree not an object": _valid(tree=[1]),
    "no rows": _valid([]),
    "rows not a list": _valid(rows={"": 1}),
    "parameters not a list": _tree(parameters={"a": 1}),
    "parameter row too short": _tree(parameters=[["w", [1]]]),
    "negative dimension": _tree(parameters=[["w", [-1], None]]),
    "layer as text": _tree(parameters=[["w", [1], "0"]]),
    "no fingerprint": _tree(fingerprint=None),
    "row too short": _rows(["", "ResNet", ["ResNet"], -1]),
    "count as text": _rows(_m("", "ResNet", -1, "0")),
    "count as bool": _rows(_m("", "ResNet", -1, True)),
    "count as float": _rows(_m("", "ResNet", -1, 1.5)),
    "negative count": _rows(_m("", "ResNet", -1, -1)),
    "more trainable than parameters": _rows(_m("", "ResNet", -1, 1, trainable=2)),
    "unknown flags": _rows(_m("", "ResNet", -1, flags=64)),
    "classes not text": _rows(["", "ResNet", [1], -1, 0, 0, 0, [], 4]),
    "empty class": _rows(_m("", "", -1)),
    "huge class name": _rows(_m("", "R" * 100_000, -1)),
    "root not first": _rows(_m("fc", "Linear", -1)),
    "two roots": _rows(_m("", "ResNet", -1), _m("", "ResNet", -1)),
    "parent after the row": _rows(_m("", "ResNet", -1), _m("fc", "Linear", 2), _m("fc.x", "Linear", 1)),
    "parent of itself": _rows(_m("", "ResNet", -1), _m("fc", "Linear", 1)),
    "parent out of range": _rows(_m("", "ResNet", -1), _m("fc", "Linear", -5)),
    "path not under its parent": _rows(_m("", "R", -1), _m("a", "S", 0), _m("b.c", "L", 1)),
    "two segments at once": _rows(_m("", "R", -1), _m("a.b", "L", 0)),
    "empty segment": _rows(_m("", "R", -1), _m("a", "S", 0), _m("a.", "L", 1)),
    "duplicate path": _rows(_m("", "R", -1), _m("a", "L", 0, 1), _m("a", "L", 0, 1)),
    "not pre-order": _rows(_m("", "R", -1), _m("a", "S", 0), _m("b", "S", 0), _m("a.x", "L", 1)),
}


@pytest.mark.parametrize("case", sorted(_BAD_TEXT))
def test_a_broken_description_is_ignored_in_one_line(case: str, tmp_path: Path) -> None:
    path = tc.cache_file(_SOURCE, _NAME, tmp_path)
    path.parent.mkdir(parents=True)
    content = _BAD_TEXT[case]
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(tc.TreeCacheError) as info:
        tc.read_tree_checked(_SOURCE, _NAME, folder=tmp_path)
    assert "\n" not in str(info.value) and "Traceback" not in str(info.value)
    assert tc.read_tree(_SOURCE, _NAME, folder=tmp_path) is None


def test_the_valid_text_of_these_cases_is_read(tmp_path: Path) -> None:
    # the cases above break one thing each in a description that is otherwise read
    path = tc.cache_file(_SOURCE, _NAME, tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(_valid(), encoding="utf-8")
    cached = tc.read_tree_checked(_SOURCE, _NAME, folder=tmp_path)
    assert [n.total_params for n in cached.tree.root.walk()] == [10, 10]


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _symlink(path: Path) -> None:
    target = path.parent / "elsewhere.json"
    target.write_text(_valid(), encoding="utf-8")
    path.symlink_to(target)


def _folder(path: Path) -> None:
    path.mkdir()


def _huge(path: Path) -> None:
    with open(path, "wb") as f:
        f.truncate(tc.MAX_CACHE_BYTES + 1)  # sparse: larger than the cap, read no further


def _too_many_rows(path: Path) -> None:
    rows = [_m("", "R", -1)] + [_m(f"m{i}", "L", 0, 1) for i in range(tc.MAX_CACHED_ROWS)]
    path.write_text(_valid(rows), encoding="utf-8")


_BAD_FILES: dict[str, Callable[[Path], None]] = {
    "FIFO": _fifo, "symlink": _symlink, "folder": _folder, "huge": _huge, "too many rows": _too_many_rows,
}


@pytest.mark.parametrize("case", sorted(_BAD_FILES))
def test_a_description_that_is_not_a_plain_small_file_is_not_read(case: str, tmp_path: Path) -> None:
    if case == "FIFO" and not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    path = tc.cache_file(_SOURCE, _NAME, tmp_path)
    path.parent.mkdir(parents=True)
    _BAD_FILES[case](path)
    with pytest.raises(tc.TreeCacheError) as info:  # a FIFO with no writer would block a plain open
        tc.read_tree_checked(_SOURCE, _NAME, folder=tmp_path)
    assert "\n" not in str(info.value)
    assert tc.read_tree(_SOURCE, _NAME, folder=tmp_path) is None


def test_an_unwritable_cache_folder_loses_nothing_but_the_description(tmp_path: Path) -> None:
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the folder would be", encoding="utf-8")
    tree = ModelTree.from_dict(json.loads(_valid())["tree"])
    with pytest.raises(OSError):
        tc.write_tree(_SOURCE, _NAME, None, tree, folder=blocker)
    assert blocker.read_text(encoding="utf-8") == "a file where the folder would be"


@pytest.mark.parametrize("case", ["truncated", "not pre-order", "other versions"])
def test_the_app_starts_as_without_a_description(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 qtbot: Any) -> None:
    from workbench.gui import app
    from workbench.gui.startup import StartupWindow

    monkeypatch.setenv(tc.CACHE_DIR_ENV, str(tmp_path))
    path = tc.cache_file(_SOURCE, _NAME, tmp_path)
    path.parent.mkdir(parents=True)
    content = _BAD_TEXT[case]
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    preview = app._described_tree(_NAME)
    assert preview is not None and preview.shipped  # the broken one ignored: the tree the app ships
    shipped = tmp_path / "shipped.json"
    shipped.write_text(str(_BAD_TEXT["truncated"]), encoding="utf-8")
    monkeypatch.setattr(app, "resource_path", lambda *parts: shipped)  # and that one broken too
    assert app._described_tree(_NAME) is None
    shell = StartupWindow(_NAME, preview=None)  # today's path: the empty tree saying what loads
    qtbot.addWidget(shell)
    assert shell.described is None and shell.tree.model().rowCount() == 0 and not shell.notice.isVisibleTo(shell)
    assert shell.loading_label.text() == "Loading PyTorch and resnet18…"
