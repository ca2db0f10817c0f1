"""The suite's preloaded interpreter: child programs that start clean without paying for torch's import.

``preloaded()`` starts one server per test process (``server.py``: torch, torchvision and the
workbench imported once, a fork per program) and returns a folder of shims named ``python``,
``python3`` and ``workbench`` (``client.py``). A test puts the folder first on a child's PATH;
every ``python FILE``, ``python -m``, ``python -c`` and ``workbench ...`` the child runs is then
served by a fork of the server, with its own streams, folder, environment and exit status.
``python_argv()`` does the same for one command. ``WORKBENCH_TESTS_FRESH=1`` runs every program
in a fresh interpreter instead (``preloaded()`` then returns ``None``).
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.timeouts import PRELOAD_START_S

ROOT = Path(__file__).resolve().parents[2]
CLIENT = Path(__file__).with_name("client.py")


@dataclass(frozen=True)
class Preloaded:
    """A running server, and the folder of its shims (each names the server itself)."""

    bin_dir: Path

    def child_env(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` with the shims first on PATH."""
        return dict(env, PATH=str(self.bin_dir) + os.pathsep + env.get("PATH", "/usr/bin:/bin"))


_server: Preloaded | None = None


def preloaded() -> Preloaded | None:
    """This process's server, started on first use; None with ``WORKBENCH_TESTS_FRESH`` set.

    Raises:
        RuntimeError: the server did not start (its output is in the message).
    """
    global _server
    if os.environ.get("WORKBENCH_TESTS_FRESH"):
        return None
    if _server is not None:
        return _server
    folder = Path(tempfile.mkdtemp(prefix="wb-preload-"))  # short: a socket path has 108 bytes
    sock = folder / "s"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    # one OpenMP/BLAS thread while importing: no worker threads exist when the server forks
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), QT_QPA_PLATFORM="offscreen")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.preload.server", str(sock)],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )

    def stop() -> None:
        proc.kill()
        proc.wait()
        shutil.rmtree(folder, ignore_errors=True)

    try:
        line = _read_ready(proc)
    except BaseException:
        stop()
        raise
    if line != "ready":
        stop()
        raise RuntimeError(f"the preloaded interpreter did not start: {line}\n{proc.stderr.read() if proc.stderr else ''}")
    atexit.register(stop)
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    for name, mode in (("python", "python"), ("python3", "python"), ("workbench", "workbench")):
        shim = bin_dir / name
        shim.write_text(
            f'#!/bin/sh\nexport WB_PRELOAD_SOCKET="{sock}" WB_PRELOAD_PYTHON="{sys.executable}"\n'
            f'exec "{sys.executable}" -S "{CLIENT}" {mode} "$@"\n', encoding="utf-8")
        shim.chmod(0o755)
    _server = Preloaded(bin_dir)
    return _server


def python_argv(*args: str) -> list[str]:
    """``[python, *args]`` for a child that only needs to start clean: served by the preloaded
    interpreter when there is one, else ``sys.executable``. Not for tests of what a new process
    is (imports, threads, signals at start-up, installation): those use ``sys.executable``."""
    server = preloaded()
    return [str(server.bin_dir / "python") if server else sys.executable, *args]


def _read_ready(proc: subprocess.Popen[str]) -> str:
    """The server's first line, or what it said instead, within ``PRELOAD_START_S``."""
    import selectors

    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(PRELOAD_START_S):
            return f"no answer within {PRELOAD_START_S} s"
    return proc.stdout.readline().strip() or f"exit {proc.wait()}"
