"""Every timeout of the test suite, in one place.

A timeout here is a ceiling for a wait on a condition (``qtbot.waitUntil``, ``waitSignal``,
``subprocess.run(timeout=...)``), never a measurement: a test that passes on a quiet machine
in 2 s waits up to these values on a loaded one and still passes. They are generous on
purpose; a wait that reaches one is a hang, not a slow machine.

``WORKBENCH_TEST_TIMEOUT_SCALE`` (a number, default 1) multiplies all of them, for machines
slower still (emulated CPUs, valgrind).
"""

from __future__ import annotations

import os

_SCALE = float(os.environ.get("WORKBENCH_TEST_TIMEOUT_SCALE", "1") or 1)


def _s(seconds: float) -> float:
    return seconds * _SCALE


#: a GUI condition that needs only the event loop (a repaint, a debounced save): seconds
GUI_EVENT_S = _s(30)
#: a GUI condition that waits on a worker thread's computation (a profile, a model build): seconds
GUI_WORKER_S = _s(300)
#: a short training run driven from the GUI to its end: seconds
GUI_RUN_S = _s(600)
#: a subprocess running the CLI or a short script (imports torch, builds a small model): seconds
SUBPROCESS_S = _s(900)
#: a subprocess that trains or launches several processes (torchrun, exported scripts): seconds
SUBPROCESS_LONG_S = _s(1800)
#: one documentation block of tests/docs (a fresh interpreter or shell): seconds
DOC_BLOCK_S = _s(900)
#: the suite's preloaded interpreter importing torch, torchvision and the workbench: seconds
PRELOAD_START_S = _s(300)
#: a family of catastrophic regular expressions matched against 200 module paths (a backtracking
#: matcher takes hours; the linear-time one, well under a second): seconds
REGEX_FAMILY_S = _s(120)
#: a save-folder recovery reading a hostile journal (a FIFO, /dev/zero): seconds
RECOVERY_S = _s(120)
#: a download on a machine without network must fail by then, not hang: seconds
OFFLINE_FAILURE_S = _s(120)


def ms(seconds: float) -> int:
    """A timeout in seconds as the milliseconds pytest-qt takes.

    Args:
        seconds: one of the constants above.

    Returns:
        Whole milliseconds.
    """
    return int(seconds * 1000)
