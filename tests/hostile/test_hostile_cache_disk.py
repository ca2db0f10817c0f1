"""The frozen-prefix cache's spill file on a full disk: the run goes on uncached, never SIGBUS.

A memory-mapped file whose blocks the disk cannot supply kills the process with SIGBUS (rc -7)
at the first write past the free space, with no message and the run folder's staging and lock
left behind. The promise: the spill file's size is reserved before it is mapped; when the disk
has not the room, the run goes on uncached and one line says so.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.preload import python_argv
from tests.timeouts import SUBPROCESS_S
from workbench.core.training import cache_store
from workbench.core.training.cache_store import SPILL_HEADROOM, SPILL_NAME, RowStore, SpillSpaceError, create_spill_file

HEAD = {"rules": [{"select": "*", "frozen": True}, {"select": "fc", "frozen": False}]}


def _run(save: Path) -> tuple[Any, list[str]]:
    import torchvision

    from workbench.core.training.config import TrainConfig
    from workbench.core.training.engine import Trainer

    torch.manual_seed(0)
    cfg = TrainConfig(plan=HEAD, cache_frozen="on", cache_budget=0, save_dir=str(save), data="synthetic:16",
                      batch_size=4, steps=8, device="cpu", seed=0, image_size=16)
    t = Trainer(cfg, model=torchvision.models.resnet18(num_classes=10))
    events = [e for m in t.steps() for e in m.events]
    return t.result, events


def _uncached_with_one_line(result: Any, events: list[str], save: Path, *needles: str) -> None:
    assert result.status == "completed", result.message
    lines = [e for e in events if "spill file" in e]
    assert len(lines) == 1 and "\n" not in lines[0], events
    for n in needles:
        assert n in lines[0], lines[0]
    stats = result.summary["frozen_cache"]
    assert stats["rows"] == 0 and stats["hits"] == 0 and stats["bytes_disk"] == 0, stats
    assert (save / "summary.json").is_file() and not list(save.parent.rglob(SPILL_NAME))
    assert sorted(p.name for p in save.parent.iterdir()) == [".run.lock", "run"]  # no staging folder left


def test_too_little_free_space_is_checked_before_the_file_is_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = shutil.disk_usage

    def tiny(path: Any) -> Any:
        u = real(path)
        return type(u)(u.total, u.total - 1000, 1000)

    monkeypatch.setattr(cache_store.shutil, "disk_usage", tiny)
    result, events = _run(tmp_path / "run")
    _uncached_with_one_line(result, events, tmp_path / "run", "no room", "stay uncached")


def test_a_disk_that_fills_while_reserving_leaves_the_run_uncached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(cache_store.os, "posix_fallocate", full, raising=False)
    result, events = _run(tmp_path / "run")
    _uncached_with_one_line(result, events, tmp_path / "run", "No space left on device", "stay uncached")


def test_without_fallocate_the_space_is_written_through(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def unsupported(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))

    monkeypatch.setattr(cache_store.os, "posix_fallocate", unsupported, raising=False)
    path = tmp_path / SPILL_NAME
    create_spill_file(path, 3 << 20)
    st = path.stat()
    assert st.st_size == 3 << 20 and st.st_blocks * 512 >= 3 << 20  # real blocks, not a sparse hole


def test_a_write_through_that_hits_a_full_disk_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(cache_store.os, "posix_fallocate", raising=False)
    real_write = os.write
    writes: list[int] = []

    def fills_up(fd: int, data: bytes) -> int:  # the first MiB goes in, then the disk is full
        writes.append(len(data))
        if len(writes) > 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(cache_store.os, "write", fills_up)
    store = RowStore(512, (1024,), torch.float32, torch.device("cpu"), budget=0, spill_dir=tmp_path)
    assert store.capacity == 0 and "No space left on device" in store.note and "\n" not in store.note
    assert not (tmp_path / SPILL_NAME).exists()


def test_the_space_check_names_what_is_needed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = shutil.disk_usage
    monkeypatch.setattr(cache_store.shutil, "disk_usage", lambda p: type(real(p))(1 << 30, (1 << 30) - SPILL_HEADROOM, SPILL_HEADROOM))
    with pytest.raises(SpillSpaceError) as info:
        create_spill_file(tmp_path / SPILL_NAME, 1 << 20)
    assert info.value.errno == errno.ENOSPC and "needs 1 MB" in str(info.value.strerror)
    assert not (tmp_path / SPILL_NAME).exists()


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A real 1 MiB file system, where the system lets this process mount one (root, Linux)."""
    mount = shutil.which("mount")
    if sys.platform != "linux" or os.geteuid() != 0 or mount is None:
        pytest.skip("mounting a small tmpfs needs root on Linux")
    where = tmp_path / "small"
    where.mkdir()
    done = subprocess.run([mount, "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)], capture_output=True,
                          timeout=SUBPROCESS_S, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()[:80]}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=SUBPROCESS_S, check=False)


def test_a_real_full_disk_never_ends_the_run_with_sigbus(small_tmpfs: Path, tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    # the cut's input: layer2's, 64 x 4 x 4 floats a sample at 16 px: 384 samples make 1.5 MB
    # BitFit in layer2: the cut is layer2.0, whose input is 64 x 4 x 4 floats a sample at 16 px, so
    # 384 samples need 1.5 MB of spill file, while the state to save is a few kB
    plan.write_text(json.dumps({"rules": [{"select": "*", "frozen": True}, {"select": "param:layer2.0.bn1.bias", "frozen": False},
                                          {"select": "fc", "frozen": False}]}))
    save = small_tmpfs / "run"
    argv = [*python_argv("-m", "workbench", "train"), "--model", "resnet18", "--num-classes", "10",
            "--image-size", "16", "--batch-size", "64", "--data", "synthetic:384", "--device", "cpu", "--no-progress",
            "--plan", str(plan), "--steps", "7", "--cache-frozen", "on", "--cache-budget", "0",
            "--save", str(save), "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=SUBPROCESS_S, check=False)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])  # -7 was SIGBUS
    summary = json.loads(done.stdout)["summary"]
    assert summary["frozen_cache"]["bytes_disk"] == 0 and summary["frozen_cache"]["rows"] == 0
    lines = [ln for ln in done.stderr.splitlines() if "spill file" in ln]
    assert len(lines) == 1 and "no room" in lines[0], done.stderr[-2000:]
    assert sorted(p.name for p in small_tmpfs.iterdir()) == [".run.lock", "run"]
    assert not list(small_tmpfs.rglob(SPILL_NAME)) and (save / "summary.json").is_file()
