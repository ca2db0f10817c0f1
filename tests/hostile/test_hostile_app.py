"""The app always starts: broken run folders are listed as unreadable, store and settings problems said once."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hostile.makers import nested_json
from workbench.core.runs.store import RunStore


def _good_run(store: RunStore) -> None:
    store.save(store.new_record("#1 ok"))


def test_deeply_nested_run_json_is_listed_as_unreadable(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    _good_run(store)
    bad = tmp_path / "20200101-000000-dead"
    bad.mkdir()
    (bad / "run.json").write_text(nested_json(100_000))
    records, problems = store.list()
    assert [r.name for r in records] == ["#1 ok"]
    assert len(problems) == 1 and "unreadable run" in problems[0] and "nested" in problems[0]


@pytest.mark.parametrize("content", ['{"format": "workbench-run", "version": 1, "id": 5, "name": []}', "[1, 2]", "\x00\xff"])
def test_malformed_run_json_never_raises(tmp_path: Path, content: str) -> None:
    store = RunStore(tmp_path)
    bad = tmp_path / "x"
    bad.mkdir()
    (bad / "run.json").write_text(content, errors="surrogateescape")
    records, problems = store.list()
    assert records == [] and len(problems) == 1


def test_run_json_that_is_a_device_or_folder(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    (tmp_path / "a" / "run.json").mkdir(parents=True)  # a folder named run.json: not a run, skipped
    records, problems = store.list()
    assert records == [] and problems == []


@pytest.mark.skipif(os.geteuid() == 0 if hasattr(os, "geteuid") else True, reason="root reads any folder")
def test_unreadable_run_folder_is_listed(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0)
    try:
        _, problems = store.list()
        assert len(problems) == 1 and "unreadable run folder" in problems[0]
    finally:
        locked.chmod(0o700)


def test_store_that_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "runs"
    f.write_text("")
    store = RunStore(f)
    assert "is a file" in (store.problem() or "")
    assert store.list() == ([], [store.problem()])


@pytest.fixture
def private_settings(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    from PySide6.QtCore import QSettings

    folder = tmp_path / "settings"
    folder.mkdir()
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(folder))
    yield folder
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(tmp_path_factory.mktemp("qsettings")))


def test_window_says_ignored_settings_and_file_store(qtbot, private_settings: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from workbench.gui import settings as app_settings
    from workbench.gui.main_window import MainWindow

    ini = private_settings / app_settings.ORGANIZATION / f"{app_settings.APPLICATION}.ini"
    ini.parent.mkdir(parents=True)
    ini.write_bytes(b"[General]\n\x00\xff\xfe=\n[[[\nkey")
    runs = tmp_path / "runs"
    runs.write_text("not a folder")
    monkeypatch.setenv("WORKBENCH_RUNS_DIR", str(runs))
    window = MainWindow(load_default=False)
    qtbot.addWidget(window)
    notices = window.startup_notices
    assert len(notices) == 2 and "settings file" in notices[0] and "is a file" in notices[1]
    assert "is a file" in window.statusBar().currentMessage()


def test_settings_problem_none_when_fine(private_settings: Path) -> None:
    from workbench.gui import settings as app_settings

    assert app_settings.settings_problem() is None


def test_unreadable_run_folder_is_listed_whoever_runs_the_tests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from workbench.core.runs import store as store_module

    store = RunStore(tmp_path)
    locked = tmp_path / "locked"
    locked.mkdir()
    real = store_module.os.access
    monkeypatch.setattr(store_module.os, "access", lambda p, mode: False if Path(p) == locked else real(p, mode))
    _, problems = store.list()
    assert len(problems) == 1 and "unreadable run folder" in problems[0]


@pytest.mark.parametrize("content", ["deep", "/dev/zero"])
def test_window_opening_a_hostile_plan_shows_one_error(qtbot, private_settings: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch, content: str) -> None:
    from workbench.gui import dialogs
    from workbench.gui.main_window import MainWindow

    shown: list[tuple[str, str]] = []
    monkeypatch.setattr(dialogs, "error", lambda parent, title, message, details=None: shown.append((title, message)))
    if content == "deep":
        path = tmp_path / "deep.json"
        path.write_text('{"rules": ' + nested_json(100_000) + "}")
    elif not os.path.exists(content):
        pytest.skip("no /dev/zero here")
    else:
        path = Path(content)
    window = MainWindow(load_default=False)
    qtbot.addWidget(window)
    assert window.documents.open_plan(str(path)) is False
    assert len(shown) == 1 and shown[0][0] == "Cannot open plan"
    assert ("nested" if content == "deep" else "not a regular file") in shown[0][1]
