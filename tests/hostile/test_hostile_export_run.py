"""``workbench export --run FOLDER``: hostile run folders are refused in one line, nothing hangs or runs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from workbench.core.export import ExportError
from workbench.core.export.from_run import load_run


def _refused(folder: Path) -> str:
    with pytest.raises(ExportError) as info:
        load_run(folder)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_truncated_non_utf8_nested_and_huge_records(tmp_path: Path):
    cases = {
        "truncated": b'{"format": "workbench-run", "config": {',
        "non_utf8": b'{"format": "workbench-run", "name": "\xff\xfe"}',
        "nested": b"[" * 100_000 + b"]" * 100_000,
        "huge": b'{"format": "workbench-run", "notes": "' + b"x" * (80 * 2**20) + b'"}',
    }
    for name, data in cases.items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / "run.json").write_bytes(data)
        assert "unreadable run" in _refused(folder), name


def test_fifo_and_symlinked_files_do_not_hang(tmp_path: Path):
    fifo_run = tmp_path / "fifo"
    fifo_run.mkdir()
    os.mkfifo(fifo_run / "run.json")
    _refused(fifo_run)
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "config.json").symlink_to(tmp_path / "nowhere.json")
    assert "not a run folder" in _refused(linked)


def test_code_named_by_a_run_record_never_runs(tmp_path: Path):
    marker = tmp_path / "ran"
    (tmp_path / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('x')\ndef make():\n    raise SystemExit\n")
    folder = tmp_path / "run"
    folder.mkdir()
    record = {"format": "workbench-run", "version": 1, "id": "run", "name": "#1", "config": {"model": f"py:{tmp_path / 'evil.py'}:make", "data": "py:evil:data",
                                                    "steps": 2}, "plan": {"rules": []}}
    (folder / "run.json").write_text(json.dumps(record))
    try:
        saved = load_run(folder)
    except ExportError:
        saved = None
    if saved is not None:
        from workbench.core.export import render_script

        with pytest.raises(Exception):  # noqa: B017 - refused by the model layer or the data rule, never run
            render_script(saved.plan, saved.spec, config=saved.config)
    assert not marker.exists()
