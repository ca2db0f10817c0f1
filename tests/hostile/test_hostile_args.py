"""The remaining bad arguments: one line on stderr, exit 2, before anything is allocated;
a second Ctrl+C ends ``train`` at once."""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.hostile.makers import one_line_exit_2 as _one_line
from tests.preload import python_argv
from tests.timeouts import SUBPROCESS_S

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("argv, needles", [
    (["--image-size", "100000"], ["--image-size 100000 needs", "for one batch of inputs alone"]),
    (["--seed", str(2**80)], ["'seed'", "at most"]),
    (["--seed", "-1"], ["'seed'", ">= 0"]),
    (["--compile", "bogusbackend"], ["'bogusbackend' is not a torch.compile backend", "inductor"]),
])
def test_train_arguments(argv: list[str], needles: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    _one_line(["train", "--model", "resnet18", "--steps", "1", "--device", "cpu", *argv], capsys, *needles)


def test_image_size_preflight_runs_before_allocating() -> None:
    """Under a 1 GB address-space cap: refused by the pre-flight, not by a failed 120 GB allocation."""
    code = textwrap.dedent("""
        import resource, sys, torch, torchvision
        from workbench.cli import main
        used = int(open('/proc/self/statm').read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (used + 2**30, resource.RLIM_INFINITY))
        sys.exit(main(["train", "--model", "resnet18", "--image-size", "100000", "--batch-size", "1",
                       "--steps", "1", "--device", "cpu"]))
    """)
    r = subprocess.run(python_argv("-c", code), capture_output=True, text=True, cwd=ROOT, timeout=SUBPROCESS_S)
    assert r.returncode == 2 and "for one batch of inputs alone" in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize("argv, needle", [
    (["--image-size", "0"], "--image-size must be a positive integer"),
    (["--batch-size", "-4"], "--batch-size must be a positive integer"),
    (["--device", "bogus"], "--device 'bogus' is not a device"),
])
def test_advise_arguments(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    _one_line(["advise", "resnet18", "--memory", "4GB", *argv], capsys, needle)


def test_second_ctrl_c_aborts_train_at_once(tmp_path: Path) -> None:
    """The run's end (verify, save) is made to hang: only an abort that skips it ends the process."""
    code = textwrap.dedent("""
        import sys, threading
        from workbench.cli import main
        from workbench.core.training.engine import Trainer
        Trainer._finish = lambda self, st: threading.Event().wait()  # a finish that never ends
        sys.exit(main(sys.argv[1:]))
    """)
    argv = ["train", "--model", "resnet18", "--num-classes", "2", "--image-size", "32", "--batch-size", "2",
            "--data", "synthetic:64", "--steps", "1000000", "--device", "cpu", "--threads", "1",
            "--save", str(tmp_path / "run")]
    p = subprocess.Popen(python_argv("-c", code, *argv), stderr=subprocess.PIPE, cwd=ROOT,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert p.stderr is not None
    err = b""

    def read_until(needle: bytes) -> None:
        nonlocal err
        while needle not in err:
            chunk = os.read(p.stderr.fileno(), 4096)  # type: ignore[union-attr]
            assert chunk, err.decode(errors="replace")  # the process ended first
            err += chunk

    try:
        read_until(b"loss=")  # the progress bar after a step: the handlers are in place
        p.send_signal(signal.SIGINT)
        read_until(b"Ctrl+C again to abort")
        p.send_signal(signal.SIGINT)
        rest = p.stderr.read().decode(errors="replace")
        rc = p.wait(timeout=SUBPROCESS_S)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert rc == 130, err.decode(errors="replace") + rest
    assert "aborted; this run is not saved" in rest and "Traceback" not in rest, rest
