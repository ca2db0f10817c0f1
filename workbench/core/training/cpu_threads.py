"""Which thread of a process gets torch's CPU threads (intra-op parallelism).

A process with an interactive thread (the desktop app's GUI thread) and a worker thread that
trains should give the cores to the worker. torch's CPU build runs its parallel ops on OpenMP
(libgomp), which keeps one team of helper threads *per thread that starts parallel work*, and
counts the threads of all teams together: once there are more of them than cores, every team
stops spinning between parallel regions and sleeps instead, so each of the hundreds of
parallel regions of a training step pays a wake-up. On a 2-core machine resnet18 trained on
a worker thread, after the main thread had run parallel ops too, took about 17 % longer per
step than the same run on the main thread (``tests/benchmarks/bench_cpu_threads.py``).

The fix is to keep the interactive thread serial: :func:`reserve_cores_for_workers` makes the
calling thread run torch ops on one thread (so it never starts a team) before it runs any, and
:func:`use_worker_threads` gives each worker thread the count torch would have used. Other
processes (``workbench train``, scripts) need neither.

torch keeps the thread count per thread and sets a new thread's count lazily, on its first
parallel op, from the last value anyone set; both functions settle that lazy set-up first so
that it cannot later undo what they set.
"""

from __future__ import annotations

import threading

__all__ = ["reserve_cores_for_workers", "use_worker_threads", "worker_thread_count"]

_lock = threading.Lock()
_worker_count: int | None = None


def reserve_cores_for_workers() -> int:
    """Make the calling thread run torch ops on one CPU thread, leaving the cores to workers.

    Call it on the interactive thread before it runs any torch op (an OpenMP team, once
    started, lives as long as its thread). Calling it again changes nothing.

    Returns:
        The intra-op thread count worker threads get (torch's count before the call).
    """
    import torch

    global _worker_count
    with _lock:
        if _worker_count is None:
            _worker_count = torch.get_num_threads()  # also settles this thread's lazy set-up
        torch.set_num_threads(1)
        return _worker_count


def worker_thread_count() -> int:
    """The intra-op thread count for worker threads.

    Returns:
        What :func:`reserve_cores_for_workers` recorded, or torch's current count when it
        was never called.
    """
    import torch

    with _lock:
        return _worker_count if _worker_count is not None else torch.get_num_threads()


def use_worker_threads(threads: int | None = None) -> int:
    """Give the calling worker thread its intra-op threads.

    Args:
        threads: the count (default: :func:`worker_thread_count`).

    Returns:
        The count set.

    Raises:
        ValueError: ``threads`` is not positive.
    """
    import torch

    n = worker_thread_count() if threads is None else threads
    if n < 1:
        raise ValueError(f"threads must be positive, got {n}")
    torch.get_num_threads()  # settle torch's lazy per-thread set-up before setting the count
    torch.set_num_threads(n)
    return n
