"""A preloaded interpreter for the suite's child processes: torch, torchvision and the
workbench imported once, then one ``fork`` per program run.

Starting a Python program that imports torch and torchvision costs about 3-5 s of CPU on the
machines the suite runs on, almost all of it imports. The docs tier alone starts dozens of such
programs (every ``python`` block, every ``workbench ...`` line of a bash block), and the suite
runs on two cores. The server imports what they all import, once, and never runs anything
else; each request forks it, so every program starts from the same pristine state a fresh
interpreter would have after those imports, and nothing one program does reaches the next.

A request (sent by ``tests/preload/client.py``, a stdlib-only script) carries the program's
argv (``python FILE ...``, ``python -m MOD ...``, ``python -c CODE ...``, ``python - ...`` or ``workbench ...``),
its working folder and environment, and its standard streams as file descriptors
(``SCM_RIGHTS``), so output goes exactly where the caller pointed it. The forked supervisor
forks once more to run the program, waits for it and sends back its wait status, so an exit
code, an uncaught exception (exit 1) and a death by signal look to the caller as they would
from a fresh interpreter. If the caller goes away (a timeout killed it), the supervisor kills
the program's process group.

What differs from a fresh interpreter, by design: the preloaded modules are already in
``sys.modules`` (their import-time reads of the environment came from the server's
environment; only ``OMP_NUM_THREADS`` is re-applied, through ``torch.set_num_threads``), and
the program runs as ``__main__`` through ``runpy`` as ``python`` itself does. Modules whose
import reads per-run settings (the Hugging Face libraries read ``HF_HOME`` and the offline
flags) and Qt are not preloaded.

Run: ``python -m tests.preload.server SOCKET_PATH`` (the suite's fixture starts it).
``WB_PRELOAD_MODULES=a,b`` preloads those modules instead of ``PRELOAD`` (tests of the server's
own life, which need none of them).
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import runpy
import signal
import socket
import struct
import sys
import threading
import traceback
import types

#: what every program of the suite imports; nothing here may read per-run settings at import
PRELOAD = (
    "numpy",
    "torch",
    "torchvision",
    "PIL.Image",
    "workbench.cli",
    "workbench.core.training.engine",
    "workbench.core.models.zoo",
    "workbench.core.export",
    "workbench.core.advisor.advice",
)
_HEADER = struct.Struct("!I")


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the client closed the connection mid-request")
        buf += chunk
    return bytes(buf)


def _streams(env: dict[str, str]) -> None:
    """Point ``sys.stdin/stdout/stderr`` at fds 0-2 as a fresh interpreter would open them."""
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    encoding = env.get("PYTHONIOENCODING", "utf-8").split(":")[0] or "utf-8"
    sys.stdin = io.TextIOWrapper(open(0, "rb", closefd=False), encoding=encoding)  # noqa: SIM115 - for the program's life
    for fd, name, errors in ((1, "stdout", "strict"), (2, "stderr", "backslashreplace")):
        tty = os.isatty(fd)
        raw = open(fd, "wb", buffering=0 if unbuffered else -1, closefd=False)  # noqa: SIM115 - as above
        stream = io.TextIOWrapper(raw, encoding=encoding, errors=errors,
                                  line_buffering=tty or fd == 2, write_through=unbuffered)
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _run_program(argv: list[str]) -> int:
    """Run ``argv`` (without the interpreter) as ``python`` would; the exit code."""
    mode = argv[0]
    try:
        if mode == "workbench":
            sys.argv = ["workbench", *argv[1:]]
            sys.path[0:1] = [os.path.dirname(sys.executable)]
            from workbench.cli import main

            return int(main() or 0)
        if mode == "-m":
            sys.argv = [argv[1], *argv[2:]]
            sys.path[0:1] = [os.getcwd()]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        elif mode in ("-c", "-"):
            sys.argv = ["-c", *argv[2:]] if mode == "-c" else argv
            sys.path[0:1] = [""]
            main_module = types.ModuleType("__main__")
            sys.modules["__main__"] = main_module
            code, name = (argv[1], "<string>") if mode == "-c" else (sys.stdin.read(), "<stdin>")
            exec(compile(code, name, "exec"), main_module.__dict__)
        else:
            path = os.path.abspath(mode)
            sys.argv = [mode, *argv[1:]]
            sys.path[0:1] = [os.path.dirname(path)]
            runpy.run_path(path, run_name="__main__")
        return 0
    except SystemExit as e:
        if e.code is None:
            return 0
        if isinstance(e.code, int):
            return e.code
        print(e.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:
        _print_exception(e)
        return 130
    except BaseException as e:
        _print_exception(e)
        return 1


def _print_exception(e: BaseException) -> None:
    """The traceback as ``python`` prints it: the program's frames, not this server's or runpy's."""
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in (__file__, runpy.__file__):
        tb = tb.tb_next
    traceback.print_exception(type(e), e, tb)


def _program(request: dict, fds: list[int]) -> None:
    """In the grandchild: become the requested program, then exit with its code."""
    os.setpgid(0, 0)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    env = request["env"]
    os.environ.clear()
    os.environ.update(env)
    os.chdir(request["cwd"])
    _streams(env)
    import random

    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    threads = env.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        sys.modules["torch"].set_num_threads(int(threads))
    code = _run_program(request["argv"])
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code & 0xFF)


def _supervise(conn: socket.socket, request: dict, fds: list[int]) -> None:
    """In the child: fork the program, report its pid and wait status, kill it if the caller goes."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    pid = os.fork()
    if pid == 0:
        conn.close()
        _program(request, fds)
    for fd in fds:
        os.close(fd)
    conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")

    def watch() -> None:  # the caller went away (killed by a timeout): take the program down
        with contextlib.suppress(OSError):
            conn.recv(1)
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)

    threading.Thread(target=watch, daemon=True).start()
    _, status, usage = os.wait4(pid, 0)
    cpu = usage.ru_utime + usage.ru_stime
    with contextlib.suppress(OSError):
        conn.sendall(json.dumps({"status": status, "cpu_s": cpu}).encode() + b"\n")
    os._exit(0)


def _die_with_parent() -> None:
    """Linux: the kernel kills the server when the test process that started it dies, even by a
    signal that skips its exit handlers (the forks it serves do not inherit this)."""
    import ctypes

    with contextlib.suppress(AttributeError, OSError):  # elsewhere the test process's exit handler stops it
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def serve(path: str) -> None:
    """Preload, listen on ``path`` and fork per request until killed."""
    import importlib

    _die_with_parent()
    listed = os.environ.get("WB_PRELOAD_MODULES")  # a test of the server itself: what it preloads (comma-separated)
    for name in PRELOAD if listed is None else [n for n in listed.split(",") if n]:
        importlib.import_module(name)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the supervisors are reaped by the kernel
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    print("ready", flush=True)
    while True:
        conn, _ = listener.accept()
        try:
            data, fds, _flags, _addr = socket.recv_fds(conn, _HEADER.size, 3)
            if len(data) < _HEADER.size:
                data += _recv_exact(conn, _HEADER.size - len(data))
            (size,) = _HEADER.unpack(data)
            request = json.loads(_recv_exact(conn, size))
        except (OSError, ValueError, ConnectionError):
            conn.close()
            continue
        if os.fork() == 0:
            listener.close()
            _supervise(conn, request, fds)
        conn.close()
        for fd in fds:
            os.close(fd)


if __name__ == "__main__":
    serve(sys.argv[1])
