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

_SOURCE, _NAME = "torchvision", "resnet18"


def _valid(rows: Any = None, **changes: Any) -> str:
    versions = tc.library_versions()
    data: dict[str, Any] = {
        "format": tc.TREE_CACHE_FORMAT, "version": 1, "model": {"source": _SOURCE, "name": _NAME, "weights": None},
        "versions": versions, "rows": rows if rows is not None else [["", "ResNet", 0, -1], ["fc", "Linear", 10, 0]],
    }
    data.update(changes)
    return json.dumps(data)


def _rows(*rows: list[Any]) -> str:
    return _valid([list(r) for r in rows])


_BAD_TEXT: dict[str, str | bytes] = {
    "truncated": _valid()[:-20],
    "non-UTF-8": b'{"format": "workbench-tree-cache", "\xff\xfe": 1}',
    "empty": "",
    "nested deep": nested_json(5000),
    "not an object": "[1, 2, 3]",
    "other format": _valid(format="freeze-plan"),
    "other format version": _valid(version=2),
    "other model": _valid(model={"source": _SOURCE, "name": "resnet50", "weights": None}),
    "weights not text": _valid(model={"source": _SOURCE, "name": _NAME, "weights": 7}),
    "other versions": _valid(versions={"app": "0.0", "torch": "1.0", "torchvision": "0.1", "timm": "0.1"}),
    "no versions": _valid(versions=None),
    "no rows": _valid([]),
    "rows not a list": _valid(rows={"": 1}),
    "row too short": _rows(["", "ResNet", 0]),
    "count as text": _rows(["", "ResNet", "0", -1]),
    "count as bool": _rows(["", "ResNet", True, -1]),
    "count as float": _rows(["", "ResNet", 1.5, -1]),
    "negative count": _rows(["", "ResNet", -1, -1]),
    "empty class": _rows(["", "", 0, -1]),
    "huge class name": _rows(["", "R" * 100_000, 0, -1]),
    "root not first": _rows(["fc", "Linear", 0, -1]),
    "two roots": _rows(["", "ResNet", 0, -1], ["", "ResNet", 0, -1]),
    "parent after the row": _rows(["", "ResNet", 0, -1], ["fc", "Linear", 0, 2], ["fc.x", "Linear", 0, 1]),
    "parent of itself": _rows(["", "ResNet", 0, -1], ["fc", "Linear", 0, 1]),
    "parent out of range": _rows(["", "ResNet", 0, -1], ["fc", "Linear", 0, -5]),
    "path not under its parent": _rows(["", "R", 0, -1], ["a", "S", 0, 0], ["b.c", "L", 0, 1]),
    "two segments at once": _rows(["", "R", 0, -1], ["a.b", "L", 0, 0]),
    "empty segment": _rows(["", "R", 0, -1], ["a", "S", 0, 0], ["a.", "L", 0, 1]),
    "duplicate path": _rows(["", "R", 0, -1], ["a", "L", 1, 0], ["a", "L", 1, 0]),
    "not pre-order": _rows(["", "R", 0, -1], ["a", "S", 0, 0], ["b", "S", 0, 0], ["a.x", "L", 0, 1]),
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
    assert cached.total_params == (10, 10)


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
    rows = [["", "R", 0, -1]] + [[f"m{i}", "L", 1, 0] for i in range(tc.MAX_CACHED_ROWS)]
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
    rows = [tc.TreeRow("", "R", 0, -1)]
    with pytest.raises(OSError):
        tc.write_tree(_SOURCE, _NAME, None, rows, folder=blocker)
    assert blocker.read_text(encoding="utf-8") == "a file where the folder would be"


@pytest.mark.parametrize("case", ["truncated", "not pre-order", "other versions"])
def test_the_app_starts_as_without_a_description(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 qtbot: Any) -> None:
    from workbench.gui.app import _described_tree
    from workbench.gui.startup import StartupWindow

    monkeypatch.setenv(tc.CACHE_DIR_ENV, str(tmp_path))
    path = tc.cache_file(_SOURCE, _NAME, tmp_path)
    path.parent.mkdir(parents=True)
    content = _BAD_TEXT[case]
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    preview = _described_tree(_NAME)
    assert preview is None
    shell = StartupWindow(_NAME, preview=preview)  # today's path: the empty tree saying what loads
    qtbot.addWidget(shell)
    assert shell.tree.topLevelItemCount() == 0 and not shell.notice.isVisibleTo(shell)
    assert shell.loading_label.text() == "Loading PyTorch and resnet18…"
