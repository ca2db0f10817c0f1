"""Run a program in the suite's preloaded interpreter (see ``server.py``), or fresh as a fallback.

``client.py python ARGS...`` stands for ``python ARGS...`` and ``client.py workbench ARGS...``
for the ``workbench`` command; the suite puts shims named ``python``, ``python3`` and
``workbench`` first on a child's PATH that exec this file (stdlib only, started with ``-S``, so
it costs milliseconds). The server named by ``WB_PRELOAD_SOCKET`` runs the program with this
process's standard streams; this process forwards signals to it and exits as it did.

A leading ``-u`` is served as ``PYTHONUNBUFFERED=1``, and ``python - ARGS...`` (the program read from
stdin, as a shell's here-document gives it) is served too. Anything the server cannot stand for
(other interpreter options, ``python`` with no program, no server) runs the real program
instead: ``WB_PRELOAD_PYTHON``.
With ``WB_PRELOAD_LOG=FILE`` each served program appends its CPU seconds and argv to FILE.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import sys

_HEADER = struct.Struct("!I")


def _fallback(mode: str, args: list[str]) -> None:
    real = os.environ["WB_PRELOAD_PYTHON"]
    if mode == "workbench":
        os.execv(real, [real, "-m", "workbench", *args])
    os.execv(real, [real, *args])


def _servable(mode: str, args: list[str]) -> bool:
    if mode == "workbench":
        return True
    if not args:
        return False
    if args[0] in ("-m", "-c"):
        return len(args) >= 2
    return args[0] == "-" or not args[0].startswith("-")  # ``-``: the program is read from stdin


def main() -> None:
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "python" and args[:1] == ["-u"]:  # unbuffered streams (torchrun starts its workers so)
        args = args[1:]
        os.environ["PYTHONUNBUFFERED"] = "1"
    path = os.environ.get("WB_PRELOAD_SOCKET", "")
    if not path or not _servable(mode, args):
        _fallback(mode, args)
    argv = ["workbench", *args] if mode == "workbench" else args
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError:
        _fallback(mode, args)
    body = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
    socket.send_fds(conn, [_HEADER.pack(len(body))], [0, 1, 2])
    conn.sendall(body)
    reader = conn.makefile("r", encoding="utf-8")
    pid = json.loads(reader.readline())["pid"]

    def forward(sig: int, _frame: object) -> None:
        with contextlib.suppress(OSError):
            os.killpg(pid, sig)

    for forwarded in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(forwarded, forward)
    line = reader.readline()
    if not line:  # the supervisor died: say so, as a crash of the program would
        print(f"preloaded interpreter: program {pid} ended without a status", file=sys.stderr)
        sys.exit(1)
    answer = json.loads(line)
    status = answer["status"]
    log = os.environ.get("WB_PRELOAD_LOG")
    if log:  # where the suite's child CPU goes: one line per program
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"{answer['cpu_s']:.2f}\t{json.dumps(argv)[:300]}\n")
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig != signal.SIGKILL:
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    sys.exit(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main()
