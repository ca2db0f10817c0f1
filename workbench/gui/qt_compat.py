"""Work-arounds for defects of the installed Qt bindings, applied once per process.

``protect_none_refcount``: shiboken6 6.12.0 (the ``abi3`` wheels) hands ``None`` back from
every ``void`` Qt method without taking a reference to it, and loses references to ``True`` on
some paths too (a pyqtgraph ``setData`` loses about two). On Python 3.12+ these objects are
immortal and nothing happens; on Python 3.11 each such call (``widget.update()``,
``setText``, every ``setData`` of a plot curve, ...) lowers the reference count by one, and
after some ten thousand calls the interpreter aborts with ``Fatal Python error: none_dealloc``
(or ``bool_dealloc``). A window that redraws live plots 15 times a second gets there in well
under a minute.

The fix gives ``None``, ``True`` and ``False`` reference counts so large that those losses
can never bring them to zero (what 3.12 does by design). It is applied only when a probe
shows the loss: a few ``QObject.setObjectName`` calls must each lose one reference to ``None``.
"""

from __future__ import annotations

import ctypes
import sys

__all__ = ["none_refcount_leaks", "protect_none_refcount"]

_PROTECTED = False
#: References added to each singleton (about 10¹²: at a million lost references per second it
#: would take twelve days to use them up).
_EXTRA_REFS = 1 << 40


def none_refcount_leaks(calls: int = 64) -> bool:
    """Whether calling a ``void`` Qt method loses a reference to ``None``.

    Args:
        calls: how many probe calls to make.

    Returns:
        True when every call lost one reference (the shiboken6 6.12.0 defect).
    """
    if sys.version_info >= (3, 12):  # None is immortal: nothing to lose
        return False
    from PySide6.QtCore import QObject

    probe = QObject()
    before = sys.getrefcount(None)
    for _ in range(calls):
        probe.setObjectName("refcount-probe")
    lost = before - sys.getrefcount(None)
    probe.setObjectName("")
    return lost >= calls


def protect_none_refcount() -> bool:
    """Make ``None``, ``True`` and ``False`` immortal in practice when the Qt bindings lose references.

    Idempotent and cheap after the first call; does nothing on Python 3.12+, on debug
    builds of Python, or when the probe finds no leak.

    Returns:
        True when the protection was applied by this call.
    """
    global _PROTECTED
    if _PROTECTED:
        return False
    _PROTECTED = True
    if hasattr(sys, "gettotalrefcount") or not none_refcount_leaks():
        return False  # a debug build lays objects out differently; or nothing to fix
    # ob_refcnt is the first field of every object in release builds of CPython 3.11
    for singleton in (None, True, False):
        ctypes.c_ssize_t.from_address(id(singleton)).value += _EXTRA_REFS
    return True
