"""The suite's preloaded interpreter stands for a fresh one: streams, folder, environment, exit
status, signals, isolation between programs, and a fallback for what it cannot serve."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.preload import preloaded, python_argv
from tests.timeouts import SUBPROCESS_S

pytestmark = pytest.mark.skipif(bool(os.environ.get("WORKBENCH_TESTS_FRESH")), reason="WORKBENCH_TESTS_FRESH is set")


def _run(*args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(python_argv(*args), capture_output=True, text=True, timeout=SUBPROCESS_S, **kw)  # type: ignore[call-overload]


def test_a_program_gets_its_argv_folder_environment_and_streams(tmp_path: Path) -> None:
    script = tmp_path / "prog.py"
    script.write_text(
        "import os, sys\n"
        "print(sys.argv[1:], os.getcwd(), os.environ['ONLY_HERE'], __name__, sys.path[0], sys.stdin.read().upper())\n"
        "print('to stderr', file=sys.stderr)\n"
    )
    r = _run(str(script), "a", "b c", cwd=tmp_path, input="piped", env={**os.environ, "ONLY_HERE": "yes"})
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"['a', 'b c'] {tmp_path} yes __main__ {tmp_path} PIPED\n"
    assert r.stderr == "to stderr\n"


def test_exit_codes_and_tracebacks_are_a_fresh_interpreters() -> None:
    assert _run("-c", "import sys; sys.exit(3)").returncode == 3
    assert _run("-c", "raise SystemExit('said why')").returncode == 1
    r = _run("-c", "raise ValueError('boom')")
    assert r.returncode == 1
    assert r.stderr == 'Traceback (most recent call last):\n  File "<string>", line 1, in <module>\nValueError: boom\n'
    r = _run("-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert r.returncode == -signal.SIGKILL


def test_modules_and_the_workbench_command_run() -> None:
    r = _run("-m", "workbench", "--version")
    assert r.returncode == 0 and r.stdout.startswith("freeze-workbench "), r.stderr
    server = preloaded()
    assert server is not None
    r = subprocess.run([str(server.bin_dir / "workbench"), "--version"], capture_output=True, text=True, timeout=SUBPROCESS_S)
    assert r.returncode == 0 and r.stdout.startswith("freeze-workbench "), r.stderr


def test_nothing_one_program_does_reaches_the_next() -> None:
    code = "import torch, random; print(getattr(torch, 'marked', False)); torch.marked = True; print(random.random())"
    first, second = _run("-c", code), _run("-c", code)
    assert first.stdout.split()[0] == second.stdout.split()[0] == "False"
    assert first.stdout.split()[1] != second.stdout.split()[1]  # each reseeds, as a new process would


def test_torch_threads_follow_the_programs_environment() -> None:
    r = _run("-c", "import torch; print(torch.get_num_threads())", env={**os.environ, "OMP_NUM_THREADS": "2"})
    assert r.stdout.strip() == "2", r.stderr


def test_what_it_cannot_stand_for_runs_fresh() -> None:
    r = _run("-X", "importtime", "-c", "print('fresh')")  # an interpreter option: the real interpreter runs it
    assert r.returncode == 0 and r.stdout == "fresh\n" and "import time:" in r.stderr


def test_unbuffered_programs_are_served() -> None:
    # torchrun starts each worker as `$PYTHON_EXEC -u ...`: served, with its streams unbuffered
    r = _run("-u", "-c", "import sys; print('torch' in sys.modules, sys.stdout.write_through)")
    assert r.returncode == 0 and r.stdout == "True True\n", r.stderr


def test_a_program_read_from_stdin_is_served() -> None:
    # a shell's here-document (`python - <<'EOF'`): served, with the argv, path and traceback `python -` gives
    code = "import sys\nprint('torch' in sys.modules, sys.argv, repr(sys.path[0]), __name__)\nraise ValueError('boom')\n"
    r = _run("-", "a", input=code)
    assert r.returncode == 1 and r.stdout == "True ['-', 'a'] '' __main__\n", r.stderr
    assert r.stderr == 'Traceback (most recent call last):\n  File "<stdin>", line 3, in <module>\nValueError: boom\n'


def test_a_killed_caller_takes_its_program_down(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    caller = subprocess.Popen(python_argv("-c", f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(600)"))
    deadline = time.monotonic() + SUBPROCESS_S
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline and caller.poll() is None
        time.sleep(0.05)
    program = int(pid_file.read_text())
    caller.kill()
    caller.wait()
    while _alive(program):
        assert time.monotonic() < deadline, "the program outlived its caller"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ")[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def test_the_preloaded_interpreter_is_this_one() -> None:
    r = _run("-c", "import sys; print(sys.executable)")
    assert r.stdout.strip() == sys.executable


def test_the_server_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    starter = subprocess.Popen(
        [sys.executable, "-c", "import os, sys; sys.path.insert(0, os.getcwd()); from tests.preload import preloaded; "
         "s = preloaded(); print(s.bin_dir, flush=True); import time; time.sleep(600)"],
        cwd=Path(__file__).resolve().parents[1], stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": "", "WB_PRELOAD_MODULES": ""},  # its life, not its imports, is the point
    )
    assert starter.stdout is not None
    bin_dir = Path(starter.stdout.readline().strip())
    sock = bin_dir.parent / "s"
    servers = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline(p).endswith(str(sock))]
    assert servers, "no server found"
    starter.kill()  # SIGKILL: no exit handler runs
    starter.wait()
    deadline = time.monotonic() + SUBPROCESS_S
    while _alive(int(servers[0].name)):
        assert time.monotonic() < deadline, "the server outlived the process that started it"
        time.sleep(0.05)


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""
