"""workbench.core.training.cpu_threads: the interactive thread stays serial, workers get the cores.

The checks run in child interpreters: torch's thread counts are per thread and process-wide
state the rest of the suite also sets (tests/conftest.py). The children are forks of the suite's
preloaded interpreter (tests/preload), which imported torch with one OpenMP thread and never ran
a parallel region: like a fresh interpreter, a child starts with no OpenMP team and torch's
counts unset for its threads.
"""

from __future__ import annotations

import os
import subprocess
import textwrap

import pytest

from tests.preload import python_argv
from tests.timeouts import SUBPROCESS_S
from workbench.core.training.cpu_threads import use_worker_threads


def run_python(code: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    out = subprocess.run(
        python_argv("-c", textwrap.dedent(code)), capture_output=True, text=True, timeout=SUBPROCESS_S, env=env
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_workers_get_the_count_and_the_reserved_thread_keeps_one() -> None:
    out = run_python(
        """
        import threading, torch
        torch.set_num_threads(3)
        from workbench.core.training.cpu_threads import reserve_cores_for_workers, use_worker_threads, worker_thread_count
        assert reserve_cores_for_workers() == 3
        assert reserve_cores_for_workers() == 3  # again: unchanged
        seen = {}
        def work(name, n=None):
            seen[name + " set"] = use_worker_threads(n)
            torch.ones(4).add_(1)  # a first op: torch's lazy per-thread set-up has run
            seen[name] = torch.get_num_threads()
        for name, n in (("default", None), ("two", 2)):
            t = threading.Thread(target=work, args=(name, n)); t.start(); t.join()
        torch.ones(4).add_(1)  # the main thread's first op after workers set other counts
        print(torch.get_num_threads(), worker_thread_count(), seen["default"], seen["default set"], seen["two"])
        """
    )
    assert out.split() == ["1", "3", "3", "3", "2"]


@pytest.mark.skipif(not os.path.isdir("/proc/self/task") or (os.cpu_count() or 1) < 2, reason="Linux, 2+ cores")
def test_the_reserved_thread_starts_no_openmp_team() -> None:
    # An OpenMP team outlives its parallel region (its threads wait for the next one), and
    # with the training thread's team it would make every team sleep between regions.
    code = """
        import os, torch
        torch.set_num_threads(2)
        {reserve}
        before = len(os.listdir("/proc/self/task"))
        x = torch.rand(4_000_000)
        for _ in range(5):
            x = (x * 1.5).sin()  # parallel elementwise ops
        print(len(os.listdir("/proc/self/task")) - before)
        """
    reserved = run_python(code.format(reserve="from workbench.core.training.cpu_threads import reserve_cores_for_workers; reserve_cores_for_workers()"))
    plain = run_python(code.format(reserve=""))
    assert int(plain) >= 1  # the check can see a team being started
    assert int(reserved) == 0


def test_a_non_positive_count_is_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        use_worker_threads(0)
