"""Persistent window settings: recent files, geometry, the cost panel's optimizer.

Stored with ``QSettings`` (INI format) under :data:`ORGANIZATION` / :data:`APPLICATION`.
Tests redirect the location with ``QSettings.setPath`` so they never touch the user's files.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings

__all__ = ["APPLICATION", "MAX_RECENT", "ORGANIZATION", "add_recent", "recent_files", "settings", "settings_problem"]

ORGANIZATION = "FreezeWorkbench"
APPLICATION = "Freeze Workbench"
#: How many recent files the File menu lists.
MAX_RECENT = 8


def settings() -> QSettings:
    """The application's settings store (INI file in the user's config folder).

    Returns:
        A ``QSettings``; changes are written when it is destroyed or synced.
    """
    return QSettings(QSettings.Format.IniFormat, QSettings.Scope.UserScope, ORGANIZATION, APPLICATION)


def settings_problem(store: QSettings | None = None) -> str | None:
    """Why the stored settings were ignored (unreadable or malformed file), if they were.

    Args:
        store: settings to check (default: :func:`settings`).

    Returns:
        One line for the window to show once, or None when the settings were read.
    """
    store = store or settings()
    status = store.status()
    if status == QSettings.Status.NoError:
        return None
    why = "could not be read" if status == QSettings.Status.AccessError else "is malformed"
    return (
        f"the settings file {store.fileName()} {why}: defaults are used and changes may not be "
        "kept; check its permissions, or delete it"
    )


def recent_files(store: QSettings | None = None) -> list[str]:
    """Recently opened or saved plan and checkpoint files that still exist, newest first.

    Args:
        store: settings to read (default: :func:`settings`).

    Returns:
        Up to :data:`MAX_RECENT` paths.
    """
    store = store or settings()
    raw = store.value("recentFiles", [])
    if isinstance(raw, str):  # QSettings returns a lone string for a one-element list
        raw = [raw]
    items = raw if isinstance(raw, list) else []
    return [p for p in items if isinstance(p, str) and Path(p).is_file()][:MAX_RECENT]


def add_recent(path: str | Path, store: QSettings | None = None) -> list[str]:
    """Put ``path`` first in the recent-files list.

    Args:
        path: the file just opened or saved.
        store: settings to update (default: :func:`settings`).

    Returns:
        The new list.
    """
    store = store or settings()
    p = str(Path(path).resolve())
    files = [p] + [f for f in recent_files(store) if f != p]
    files = files[:MAX_RECENT]
    store.setValue("recentFiles", files)
    store.sync()
    return files
