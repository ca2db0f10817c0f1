"""Python's cyclic garbage collector held off around passes that make millions of objects (Qt-free).

A meta copy of a 50,000-module model makes millions of Python objects (modules, dicts, meta
tensors), none of them cyclic garbage: each is freed by reference counting when the copy goes.
While they are made, the collector still runs its full collections over every object alive, the
copy included, each one longer than the last (up to a second on such a model), holding the
interpreter lock the whole time: another thread (a window answering a click) waits for it, and
the pass itself takes about a third longer. :func:`collector_paused` holds the collector off for
the pass; nested and concurrent passes keep it off until the last one ends.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextmanager
def collector_paused() -> Iterator[None]:
    """Hold off the cyclic garbage collector for the ``with`` block (all threads of the process).

    Explicit ``gc.collect()`` calls still collect. The collector's state before the first of
    nested or concurrent blocks is restored when the last ends.

    Yields:
        None.
    """
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
